"""kvfuzz's own Triton kernels for SGLang's KV-cache metadata ops (the ``builtin`` target).

Hardened re-implementations, written from each op's contract (``kvfuzz/ops/<op>/contract.py``) with SGLang's call
signatures: they refuse bad arguments with ``ValueError``, honour any strides, keep every
access inside its tensor whatever the tensor values, and stay CUDA-graph capturable (no host
reads of tensor values). kvfuzz uses them as its reference target; SGLang can call them in
place of its own (``metadata_kernels.py``).
"""

from .aiter_ragged_page_table import scatter_ragged_to_page_table_kernel
from .aiter_req_to_token_page_table import scatter_req_to_token_to_page_table_kernel
from .chunked_prefix_kv_indices import create_chunked_prefix_cache_kv_indices
from .decode_metadata import normal_decode_set_metadata
from .draft_extend_metadata import draft_extend_set_metadata
from .flashinfer_kv_indices import create_flashinfer_kv_indices_triton
from .flashmla_kv_indices import create_flashmla_kv_indices_triton
from .num_kv_splits import get_num_kv_splits, get_num_kv_splits_triton, sglang_max_num_seq
from .pa_page_table import _build_pa_page_table
from .q8kv8_topk_length import q8kv8_topk_length_from_indices
from .swa_spec_page_table import prepare_swa_spec_page_table_triton
from .trtllm_mha_graph_metadata import update_trtllm_mha_graph_metadata
from .trtllm_mha_kv_indices import create_trtllm_mha_kv_indices_triton

__all__ = [
    "_build_pa_page_table",
    "create_chunked_prefix_cache_kv_indices",
    "create_flashinfer_kv_indices_triton",
    "create_flashmla_kv_indices_triton",
    "create_trtllm_mha_kv_indices_triton",
    "draft_extend_set_metadata",
    "get_num_kv_splits",
    "get_num_kv_splits_triton",
    "normal_decode_set_metadata",
    "prepare_swa_spec_page_table_triton",
    "q8kv8_topk_length_from_indices",
    "scatter_ragged_to_page_table_kernel",
    "scatter_req_to_token_to_page_table_kernel",
    "sglang_max_num_seq",
    "update_trtllm_mha_graph_metadata",
]
