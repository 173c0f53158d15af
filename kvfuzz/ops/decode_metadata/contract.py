"""`normal_decode_set_metadata`: per-request lengths, their prefix sums, and page tables.

SGLang 0.5.17 added unified memory (`v2p_page_table`, kvfuzz's `full_v2p`, and
`kernel_page_multiplier`), 0.5.18 the unified SWA pool (its v2p table, kvfuzz's `swa_v2p`, in
the pool's mapping slot), 0.5.19 a page-granular read table (`src_is_read_table`,
`swa_src_table`), 0.5.20 `skip_page_table` and 0.5.23 `zero_tail`, `full_v2p` and
`swa_v2p` as arguments. They are optional case fields, in contract only for the variants whose
targets take them (`VARIANT_ARGS`); without them a case means what it always meant. What
kvfuzz assumes where SGLang does not say:

* A v2p table maps the page id `token // page_size` (floor) of a full-pool token slot; the
  page must lie in `[0, len(v2p))` (a table sized for one pool and indexed with another
  pool's ids is the caller's bug, so out of contract). Entries are a physical page (>= 0) or
  the tombstone -1 of an unbound page, which maps to the sink page 0 (0.5.23's docstring:
  "an unbound (-1) page maps to the sink"); a tombstone copied into a page table is a
  defect. Entries below -1 are not produced by SGLang's allocator: out of contract. A negative
  token id (a tombstoned slot, -1, of the unified pool) in a live column reads virtual page 0:
  `sink(v2p[max(token // page_size, 0)])`. SGLang 0.5.23 guards it (`metadata.py:185`,
  `tl.maximum(page_ids, 0)` before the v2p gather), so such tokens are in contract wherever a
  v2p table is (0.5.17 and 0.5.18 too, whose unguarded gather reads before the table). With
  the static pool's mapping a negative token id is still out of contract (it indexes the
  mapping).
* `kernel_page_multiplier` (0.5.17-0.5.18, a positive int, absent: 1) scales the full page
  table's values after the v2p translation (a physical page's first block in a page-major
  envelope): `page_table = sink(v2p[page]) * multiplier`, or `page * multiplier` without a table;
  the SWA table is not scaled (0.5.17-0.5.18 scale only the full one). A product past int32 is
  out of contract.
* `swa_v2p` is the unified SWA pool's table over the same virtual page ids (0.5.18 and 0.5.23
  index it with `token // page_size`, never with a token id); the static pool's
  `full_to_swa_index_mapping` maps token slots, then `// page_size`. `swa_page_table` comes
  with exactly one of the two (0.5.23 asserts it).
* `src_is_read_table` (0.5.19): `req_to_token` holds kernel-facing page ids, one per page:
  `page_table[i, c] = req_to_token[pool[i], c]` verbatim (no division, no translation), and
  with SWA `swa_page_table[i, c] = swa_src_table[pool[i], c]` (the SWA canonical, in place of the
  mapping; 0.5.19's docstring: "same shape and strides" as `req_to_token`, so kvfuzz requires
  both). `swa_src_table` comes only with the flag, and the flag with SWA needs it.
* `zero_tail`: columns `cdiv(len, page_size) <= c < P` are written 0 ("clears columns up to
  max_seq_pages to zero, independently of address translation"), so every column `c < P` is
  required, in every variant.
* `skip_page_table`: only the lengths and their prefix sum are written; both page tables are
  untouched. The page-table input rules still apply (a case stays in contract when the flag
  flips), though SGLang reads none of those inputs then.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, Scalar, dtype_and_layout_reasons, is_power_of_two
from . import oracle

I32, I32_64 = ("int32",), ("int32", "int64")

ARGS = (
    Arg("cache_seqlens_int32", "out", I32, "B", doc="seq_lens + seq_len_delta, as int32"),
    Arg("cu_seqlens_k", "out", I32, "B+1", doc="0, then the running int32 sum of cache_seqlens_int32"),
    Arg("page_table", "out", I32, "B,W", doc="columns c < P: req_to_token[pool[i], c*page_size] // page_size"),
    Arg("req_to_token", "in", I32_64, "R,T", doc="token id of every position of every request slot"),
    Arg("req_pool_indices", "in", I32_64, "B", doc="request slot of each batch row, in [0, R)"),
    Arg("strided_indices", "in", ("int64", "int32"), "S", doc="arange(0, T, page_size); used only by the unfused reference"),
    Arg("seq_lens", "in", I32_64, "B", doc="current length of each request"),
    Arg("swa_page_table", "out", I32, "B,W2", optional=True, doc="columns c < P: mapping[token] // page_size"),
    Arg("full_to_swa_index_mapping", "in", I32_64, "N", optional=True,
        doc="SWAKVPool.full_to_swa_index_mapping: full-pool token id -> SWA slot"),
    Arg("full_v2p", "in", I32_64, "V", optional=True,
        doc="0.5.23 (0.5.17-0.5.18: v2p_page_table): the full pool's virtual page -> physical page; page_table "
        "gets sink(full_v2p[token // page_size]), sink(-1) = 0"),
    Arg("swa_src_table", "in", I32_64, "R,T", optional=True,
        doc="0.5.19, with src_is_read_table: the SWA read table, shaped and strided as req_to_token: "
        "swa_page_table gets swa_src_table[pool[i], c]"),
    Arg("swa_v2p", "in", I32_64, "V2", optional=True,
        doc="0.5.23 (0.5.18: the UnifiedSWAKVPool's): the unified SWA pool's virtual page -> SWA physical "
        "page, in place of the mapping: swa_page_table gets sink(swa_v2p[token // page_size])"),
)
SCALARS = (
    Scalar("max_seq_pages", "P, a Python int: callers pass cdiv(max(seq_lens) + seq_len_delta, page_size)"),
    Scalar("seq_len_delta", "0 for decode, step + 1 for draft decode"),
    Scalar("page_size", "a power of two; anything else must be refused"),
    Scalar("skip_page_table", "0.5.20: optional bool (absent: False); True writes the lengths and sums only"),
    Scalar("zero_tail", "0.5.23: optional bool (absent: False); True also writes 0 to columns "
           "cdiv(len, page_size) <= c < P"),
    Scalar("kernel_page_multiplier", "0.5.17-0.5.18: optional int >= 1 (absent: 1); scales page_table's values"),
    Scalar("src_is_read_table", "0.5.19: optional bool (absent: False); True: req_to_token holds page ids, copied "
           "verbatim, c < P"),
)

# The arguments each variant's targets take beyond 0.5.14's (the rest of SGLang's additions get
# the value that turns them off, kvfuzz/targets/calls.py). A case using an argument its variant
# lacks is out of contract, so it is never generated for (or judged against) such a target.
EXT_0523 = ("skip_page_table", "zero_tail", "full_v2p", "swa_v2p")
VARIANT_ARGS = {
    "default": (), "live_prefix": (),
    "v2p": ("full_v2p", "kernel_page_multiplier"),  # 0.5.17: v2p_page_table, kernel_page_multiplier
    "v2p_swa": ("full_v2p", "kernel_page_multiplier", "swa_v2p"),  # 0.5.18: and the unified SWA pool
    # 0.5.19-0.5.22 keep 0.5.18's unified SWA pool path (swa_v2p in a UnifiedSWAKVPool)
    "read_table": ("src_is_read_table", "swa_src_table", "swa_v2p"),  # 0.5.19
    "skip": ("skip_page_table", "swa_v2p"), "fused": EXT_0523, "strict": EXT_0523 + ("kernel_page_multiplier",),
}
LIVE_PREFIX = ("live_prefix", "v2p", "v2p_swa", "read_table", "skip", "fused")  # only the live pages required
FLAGS = ("skip_page_table", "zero_tail", "src_is_read_table")  # optional bool scalars
TABLES = ("full_v2p", "swa_v2p", "swa_src_table")  # optional translation tables
SWA_SOURCES = ("full_to_swa_index_mapping", "swa_v2p", "swa_src_table")  # swa_page_table takes exactly one


def uses_swa(case: Case) -> bool:
    t = case.tensors
    return "swa_page_table" in t and any(name in t for name in SWA_SOURCES)


def flag(case: Case, name: str) -> bool:
    return bool(case.scalars.get(name, False))


def kernel_path(case: Case) -> str:
    if flag(case, "skip_page_table"):
        return "skip"
    if uses_swa(case):
        return "swa"
    return "ps1" if case.scalars.get("page_size") == 1 else "general"


def live_pages(case: Case) -> np.ndarray:
    """cdiv(seq_lens[i] + seq_len_delta, page_size) per row (a row's live pages)."""
    lens = case.values["seq_lens"].astype(np.int64) + case.scalars["seq_len_delta"]
    return -(-lens // case.scalars["page_size"])


def _extension_reasons(case: Case) -> list[str]:
    """The optional 0.5.17-0.5.23 arguments: allowed by the variant, well-formed, consistent."""
    t, s, reasons = case.tensors, case.scalars, []
    allowed = VARIANT_ARGS.get(case.variant, ())
    for name in FLAGS:
        if name in s and not isinstance(s[name], bool):
            reasons.append(f"{name} must be a bool, got {s[name]!r}")
        elif s.get(name) and name not in allowed:
            reasons.append(f"{name}=True is not an argument of variant {case.variant}")
    for name in TABLES:
        if name in t and name not in allowed:
            reasons.append(f"{name} is not an argument of variant {case.variant}")
    mult = s.get("kernel_page_multiplier", 1)
    if type(mult) is not int or mult < 1:
        reasons.append(f"kernel_page_multiplier must be an int >= 1, got {mult!r}")
    elif mult != 1 and "kernel_page_multiplier" not in allowed:
        reasons.append(f"kernel_page_multiplier={mult} is not an argument of variant {case.variant}")
    if "swa_page_table" in t and sum(name in t for name in SWA_SOURCES) != 1:
        reasons.append("swa_page_table comes with exactly one of " + ", ".join(SWA_SOURCES))
    for name in SWA_SOURCES:
        if name in t and "swa_page_table" not in t:
            reasons.append(f"{name} comes with swa_page_table")
    if ("swa_src_table" in t) != (bool(s.get("src_is_read_table")) and "swa_page_table" in t):
        reasons.append("swa_src_table comes with src_is_read_table and swa_page_table, and they with it")
    if "swa_src_table" in t and (t["swa_src_table"].shape, t["swa_src_table"].strides) != (
            t["req_to_token"].shape, t["req_to_token"].strides):
        reasons.append("swa_src_table must have req_to_token's shape and strides")
    if s.get("src_is_read_table") and "full_v2p" in t:
        reasons.append("a read table's entries are final pages: no full_v2p with src_is_read_table")
    return reasons


def must_refuse(case: Case) -> list[str]:
    ps = case.scalars.get("page_size")
    return [] if is_power_of_two(ps) else [f"page_size {ps!r} is not a positive power of two"]


def structural_reasons(case: Case) -> list[str]:
    reasons = must_refuse(case) + dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t, s = case.tensors, case.scalars
    B = t["cache_seqlens_int32"].shape[0] if len(t["cache_seqlens_int32"].shape) == 1 else -1
    want = {"cache_seqlens_int32": (B,), "cu_seqlens_k": (B + 1,), "req_pool_indices": (B,), "seq_lens": (B,)}
    for name, shape in want.items():
        if t[name].shape != shape:
            reasons.append(f"{name} has shape {t[name].shape}, expected {shape} (batch B = {B})")
    for name in ("page_table", "swa_page_table", "req_to_token", "swa_src_table"):
        if name in t and len(t[name].shape) != 2:
            reasons.append(f"{name} must be 2-D, got shape {t[name].shape}")
    for name in ("strided_indices", "full_to_swa_index_mapping", "full_v2p", "swa_v2p"):
        if name in t and len(t[name].shape) != 1:
            reasons.append(f"{name} must be 1-D, got shape {t[name].shape}")
    reasons += _extension_reasons(case)
    if reasons:
        return reasons
    P, ps = s["max_seq_pages"], s["page_size"]
    if not isinstance(P, int) or P < 0:
        return [f"max_seq_pages must be a non-negative int, got {P!r}"]
    if not isinstance(s["seq_len_delta"], int):
        reasons.append(f"seq_len_delta must be an int, got {s['seq_len_delta']!r}")
    for name in ("page_table", "swa_page_table"):
        if name in t and t[name].shape[0] != B:
            reasons.append(f"{name} has {t[name].shape[0]} rows, batch is {B}")
        if name in t and P > t[name].shape[1]:
            reasons.append(f"max_seq_pages {P} > {name} width {t[name].shape[1]}")
    if P > 0:
        if (P - 1) * ps >= t["req_to_token"].shape[1]:
            reasons.append(f"(max_seq_pages - 1) * page_size = ({P} - 1) * {ps} >= req_to_token width "
                           f"{t['req_to_token'].shape[1]}")
        strided = case.values["strided_indices"]
        if strided.shape[0] < P:
            reasons.append(f"strided_indices has {strided.shape[0]} elements < max_seq_pages {P}")
        elif not np.array_equal(strided[:P], np.arange(P) * ps):
            j = int(np.flatnonzero(strided[:P] != np.arange(P) * ps)[0])
            reasons.append(f"strided_indices[{j}] = {strided[j]}, not {j} * page_size = {j * ps} "
                           "(strided_indices[:max_seq_pages] must be arange(0, P * page_size, page_size))")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    t, P = case.tensors, case.scalars["max_seq_pages"]
    out = {}
    for name in ("cache_seqlens_int32", "cu_seqlens_k"):
        out[name] = Cells(np.ones(t[name].shape, bool), np.zeros(t[name].shape, bool))
    for name in ("page_table", "swa_page_table"):
        if name not in t:
            continue
        rows, width = t[name].shape
        col = np.arange(width)[None, :]
        written = np.broadcast_to(col < P, (rows, width))
        if (name == "swa_page_table" and not uses_swa(case)) or flag(case, "skip_page_table"):
            written = np.zeros((rows, width), bool)
        if case.variant in LIVE_PREFIX and not flag(case, "zero_tail"):
            required = written & (col < live_pages(case)[:, None])
        else:  # zero_tail writes the tail too
            required = written.copy()
        out[name] = Cells(np.array(required), np.array(written & ~required))
    return out


CONTRACT = Contract(
    name="decode_metadata",
    entry="normal_decode_set_metadata",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={
        "default": "SGLang 0.5.10-0.5.16 (the seed, 0.5.14): every column c < max_seq_pages is written, "
        "the rest untouched",
        "live_prefix": "SGLang 0.5.17 and later: only each row's live pages c < min(cdiv(seq_lens[i] + "
        "seq_len_delta, page_size), max_seq_pages) are required; the other columns < max_seq_pages may be "
        "written (0.5.17+ leaves them stale); the rest untouched. (The base of the variants of 0.5.17 on, which "
        "add their releases' arguments)",
        "v2p": "SGLang 0.5.17: live_prefix, plus v2p_page_table (kvfuzz's full_v2p; -1 maps to the sink page 0) "
        "and kernel_page_multiplier",
        "v2p_swa": "SGLang 0.5.18: v2p, plus the unified SWA pool (UnifiedSWAKVPool: its v2p table, kvfuzz's "
        "swa_v2p, in place of the token mapping)",
        "read_table": "SGLang 0.5.19: live_prefix, plus src_is_read_table (req_to_token's page ids copied "
        "verbatim), swa_src_table (the SWA read table, req_to_token's shape and strides) and the unified SWA "
        "pool (swa_v2p in a UnifiedSWAKVPool, without read tables)",
        "skip": "SGLang 0.5.20-0.5.22: live_prefix, plus skip_page_table (lengths and sums only) and the unified "
        "SWA pool (swa_v2p in a UnifiedSWAKVPool)",
        "fused": "SGLang 0.5.23: live_prefix, plus skip_page_table, zero_tail (every column < max_seq_pages "
        "required, 0 past the live pages), full_v2p and swa_v2p (unified memory; -1 maps to the sink page 0)",
        "strict": "kvfuzz's builtin kernels: default's rule (every column < max_seq_pages written), plus "
        "0.5.23's skip_page_table, zero_tail, full_v2p and swa_v2p, and 0.5.17's kernel_page_multiplier",
    },
    paths={
        "ps1": "page_size == 1 without SWA: the fast kernel (256-column blocks)",
        "general": "any power-of-two page_size without SWA: the general kernel (128-column blocks)",
        "swa": "swa_page_table and an SWA source given (the pool's mapping, swa_v2p, or 0.5.19's "
        "swa_src_table): the general kernel with the SWA mapping",
        "skip": "skip_page_table=True (0.5.20 on): the lengths and their prefix sum only",
    },
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=must_refuse,
    cells=cells,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(128, 256),
    variant_args=VARIANT_ARGS,
)
