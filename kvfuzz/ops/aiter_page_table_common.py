"""What the two AITER unified-attention page-table ops share (aiter_ragged_page_table,
aiter_req_to_token_page_table): SGLang's `scatter_ragged_to_page_table_kernel` and
`scatter_req_to_token_to_page_table_kernel`, bare `@triton.jit` kernels of one file
(`aiter_unified_attention.py`, 0.5.12 on), launched by the AITER backend with grid
`(bs, cdiv(max(W, 1), BLOCK_SIZE))`, BLOCK_SIZE = 1024 pages per program. Each turns a request's
KV-pool slots into the 2-D block-level page table unified_attention reads: for request i (row i of
`page_table`), with n_i tokens and page size ps,

    page_table[i, p]     = slot_i(p * ps) // ps                      for 0 <= p < ceil(n_i / ps)
    swa_page_table[i, p] = swa_slot_mapping[slot_i(p * ps)] // ps    (HAS_SWA)

where slot_i(t) is the request's t-th token's slot: `kv_flat[kv_indptr[i] + t]` (the ragged
kernel) or `req_to_token[req_pool_indices[i], t]` (the req_to_token kernel, n_i = seq_lens[i] +
DRAFT_NUM). Both write `swa_page_table` through `page_table`'s row stride (one `dest_stride` /
`page_table_stride`), read the mapping at `vals` unmasked (a lane past the request's pages has
loaded `other=0`, so it reads the mapping's first entry and stores nothing), and take no width of
the tables: a request with more pages than a row holds writes on into the next row, as far as the
grid's blocks reach.

Here are the pieces whose logic is the same: the shared arguments and scalar rules, the output
and SWA checks, the written and racy cells, the oracles' page rule (NumPy) and gather (torch),
the generator's draws of the SWA mapping, the slots, the tables and their features, the
violations that break a slot or table rule, the minimizer's SWA pass and value bounds, and the
short call's launch line. What differs (where a request's slots and length come from) stays in
each op's folder. Not a standalone module: each op's call.py is (the full repro script embeds it).
"""

from __future__ import annotations

import bisect
from typing import Callable, Iterator, Mapping

import numpy as np

from ..case import Case, TensorSpec
from ..contract import INT32_MAX, Arg, Cells, OutOfContract, written_more_than_once
from ..minimize import Candidate
from ..strategies.draw import CompileClass, Draw
from ..strategies.layouts import LayoutClass, layout_class, relayout
from .kv_index_common import I32, matrix_reasons
from .record import OpRecord

BLOCK_SIZE = 1024  # SGLang's BLOCK_SIZE: pages per program (every launch)
BLOCK_EDGES = (BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 2 * BLOCK_SIZE + 1)  # pages at the grid's block edges
OUTPUTS = ("page_table", "swa_page_table")
MAPPING = "swa_slot_mapping"
SENTINEL = -1  # SGLang's mapping's last entry (size + page_size + 1 entries), never a live slot's
MAX_TOKENS = 1 << 16  # a generated request's tokens at most (W * ps): the cases stay small

PAGE_TABLE = Arg("page_table", "out", I32, "R,W",
                 doc="R >= bs; cells [i, p < ceil(n[i] / ps)) written, the rest untouched")
SWA_PAGE_TABLE = Arg("swa_page_table", "out", I32, "R',W", optional=True,
                     doc=f"exactly with {MAPPING}; R' >= bs, page_table's width and row stride; the same cells written")
SWA_MAPPING = Arg(MAPPING, "in", ("int64", "int32"), "M", optional=True,
                  doc="full slot -> SWA slot (absent: no SWA); M >= 1, every slot read < M, its entry in [0, 2^31)")


# the contract ----------------------------------------------------------------------------


def kernel_path(case: Case) -> str:
    return "swa" if MAPPING in case.tensors else "no_swa"


def page_size_reasons(case: Case) -> list[str]:
    """PAGE_SIZE: a positive int (the kernels' page arithmetic holds for any; SGLang's are powers of two)."""
    ps = case.scalars.get("page_size")
    if not (isinstance(ps, int) and not isinstance(ps, bool) and ps >= 1):
        return [f"page_size {ps!r} is not a positive integer"]
    return []


def table_reasons(t: Mapping[str, TensorSpec], bs: int) -> list[str]:
    """The output and SWA rules both kernels share, for bs requests: the two SWA tensors together
    (HAS_SWA is whether the mapping is given), 2-D tables with unit column stride and at least bs
    rows, swa_page_table with page_table's width and row stride, a mapping of one entry or more."""
    if (MAPPING in t) != ("swa_page_table" in t):
        return [f"{MAPPING} and swa_page_table must be given together (SGLang passes both or neither)"]
    reasons = [r for name in OUTPUTS if name in t for r in matrix_reasons(t, name)]
    if reasons:
        return reasons
    out = t["page_table"]
    for name in OUTPUTS:
        if name in t and t[name].shape[0] < bs:
            reasons.append(f"{name} has {t[name].shape[0]} rows, fewer than bs = {bs} (the kernel writes row i for "
                           "request i)")
    swa = t.get("swa_page_table")
    if swa is not None:
        if swa.shape[1] != out.shape[1]:
            reasons.append(f"swa_page_table is {swa.shape[1]} wide, page_table {out.shape[1]} (SGLang sizes both "
                           "max_num_blocks_per_seq wide)")
        elif bs > 1 and swa.strides[0] != out.strides[0]:
            reasons.append(f"swa_page_table's row stride {swa.strides[0]} differs from page_table's "
                           f"{out.strides[0]} (the kernel writes both through page_table's)")
        if t[MAPPING].shape[0] < 1:
            reasons.append(f"{MAPPING} is empty (a lane past a request's pages reads its first entry)")
    return reasons


def page_counts(case: Case, lengths: Callable[[Case], np.ndarray]) -> np.ndarray:
    """ceil(n_i / ps) of each request's n_i = `lengths(case)` (0 for a negative length)."""
    ps = case.scalars["page_size"]
    return -(-np.maximum(np.asarray(lengths(case), np.int64), 0) // ps)


def cells_of(lengths: Callable[[Case], np.ndarray]) -> Callable[[Case], dict[str, Cells]]:
    """Contract.cells: row i's first ceil(n_i / ps) columns of each table written, the rest (later
    columns, rows past bs) untouched."""

    def cells(case: Case) -> dict[str, Cells]:
        pages = page_counts(case, lengths)
        out = {}
        for name in OUTPUTS:
            if name in case.tensors and len(case.tensors[name].shape) == 2:
                R, W = case.tensors[name].shape
                counts = np.zeros(R, np.int64)
                counts[:min(R, pages.shape[0])] = pages[:R]
                required = np.arange(W)[None, :] < counts[:, None]
                out[name] = Cells(required, np.zeros_like(required))
        return out

    return cells


def racy_of(lengths: Callable[[Case], np.ndarray]) -> Callable[[Case], dict[str, np.ndarray]]:
    """Contract.racy: request i writes pages p < ceil(n_i / ps), up to the grid's last block, at
    i * row stride + p of each table, so a request with more pages than the row holds (out of
    contract) writes on into the next row, which that row's request writes too."""

    def racy(case: Case) -> dict[str, np.ndarray]:
        out = case.tensors.get("page_table")
        if out is None or len(out.shape) != 2 or page_size_reasons(case):
            return {}
        try:
            pages = page_counts(case, lengths)
        except (KeyError, ValueError, IndexError, TypeError):  # a case whose lengths cannot be read
            return {}
        stride, W = out.strides[0], out.shape[1]
        reach = -(-max(W, 1) // BLOCK_SIZE) * BLOCK_SIZE  # columns the grid's blocks cover
        written = np.minimum(pages, reach)
        result = {}
        for name in OUTPUTS:
            spec = case.tensors.get(name)
            if spec is None or len(spec.shape) != 2:
                continue
            R = spec.shape[0]
            bs = min(R, written.shape[0])
            if bs < 2 or W == 0 or stride < W:
                continue
            hit = written_more_than_once(R * stride + reach, np.arange(bs, dtype=np.int64) * stride, written[:bs])
            result[name] = hit[np.arange(R)[:, None] * stride + np.arange(W)[None, :]]
        return result

    return racy


# the oracles -----------------------------------------------------------------------------


class PageRows:
    """The NumPy oracle's tables: `page_table` (and `swa_page_table` through the mapping) as
    int64 arrays of the outputs' shapes, filled row by row from each request's slots."""

    def __init__(self, case: Case):
        self.ps = int(case.scalars["page_size"])
        self.out = np.zeros(case.tensors["page_table"].shape, np.int64)
        self.W = self.out.shape[1]
        self.mapping = np.asarray(case.values[MAPPING], np.int64) if MAPPING in case.values else None
        self.swa_out = np.zeros(case.tensors["swa_page_table"].shape, np.int64) if self.mapping is not None else None

    def check_pages(self, i: int, n: int) -> int:
        """ceil(n / ps), or OutOfContract when it is past page_table's width."""
        pages = -(-n // self.ps)
        if pages > self.W:
            raise OutOfContract(f"request {i}: ceil({n} / {self.ps}) = {pages} pages > page_table width {self.W}")
        return pages

    def fill(self, i: int, slots: np.ndarray, where: Callable[[int], str]) -> None:
        """Row i from the slots of the request's pages (`where(p)`: page p's slot, in words):
        each a KV-pool slot in [0, 2^31), with SWA inside the mapping, whose entry is an SWA slot."""
        ps = self.ps
        bad = (slots < 0) | (slots > INT32_MAX)
        if bad.any():
            p = int(np.argmax(bad))
            raise OutOfContract(f"request {i}: slot {where(p)} = {int(slots[p])} outside [0, 2^31) (a KV-pool slot; "
                                "the page of a negative one is not defined: Triton's // truncates)")
        self.out[i, :slots.shape[0]] = slots // ps
        if self.mapping is None:
            return
        M = self.mapping.shape[0]
        if slots.size and slots.max() >= M:
            p = int(np.argmax(slots >= M))
            raise OutOfContract(f"request {i}: slot {where(p)} = {int(slots[p])} past {MAPPING}'s {M} entries")
        mapped = self.mapping[slots]
        bad = (mapped < 0) | (mapped > INT32_MAX)
        if bad.any():
            p = int(np.argmax(bad))
            raise OutOfContract(f"request {i}: {MAPPING}[{int(slots[p])}] = {int(mapped[p])} outside [0, 2^31) "
                                "(an SWA slot)")
        self.swa_out[i, :slots.shape[0]] = mapped // ps

    def result(self) -> dict[str, np.ndarray]:
        out = {"page_table": self.out}
        if self.swa_out is not None:
            out["swa_page_table"] = self.swa_out
        return out


def torch_pages(case: Case, device, inputs, lens, slot_of) -> dict:
    """The torch oracle's tables: over a (bs, W) grid of pages, the live ones (p < ceil(lens[i] /
    ps)) gathered in one go: `slot_of(req, page)` gives their slots (int64 tensors), page_table
    their floor by ps, swa_page_table the mapping's entry there by ps. int64, the outputs' shapes."""
    import torch

    from ..oracles.torch_ref import as_int64, input_tensor

    ps = int(case.scalars["page_size"])
    R, W = case.tensors["page_table"].shape
    result = {"page_table": torch.zeros((R, W), dtype=torch.int64, device=device)}
    mapping = None
    if MAPPING in case.tensors:
        mapping = input_tensor(case, MAPPING, device, inputs).long()
        result["swa_page_table"] = torch.zeros(case.tensors["swa_page_table"].shape, dtype=torch.int64, device=device)
    p = torch.arange(W, device=device)
    live = p[None, :] < torch.div(torch.clamp(lens, min=0) + ps - 1, ps, rounding_mode="floor")[:, None]
    if bool(live.any()):
        req, page = live.nonzero(as_tuple=True)
        slots = slot_of(req, page)
        result["page_table"][req, page] = torch.div(slots, ps, rounding_mode="floor")
        if mapping is not None:
            result["swa_page_table"][req, page] = torch.div(mapping[slots], ps, rounding_mode="floor")
    return {name: as_int64(t) for name, t in result.items()}


# the generators --------------------------------------------------------------------------

PAGE_SIZES = (16, 1, 64, 32, 128, 3)  # the AITER backend's (the server's page size: 1, 16, 64 ...); 3 is no power of two
PRODUCTION = (1, 16, 64)
MAPPING_SIZES = (1, 2, 64, 65, 1000, 4097)


PROD_TOKENS = (32768, 65536, 131072, 163840)  # context lengths: 32 to 160 blocks of 1024 pages at page size 1


def production_class(d: Draw, p: dict) -> bool:
    """One class in sixteen: a production size into `p` (`C_tokens`, the context): a context of
    32768 to 163840 tokens for one or a few requests, or a batch of 17 to 256 or past 256 over a
    context of 1 to 2049 pages (the CPU interpreter runs each program in milliseconds: a big batch
    of long rows would take minutes there); whether it drew one."""
    if d.integer(0, 15):
        return False
    p["size"] = "production"
    p["bs"] = d.choice(("one", "few", "few", "big", "past"))
    if p["bs"] in ("one", "few"):  # a long context: 32 to 160 blocks of 1024 pages per request at page size 1
        p["page_size"] = d.choice(PRODUCTION)
        p["C_tokens"] = d.choice(PROD_TOKENS)
    else:  # a big batch, its context within 2049 pages (1 to 3 programs per request)
        p["C_tokens"] = p["page_size"] * d.choice((1, 1023, 1025, 2049))
    return True


def production_lengths(d: Draw, g, bs: int, cap: int, ps: int, W: int, least: int = 0) -> list[int]:
    """A production batch's tokens: one or two requests long (the row's end, the grid's block
    edges, any), the rest short (at least `least`, a verify's drafts)."""
    lens = g.integers(least, max(least, min(cap, 3 * ps)) + 1, size=bs).tolist()  # = a scalar draw each
    for _ in range(min(bs, d.integer(1, 2))):
        lens[d.integer(0, bs - 1)] = max(page_length(d, cap, ps, W), least)
    return lens


def class_lengths(d: Draw, g, bs: int, cap: int, ps: int, W: int, least: int = 0) -> list[int]:
    """An ordinary batch's tokens: every request of a small batch (one in eight of a big one) at
    the edges (`page_length`, at least `least`), the rest short from the case's RNG `g`, drawn
    together (the same values as a scalar draw per short request)."""
    lens, short = [], []
    for i in range(bs):
        if bs <= 4 or d.integer(0, 7) == 0:
            lens.append(max(page_length(d, cap, ps, W), least))
        else:
            short.append(i)
            lens.append(0)
    if short:
        for i, n in zip(short, g.integers(least, max(least, min(cap, 3 * ps)) + 1, size=len(short)).tolist()):
            lens[i] = n
    return lens


def swa_class(d: Draw, p: dict) -> None:
    """The class's SWA parameters into `p`: on or off, the mapping's dtype and layout, and
    page_table's layout (swa_page_table shares it)."""
    p["swa"] = swa = d.boolean()
    p["layout:page_table"] = layout_class(d, "out", 2, ("contiguous", "offset", "padded"))
    if swa:
        p[f"dtype:{MAPPING}"] = d.choice(("int64", "int32"))
        p[f"layout:{MAPPING}"] = layout_class(d, "in", 1, ("contiguous", "offset"))


def slot_range(d: Draw, g, k: CompileClass, values: dict) -> tuple[int, int]:
    """(lo, top): the range of the slots the kernel reads. With SWA the mapping's live entries (a
    mapping of M entries drawn into `values`, SGLang's ending with -1, never read; SWA slots up to
    int32's largest, freed (0) entries, and sometimes an odd first entry, which the lanes past a
    request's pages read and must not store: the live slots start at 1 then); without, any
    KV-pool slot up to int32's largest."""
    if not k["swa"]:
        return 0, d.choice((1 << 20, 2**31))
    M = d.choice(MAPPING_SIZES)
    sglang_end = M > 1 and d.boolean()
    swa_top = d.choice((1 << 16, 2**31))
    mapping = g.integers(0, swa_top, size=M)
    mapping[g.random(M) < 0.25] = 0  # freed entries
    if d.boolean():
        mapping[int(g.integers(0, M))] = swa_top - 1  # the largest SWA slot
    top, lo = (M - 1 if sglang_end else M), 0
    if top > 1 and d.integer(0, 3) == 0:
        mapping[0] = d.choice((SENTINEL, 2**31 - 1))  # read by the lanes past the pages; live slots avoid 0 then
        lo = 1
    if sglang_end:
        mapping[-1] = SENTINEL
    values[MAPPING] = mapping
    return lo, top


def live_slots(d: Draw, g, n: int, lo: int, top: int) -> np.ndarray:
    """n slots the kernel reads, in [lo, top), the first and last of that range among them."""
    slots = g.integers(lo, top, size=n)
    if n:
        ends = d.choice(("none", "first", "last", "both"))
        if ends in ("first", "both"):
            slots[0] = lo  # the pool's first slot (the first one read)
        if ends in ("last", "both"):
            slots[-1] = top - 1  # the pool's last slot (int32's largest without SWA, at top 2**31)
    return slots


def live_rows(d: Draw, g, rows: int, n: int, lo: int, top: int) -> np.ndarray:
    """`live_slots` for each of `rows` rows, stacked: the slots in one draw from `g` (the same
    values as a draw of n per row), then each row's ends."""
    slots = g.integers(lo, top, size=(rows, n))
    if n:
        for row in slots:
            ends = d.choice(("none", "first", "last", "both"))
            if ends in ("first", "both"):
                row[0] = lo
            if ends in ("last", "both"):
                row[-1] = top - 1
    return slots


def page_length(d: Draw, limit: int, ps: int, W: int) -> int:
    """A request's tokens at most `limit`: at a page edge (0, 1, ps - 1, ps, ps + 1), at the
    grid's block edges (the tokens of 1023, 1024, 1025, 2049 pages, or one more; on a production
    table of W > 2049 pages, of the last blocks' edges too), in the last page of a row of W pages,
    the limit, or any."""
    edges = [e for e in (0, 1, ps - 1, ps, ps + 1) if 0 <= e <= limit]
    far = [b for b in ((W // BLOCK_SIZE) * BLOCK_SIZE, (W // BLOCK_SIZE) * BLOCK_SIZE + 1) if b > 2 * BLOCK_SIZE + 1]
    blocks = [t for b in BLOCK_EDGES + tuple(far) for t in (b * ps, (b - 1) * ps + 1) if t <= limit] or edges
    last = (max(0, min(limit, (W - 1) * ps + 1)), min(limit, W * ps))
    return d.one_of(lambda: d.choice(edges), lambda: d.choice(blocks), lambda: limit, lambda: d.integer(*last),
                    lambda: d.integer(0, limit))


def reach_features(pages: int) -> set[str]:
    """OpGenerator.class_features: the grid's block edges a class's rows can reach (a row of
    `pages` pages at most), which the class pool covers first."""
    return {f"reach:{b}" for b in BLOCK_EDGES if pages >= b}


def table_rows(d: Draw, k: CompileClass, bs: int, spare: tuple[int, ...]) -> tuple[int, int]:
    """(page_table's rows, swa_page_table's): bs, or more (a CUDA-graph buffer's max_bs rows,
    `spare` more); SGLang 0.5.12's graph page_table views a buffer with more rows than
    its SWA table."""
    R = bs + d.choice(spare)
    return R, (d.choice((R, R, bs)) if k["swa"] else R)


def table_shapes(k: CompileClass, shapes: dict, values: Mapping[str, np.ndarray], R: int, swa_R: int, W: int) -> None:
    """The tables' (and the mapping's) (dtype, shape) into `shapes`."""
    shapes["page_table"] = ("int32", (R, W))
    if k["swa"]:
        shapes[MAPPING] = (k[f"dtype:{MAPPING}"], (values[MAPPING].shape[0],))
        shapes["swa_page_table"] = ("int32", (swa_R, W))


def relaid_tables(k: CompileClass, t: dict, R: int, swa_R: int, W: int) -> None:
    """The tables' specs after a violation changed their rows or width (one row stride for both)."""
    lc = k.get("layout:page_table", LayoutClass())
    t["page_table"] = relayout(lc, "int32", (R, W))
    if "swa_page_table" in t:
        t["swa_page_table"] = relayout(lc, "int32", (swa_R, W))


# the violations both ops draw (each op adds its own)
SHARED_VIOLATIONS = ("page_table_too_narrow", "page_table_too_few_rows", "negative_slot", "slot_past_mapping",
                     "negative_swa_slot")


def slot_kind(kind: str, v: Mapping[str, np.ndarray]) -> str:
    """A slot violation for this case: SWA is the class's, so a case without the mapping breaks the
    full pool's slot rule."""
    if kind in ("slot_past_mapping", "negative_swa_slot") and MAPPING not in v:
        return "negative_slot"
    return kind


def bad_slot(d: Draw, kind: str, v: dict, ps: int) -> int:
    """A slot that breaks `kind`'s rule: negative, at or past the mapping's end, or one whose
    mapping entry is made negative (SGLang's -1 sentinel) in `v`."""
    if kind == "negative_slot":
        return -d.choice((1, ps + 1, 2**31))
    M = v[MAPPING].shape[0]
    if kind == "slot_past_mapping":
        return M + d.choice((0, 1, 1000))
    slot = d.integer(0, M - 1)
    v[MAPPING][slot] = -d.choice((1, ps + 1))
    return slot


def narrower(d: Draw, most: int) -> int:
    """page_table_too_narrow's width: fewer pages than the longest request has."""
    return most - d.integer(1, max(1, min(most, 3)))


def features(case: Case, kv_lens: list[int], slots: np.ndarray | None) -> set[str]:
    """Both ops' features, from the requests' tokens `kv_lens` (n_i) and the slots read: SWA, the
    page size, lengths at the page and block edges, a row filled or not, the grid's two blocks,
    spare and padded rows, the pool's first and last slots, and the mapping's entries read."""
    ps = case.scalars.get("page_size")
    out_spec = case.tensors.get("page_table")
    if not isinstance(ps, int) or ps < 1 or out_spec is None or len(out_spec.shape) != 2:
        return set()
    R, W = out_spec.shape
    out = {kernel_path(case), f"page_size:{ps}"}
    if ps & (ps - 1):
        out.add("page_size:not_power_of_two")
    seen = sorted(set(kv_lens))  # the distinct lengths: membership and range tests, not a loop over requests
    if seen:
        if _any_in(seen, 0, 0):
            out.add("len:zero")
        for name, e in (("page-1", ps - 1), ("page", ps), ("page+1", ps + 1)):
            if e > 0 and _any_in(seen, e, e):
                out.add(f"edge:len:{name}")
        for b in BLOCK_EDGES:  # the n with ceil(n / ps) == b
            if _any_in(seen, max((b - 1) * ps + 1, 0), b * ps):
                out.add(f"edge:pages:{b}")
        if -(-seen[-1] // ps) > BLOCK_SIZE:
            out.add("pages:two_blocks")
        if _any_in(seen, max((W - 1) * ps + 1, 1), W * ps):
            out.add("width:full")
        if seen[-1] >= 0 and -(-seen[-1] // ps) < W:
            out.add("width:spare")
    if W > BLOCK_SIZE:
        out.add("grid:two_blocks")
    if W * ps >= 32768:
        out.add("size:production")
    if len(kv_lens) > 256:
        out.add("bs:past_256")
    if len(kv_lens) >= 17:
        out.add("big_batch")
    if R > len(kv_lens):
        out.add("rows:spare")
    if R > 1 and out_spec.strides[0] != W:
        out.add("page_table:padded_rows")
    swa = case.tensors.get("swa_page_table")
    if swa is not None and len(swa.shape) == 2 and swa.shape[0] != R:
        out.add("swa_page_table:other_rows")
    if slots is not None and slots.size:
        if int(slots.max()) == 2**31 - 1:
            out.add("slot:int32_max")
        if int(slots.min()) == 0:
            out.add("slot:zero")
        mapping = case.values.get(MAPPING)
        if mapping is not None:
            m = np.asarray(mapping)
            if int(m[-1]) == SENTINEL:
                out.add("swa:sentinel")
            if int(slots.max()) == m.shape[0] - 1 and int(m[-1]) >= 0:
                out.add("swa:last_slot")  # the mapping's last entry read
            live = slots[(slots >= 0) & (slots < m.shape[0])]
            if live.size and int(m[live].max()) == 2**31 - 1:
                out.add("swa:int32_max")
            if live.size and int(m[live].min()) == 0:
                out.add("swa:freed")
            if (int(m[0]) < 0 or int(m[0]) == 2**31 - 1) and live.size and int(live.min()) > 0:
                out.add("swa:entry0_odd")  # only the lanes past the pages read it, and store nothing
    return out


def _any_in(ascending: list[int], lo: int, hi: int) -> bool:
    """Whether the sorted list holds a value in [lo, hi]."""
    i = bisect.bisect_left(ascending, lo)
    return i < len(ascending) and ascending[i] <= hi


def required_features() -> set[str]:
    """The features every campaign of a few minutes must reach, of both ops."""
    return ({"swa", "no_swa", "len:zero", "pages:two_blocks", "width:full", "width:spare", "grid:two_blocks",
             "big_batch", "rows:spare", "page_table:padded_rows", "swa_page_table:other_rows", "slot:int32_max",
             "slot:zero", "swa:sentinel", "swa:last_slot", "swa:int32_max", "swa:freed", "swa:entry0_odd",
             "page_size:not_power_of_two"}
            | {f"page_size:{ps}" for ps in PRODUCTION}
            | {f"edge:len:{e}" for e in ("page-1", "page", "page+1")}
            | {f"edge:pages:{b}" for b in BLOCK_EDGES})


# the minimizer and presentation ----------------------------------------------------------


def swa_pass(case: Case) -> Iterator[Candidate]:
    """SWA off: the mapping and swa_page_table dropped (the finding may be page_table's alone)."""
    if MAPPING not in case.tensors and "swa_page_table" not in case.tensors:
        return

    def build() -> Case:
        drop = (MAPPING, "swa_page_table")
        return case.replace(tensors={n: s for n, s in case.tensors.items() if n not in drop},
                            values={n: x for n, x in case.values.items() if n not in drop})
    yield f"SWA dropped ({MAPPING}, swa_page_table)", build


def mapping_bound(case: Case, name: str, slots: str) -> int | None:
    """With SWA, the exclusive bound of the slots input `slots`: the mapping's size."""
    if name == slots and MAPPING in case.tensors:
        return case.tensors[MAPPING].shape[0]
    return None


def launch(case: Case, entry: str, rows: str, args: str, tail: str, where: str) -> str:
    """The short script's launch line: SGLang's grid `(bs, cdiv(max(W, 1), 1024))` (bs from
    `rows`), `args` then the SWA pointers, the constexprs `tail`."""
    swa = MAPPING in case.tensors
    ptrs = f"swa_page_table, {MAPPING}" if swa else "None, None"
    return (f"{entry}[({rows}, -(-max(page_table.shape[1], 1) // {BLOCK_SIZE}))]({args}, {ptrs}, {tail}"
            f"PAGE_SIZE={case.scalars['page_size']}, BLOCK_SIZE={BLOCK_SIZE}, HAS_SWA={swa})  # SGLang's {where}")


SOURCE_FILE = "aiter_unified_attention.py"  # the release file holding both kernels, by its name in kvfuzz's cache


def aiter_record(contract, call, generate, minimize, present, order: int) -> OpRecord:
    """The op record of an AITER page-table op from its folder's modules: the builtin kernel
    `kvfuzz.kernels.<op>:<entry>`, the release file aiter_unified_attention.py, the full repro
    script embedding its call.py."""
    return OpRecord(
        name=contract.name,
        contract=contract,
        generator=generate.GENERATOR,
        call=call.CALL,
        generations=call.GENERATIONS,
        builtin=f"kvfuzz.kernels.{contract.name}:{contract.entry}",
        source_file=SOURCE_FILE,
        release_variants=call.RELEASE_VARIANTS,
        passes=minimize.PASSES,
        value_bound=minimize.value_bound,
        related_rows=present.related_rows,
        short_call=present.short_call,
        standalone=(call.__name__,),
        order=order,
    )
