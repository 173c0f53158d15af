"""`_build_pa_page_table`: the decode page table of SGLang's prefill-aware sliding-window (PA-SWA)
attention, built by the FlashAttention backend from `req_to_token` (page size 1, one token slot a
cell): request i keeps its whole prefill and the last `window_size` tokens after it.

For every request i < bs, with r = req_pool_indices[i], n = seq_lens[i], f = prefill_lens[r]
(`prefill_lens` is pool-sized, read through the pool index) and w = window_size:

    decode_start = max(f, n - w)
    kv_len       = n - (decode_start - f) = min(n, f + w)
    dst_kv_lens[i]           = kv_len
    dst_page_table[i, 0:f]   = req_to_token[r, 0:f]              (the prefill)
    dst_page_table[i, f:kv_len] = req_to_token[r, decode_start:n]  (the window)

Those cells must be written; the rest of each row (columns >= kv_len) and every other cell must
stay as they were, and no input is written. SGLang's attention relies on exactly that: the
backend hands the table and `dst_kv_lens` to flash_attn_with_kvcache as `page_table` and
`cache_seqlens` (page size 1, window (-1, -1)), which reads row i's first kv_len cells; the rest
of the row is zeros (eager: the wrapper's `torch.zeros(bs, pa_max_len)`) or a CUDA-graph buffer's
stale cells (replay passes the graph's `page_table[:bs]` and `cache_seqlens[:bs]`), never read.

The entry point is the host wrapper, called as the backend calls it in every release (0.5.15
on): `_build_pa_page_table(req_to_token, req_pool_indices, seq_lens, prefill_lens, window_size,
bs, pa_max_len, device, dst_page_table, dst_kv_lens)`, the graph-replay form, so that the outputs
are kvfuzz's (eager, the wrapper allocates them). The wrapper launches `_build_pa_page_table_kernel`
on grid (bs,) with `req_pool_indices.contiguous()`, `seq_lens.to(torch.int32)`, `window_size` as
a constexpr, both row strides and BLOCK_SIZE = 256, and launches nothing unless bs > 0 and
pa_max_len > 0. The kernel takes no width of the table: it writes kv_len cells whatever
`pa_max_len` and the row hold.

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `req_to_token` is int32 [P, C] with unit column stride (the kernel adds the position to the
  row's base) and any row stride (passed); any slot value is copied as it is (int32's whole range:
  the kernel is a gather, the slots' meaning is the attention's);
* `req_pool_indices` (int64 in SGLang; int32 too) is [bs], any layout (the wrapper makes it
  contiguous); `seq_lens` (int64 in SGLang; int32 too) is [bs]: an int64 one in any layout (the
  wrapper's int32 copy is contiguous), an int32 one with unit stride (`.to(torch.int32)` returns
  it as it is, and the kernel indexes it by program id);
* `prefill_lens` (int32 in SGLang; int64 too) is [PL], unit stride (indexed by pool index, its
  stride is not passed); `dst_page_table` is int32 [bs, W] with unit column stride and any row
  stride (the graph's `page_table[:bs]` rows, or the eager (bs, pa_max_len) table); `dst_kv_lens`
  int32 [bs], unit stride; bs >= 0 (bs = 0 launches nothing: SGLang's idle batches);
* 0 <= r < P and r < PL: SGLang sizes `prefill_lens` size + 1 from 0.5.18 on, one entry per
  req_to_token row; 0.5.15 - 0.5.17 sized it `size`, so a request in the pool's last row reads one
  past it (out of contract here: docs/findings.md);
* 0 <= f <= n <= C: a decoding request's length only grows from the length its last extend
  recorded in `prefill_lens` (the kernel then keeps the row's first n slots, kv_len = n; no caller
  passes it, so kvfuzz requires nothing there);
* 0 <= w < 2^31: SGLang passes the model's `sliding_window_size` only when it is > -1 (`has_swa`);
  w = 0 keeps the prefill alone, w >= n the whole row (kv_len = n); -1 (no window) would drop the
  last prefill token (kv_len = f - 1), so it is out of contract;
* every kv_len <= pa_max_len <= W, and pa_max_len >= 1 when bs >= 1. SGLang's pa_max_len is
  min(max_pf + w, max_len) (max_pf the largest length any extend recorded, max_len the batch's
  largest length), which bounds every kv_len, and the table is pa_max_len wide (eager) or
  max_context_len (graph); pa_max_len = 0 launches nothing, leaving `dst_kv_lens` unwritten
  (`torch.empty` in the eager path), which no decode batch reaches (max_len >= 1, max_pf >= 1);
* the eager call (scalar `eager`, optional bool, absent: False; the backend's eager decode in
  `init_forward_metadata`, every release): both outputs None, the wrapper allocates
  `torch.zeros(bs, pa_max_len)` and `torch.empty(bs)` and returns them; kvfuzz copies them into
  the case's outputs, so `dst_page_table` is [bs, pa_max_len] and every cell of it is required
  (0 past kv_len, the wrapper's zeros), and a result of another shape or dtype is a crash;
* offsets: the kernel's row base is pool index x row stride, in int64 for int64 indices and in
  int32 for int32 ones (so with int32 indices req_to_token spans fewer than 2^31 elements), and its
  output offsets are int32 (dst_page_table spans fewer than 2^31 elements).
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import INT32_MAX, Arg, Cells, Contract, Scalar, dtype_and_layout_reasons, written_more_than_once
from ..kv_index_common import I32, I32_64, matrix_reasons, refuses_nothing, size_reasons, vector_reasons
from . import oracle

BLOCK = 256  # SGLang's BLOCK_SIZE: the kernel copies a row 256 cells at a time

ARGS = (
    Arg("req_to_token", "in", I32, "P,C", doc="KV-pool slots per request-pool row; unit column stride"),
    Arg("req_pool_indices", "in", I32_64, "bs", doc="each request's row r, in [0, P) and [0, PL); any layout"),
    Arg("seq_lens", "in", I32_64, "bs", doc="n: f <= n <= C (an int32 one with unit stride)"),
    Arg("prefill_lens", "in", I32_64, "PL", doc="pool-sized, read at r: f, 0 <= f <= n; unit stride"),
    Arg("dst_page_table", "out", I32, "bs,W",
        doc="row i: cells [0, kv_len) written, the rest untouched; kv_len <= pa_max_len <= W"),
    Arg("dst_kv_lens", "out", I32, "bs", doc="kv_len = min(n, f + w), every cell written; unit stride"),
)
SCALARS = (Scalar("window_size", doc="w: the decode window, 0 <= w < 2^31 (a constexpr in SGLang)"),
           Scalar("pa_max_len", doc="every kv_len <= pa_max_len <= W; >= 1 with requests (0: nothing launched)"),
           Scalar("eager", doc="optional bool (absent: False): the eager call, the wrapper allocating both outputs "
                  "(W = pa_max_len, every cell required)"))
OUTPUTS = ("dst_page_table", "dst_kv_lens")


def kernel_path(case: Case) -> str:
    return "pa"


def structural_reasons(case: Case) -> list[str]:
    reasons = dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t, s = case.tensors, case.scalars
    reasons = matrix_reasons(t, "req_to_token") + matrix_reasons(t, "dst_page_table")
    for name in ("req_pool_indices", "seq_lens", "prefill_lens", "dst_kv_lens"):
        if len(t[name].shape) != 1:
            reasons.append(f"{name} must be 1-D, got shape {t[name].shape}")
    if reasons:
        return reasons
    reasons = vector_reasons(t, ("prefill_lens",), "pool index") + vector_reasons(t, ("dst_kv_lens",))
    if t["seq_lens"].dtype == "int32":  # the wrapper's .to(torch.int32) returns an int32 tensor as it is
        reasons += vector_reasons(t, ("seq_lens",))
    bs = t["req_pool_indices"].shape[0]
    reasons += size_reasons(t, bs, {"seq_lens": bs, "dst_kv_lens": bs})
    out = t["dst_page_table"]
    if out.shape[0] != bs:
        reasons.append(f"dst_page_table has {out.shape[0]} rows, expected bs = {bs}")
    if reasons:
        return reasons
    w, cap = s.get("window_size"), s.get("pa_max_len")
    for name, value in (("window_size", w), ("pa_max_len", cap)):
        if type(value) is not int:
            return [f"{name} must be an int, got {value!r}"]
    if not 0 <= w <= INT32_MAX:
        return [f"window_size {w} outside [0, 2^31) (SGLang passes the model's window only when it is > -1; "
                "-1 would drop the last prefill token)"]
    W = out.shape[1]
    if cap > W:
        return [f"pa_max_len {cap} > dst_page_table width {W} (SGLang's table is pa_max_len or max_context_len "
                "wide)"]
    if "eager" in s and type(s["eager"]) is not bool:
        return [f"eager must be a bool, got {s['eager']!r}"]
    if s.get("eager") and W != cap:
        return [f"the eager call's table is the wrapper's (bs, pa_max_len) = ({bs}, {cap}), not {W} columns wide"]
    if bs and cap < 1:
        return [f"pa_max_len {cap} < 1 with {bs} requests: the wrapper launches nothing and dst_kv_lens stays "
                "unwritten (no decode batch has pa_max_len 0)"]
    if bs > 1 and W and (bs - 1) * out.strides[0] + W > INT32_MAX:
        return [f"dst_page_table spans {(bs - 1) * out.strides[0] + W} elements, past int32 (the kernel's output "
                "offsets are int32)"]
    table = t["req_to_token"]
    if t["req_pool_indices"].dtype == "int32" and table.shape[0] > 1 and table.shape[1] and \
            (table.shape[0] - 1) * table.strides[0] + table.shape[1] > INT32_MAX:
        return [f"req_to_token spans {(table.shape[0] - 1) * table.strides[0] + table.shape[1]} elements and "
                "req_pool_indices is int32 (the kernel's row base, index x row stride, is then int32)"]
    return []


def kv_lens(case: Case) -> np.ndarray:
    """Each request's kv_len as the kernel computes it, for any values (an out-of-contract case
    too: a pool index outside prefill_lens reads f as 0, a negative length keeps no cell), int64."""
    v, s = case.values, case.scalars
    rows = np.asarray(v["req_pool_indices"], np.int64)
    n = np.asarray(v["seq_lens"], np.int64)
    pf = np.asarray(v["prefill_lens"], np.int64)
    bs = min(rows.shape[0], n.shape[0])
    w = int(s.get("window_size", 0)) if isinstance(s.get("window_size"), int) else 0
    inside = (rows[:bs] >= 0) & (rows[:bs] < pf.shape[0])
    f = np.where(inside, pf[np.clip(rows[:bs], 0, max(pf.shape[0] - 1, 0))] if pf.shape[0] else 0, 0)
    start = np.maximum(f, n[:bs] - w)
    return n[:bs] - np.maximum(start - f, 0)


def cells(case: Case) -> dict[str, Cells]:
    spec = case.tensors["dst_page_table"]
    R, W = spec.shape
    k = np.zeros(R, np.int64)
    got = kv_lens(case)[:R]
    k[:got.shape[0]] = got
    required = np.arange(W)[None, :] < k[:, None]
    if case.scalars.get("eager"):  # the wrapper's zeros past kv_len, copied in whole
        required = np.ones((R, W), bool)
    kv = np.ones(case.tensors["dst_kv_lens"].shape, bool)
    return {"dst_page_table": Cells(required, np.zeros_like(required)), "dst_kv_lens": Cells(kv, np.zeros_like(kv))}


def racy(case: Case) -> dict[str, np.ndarray]:
    """Cells two programs write: program i writes kv_len cells from i * row stride, so a request
    whose kv_len passes the row (out of contract: kv_len > W) writes on into the next row, which
    that row's request writes too."""
    out = case.tensors["dst_page_table"]
    if len(out.shape) != 2:
        return {}
    R, W = out.shape
    stride = out.strides[0]
    if R < 2 or W == 0 or stride < W:
        return {}
    lens = np.zeros(R, np.int64)
    got = np.maximum(kv_lens(case)[:R], 0)
    lens[:got.shape[0]] = got
    size = int(R * stride + max(int(lens.max()), W))
    hit = written_more_than_once(size, np.arange(R, dtype=np.int64) * stride, lens)
    return {"dst_page_table": hit[np.arange(R)[:, None] * stride + np.arange(W)[None, :]]}


CONTRACT = Contract(
    name="pa_page_table",
    entry="_build_pa_page_table",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={"default": "SGLang 0.5.15-0.5.23 (one kernel text in every release): row i of dst_page_table holds "
              "req_to_token[r, 0:f] then req_to_token[r, max(f, n - w):n], kv_len = min(n, f + w) cells, the rest "
              "of the row untouched (the eager call: 0); dst_kv_lens[i] = kv_len"},
    paths={"pa": "one program per request (grid (bs,)), the row copied 256 cells at a time, prefill then window"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells,
    racy=racy,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK,),
)
