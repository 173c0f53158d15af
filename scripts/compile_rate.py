"""How many kernels a campaign on an empty Triton cache compiles per 1,000 cases, per op: the
distinct specialisation keys (Triton's own rules, `kvfuzz/specialize.py`; on an H200 they
equalled the kernels Triton compiled, benchmarks/h200-campaign-cold.json) over the first N cases
of the batched engine's stream at the GPU's stint, in-contract and out-of-contract cases mixed
as a campaign draws them. Kernels are recorded, not run (the recorder's dry mode), so it runs
on any host in seconds.

    python scripts/compile_rate.py [--target builtin|PATH.py] [--seed S] [--at 1000 10000 50000] [--ops OP ...] [--json F]

The figure at 1,000 cases is a cold campaign's first stretch: each class's first case compiles
its kernels, and a GPU campaign visits a class every `STINT["cuda"]` cases.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="builtin")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--at", type=int, nargs="+", default=[1000, 10000, 50000])
    ap.add_argument("--ops", nargs="*")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from kvfuzz import device as devmod

    devmod.select("cpu")  # the interpreter's launch path, before any kernel is defined
    from kvfuzz.device import torch_device
    from kvfuzz.engines.batch_engine import STINT, case_stream
    from kvfuzz.engines.common import fit_target
    from kvfuzz.execute import prepare
    from kvfuzz.materialize import to_device
    from kvfuzz.ops import CONTRACTS
    from kvfuzz.specialize import recorder
    from kvfuzz.targets import load_target

    target = load_target(args.target, "cpu")
    rec = recorder()
    rec.install()
    rec.dry = True
    out = {"command": "python scripts/compile_rate.py " + " ".join(sys.argv[1:]), "target": args.target,
           "seed": args.seed, "stint": STINT["cuda"], "ops": {}}
    dev = torch_device("cpu")
    for op in args.ops or sorted(CONTRACTS):
        if not target.supports(op):
            continue
        start, marks, n = set(rec.keys), {}, max(args.at)
        for i, (_, case) in enumerate(case_stream(op, args.seed, n, "cuda", stint=STINT["cuda"]), 1):
            case = fit_target(case, target.lacks)
            try:
                target.invoke(op, to_device(prepare(case).plan, dev)[1], case.scalars)
            except Exception:
                pass  # refused: no kernel launched
            if i in args.at:
                marks[i] = len(set(rec.keys) - start)
        out["ops"][op] = {str(k): {"kernels": v, "per_1000": round(1000 * v / k, 2)} for k, v in sorted(marks.items())}
        print(f"{op:<32}" + "  ".join(f"{k:>6} cases: {v:>3} kernels ({1000 * v / k:5.2f}/1000)"
                                      for k, v in sorted(marks.items())), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
