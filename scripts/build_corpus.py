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
a float32 rounding boundary of num_kv_splits where the NumPy and torch oracles really do
answer differently (an `oracle_disagreement` case: kvfuzz must accept both sides there, and
only there), and tests/fixtures/overrun_kernels.py's read past an input and write past its
output (`out_of_bounds_read`, `out_of_bounds_write`: strict xfail for it, must-pass for
builtin). `--hand-only` rewrites just those.
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
OVERRUN = "tests/fixtures/overrun_kernels.py"  # a Triton kernel that reads past an input, writes past its output
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


def overrun_cases() -> list[Case]:
    """Two spec cases for tests/fixtures/overrun_kernels.py, out of contract: the last
    request's la (7) exceeds page_table_a's width (5), so the fixture reads past it
    (out_of_bounds_read); the last row's lb (1600) exceeds page_table_b's width, so it writes
    6 KB past page_table_dst, into seq_len_a's guard band (out_of_bounds_write)."""
    C = TensorSpec.contiguous
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 1 << 20, size=(2, 5)), -1 - rng.integers(0, 99, size=(4, 2))
    out = []
    for la, lb, width in (([3, 7], [0, 1, 2, 0], 11), ([3, 5], [0, 1, 1, 1600], 7)):
        tensors = {"page_table_dst": C("int32", (4, width)), "page_table_a": C("int32", (2, 5)),
                   "page_table_b": C("int32", (4, 2)), "seq_len_a": C("int32", (2,)), "seq_len_b": C("int32", (4,))}
        values = {"page_table_a": a, "page_table_b": b, "seq_len_a": np.array(la), "seq_len_b": np.array(lb)}
        out.append(Case("swa_spec_page_table", {"speculative_num_draft_tokens": 2}, tensors, values))
    return out


def save_overrun_cases(store: DirectoryCorpus, device: str, versions: dict) -> None:
    """The fixture's read and write, each a strict xfail for it (the judge's finding on it: the
    out-of-bounds detectors still fire, named after the input read past and the output written
    past) and a must-pass case for builtin."""
    from kvfuzz.judge import judge
    from kvfuzz.worker import WorkerExecutor

    ex = WorkerExecutor(OVERRUN, device)
    try:
        for case in overrun_cases():
            (f,) = judge(case, ex.run(case, repeats=2)).findings
            common = dict(case=case, device=device, versions=versions, origin="hand")
            print(store.save(SavedCase(target=OVERRUN, finding=f, expected="xfail",
                                       reason=f"planted defect: {f.kind} on {f.tensor}", **common)).path)
            print(store.save(SavedCase(target="builtin", finding=f, **common)).path)
    finally:
        ex.close()


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
    save_overrun_cases(store, device, versions)


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
