"""What the kv_indices ops (flashinfer_kv_indices, chunked_prefix_kv_indices,
flashmla_kv_indices, and the page-table parts of trtllm_mha_kv_indices) share. Each runs one
program per request i: it reads the token ids of request-pool row r = req_pool_indices[i] of
`req_to_token`, from a start s for a length n, and writes them (or, flashmla's, the pages of
every page_size-th one) into `kv_indices`. The first two write one flat CSR stream (request i's
range from an offset: kv_indptr, chunk_cu_seq_lens); flashmla writes row i of a 2-D page table,
one program per block of 4096 tokens, as trtllm_mha does (from column 0, into `page_table`).
What differs stays in each op's folder; here are the pieces whose logic is the same:

* contract: the shared arguments, kernel path, structural checks, written and racy cells;
* oracles: reading the requests and their value rules (NumPy), the CSR gather (torch);
* generator: the draws the ops make alike, each in its fixed order of Draw calls (the ops'
  case streams for a seed depend on it: `scripts/stream_digest.py` checks a change keeps them);
* minimizer, presentation and the op record.

Not a standalone module: the full repro script embeds each op's call.py only (its shared
getters are in `kvfuzz.targets.calls`).
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

import numpy as np

from ..case import Case, TensorSpec
from ..contract import Arg, Cells, Contract, OutOfContract, dtype_and_layout_reasons, fits_int32, is_power_of_two, \
    written_more_than_once
from ..minimize import Candidate, _chunks, _fmt
from ..minimize import relayout as reshaped
from ..oracles.torch_ref import Inputs, input_tensor
from ..strategies.draw import CompileClass, Draw
from ..strategies.layouts import LayoutClass, apply_broadcast, class_layout, layout_class, relayout
from .record import OpRecord

# the contract ----------------------------------------------------------------------------

I32, I32_64 = ("int32",), ("int32", "int64")
PAGE_BLOCK = 4096  # the page tables' tokens per program (_FLASHMLA_CREATE_KV_BLOCK_SIZE, _MHA_KV_INDEX_BLOCK_TOKENS)
BLOCK = 512  # the CSR gathers' copy block (SGLang's): lengths around its edges take different loop counts
TABLE = Arg("req_to_token", "in", I32, "P,C", doc="token ids per request-pool row; unit column stride")
POOL_INDICES = Arg("req_pool_indices", "in", I32_64, "bs", doc="each request's row, in [0, P)")
NO_REQUEST = "bs = 0: no request (SGLang never launches an empty grid)"


def start_path(case: Case) -> str:
    """The kernel path of an op with an optional `kv_start_idx`."""
    return "start" if "kv_start_idx" in case.tensors else "no_start"


def refuses_nothing(case: Case) -> list[str]:
    """must_refuse: the bare kernels check nothing before they launch."""
    return []


def matrix_reasons(t: Mapping[str, TensorSpec], name: str) -> list[str]:
    """Tensor `name` is 2-D with unit column stride (its row stride is passed, not its column's)."""
    spec = t[name]
    if len(spec.shape) != 2:
        return [f"{name} must be 2-D, got shape {spec.shape}"]
    if spec.shape[1] > 1 and spec.strides[1] != 1:
        return [f"{name} must have unit column stride, got strides {spec.strides}"]
    return []


def vector_reasons(t: Mapping[str, TensorSpec], names: tuple[str, ...], indexed_by: str = "program id") -> list[str]:
    """Each of the tensors `names` present is 1-D with unit stride (the kernel indexes it by
    `indexed_by`)."""
    reasons = []
    for name in names:
        spec = t.get(name)
        if spec is None:
            continue
        if len(spec.shape) != 1:
            reasons.append(f"{name} must be 1-D, got shape {spec.shape}")
        elif spec.shape[0] > 1 and spec.strides[0] != 1:
            reasons.append(f"{name} must have unit stride (the kernel indexes it by {indexed_by}), "
                           f"got stride {spec.strides[0]}")
    return reasons


def size_reasons(t: Mapping[str, TensorSpec], bs: int, want: Mapping[str, int]) -> list[str]:
    """Each tensor of `want` present has its number of elements."""
    return [f"{name} has {t[name].shape[0]} elements, expected {n} (bs = {bs})"
            for name, n in want.items() if name in t and t[name].shape[0] != n]


def gather_reasons(contract: Contract, case: Case, vectors: tuple[str, ...],
                   sizes: Callable[[Mapping[str, TensorSpec], int], list[str]]) -> list[str]:
    """structural_reasons of a CSR gather (flashinfer's, chunked prefix's): the dtypes, a 2-D
    req_to_token with unit column stride, the 1-D `vectors` with unit stride, bs >= 1, then
    `sizes(tensors, bs)`."""
    reasons = dtype_and_layout_reasons(contract, case)
    if reasons:
        return reasons
    t = case.tensors
    if len(t["req_to_token"].shape) != 2:  # the table's rank alone
        return matrix_reasons(t, "req_to_token")
    reasons = matrix_reasons(t, "req_to_token") + vector_reasons(t, vectors)
    if reasons:
        return reasons
    bs = t["req_pool_indices"].shape[0]
    if bs < 1:
        return [NO_REQUEST]
    return sizes(t, bs)


def page_size_reasons(case: Case) -> list[str]:
    """A page table's page_size: a power of two from 1 to PAGE_BLOCK (`tl.arange(0, 4096 // ps)`)."""
    ps = case.scalars.get("page_size")
    if not (is_power_of_two(ps) and ps <= PAGE_BLOCK):
        return [f"page_size {ps!r} is not a power of two from 1 to {PAGE_BLOCK}"]
    return []


def page_counts(case: Case, lengths: str, rows: int) -> np.ndarray:
    """ceil(n / ps) of each of the first `rows` requests' `lengths` (0 for a negative length or a
    missing request)."""
    ps = case.scalars["page_size"]
    lens = np.asarray(case.values[lengths], dtype=np.int64)
    pages = np.zeros(rows, np.int64)
    k = min(lens.shape[0], rows)
    pages[:k] = -(-np.maximum(lens[:k], 0) // ps)
    return pages


def page_cells(case: Case, out: str, lengths: str) -> Cells:
    """The cells of page table `out` written: row i's first ceil(n[i] / ps) columns, the rest untouched."""
    spec = case.tensors[out]
    required = np.arange(spec.shape[1])[None, :] < page_counts(case, lengths, spec.shape[0])[:, None]
    return Cells(required, np.zeros_like(required))


def span_cells(spec: TensorSpec, lo: int, hi: int) -> Cells:
    """Cells [lo, hi) of a flat output written, the rest untouched."""
    required = np.zeros(spec.shape, bool)
    required[lo:hi] = True
    return Cells(required, np.zeros_like(required))


def csr_racy(out: str, offsets: str, lengths: str) -> Callable[[Case], dict[str, np.ndarray]]:
    """Contract.racy of a CSR gather: program i writes `lengths`[i] cells of `out` from
    `offsets`[i], so offsets out of step with the lengths (out of contract) overlap two
    requests' ranges."""

    def racy(case: Case) -> dict[str, np.ndarray]:
        spec = case.tensors[out]
        if len(spec.shape) != 1:
            return {}
        lens = np.asarray(case.values[lengths], dtype=np.int64)
        starts = np.asarray(case.values[offsets], dtype=np.int64)[:lens.shape[0]]
        return {out: written_more_than_once(spec.shape[0], starts, lens)}

    return racy


# the oracles -----------------------------------------------------------------------------


def request_values(case: Case, lengths: str, starts: str) -> tuple[np.ndarray, int, int, np.ndarray, np.ndarray,
                                                                     np.ndarray]:
    """(req_to_token as int64, its P and C, each request's pool row, length and start, int64;
    zero starts where the optional `starts` is absent)."""
    v = case.values
    table = np.asarray(v["req_to_token"], dtype=np.int64)
    P, C = case.tensors["req_to_token"].shape
    rows = np.asarray(v["req_pool_indices"], dtype=np.int64)
    lens = np.asarray(v[lengths], dtype=np.int64)
    if starts in v:
        first = np.asarray(v[starts], dtype=np.int64)
    else:
        first = np.zeros(rows.shape[0], np.int64)
    return table, P, C, rows, lens, first


def check_int32(case: Case, names: tuple[str, ...]) -> None:
    """OutOfContract for the first of `names` (those present) holding a value past int32."""
    for name in names:
        if name in case.values and not fits_int32(case.values[name]):
            raise OutOfContract(f"{name} has a value outside int32 (the kernel casts it to int32)")


def check_request(i: int, r: int, s: int, n: int, P: int, C: int, lengths: str, starts: str) -> None:
    """OutOfContract unless request i's pool row is in the table and its columns [s, s + n) in the row."""
    if not 0 <= r < P:
        raise OutOfContract(f"req_pool_indices[{i}] = {r} outside [0, {P})")
    if n < 0:
        raise OutOfContract(f"{lengths}[{i}] = {n} < 0")
    if s < 0:
        raise OutOfContract(f"{starts}[{i}] = {s} < 0")
    if s + n > C:
        raise OutOfContract(f"request {i}: start + length = {s} + {n} > req_to_token width {C}")


def torch_requests(case: Case, device, inputs: Inputs, lengths: str, starts: str):
    """The torch oracles' (req_to_token, pool rows, lengths, starts) as int64 tensors on
    `device`; zero starts where the optional `starts` is absent."""
    import torch

    table = input_tensor(case, "req_to_token", device, inputs).long()
    rows = input_tensor(case, "req_pool_indices", device, inputs).long()
    lens = input_tensor(case, lengths, device, inputs).long()
    if starts in case.tensors:
        first = input_tensor(case, starts, device, inputs).long()
    else:
        first = torch.zeros_like(lens)
    return table, rows, lens, first


def torch_csr_gather(table, rows, starts, lens, offsets, size: int, device, entry_page_size: int = 1,
                     mapping=None):
    """out[offsets[i] + j] = table[rows[i], starts[i] + j] for j < lens[i], as one gather over the
    flat stream (repeat_interleave of the request ids); zeros elsewhere. int64, `size` cells.
    A page-granular table (entry_page_size ps > 1) gives table[r, pos // ps] * ps + pos % ps at
    pos = starts[i] + j; `mapping` then maps each id t >= 0 to mapping[t] (t < 0 gives -1)."""
    import torch

    out = torch.zeros(size, dtype=torch.int64, device=device)
    total = int(lens.sum())
    if total:
        req = torch.repeat_interleave(torch.arange(lens.shape[0], device=device), lens)
        j = torch.arange(total, device=device) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
        pos = starts[req] + j
        ps = entry_page_size
        ids = table[rows[req], pos] if ps == 1 else table[rows[req], pos // ps] * ps + pos % ps
        if mapping is not None:
            ids = torch.where(ids >= 0, mapping[ids.clamp(min=0)], torch.full_like(ids, -1))
        out[offsets[req] + j] = ids
    return out


# the generators: draws every op makes alike (the order of the Draw calls is the stream's) ---

WIDTHS = (1, 16, 100, 511, 512, 513, 1024, 1100, 2049)  # C: the table's width (max context), CSR gathers
EDGES = (0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 2 * BLOCK + 1)


def table_layout(d: Draw) -> LayoutClass:
    """req_to_token's layout class: contiguous, offset, padded rows, or one row repeated (row
    stride 0; a zero column stride is out of contract)."""
    table = layout_class(d, "in", 2, ("contiguous", "offset", "padded", "broadcast"))
    if table.kind == "broadcast":
        table = LayoutClass("broadcast", table.offset, table.slack, axis=0)
    return table


def batch_size(d: Draw, k: CompileClass, big: int = 40) -> int:
    """bs for the class's size class (one request, a few, a big batch up to `big`)."""
    return {"one": 1, "few": d.integer(2, 4), "big": d.integer(17, big)}[k["bs"]]


def production_batch(d: Draw, k: CompileClass) -> int:
    """bs for a production-size class: one request, a few, 17 to 256, or past 256 (257-300)."""
    return {"one": 1, "few": d.integer(2, 4), "big": d.integer(17, 256), "past": d.integer(257, 300)}[k["bs"]]


def pool_size(d: Draw, k: CompileClass) -> int:
    """P: the pool's rows (one, sometimes, under a repeated row)."""
    return 1 if k["layout:req_to_token"].kind == "broadcast" and d.boolean() else d.integer(1, 6)


def block_length(d: Draw, C: int) -> int:
    """A length at most C: at a block edge, the row's end, or any."""
    edges = [e for e in EDGES if e <= C]
    return d.one_of(lambda: d.choice(edges), lambda: C, lambda: d.integer(0, C))


def free_lengths(d: Draw, g, C: int, bs: int) -> np.ndarray:
    """Each request's length: drawn at the edges (every one of a small batch, one in eight of a
    big one), else small, from the case's RNG `g`."""
    return np.array([block_length(d, C) if bs <= 4 or d.integer(0, 7) == 0 else int(g.integers(0, min(C, 40) + 1))
                     for _ in range(bs)], dtype=np.int64)


def start_in_row(d: Draw, g, C: int, n: int) -> int:
    """A start for a length n in a row of C: the row's first column, its last start, or any."""
    return d.choice((0, C - n, int(g.integers(0, C - n + 1))))


def free_starts(d: Draw, g, C: int, lens: np.ndarray) -> np.ndarray:
    return np.array([start_in_row(d, g, C, n) for n in lens.tolist()], np.int64)


def pool_rows(d: Draw, g, P: int, bs: int) -> list[int]:
    """Each request's pool row, the pool's first and last rows among them."""
    # one batched draw: the same values as bs scalar draws from `g`
    return [d.choice((0, P - 1, r)) for r in g.integers(0, P, size=bs).tolist()]


def token_table(d: Draw, g, P: int, C: int, top: int = 1 << 20) -> np.ndarray:
    """req_to_token's values: any int32, or ids in [0, top)."""
    return g.integers(-(2**31), 2**31, size=(P, C)) if d.boolean() else g.integers(0, top, size=(P, C))


def csr_offsets(d: Draw, lens: np.ndarray) -> tuple[np.ndarray, int]:
    """(the bs + 1 offsets of a flat output from a base, its size with a tail past the last)."""
    base = d.choice((0, 0, 0, 1, 7, BLOCK))
    offsets = base + np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return offsets, int(offsets[-1]) + d.choice((0, 0, 1, 5, BLOCK))


def laid_out(k: CompileClass, shapes: Mapping[str, tuple[str, tuple[int, ...]]],
             values: dict[str, np.ndarray], shared: Mapping[str, str] | None = None) -> dict[str, TensorSpec]:
    """Each tensor of `shapes` (name -> (dtype, shape)) in the class's layout (that of
    `shared[name]` where given); the values of a broadcast one made constant along its stride-0
    axis (in `values`)."""
    tensors = {}
    for name, (dt, shape) in shapes.items():
        tensors[name], bcast = class_layout(k, name, dt, shape, (shared or {}).get(name))
        if name in values:
            values[name] = apply_broadcast(values[name], bcast)
    return tensors


PAGE_BLOCK_EDGES = (PAGE_BLOCK - 1, PAGE_BLOCK, PAGE_BLOCK + 1, 2 * PAGE_BLOCK + 1)


def pages(n: int, ps: int) -> int:
    """ceil(n / ps): the pages of n tokens."""
    return -(-n // ps)


def page_length(d: Draw, limit: int, ps: int, W: int) -> int:
    """A page table's request length at most `limit`: at a page or block edge, in the last page
    of a row of W pages, or any."""
    edges = [e for e in (0, 1, ps - 1, ps, ps + 1, *PAGE_BLOCK_EDGES) if 0 <= e <= limit]
    last = (max(0, min(limit, (W - 1) * ps + 1)), min(limit, W * ps))  # the last page the row holds
    return d.one_of(lambda: d.choice(edges), lambda: limit, lambda: d.integer(*last), lambda: d.integer(0, limit))


def strided_cells(starts, lens, ps: int) -> np.ndarray:
    """The concatenation over requests i of np.arange(starts[i], starts[i] + lens[i], ps)
    (int64; nothing for a length <= 0), in one pass rather than an arange per request."""
    starts = np.asarray(starts, np.int64)
    counts = np.maximum(-(-np.asarray(lens, np.int64) // ps), 0)
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    first = np.cumsum(counts) - counts  # each request's first position in the result
    return np.repeat(starts - ps * first, counts) + ps * np.arange(total, dtype=np.int64)


def page_length_features(ls: list[int], ps: int, W: int) -> set[str]:
    """A page table's length features for lengths `ls` and rows of W pages: zero, the page and
    block edges, two blocks, a request filling its row."""
    out = set()
    if not ls:
        return out
    seen = set(ls)  # membership tests on the distinct lengths, not a loop over every request
    if 0 in seen:
        out.add("len:zero")
    for name, e in (("page-1", ps - 1), ("page", ps), ("page+1", ps + 1)):
        if e > 0 and e in seen:
            out.add(f"edge:len:{name}")
    for e in PAGE_BLOCK_EDGES:
        if e in seen:
            out.add(f"edge:len:{e}")
    top = max(seen)
    if top > PAGE_BLOCK:
        out.add("len:two_blocks")
    lo, hi = max((W - 1) * ps + 1, 1), W * ps  # the n > 0 with pages(n, ps) == W
    if lo <= hi and any(lo <= n <= hi for n in seen):
        out.add("width:full")  # the request's pages fill the row
    if top >= 0 and pages(top, ps) < W:
        out.add("width:spare")
    return out


def editable(case: Case) -> tuple[dict[str, TensorSpec], dict[str, np.ndarray]]:
    """A violation's working copy: the specs, and every value array as an int64 copy."""
    return dict(case.tensors), {n: np.array(x, dtype=np.int64) for n, x in case.values.items()}


def relength(lens: np.ndarray, offsets: np.ndarray, i: int, n: int) -> None:
    """Request i's length n, the later CSR offsets kept consistent."""
    offsets[i + 1:] += n - lens[i]
    lens[i] = n


def flat_size(d: Draw, kind: str, needed: int, size: int) -> int:
    """A flat output's size after a violation: short of the last write for
    kv_indices_too_short, else room for every write (one broken rule at a time)."""
    if kind == "kv_indices_too_short":
        return max(needed - d.integer(1, max(1, min(needed, 5))), 0)
    return max(size, needed)


def relaid(k: CompileClass, t: dict[str, TensorSpec], v: Mapping[str, np.ndarray], names: tuple[str, ...]) -> None:
    """The specs of the inputs `names` (those with values) for their edited values, in the class's layouts."""
    for name in names:
        if name in v:
            t[name] = relayout(k.get(f"layout:{name}", LayoutClass()), t[name].dtype, v[name].shape, v[name])


def length_features(ls: list[int]) -> set[str]:
    """A CSR gather's length features: the block edges, three blocks, a big batch."""
    out = set()
    for n in ls:
        if n in EDGES:
            out.add(f"edge:len:{n}")
        if n > 2 * BLOCK:
            out.add("len:three_blocks")
    if len(ls) >= 17:
        out.add("big_batch")
    return out


def strided_rows(case: Case) -> set[str]:
    """strided_rows: req_to_token's rows are not back to back."""
    table = case.tensors.get("req_to_token")
    if table is not None and len(table.shape) == 2 and table.shape[0] > 1 and table.strides[0] != table.shape[1]:
        return {"strided_rows"}
    return set()


def last_pool_row(case: Case) -> set[str]:
    """pool:last_row: a request reads the pool's last row."""
    table, rows = case.tensors.get("req_to_token"), case.values.get("req_pool_indices")
    if table is not None and len(table.shape) == 2 and table.shape[0] > 1 and rows is not None and \
            table.shape[0] - 1 in np.asarray(rows).tolist():
        return {"pool:last_row"}
    return set()


def generic_required(index_inputs: tuple[str, ...]) -> set[str]:
    """The generic features (strategies.coverage.generic_features) every campaign must reach:
    a misaligned tensor, the repeated table row, both dtypes of each index input."""
    return {"misaligned", "broadcast:req_to_token", *(f"dtype:{n}:{dt}" for n in index_inputs
                                                      for dt in ("int32", "int64"))}


# the minimizer and presentation ----------------------------------------------------------


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows."""
    if name == "req_pool_indices":
        return case.tensors["req_to_token"].shape[0]
    return None


def request_drops(bs: int, build: Callable[[list[int]], Case]) -> Iterator[Candidate]:
    """The requests pass's candidates: ddmin subsets of the bs requests dropped, each built by
    `build(the requests kept)`."""
    for drop in _chunks(bs):
        dropped = frozenset(drop)
        keep = [i for i in range(bs) if i not in dropped]
        yield (f"dropped request{'s' if len(drop) > 1 else ''} {_fmt(drop)} (bs {bs} -> {len(keep)})",
               lambda keep=keep: build(keep))


def kept(case: Case, names: tuple[str, ...], keep: list[int]) -> tuple[dict, dict]:
    """(specs, values) of the per-request inputs `names` present, cut to the requests `keep`."""
    specs, values = {}, {}
    for name in names:
        if name in case.tensors:
            values[name] = np.asarray(case.values[name])[keep]
            specs[name] = reshaped(case.tensors[name], (len(keep),))
    return specs, values


def request_rows(case: Case, reqs: list[int], names: tuple[str, ...]) -> dict[str, list[int]]:
    """related_rows: the requests `reqs` in each per-request input `names` present, and the
    req_to_token rows they read."""
    out = {name: reqs for name in names if name in case.tensors}
    pool = np.asarray(case.values["req_pool_indices"]).tolist()
    out["req_to_token"] = sorted({pool[i] for i in reqs if i < len(pool)})
    return out


def kv_index_record(contract: Contract, call, generate, minimize, present, order: int, packing=None) -> OpRecord:
    """The op record of a kv_indices op from its folder's modules: the builtin kernel
    `kvfuzz.kernels.<op>:<entry>`, the release file kv_indices.py, the full repro script
    embedding its call.py."""
    return OpRecord(
        name=contract.name,
        contract=contract,
        generator=generate.GENERATOR,
        call=call.CALL,
        generations=call.GENERATIONS,
        builtin=f"kvfuzz.kernels.{contract.name}:{contract.entry}",
        source_file="kv_indices.py",
        release_variants=call.RELEASE_VARIANTS,
        passes=minimize.PASSES,
        value_bound=value_bound,
        related_rows=present.related_rows,
        short_call=present.short_call,
        standalone=(call.__name__,),
        order=order,
        packing=packing,
    )
