"""`update_trtllm_mha_graph_metadata` (SGLang 0.5.15 on): the TRT-LLM MHA backend's CUDA-graph
metadata update, fused into one launch of `update_trtllm_mha_graph_metadata_kernel`. The
backend's `_apply_cuda_graph_metadata` calls it on capture and on every replay of a decode,
draft-decode, target-verify or draft-extend (v2) graph, with its graph buffers as outputs.

For bs = len(req_pool_indices) >= 1 requests, with ps = page_size, d = seqlen_offset,
P = max_seq_pages, s_i = seq_lens[i] + d, r_i = req_pool_indices[i] and t_ip =
req_to_token[r_i, p * ps]:

    cache_seqlens[i]         = s_i                                      (int32)
    cu_seqlens_k[i + 1]      = s_0 + ... + s_i                          (int32)
    cu_seqlens_q[i + 1]      = qlens[0] + ... + qlens[i]                (q_mode 1, CUMSUM)
                             = (i + 1) * q_stride                       (q_mode 2, STRIDED)
    page_table[i, p]         = t_ip // ps                               for p < n_i
    swa_page_table[i, p]     = -1 if m < 0 else m // ps, m = swa_mapping[t_ip]   (with swa_page_table)
    swa_out_cache_loc[k]     = -1 if l < 0 else swa_mapping[l], l = out_cache_loc[k]   for k < K
                             = 0                                        for K <= k < L

where n_i = min(cdiv(s_i, ps), P) is a row's live pages, L = len(swa_out_cache_loc) and K =
min(L, len(out_cache_loc)) (0 without out_cache_loc). Those cells must be written: the attention
kernels read a row up to cdiv(cache_seqlens[i], ps) pages, nothing further. cu_seqlens_k[0] and
cu_seqlens_q[0] are the backend's preset 0 (its buffers are torch.zeros, its cu_seqlens_q
arange/zeros; 0.5.14's torch ops wrote `cu_seqlens_k[1:]` only) and must stay untouched, as must
every page-table cell past a row's n_i pages (the stale tail: SGLang 0.5.17 on, "only the live
prefix ... is (re)written; the tail keeps stale values"; variants `default` and `live_prefix`),
and, with `skip_page_table` (0.5.19 on: the unified pool's tables are refreshed out of graph),
both page tables whole. 0.5.15-0.5.16 rewrite every row to the static width P from the stale
slots past the live pages (variant `full_width`): there the cells [n_i, P) may be written, and
the slots they read must be valid too. Under q_mode 0 (NONE: decode and target verify, whose
cu_seqlens_q is a static preset) no cu_seqlens_q is passed. No input is written.

The backend's calls (read from every wheel 0.5.15-0.5.23): page_table and swa_page_table are the
`[:bs]` rows of `(max_bs, max_num_pages)` int32 buffers, max_num_pages = cdiv(context_len, ps),
and P = max_num_pages; req_to_token is the pool's `(pool rows, context_len + a few)` int32
table; cache_seqlens `[:bs]`, cu_seqlens_k and cu_seqlens_q `[:bs + 1]` of int32 buffers;
swa_out_cache_loc the `[:num_tokens]` of an int64 buffer and out_cache_loc the batch's
(num_tokens long, or longer in multi-step draft decode); swa_mapping is the SWA allocator's
full_to_swa_index_mapping (int64, size + page_size + 1 entries, its last -1, freed entries 0).
The paths: normal decode d = 0, q_mode 0; draft decode d = step + 1; target verify d = the draft
tokens per request, q_mode 0; draft extend v2 d = 0, q_mode 2 with q_stride = its tokens per
request. SWA models pass swa_mapping, swa_page_table and swa_out_cache_loc together, others
none; 0.5.19 on, the unified pool passes skip_page_table=True and no page table, SWA table, SWA
write locations or mapping. No backend passes q_mode 1 (qlens): the launcher's, kvfuzz draws it
too.

In contract (where SGLang leaves intent open, kvfuzz assumes):

* bs >= 1 (the backend never replays an empty batch; the launcher returns at bs = 0);
  cache_seqlens [bs], cu_seqlens_k [bs + 1], cu_seqlens_q [bs + 1] exactly with q_mode 1 or 2,
  qlens [bs] exactly with q_mode 1, seq_lens [bs]; page_table [bs, W >= P] (absent only with
  skip_page_table), swa_page_table [bs, W2 >= P], both with unit column stride and any row stride
  (each passes its own); req_to_token [pool rows, C] int32 with unit column stride and any row
  stride, (P - 1) * ps < C (the backend's table reaches every page of the static width);
  every 1-D tensor with unit stride (the kernel indexes them without strides);
* swa_page_table and swa_out_cache_loc (int64) each need swa_mapping (the kernel loads through it);
* page_size >= 1 (any; the backend's are powers of two), 0 <= d, P >= 0, q_mode in {0, 1, 2},
  0 <= q_stride;
* seq_lens[i] >= 0, s_i and the running sum of the s_i fit int32 (the kernel sums in int32; a
  wrap is out of contract, as for draft_extend_metadata), with live pages s_i + ps - 1 fits too
  (Triton's cdiv); qlens >= 0 and its running sum, and (i + 1) * q_stride, fit int32;
* where the page tables are built (no skip_page_table): every r_i in [0, pool rows), every slot
  t_ip read (p < n_i; full_width: p < P) >= 0 (KV-pool slots; Triton's // truncates), and with
  swa_page_table < len(swa_mapping), its page fitting int32; every out_cache_loc[k], k < K,
  below len(swa_mapping) (negative ones are the -1 sentinel the kernel maps to -1). Mapping
  entries may be negative (the -1 sentinel): the SWA page is then -1.

SGLang's guards (docs/guards.md): the SWA lookup is masked by `token >= 0` with `other=-1` (every
release, for the -1 write locations; a negative slot in `req_to_token` stays out of contract);
0.5.17 writes only the live prefix (variants `live_prefix`, `default`); 0.5.19 skips the page
tables under the unified pool (`skip_page_table`). CUDA-graph replay's padded rows (`seq_lens` 1,
pool row 0) are in contract.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, Scalar, dtype_and_layout_reasons, is_power_of_two, written_more_than_once, \
    zero_stride_reasons
from ..kv_index_common import I32, I32_64, NO_REQUEST, matrix_reasons, refuses_nothing, vector_reasons
from . import oracle

ARGS = (
    Arg("req_pool_indices", "in", I32_64, "bs", doc="each request's row of req_to_token, in [0, pool rows)"),
    Arg("seq_lens", "in", I32_64, "bs", doc="each request's length before seqlen_offset (>= 0)"),
    Arg("req_to_token", "in", I32, "R,C", doc="KV-pool slots per request-pool row; unit column stride"),
    Arg("swa_mapping", "in", I32_64, "M", optional=True,
        doc="full slot -> SWA slot (SGLang's full_to_swa_index_mapping, its last entry -1)"),
    Arg("out_cache_loc", "in", I32_64, "N", optional=True, doc="the batch's full-pool write locations"),
    Arg("qlens", "in", I32_64, "bs", optional=True, doc="q_mode 1 (CUMSUM) only: query tokens per request"),
    Arg("cache_seqlens", "out", I32, "bs", doc="seq_lens + seqlen_offset"),
    Arg("cu_seqlens_k", "out", I32, "bs+1", doc="[0] untouched (the backend's preset 0); [1:] the running sum"),
    Arg("cu_seqlens_q", "out", I32, "bs+1", optional=True,
        doc="q_mode 1 or 2 only: [0] untouched; [1:] cumsum(qlens) or (i + 1) * q_stride"),
    Arg("page_table", "out", I32, "bs,W", optional=True,
        doc="row i's first n_i pages written, the rest untouched; absent only with skip_page_table"),
    Arg("swa_page_table", "out", I32, "bs,W2", optional=True, doc="the same cells, through swa_mapping"),
    Arg("swa_out_cache_loc", "out", ("int64",), "L", optional=True,
        doc="whole length written: translated for k < min(L, N), 0 after"),
)
SCALARS = (
    Scalar("page_size", "ps >= 1 (PAGE_SIZE, a constexpr)"),
    Scalar("seqlen_offset", "d >= 0: 0 decode / draft extend, step + 1 draft decode, draft tokens target verify"),
    Scalar("max_seq_pages", "P >= 0: the backend's static page-table width max_num_pages"),
    Scalar("q_mode", "0 NONE (no cu_seqlens_q), 1 CUMSUM (qlens), 2 STRIDED (q_stride)"),
    Scalar("q_stride", "q_mode 2's tokens per request (the launcher's default 0 otherwise)"),
    Scalar("skip_page_table", "0.5.19 on: optional bool (absent: False); True builds no page table"),
)
OUTPUTS = ("cache_seqlens", "cu_seqlens_k", "cu_seqlens_q", "page_table", "swa_page_table", "swa_out_cache_loc")
TABLES = ("page_table", "swa_page_table")
ONE_D = ("req_pool_indices", "seq_lens", "swa_mapping", "out_cache_loc", "qlens", "cache_seqlens", "cu_seqlens_k",
         "cu_seqlens_q", "swa_out_cache_loc")
VARIANT_ARGS = {"default": ("skip_page_table",)}
LIVE = ("default", "live_prefix")  # the variants whose rows are written to their live pages only


def skips(case: Case) -> bool:
    return bool(case.scalars.get("skip_page_table", False))


def kernel_path(case: Case) -> str:
    """Q_MODE x HAS_SWA x HAS_SWA_OUT x SKIP_PAGE_TABLE, as the launcher sets them."""
    t = case.tensors
    swa = "swa_page_table" in t and not skips(case)
    return (f"q{case.scalars.get('q_mode')}/{'swa' if swa else 'no_swa'}/"
            f"{'swa_out' if 'swa_out_cache_loc' in t else 'no_swa_out'}" + ("/skip" if skips(case) else ""))


def live_pages(case: Case) -> np.ndarray:
    """n_i = min(cdiv(s_i, ps), P): each row's live pages (0 for a negative length)."""
    s = case.scalars
    seq = np.asarray(case.values["seq_lens"], dtype=np.int64) + int(s["seqlen_offset"])
    return np.clip(-(-np.maximum(seq, 0) // int(s["page_size"])), 0, max(int(s["max_seq_pages"]), 0))


def row_pages(case: Case) -> np.ndarray:
    """The pages each row's program reads and writes: its live pages, or (full_width) all P."""
    if case.variant in LIVE:
        return live_pages(case)
    return np.full(case.tensors["req_pool_indices"].shape[0], max(int(case.scalars["max_seq_pages"]), 0), np.int64)


def structural_reasons(case: Case) -> list[str]:
    reasons = dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t, s = case.tensors, case.scalars
    skip = s.get("skip_page_table", False)
    if not isinstance(skip, bool):
        return [f"skip_page_table must be a bool, got {skip!r}"]
    if skip and "skip_page_table" not in VARIANT_ARGS.get(case.variant, ()):
        return [f"skip_page_table=True is not an argument of variant {case.variant} (0.5.19 on)"]
    for name in ("page_size", "seqlen_offset", "max_seq_pages", "q_mode", "q_stride"):
        if type(s.get(name)) is not int:
            return [f"{name} must be an int, got {s.get(name)!r}"]
    ps, d, P, q_mode = s["page_size"], s["seqlen_offset"], s["max_seq_pages"], s["q_mode"]
    if ps < 1:
        return [f"page_size {ps} < 1"]
    if d < 0:
        return [f"seqlen_offset {d} < 0 (the backend's are 0, step + 1 and the draft tokens)"]
    if P < 0:
        return [f"max_seq_pages {P} < 0"]
    if q_mode not in (0, 1, 2):
        return [f"q_mode {q_mode} is not 0 (NONE), 1 (CUMSUM) or 2 (STRIDED)"]
    if s["q_stride"] < 0:
        return [f"q_stride {s['q_stride']} < 0"]
    if ("cu_seqlens_q" in t) != (q_mode != 0):
        return [f"cu_seqlens_q comes exactly with q_mode 1 or 2 (q_mode {q_mode}; the backend passes None with "
                "NONE, whose cu_seqlens_q is a preset)"]
    if ("qlens" in t) != (q_mode == 1):
        return [f"qlens comes exactly with q_mode 1 (CUMSUM), q_mode is {q_mode}"]
    if "page_table" not in t and not skip:
        return ["page_table is missing (only skip_page_table=True builds none)"]
    for name in ("swa_page_table", "swa_out_cache_loc"):
        if name in t and "swa_mapping" not in t and not (name == "swa_page_table" and skip):
            reasons.append(f"{name} without swa_mapping (the kernel loads through the mapping)")
    reasons += [r for name in ("req_to_token", *TABLES) if name in t for r in matrix_reasons(t, name)]
    reasons += vector_reasons(t, ONE_D, "program id or offset, without strides")
    if reasons:
        return reasons
    bs = t["req_pool_indices"].shape[0]
    if bs < 1:
        return [NO_REQUEST]
    want = {"seq_lens": bs, "qlens": bs, "cache_seqlens": bs, "cu_seqlens_k": bs + 1, "cu_seqlens_q": bs + 1}
    reasons = [f"{name} has {t[name].shape[0]} elements, expected {n} (bs = {bs})"
               for name, n in want.items() if name in t and t[name].shape[0] != n]
    for name in TABLES:
        if name in t:
            rows, width = t[name].shape
            if rows != bs:
                reasons.append(f"{name} has {rows} rows, expected bs = {bs}")
            elif width < P:
                reasons.append(f"max_seq_pages {P} > {name} width {width} (a row's pages would run into the next)")
    C = t["req_to_token"].shape[1]
    if P > 0 and (P - 1) * ps >= C:
        reasons.append(f"(max_seq_pages - 1) * page_size = ({P} - 1) * {ps} >= req_to_token width {C} (the "
                       "backend's table reaches every page of its static width)")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    t = case.tensors
    out = {}
    for name in ("cache_seqlens", "swa_out_cache_loc"):
        if name in t:
            out[name] = Cells(np.ones(t[name].shape, bool), np.zeros(t[name].shape, bool))
    for name in ("cu_seqlens_k", "cu_seqlens_q"):
        if name in t:
            req = np.ones(t[name].shape, bool)
            req[:1] = False  # the backend's preset 0
            out[name] = Cells(req, np.zeros_like(req))
    live = None if skips(case) else live_pages(case)
    written = None if skips(case) else row_pages(case)
    for name in TABLES:
        if name in t:
            rows, width = t[name].shape
            col = np.arange(width)[None, :]
            if live is None or live.shape[0] != rows:
                req = may = np.zeros((rows, width), bool)
            else:  # full_width: the stale tail below P may be rewritten
                req = col < live[:, None]
                may = (col < written[:, None]) & ~req
            out[name] = Cells(req, may)
    return out


def racy(case: Case) -> dict[str, np.ndarray]:
    """Cells two programs write: row i's program writes its n_i pages from i * row stride, so more
    pages than a row holds (max_seq_pages past the width: out of contract) run into the next row."""
    out = {}
    if skips(case) or type(case.scalars.get("page_size")) is not int or case.scalars["page_size"] < 1:
        return out
    try:
        pages = row_pages(case)
    except (KeyError, TypeError, ValueError):
        return out
    for name in TABLES:
        spec = case.tensors.get(name)
        if spec is None or len(spec.shape) != 2 or spec.shape[0] != pages.shape[0]:
            continue
        R, W = spec.shape
        stride = spec.strides[0]
        if R < 2 or W == 0 or stride < 1:
            continue
        size = R * stride + int(pages.max(initial=0))
        hit = written_more_than_once(size, np.arange(R, dtype=np.int64) * stride, pages)
        out[name] = hit[np.arange(R)[:, None] * stride + np.arange(W)[None, :]]
    return out


def stress(case: Case) -> list[str]:
    """In contract, but no SGLang call site launches it (docs/callsites.md)."""
    out = []
    if case.scalars.get("q_mode") == 1:
        out.append("q_mode 1 (CUMSUM over qlens): no backend passes it (decode and verify 0, draft extend 2)")
    if not is_power_of_two(case.scalars.get("page_size")):
        out.append(f"page_size {case.scalars.get('page_size')}: the backend's page sizes are powers of two")
    t = case.tensors
    if not skips(case) and ("swa_page_table" in t) != ("swa_out_cache_loc" in t):
        out.append("one SWA output without the other: SWA models pass swa_page_table and swa_out_cache_loc together")
    return out + zero_stride_reasons(case, ("req_to_token",))


CONTRACT = Contract(
    name="trtllm_mha_graph_metadata",
    entry="update_trtllm_mha_graph_metadata",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={
        "default": "SGLang 0.5.19-0.5.23 and kvfuzz's builtin: each row's live pages n_i = min(cdiv(s_i, ps), P) "
        "written, the rest of both tables untouched; skip_page_table (both tables untouched)",
        "live_prefix": "SGLang 0.5.17-0.5.18: default's rule, no skip_page_table argument",
        "full_width": "SGLang 0.5.15-0.5.16 (and a file with their signature, 0.5.17-0.5.18's too): the live pages "
        "required, the rest of a row below max_seq_pages may be written (they rewrite every row to the static "
        "width; the slots read past the live pages must be valid too), the columns past it untouched",
    },
    paths={
        "q0/no_swa/no_swa_out": "decode, draft decode, target verify without SWA (Q_MODE 0)",
        "q0/swa/swa_out": "the same for an SWA model: swa_page_table and swa_out_cache_loc through the mapping",
        "q2/no_swa/no_swa_out": "draft extend v2 (Q_MODE 2, STRIDED)",
        "q2/swa/swa_out": "draft extend v2 of an SWA model",
        "q1/...": "Q_MODE 1 (CUMSUM of qlens): the launcher's, no backend passes it",
        "*/swa/no_swa_out, */no_swa/swa_out": "one SWA output without the other: the launcher's, no backend's",
        "*/skip": "skip_page_table (0.5.19 on, the unified pool): the seqlen metadata (and swa_out_cache_loc "
        "if given) only",
    },
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells,
    racy=racy,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(512,),
    variant_args=VARIANT_ARGS,
    stress=stress,
)
