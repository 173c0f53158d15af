"""Rebuild corpora/: SGLang 0.5.14's defects (xfail) and the same cases against builtin (pass).

    python scripts/build_corpus.py [--budget 180] [--seed 0] [--out corpora]

Fuzzes the real sglang==0.5.14 wheel from PyPI (on the CPU under Triton's interpreter unless
a GPU is present), minimizes each finding, saves it as an xfail case for that target, and
saves the same minimized case as a must-pass regression case for kvfuzz's builtin kernels.
Also adds hand-written must-refuse cases (invalid page sizes) for the builtin target, and
fuzzes tests/fixtures/mutant_kernels.py (planted defects: invalid_accepted, input_modified,
nondeterministic) so that every finding kind has a case: its deterministic findings are kept as
strict xfail cases for the mutant (a self-check that the detectors still fire), and all of them
as must-pass cases for builtin. Hand-written cases complete the set: must-refuse page sizes,
and a float32 rounding boundary of num_kv_splits where the NumPy and torch oracles really do
answer differently (an `oracle_disagreement` case: kvfuzz must accept both sides there, and
only there). `--hand-only` rewrites just those.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from kvfuzz import device as devmod
from kvfuzz.campaign import CampaignConfig, run_campaign, stderr_progress
from kvfuzz.case import Case, TensorSpec
from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions, read_case_dir
from kvfuzz.findings import Finding

SGLANG = "sglang==0.5.14"
MUTANT = "tests/fixtures/mutant_kernels.py"
FLAKY_KINDS = ("nondeterministic", "mismatch")  # the mutant's random row: no strict xfail for these


def invalid_page_size_case(ps: int) -> Case:
    C = TensorSpec.contiguous
    B, R, T = 2, 2, 64
    tensors = {"cache_seqlens_int32": C("int32", (B,)), "cu_seqlens_k": C("int32", (B + 1,)),
               "page_table": C("int32", (B, 4)), "req_to_token": C("int32", (R, T)),
               "req_pool_indices": C("int64", (B,)), "strided_indices": C("int64", (4,)),
               "seq_lens": C("int64", (B,))}
    values = {"req_to_token": np.arange(R * T).reshape(R, T), "req_pool_indices": np.array([1, 0]),
              "strided_indices": np.arange(4) * 16, "seq_lens": np.array([40, 7])}
    return Case("decode_metadata", {"max_seq_pages": 3, "seq_len_delta": 0, "page_size": ps}, tensors, values)


def rounding_disagreement_case() -> Case:
    """NumPy's and torch's float32 log2 differ by one ulp at 341364 / 64; with 21 cores the
    truncated ext_core_count is 260 or 259, and the answer 8 or 7 splits."""
    C = TensorSpec.contiguous
    return Case("num_kv_splits", {"num_seq": 1, "num_group": 1, "num_head": 37, "num_kv_head": 37,
                                  "max_kv_splits": 8, "device_core_count": 21},
                {"num_kv_splits": C("int32", (1,)), "seq_lens": C("int32", (1,))},
                {"seq_lens": np.array([341364])})


def save_hand_cases(store: DirectoryCorpus, device: str, versions: dict) -> None:
    for ps in (48, 3, 0):
        print(store.save(SavedCase(case=invalid_page_size_case(ps), finding=None, target="builtin",
                                   device=device, versions=versions, origin="hand")).path)
    disagreement = Finding("oracle_disagreement", "num_kv_splits", "splits", "num_kv_splits", "all",
                           "num_kv_splits: NumPy (8) and torch (7) oracles disagree on a float32 rounding "
                           "boundary of the log2 step; both answers must be accepted, here only",
                           ({"index": [0], "numpy": 8, "torch": 7},))
    print(store.save(SavedCase(case=rounding_disagreement_case(), finding=disagreement, target="builtin",
                               device=device, versions=versions, origin="hand")).path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=180.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("corpora"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip-seed", action="store_true", help="only the mutant campaign")
    ap.add_argument("--hand-only", action="store_true", help="only the hand-written cases")
    args = ap.parse_args()
    store = DirectoryCorpus(args.out)
    if args.hand_only:
        device = devmod.select(args.device)
        save_hand_cases(store, device, environment_versions(devmod.gpu_name(device)))
        return 0
    mutant = run_campaign(CampaignConfig(ops=["decode_metadata"], target=MUTANT, device=args.device, budget_s=40,
                                         seed=args.seed, minimize_budget_s=10), progress=stderr_progress())
    versions = environment_versions(devmod.gpu_name(mutant.device))
    for x in mutant.saved:
        f = x.found.finding
        common = dict(case=x.case, finding=f, device=mutant.device, versions=versions, origin="batch",
                      minimized=True, minimize_log=tuple(x.minimize_log))
        if f.kind not in FLAKY_KINDS:
            print(store.save(SavedCase(target=MUTANT, expected="xfail", reason=f"planted defect: {f.message}",
                                       **common)).path)
        print(store.save(SavedCase(target="builtin", **common)).path)
    if args.skip_seed:
        return 0
    cfg = CampaignConfig(ops=["decode_metadata", "swa_spec_page_table", "num_kv_splits"], target=SGLANG,
                         device=args.device, budget_s=args.budget, seed=args.seed, corpus=args.out,
                         minimize_budget_s=30.0)
    result = run_campaign(cfg, progress=stderr_progress())
    for x in result.saved:
        if x.path is None:  # the corpus refused it; the campaign already said why
            continue
        saved = read_case_dir(x.path)
        builtin = dataclasses.replace(saved, target="builtin", expected="pass", reason=None)
        print(store.save(builtin).path)
    save_hand_cases(store, result.device, versions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
