"""How swa_spec_page_table's entry point (`prepare_swa_spec_page_table_triton`) is called, its
API generations, and the contract variant of each release."""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, scalar, tensor


CALL = OpCall(
    supplied={name: tensor(name) for name in ("page_table_dst", "page_table_a", "page_table_b",
                                               "seq_len_a", "seq_len_b")}
    | {"speculative_num_draft_tokens": scalar("speculative_num_draft_tokens")},
    required=(("page_table_dst",), ("page_table_a",), ("page_table_b",), ("seq_len_a",), ("seq_len_b",),
              ("speculative_num_draft_tokens",)),
    neutral={},
    legacy=("page_table_dst", "page_table_a", "page_table_b", "seq_len_a", "seq_len_b",
            "speculative_num_draft_tokens"),
)

GENERATIONS = (
    Generation("0.5.14", "0.5.6-0.5.23", CALL.legacy, "unchanged in every release"),
)

# (first release, variant) chosen automatically (kvfuzz/targets/releases.py): the entry point and
# its kernel are the same in every release from 0.5.6 to 0.5.23.
RELEASE_VARIANTS = (("0.5.6", "default"),)
