"""How pa_page_table's entry point (`_build_pa_page_table`, the host wrapper) is called, its API
generations, and the contract variant of each release. Standalone (the repro script embeds it:
the standard library and kvfuzz's standalone modules only).

kvfuzz calls the wrapper, not the bare `_build_pa_page_table_kernel` with the wrapper's grid:
the FlashAttention backend calls the wrapper in both of its paths in every release (eager decode
in init_forward_metadata, CUDA-graph replay in init_forward_metadata_replay_cuda_graph), and the
wrapper's own work is part of what the backend gets: `req_pool_indices.contiguous()` (the kernel
takes no stride for it), `seq_lens.to(torch.int32)`, BLOCK_SIZE = 256, the row strides, and the
guard that launches nothing unless bs > 0 and pa_max_len > 0. kvfuzz passes `dst_page_table` and
`dst_kv_lens`, as graph replay does (the graph's `page_table[:bs]` and `cache_seqlens[:bs]`), so
the wrapper allocates nothing and the kernel writes into kvfuzz's guarded arena; `bs` is the
number of requests (the backend's batch size, every per-request tensor's length), `device` the
tensors' device, `window_size` and `pa_max_len` the case's scalars. A case with `eager` makes
the eager decode call instead: both outputs None, so the wrapper allocates them (`torch.zeros(bs,
pa_max_len)` and `torch.empty(bs)`), and kvfuzz copies the two tensors it returns into the
case's (`OpCall.returns_when`).
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, flag, scalar, tensor


def _bs(t, s):
    return t["req_pool_indices"].shape[0]


def _device(t, s):
    return t["dst_page_table"].device


def _output(name: str):
    """The case's output (CUDA-graph replay's buffer), or None for the eager call (the wrapper allocates it)."""
    return lambda t, s: None if s.get("eager") else t[name]


CALL = OpCall(
    supplied={
        "req_to_token": tensor("req_to_token"),
        "req_pool_indices": tensor("req_pool_indices"),
        "seq_lens": tensor("seq_lens"),
        "prefill_lens": tensor("prefill_lens"),
        "window_size": scalar("window_size"),  # a constexpr of the kernel
        "bs": _bs,
        "pa_max_len": scalar("pa_max_len"),
        "device": _device,
        "dst_page_table": _output("dst_page_table"),
        "dst_kv_lens": _output("dst_kv_lens"),
    },
    required=(("req_to_token",), ("req_pool_indices",), ("seq_lens",), ("prefill_lens",), ("window_size",),
              ("dst_page_table",), ("dst_kv_lens",)),
    neutral={},
    legacy=("req_to_token", "req_pool_indices", "seq_lens", "prefill_lens", "window_size", "bs", "pa_max_len",
            "device", "dst_page_table", "dst_kv_lens"),
    returns=("dst_page_table", "dst_kv_lens"),  # (page_table, kv_lens): taken by the eager call only
    returns_when=flag("eager"),
)

GENERATIONS = (
    Generation("0.5.15", "0.5.15-0.5.23", CALL.legacy,
               "the wrapper's only signature: inside flashattention_backend.py in 0.5.15, in "
               "sglang/kernels/ops/attention/pa_page_table.py from 0.5.16 on (the same text)"),
)

# (first release, variant): one kernel text in every release that has it
RELEASE_VARIANTS = (("0.5.15", "default"),)
