"""Host cost of judging a packed batch, per case: the pack's fast path (`judge.quick_pack`)
against the member-by-member path (unpack each member's arena, `quick_verdict`), on the same
batches, in one process, alternating. No figure depends on the device: the batch runs once (in
process, under the interpreter on the CPU), then only the judging is timed.

    python scripts/pack_judge_speed.py [--ops OP ...] [--cases 64] [--k 16] [--repeats 20] [--json F]

Per op: microseconds per case of `Checker.verdicts` over the batch with the fast path and
without it (best of --repeats), the packs the fast path passed, and whether both paths gave
every case the same verdict (they must).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from kvfuzz import packing
from kvfuzz.check import Checker
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.execute import prepare
from kvfuzz.ops import records
from kvfuzz.ops.record import PackSpec
from kvfuzz.worker import InProcessExecutor


def packable(op: str, n: int, seed: int) -> list:
    spec, out = packing.spec_of(op), []
    for i, (_, c) in enumerate(case_stream(op, seed, 40 * n, "cpu", in_contract_only=True, stint=n)):
        p = prepare(c, i)
        if packing.refusal(spec, p) is None:
            out.append(p)
            if len(out) == n:
                break
    return out


def timed(checker, prepared, batch, result, packs, repeats: int, fast: bool) -> tuple[float, list]:
    original = packing.Packs.clean
    if not fast:
        packing.Packs.clean = lambda self, batch, result: {}
    try:
        best, verdicts = float("inf"), None
        for _ in range(repeats):
            for p in prepared:  # a fresh campaign's cases: nothing cached from the last pass
                p.clean_image = None
            for pk in packs.packs:
                pk._clean = None
            t = time.perf_counter()
            verdicts = [(p.index, v.status, tuple(v.signatures())) for p, _, v in
                        checker.verdicts(prepared, batch, result, packs)]
            best = min(best, time.perf_counter() - t)
        return best, verdicts
    finally:
        packing.Packs.clean = original


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", nargs="*", default=None)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ops = args.ops or sorted(op for op, r in records().items() if isinstance(r.packing, PackSpec))
    executor = InProcessExecutor("builtin", "cpu")
    rows = {}
    for op in ops:
        prepared = packable(op, args.cases, args.seed)
        repeat = [True] * len(prepared)  # as on a GPU: every case run twice, the second from the alternate image
        image, batch, packs = packing.launches(prepared, repeat, [False] * len(prepared), args.k, prove_on_device=False)
        if packs is None:
            print(f"{op:26s} nothing packed", file=sys.stderr)
            continue
        result = executor.run_batch(image, batch)
        checker = Checker(executor, op)
        slow_s, slow_v = timed(checker, prepared, batch, result, packs, args.repeats, fast=False)
        fast_s, fast_v = timed(checker, prepared, batch, result, packs, args.repeats, fast=True)
        passed = len(packs.clean(batch, result))
        rows[op] = {"cases": len(prepared), "packed": packs.packed(), "packs": len(packs),
                    "fast_path_cases": passed, "us_per_case_member_by_member": round(slow_s / len(prepared) * 1e6, 1),
                    "us_per_case_pack_fast_path": round(fast_s / len(prepared) * 1e6, 1),
                    "same_verdicts": slow_v == fast_v}
        r = rows[op]
        print(f"{op:26s} {r['packed']:3d}/{r['cases']} packed in {r['packs']} packs, {passed} by the fast path: "
              f"{r['us_per_case_member_by_member']:8.1f} -> {r['us_per_case_pack_fast_path']:8.1f} us/case, "
              f"same verdicts: {r['same_verdicts']}")
    if args.json:
        import os
        import platform
        import subprocess

        import numpy
        import torch
        import triton

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(args.json, "w") as f:
            json.dump({"command": "python scripts/" + " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                       "kvfuzz_commit": commit or None, "k": args.k,
                       "versions": {"torch": torch.__version__, "triton": triton.__version__, "numpy": numpy.__version__,
                                    "python": platform.python_version()},
                       "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}), no GPU: the batch ran under "
                                  "Triton's interpreter, only the judging is timed",
                       "ops": rows}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
