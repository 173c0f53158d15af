"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
flashinfer_kv_indices case: the input rows an output cell is computed from, and the call."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ..kv_index_common import request_rows
from ..record import ShortCall


def _requests(case: Case, cells: list[int]) -> list[int]:
    ptr = np.asarray(case.values["kv_indptr"], np.int64)
    return sorted({int(np.searchsorted(ptr, c, side="right")) - 1 for c in cells} & set(range(ptr.size - 1)))


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the kv_indices cells `rows`, the requests they belong to, and their table rows."""
    return request_rows(case, _requests(case, rows), ("req_pool_indices", "paged_kernel_lens", "kv_start_idx"))


def short_call(case: Case, entry: str) -> ShortCall:
    """The launch of the case's mode, as SGLang's call sites write it: grid (bs,), or (bs,
    num_token_blocks) with TOKEN_BLOCK_PARALLEL; ENTRY_PAGE_SIZE and token_mapping where the case
    has them."""
    start = "kv_start_idx" if "kv_start_idx" in case.tensors else "None"
    blocks = case.scalars.get("num_token_blocks")
    grid = "(req_pool_indices.shape[0],)" if blocks is None else f"(req_pool_indices.shape[0], {blocks})"
    extra = ""
    if "entry_page_size" in case.scalars:
        extra += f", ENTRY_PAGE_SIZE={case.scalars['entry_page_size']}"
    if blocks is not None:
        extra += f", TOKEN_BLOCK_PARALLEL={blocks > 1}"
    if "token_mapping" in case.tensors:
        extra += ", token_mapping=token_mapping"
    where = ("SGLang's FlashInfer and triton backends: grid (bs,)" if blocks is None else
             "SGLang's pack_read_stream and AITER: grid (bs, num_token_blocks)")
    return ShortCall((f"{entry}[{grid}](req_to_token, req_pool_indices, paged_kernel_lens, "
                      f"kv_indptr, {start}, kv_indices, req_to_token.stride(0){extra})  # {where}",))
