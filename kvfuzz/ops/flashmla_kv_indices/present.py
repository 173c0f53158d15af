"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
flashmla_kv_indices case: the input rows an output row is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ..kv_index_common import request_rows
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the kv_indices rows `rows` (request i writes row i), the requests and their table rows."""
    bs = case.tensors["req_pool_indices"].shape[0]
    reqs = sorted({r for r in rows if 0 <= r < bs})
    return request_rows(case, reqs, ("req_pool_indices", "paged_kernel_lens", "kv_start_idx"))


def short_call(case: Case, entry: str) -> ShortCall:
    """The MLA backends' launch; 0.5.17-0.5.18's v2p_ptr and PAGE_MULT where the case has them (TRT-LLM MLA's)."""
    start = "kv_start_idx" if "kv_start_idx" in case.tensors else "None"
    ps = case.scalars["page_size"]
    extra = ""
    if "v2p" in case.tensors:
        extra += ", v2p_ptr=v2p"
    if "page_mult" in case.scalars:
        extra += f", PAGE_MULT={case.scalars['page_mult']}"
    return ShortCall((f"{entry}[(req_pool_indices.shape[0], -(-kv_indices.shape[1] // (4096 // {ps})))]"
                      f"(req_to_token, req_pool_indices, paged_kernel_lens, {start}, kv_indices, "
                      f"req_to_token.stride(0), kv_indices.stride(0), PAGED_SIZE={ps}{extra})"
                      "  # SGLang's MLA backends: grid (bs, get_num_kv_index_blocks_flashmla(W, page_size))",))
