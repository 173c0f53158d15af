"""SGLang releases: where each keeps its metadata kernels, and which contract variant judges it.

`RELEASES` is what was read from each release wheel on PyPI (docs/releases.md has the table
and how it was measured). `select_variant` picks, per op, the contract variant a target is
judged by when the user gives no `--variant`:

* a target whose SGLang version is known (`sglang==X.Y.Z`, the installed `sglang`, or a module
  inside the installed `sglang` package): its record's `release_variants` (kvfuzz/ops/<op>/call.py) for that
  version;
* kvfuzz's `builtin` kernels: its record's `builtin_variant` where it has one (decode's `strict`:
  every argument kvfuzz checks, judged by the strictest column rule), else as any other;
* any other (a file, another module): the API generation of its entry point's
  signature (the record's `generations`; every generation is named after its first release), or the
  generation closest to it.

Both agree on every release 0.5.13-0.5.23 (tests/test_releases.py). Releases 0.5.6 - 0.5.12 have
no kernel file: `backends` names the modules their entry points are extracted from (extract.py).

A release is a set of kernel files, each cached as `sglang-X/<name>` (wheels.py) and each op's
entry point read from the one its record names (`OpRecord.source_file`): `metadata.py` (the
metadata kernels; `kernel_file`, `backends`, `same_file` below), `kv_indices.py` (the KV-index
kernels create_flashinfer_kv_indices_triton, create_flashmla_kv_indices_triton and
create_chunked_prefix_cache_kv_indices), `trtllm_mha_page_table.py` (the TRT-LLM MHA backend's
create_trtllm_mha_kv_indices_triton, 0.5.14 on), `trtllm_mha_graph_metadata.py` (its fused
CUDA-graph metadata update update_trtllm_mha_graph_metadata, 0.5.15 on), `pa_page_table.py` (the
FlashAttention backend's prefill-aware SWA page table _build_pa_page_table, 0.5.15 on) and
`aiter_unified_attention.py` (the AITER backend's scatter_ragged_to_page_table_kernel and
scatter_req_to_token_to_page_table_kernel, 0.5.12 on; `OTHER_FILES`). `Release.files` gives those
a release has as `KernelFile`s. A release whose file lacks an op's entry point, or that has no such
file, says why in `not_offered` (0.5.13's kv_indices.py and the chunked-prefix kernel; the AITER
page tables before 0.5.12; the TRT-LLM MHA page table before 0.5.14; its graph metadata update and
the PA-SWA page table before 0.5.15).

Which releases ship the same kernel file is data too, per file: `posts` (a release's .postN
releases, the same definitions) and `KernelFile.same_as` (the release whose copy of that file this
one ships byte for byte, the cache header of an extracted file aside; metadata.py's is
`Release.same_file`). Two releases can share one file and not the other (0.5.22's metadata.py is
0.5.20's, its kv_indices.py is its own). `known_releases` lists every release kvfuzz knows, in
order, and `file_release(version, file)` names the one whose copy of `file` stands for a release's
(`kvfuzz bisect` runs each distinct file once, the file of the case's op).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

from ..ops import record, records
from .calls import Binding
from ..variant_choice import binding_variant, parse_version, release_variant

OLD_PATH = "sglang/srt/layers/attention/triton_ops/metadata.py"
NEW_PATH = "sglang/kernels/ops/attention/metadata.py"
FA_BACKEND = "sglang/srt/layers/attention/flashattention_backend.py"
TRITON_BACKEND = "sglang/srt/layers/attention/triton_backend.py"
UTILS = "sglang/srt/layers/attention/utils.py"
METADATA, KV_INDICES = "metadata.py", "kv_indices.py"  # kernel files by their name in kvfuzz's cache
TRTLLM_MHA = "trtllm_mha_page_table.py"
PA_PAGE_TABLE = "pa_page_table.py"
TRTLLM_GRAPH = "trtllm_mha_graph_metadata.py"
AITER_UNIFIED = "aiter_unified_attention.py"  # both AITER page-table kernels (0.5.23's aiter_unified_page_table.py)
FIRST_LOADABLE = (0, 5, 6)  # the first release kvfuzz can target (before 0.5.13: extracted, targets/extract.py)
FIRST_KERNEL_FILE = (0, 5, 13)  # the first release with a kernel file of its own


@dataclass(frozen=True)
class KernelFile:
    """One kernel file of one release: where it is in the wheel, and which release's copy it is."""

    member: str | None  # its path inside the wheel; None: generated from `backends` (extract.py)
    backends: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (module inside the wheel, entry points taken from it)
    same_as: str | None = None  # the release whose copy this one ships (identical); None: its own


@dataclass(frozen=True)
class Release:
    version: str
    kernel_file: str | None  # inside the wheel; None: the kernels live in the attention backends
    unchecked: str = ""  # what this release added that kvfuzz does not check yet
    note: str = ""
    # before 0.5.13: (module inside the wheel, the entry points kvfuzz extracts from it); and the
    # ops whose entry point it does not extract, or whose kernel file lacks it -> why (docs/releases.md)
    backends: tuple[tuple[str, tuple[str, ...]], ...] = ()
    not_offered: dict = field(default_factory=dict)
    posts: tuple[str, ...] = ()  # its .postN releases on PyPI: the same definitions
    same_file: str | None = None  # the release whose kernel file this one ships (identical); None: its own

    @property
    def files(self) -> dict[str, KernelFile]:
        """Its kernel files by name: metadata.py (this entry's `kernel_file`, `backends`,
        `same_file`), then those `OTHER_FILES` lists for it."""
        out = {METADATA: KernelFile(self.kernel_file, self.backends, self.same_file)}
        out.update({name: table[self.version] for name, table in OTHER_FILES.items() if self.version in table})
        return out

    @property
    def api(self) -> dict[str, str]:
        """op -> the API generation of its entry point in this release: the op record's
        generation whose `releases` cover it (the ops it does not offer left out)."""
        out = {}
        for op, rec in records().items():
            g = next((g for g in rec.generations if _covers(g.releases, self.version)), None)
            if g is not None and op not in self.not_offered:
                out[op] = g.name
        return out


def _covers(releases: str, version: str) -> bool:
    """Whether a Generation's `releases` ("0.5.6-0.5.22", "0.5.23", or ranges joined by commas
    when a later release went back to an earlier signature) hold `version`."""
    v = parse_version(version)
    for span in releases.split(","):
        first, _, last = span.strip().partition("-")
        if v is not None and parse_version(first) <= v <= parse_version(last or first):
            return True
    return False

_TORCH_DECODE = ("normal_decode_set_metadata is plain torch (no Triton kernel): it leaves cu_seqlens_k[0] to the "
                 "caller and does not refuse a page_size that is not a power of two, both of which 0.5.14's "
                 "contract requires")
_NOT_OFFERED = {
    **{v: _TORCH_DECODE + "; no SWA parameters (the first ten of 0.5.14's)" for v in ("0.5.6", "0.5.7")},
    **{v: _TORCH_DECODE + "; SWA through SWAKVPool.translate_loc_from_full_to_swa (a token id of -1 "
       "indexes the mapping's last entry)" for v in ("0.5.8", "0.5.9")},
}


# before 0.5.14 the TRT-LLM MHA backend builds its page table with torch ops, no Triton kernel
_TRTLLM_TORCH = ("the TRT-LLM MHA backend builds its page table with torch indexing (req_to_token[req_pool_indices, "
                 ":max_seq_len_k][:, ::page_size] // page_size, after a host max of the lengths), no Triton kernel: "
                 "create_trtllm_mha_kv_indices_triton and its file trtllm_mha_page_table.py first ship in 0.5.14")

# before 0.5.15 the FlashAttention backend has no prefill-aware SWA decode
_PA_NONE = ("the FlashAttention backend has no prefill-aware SWA decode (no prefill_aware_swa, no pa_swa_page_table): "
            "_build_pa_page_table first ships in 0.5.15, inside flashattention_backend.py")
# before 0.5.15 the backend rebuilds its CUDA-graph metadata with torch ops, no fused kernel
_TRTLLM_GRAPH_TORCH = ("the TRT-LLM MHA backend rebuilds its CUDA-graph metadata with torch ops (copies, an int32 "
                       "cumsum into cu_seqlens_k[1:], the page-table builder), no fused kernel: update_trtllm_mha_"
                       "graph_metadata and its file trtllm_mha_graph_metadata.py first ship in 0.5.15")
# before 0.5.12 the AITER backend has no page-table kernels of its own
_AITER_NONE = ("scatter_ragged_to_page_table_kernel and scatter_req_to_token_to_page_table_kernel first ship in 0.5.12 "
               "(sglang/srt/layers/attention/triton_ops/aiter_unified_attention.py); before it the AITER backend has no "
               "such kernels (0.5.10-0.5.11's unified attention builds its page table with "
               "create_flashmla_kv_indices_triton and torch indexing, 0.5.6-0.5.9 have no unified attention)")
_AITER_OPS = ("aiter_ragged_page_table", "aiter_req_to_token_page_table")

# 0.5.13's kv_indices.py predates 0.5.14's move of the kernel into it
_CHUNKED_0_5_13 = ("create_chunked_prefix_cache_kv_indices is not in its kv_indices.py but in "
                   "sglang/srt/model_executor/forward_batch_deepseek_mha_mixin.py (0.5.14's text), which kvfuzz "
                   "does not read for a release with a kv_indices.py of its own")


_OLD_POSTS = {"0.5.6": ("0.5.6.post1", "0.5.6.post2"), "0.5.8": ("0.5.8.post1",), "0.5.10": ("0.5.10.post1",),
              "0.5.12": ("0.5.12.post1",)}


def _old(version: str) -> Release:
    """0.5.6 - 0.5.12: decode and swa_spec inside the FlashAttention backend, num_kv_splits inside
    the Triton backend; all but 0.5.6 - 0.5.9's torch decode is 0.5.14's text. The extracted
    files are two: 0.5.6 - 0.5.9's (no decode) and 0.5.10 - 0.5.12's."""
    torch_decode = version in _NOT_OFFERED
    first = "0.5.6" if torch_decode else "0.5.10"
    fa = ("prepare_swa_spec_page_table_triton",) + (() if torch_decode else ("normal_decode_set_metadata",))
    return Release(
        version, None,
        note=("decode not offered (plain torch)" if torch_decode else "decode is 0.5.14's fused Triton kernels "
              "(SWAKVPool imported at module level)") + "; prepare_swa_spec_page_table_triton and "
        "get_num_kv_splits_triton are 0.5.14's text; extracted from the backends (the .post releases: the same "
        "definitions)",
        backends=((FA_BACKEND, fa), (TRITON_BACKEND, ("get_num_kv_splits_triton",))),
        not_offered={**({"decode_metadata": _NOT_OFFERED[version]} if torch_decode else {}),
                     "trtllm_mha_kv_indices": _TRTLLM_TORCH, "trtllm_mha_graph_metadata": _TRTLLM_GRAPH_TORCH,
                     "pa_page_table": _PA_NONE,
                     **({op: _AITER_NONE for op in _AITER_OPS} if version != "0.5.12" else {})},
        posts=_OLD_POSTS.get(version, ()), same_file=None if version == first else first)


RELEASES: dict[str, Release] = {
    **{v: _old(v) for v in ("0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12")},
    "0.5.13": Release("0.5.13", OLD_PATH, note="kernel file byte-identical to 0.5.14's (so is 0.5.13.post1's)",
                      not_offered={"chunked_prefix_kv_indices": _CHUNKED_0_5_13,
                                   "trtllm_mha_kv_indices": _TRTLLM_TORCH,
                                   "trtllm_mha_graph_metadata": _TRTLLM_GRAPH_TORCH, "pa_page_table": _PA_NONE},
                      posts=("0.5.13.post1",), same_file="0.5.14"),
    "0.5.14": Release("0.5.14", OLD_PATH, note="the seed",
                      not_offered={"trtllm_mha_graph_metadata": _TRTLLM_GRAPH_TORCH, "pa_page_table": _PA_NONE}),
    "0.5.15": Release("0.5.15", OLD_PATH, note="kernel file byte-identical to 0.5.14's (so is 0.5.15.post1's)",
                      posts=("0.5.15.post1",), same_file="0.5.14"),
    "0.5.16": Release("0.5.16", NEW_PATH, note="the three 0.5.14 entry points byte for byte; new op "
                      "draft_extend_set_metadata (its signature and kernel the same text up to 0.5.23)"),
    "0.5.17": Release("0.5.17", NEW_PATH,
                      note="decode writes only each row's live prefix; v2p_page_table, kernel_page_multiplier "
                      "(unified memory) checked, variant v2p"),
    "0.5.18": Release("0.5.18", NEW_PATH,
                      note="the unified SWA pool's v2p table in the mapping slot (UnifiedSWAKVPool, when "
                      "full_to_swa_index_mapping is None) checked, variant v2p_swa"),
    "0.5.19": Release("0.5.19", NEW_PATH,
                      "the UnifiedSWAKVPool v2p path",
                      "strided_indices, v2p_page_table, kernel_page_multiplier dropped; src_is_read_table, "
                      "swa_src_table checked, variant read_table"),
    **{v: Release(v, NEW_PATH,
                  "the UnifiedSWAKVPool path",
                  "src_is_read_table, swa_src_table dropped; skip_page_table checked, variant skip"
                  + ("" if v == "0.5.20" else "; kernel file byte-identical to 0.5.20's"),
                  same_file=None if v == "0.5.20" else "0.5.20")
       for v in ("0.5.20", "0.5.21", "0.5.22")},
    "0.5.23": Release("0.5.23", NEW_PATH,
                      "",
                      "decode rewritten (_fused_decode_metadata_kernel): no .contiguous() copies, the SWA "
                      "mapping passed as a tensor"),
}


# before 0.5.13: the KV-index kernels, extracted from the attention utils.py (FlashInfer's, FlashMLA's)
# and from ForwardBatch's module (the chunked-prefix kernel: forward_batch_info.py in 0.5.6 - 0.5.7,
# its DeepSeek MHA mixin from 0.5.8 on)
_KV_ENTRY = ("create_flashinfer_kv_indices_triton", "create_flashmla_kv_indices_triton")
_CHUNKED_ENTRY = ("create_chunked_prefix_cache_kv_indices",)
FORWARD_BATCH = "sglang/srt/model_executor/forward_batch_info.py"
MHA_MIXIN = "sglang/srt/model_executor/forward_batch_deepseek_mha_mixin.py"
_KV_TRITON_OPS = "sglang/srt/layers/attention/triton_ops/kv_indices.py"
_KV_KVCACHE = "sglang/kernels/ops/kvcache/kv_indices.py"
_KV_ATTENTION = "sglang/kernels/ops/attention/kv_indices.py"
_TRT_TRITON_OPS = "sglang/srt/layers/attention/triton_ops/trtllm_mha_page_table.py"
_TRT_KVCACHE = "sglang/kernels/ops/kvcache/trtllm_mha_page_table.py"
_TRT_ATTENTION = "sglang/kernels/ops/attention/trtllm_mha_page_table.py"
_PA_ATTENTION = "sglang/kernels/ops/attention/pa_page_table.py"
_PA_ENTRY = ("_build_pa_page_table",)
_GRAPH_TRITON_OPS = "sglang/srt/layers/attention/triton_ops/trtllm_mha_graph_metadata.py"
_GRAPH_KVCACHE = "sglang/kernels/ops/kvcache/trtllm_mha_graph_metadata.py"
_GRAPH_ATTENTION = "sglang/kernels/ops/attention/trtllm_mha_graph_metadata.py"
_AITER_TRITON_OPS = "sglang/srt/layers/attention/triton_ops/aiter_unified_attention.py"
_AITER_KVCACHE = "sglang/kernels/ops/kvcache/aiter_unified_attention.py"
_AITER_ATTENTION = "sglang/kernels/ops/attention/aiter_unified_page_table.py"

# The kernel files beside metadata.py: name -> release -> its copy (read from the wheels,
# docs/releases.md). kv_indices.py: before 0.5.13 the kernels sit in the attention backends'
# utils.py, which imports sglang.srt from 0.5.12 on, and in ForwardBatch's modules, so they are
# extracted (the kernels' text is the same in 0.5.6 - 0.5.12; the files are two, 0.5.6 - 0.5.7's
# and 0.5.8 - 0.5.12's, as the chunked-prefix kernel moved into the MHA mixin); 0.5.13's file lacks
# 0.5.14's create_chunked_prefix_cache_kv_indices (still in the mixin: not offered); 0.5.16 moved
# 0.5.14's file unchanged; 0.5.17 added an MLA v2p path, 0.5.19 ENTRY_PAGE_SIZE, 0.5.20
# TOKEN_BLOCK_PARALLEL, 0.5.22 token_mapping; 0.5.23 moved it and added launch helpers.
# trtllm_mha_page_table.py: first in 0.5.14 (before it the backend's page table is torch ops: not
# offered); 0.5.16 moved it and added full_to_swa_numel (the SWA lookup clamped into the mapping);
# 0.5.20 re-wrapped two asserts; 0.5.23 moved it unchanged.
# pa_page_table.py: 0.5.15 defines _build_pa_page_table and its kernel inside
# flashattention_backend.py, which imports sgl_kernel and sglang.srt (extracted); 0.5.16 moved both
# into their own file, the definitions unchanged, and 0.5.17 - 0.5.23 ship that file byte for byte.
# trtllm_mha_graph_metadata.py: first in 0.5.15 (before it the backend rebuilds its CUDA-graph metadata with torch
# ops: not offered); 0.5.16 moved it unchanged; 0.5.17 writes only each row's live pages; 0.5.19
# added SKIP_PAGE_TABLE (skip_page_table); 0.5.23 moved 0.5.19's unchanged.
# aiter_unified_attention.py: first in 0.5.12 (it imports triton alone: loaded as it is, nothing
# extracted), the same bytes in every release since: 0.5.16 moved it, 0.5.23 moved and renamed it
# (aiter_unified_page_table.py).
OTHER_FILES: dict[str, dict[str, KernelFile]] = {
    KV_INDICES: {
        **{v: KernelFile(None, ((UTILS, _KV_ENTRY), (FORWARD_BATCH, _CHUNKED_ENTRY)), None if v == "0.5.6" else "0.5.6")
           for v in ("0.5.6", "0.5.7")},
        **{v: KernelFile(None, ((UTILS, _KV_ENTRY), (MHA_MIXIN, _CHUNKED_ENTRY)), None if v == "0.5.8" else "0.5.8")
           for v in ("0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12")},
        "0.5.13": KernelFile(_KV_TRITON_OPS),
        "0.5.14": KernelFile(_KV_TRITON_OPS),
        "0.5.15": KernelFile(_KV_TRITON_OPS, same_as="0.5.14"),
        "0.5.16": KernelFile(_KV_KVCACHE, same_as="0.5.14"),
        "0.5.17": KernelFile(_KV_KVCACHE),
        "0.5.18": KernelFile(_KV_KVCACHE, same_as="0.5.17"),
        "0.5.19": KernelFile(_KV_KVCACHE),
        "0.5.20": KernelFile(_KV_KVCACHE),
        "0.5.21": KernelFile(_KV_KVCACHE, same_as="0.5.20"),
        "0.5.22": KernelFile(_KV_KVCACHE),
        "0.5.23": KernelFile(_KV_ATTENTION),
    },
    TRTLLM_MHA: {
        "0.5.14": KernelFile(_TRT_TRITON_OPS),
        "0.5.15": KernelFile(_TRT_TRITON_OPS, same_as="0.5.14"),
        "0.5.16": KernelFile(_TRT_KVCACHE),
        **{v: KernelFile(_TRT_KVCACHE, same_as="0.5.16") for v in ("0.5.17", "0.5.18", "0.5.19")},
        "0.5.20": KernelFile(_TRT_KVCACHE),
        **{v: KernelFile(_TRT_KVCACHE, same_as="0.5.20") for v in ("0.5.21", "0.5.22")},
        "0.5.23": KernelFile(_TRT_ATTENTION, same_as="0.5.20"),
    },
    PA_PAGE_TABLE: {
        "0.5.15": KernelFile(None, ((FA_BACKEND, _PA_ENTRY),)),
        "0.5.16": KernelFile(_PA_ATTENTION),
        **{v: KernelFile(_PA_ATTENTION, same_as="0.5.16")
           for v in ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")},
    },
    TRTLLM_GRAPH: {
        "0.5.15": KernelFile(_GRAPH_TRITON_OPS),
        "0.5.16": KernelFile(_GRAPH_KVCACHE, same_as="0.5.15"),
        "0.5.17": KernelFile(_GRAPH_KVCACHE),
        "0.5.18": KernelFile(_GRAPH_KVCACHE, same_as="0.5.17"),
        "0.5.19": KernelFile(_GRAPH_KVCACHE),
        **{v: KernelFile(_GRAPH_KVCACHE, same_as="0.5.19") for v in ("0.5.20", "0.5.21", "0.5.22")},
        "0.5.23": KernelFile(_GRAPH_ATTENTION, same_as="0.5.19"),
    },
    AITER_UNIFIED: {
        "0.5.12": KernelFile(_AITER_TRITON_OPS),
        **{v: KernelFile(_AITER_TRITON_OPS, same_as="0.5.12") for v in ("0.5.13", "0.5.14", "0.5.15")},
        **{v: KernelFile(_AITER_KVCACHE, same_as="0.5.12")
           for v in ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22")},
        "0.5.23": KernelFile(_AITER_ATTENTION, same_as="0.5.12"),
    },
}


def kernel_files() -> tuple[str, ...]:
    """Every kernel file kvfuzz keeps of a release, by name: metadata.py first."""
    return (METADATA, *OTHER_FILES)


def op_file(op: str) -> str:
    """The kernel file holding `op`'s entry point in an SGLang release (its record's `source_file`)."""
    return record(op).source_file


def known_releases() -> tuple[str, ...]:
    """Every SGLang release kvfuzz knows, oldest first: each RELEASES entry, then its .post releases."""
    ordered = sorted(RELEASES, key=parse_version)
    return tuple(v for r in ordered for v in (r, *RELEASES[r].posts))


def file_release(version: str, file: str = METADATA) -> str:
    """The release whose copy of the kernel file `file` (a name in the cache: metadata.py,
    kv_indices.py, ..., `kernel_files()`) `version` ships: its own release's, or the one its
    `KernelFile.same_as` names (a .postN release ships its release's; a release without the file
    stands for itself).
    KeyError for an unknown release."""
    entry = RELEASES[version] if version in RELEASES else release_entry(version)
    if entry is None or version not in (entry.version, *entry.posts):
        raise KeyError(version)
    own = entry.files.get(file)
    return (own.same_as if own else None) or entry.version


def same_file_releases(version: str, file: str = METADATA) -> tuple[str, ...]:
    """Every known release whose copy of `file` is `version`'s (itself included), oldest first."""
    own = file_release(version, file)
    return tuple(v for v in known_releases() if file_release(v, file) == own)


def release_entry(version: str) -> Release | None:
    """The RELEASES entry of a version; a .postN release is its release's (the same definitions)."""
    v = parse_version(version)
    return RELEASES.get(".".join(map(str, v))) if v else None


def variant_for_release(op: str, version: str) -> str:
    """The contract variant that judges `op` of SGLang `version` (its record's release_variants)."""
    rec = record(op)
    return release_variant(rec.release_variants, next(iter(rec.contract.variants)), version)


def select_variant(op: str, release: str | None, binding: Binding, builtin: bool = False) -> tuple[str, str]:
    """(variant, why) for `op` of a loaded target: by its SGLang version when known, kvfuzz's
    own for the builtin kernels, else by the API generation of its entry point's signature."""
    if release is not None and parse_version(release) is not None:
        return variant_for_release(op, release), f"sglang {release}"
    if builtin and record(op).builtin_variant:
        return record(op).builtin_variant, "kvfuzz's builtin kernel"
    gen = binding.generation or binding.closest
    how = (f"signature of SGLang {gen}" if binding.generation else
           f"signature closest to SGLang {gen}" if binding.by_name else f"SGLang {gen}'s positional call")
    rec = record(op)
    return binding_variant(rec.release_variants, next(iter(rec.contract.variants)), binding), how


def installed_version() -> str | None:
    """The installed `sglang` distribution's version (importlib.metadata), or None."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def module_release(module: ModuleType) -> str | None:
    """The SGLang version of a module imported from the installed `sglang` package."""
    name = getattr(module, "__name__", "") or ""
    return installed_version() if name == "sglang" or name.startswith("sglang.") else None
