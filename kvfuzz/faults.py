"""How a target's exception is recorded, and which exceptions are CUDA faults.

A CUDA error (an illegal memory access, a device-side assert, a launch failure) leaves the
CUDA context unusable: the run is a `crash` where `cuda_fault`, in contract or not, never a
refusal. torch raises torch.AcceleratorError (newer versions) or a RuntimeError naming the
error; Triton's launcher says "Triton Error [CUDA]".

Standalone (standard library only): kvfuzz's executor uses it, and the repro script embeds
it (kvfuzz.repro.standalone_modules).
"""

CUDA_FAULT = "CudaFault"  # the error type a run is recorded with when its kernel faulted the device
CUDA_ERROR_MARKS = ("CUDA error", "CUDA_ERROR", "Triton Error [CUDA]", "illegal memory access", "device-side assert")


def one_line(exc):
    """'TypeName: first line of the message' (at most 300 characters), as a run records an error."""
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]


def is_device_fault(exc):
    """Whether `exc` is a CUDA error: the context is gone."""
    if type(exc).__name__ == "AcceleratorError":
        return True
    return isinstance(exc, RuntimeError) and any(mark in str(exc) for mark in CUDA_ERROR_MARKS)
