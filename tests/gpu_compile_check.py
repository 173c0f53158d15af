"""Compile, for an sm_90 GPU, every kernel variant kvfuzz's own kernels launch over each op's
case stream, on a machine without a GPU (run as a script by tests/test_compiles_for_gpu.py).

The Triton interpreter runs a kernel's Python; compiled Triton is stricter (a plain global
read inside a kernel, say, is a NameError there). Triton's NVIDIA backend needs no GPU to
compile: a stand-in driver reports an sm_90 target, each launch compiles its variant for real
(source -> TTIR -> ... -> cubin) and then does nothing. Prints one line per compile failure and
exits 1 if there was any.

usage: python tests/gpu_compile_check.py [CASES_PER_CLASS]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)


def main(per_class: int) -> int:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from host_overhead import install_fake_triton_runtime  # the stand-in sm_90 driver

    failures: list[str] = []
    compiled = [0]

    def compile_kernel(fn, signature, device, constexprs, options, attrs):
        target = fn.device_caches[device][2]
        try:
            fn.compile(fn.ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
            compiled[0] += 1
        except Exception as exc:
            line = f"{fn.fn.__name__} {dict(constexprs)}: {type(exc).__name__}: {str(exc).strip()}"
            failures.append(line.replace("\n", " | ")[:600])
            raise

    install_fake_triton_runtime(compile_kernel)

    import kvfuzz.kernels as builtin
    from kvfuzz.engines.batch_engine import case_stream
    from kvfuzz.materialize import to_device
    from kvfuzz.execute import prepare
    from kvfuzz.ops import CONTRACTS, record

    cpu = torch.device("cpu")
    for op, contract in CONTRACTS.items():
        binding = record(op).bind(getattr(builtin, contract.entry), where="builtin")
        before = len(failures)
        for _, case in case_stream(op, 3, 48 * per_class, "cuda", stint=per_class):
            views = to_device(prepare(case).plan, cpu)[1]
            try:
                binding(views, case.scalars)
            except Exception:
                pass  # a refusal, or a compile failure (recorded)
        print(f"{op}: {len(failures) - before} compile failures", flush=True)
    print(f"{compiled[0]} kernel variants compiled for sm_90")
    for line in dict.fromkeys(failures):
        print("FAILED", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
