"""How many kernels a campaign on an empty Triton cache compiles per 1,000 cases, per op: the
distinct specialisation keys (Triton's own rules, `kvfuzz/specialize.py`; on an H200 they
equalled the kernels Triton compiled, benchmarks/h200-campaign-cold.json) over the first N cases
of the batched engine's stream at the GPU's stint, in-contract and out-of-contract cases mixed
as a campaign draws them. Kernels are recorded, not run (the recorder's dry mode), so it runs
on any host in seconds.

    python scripts/compile_rate.py [--target builtin|PATH.py] [--seed S] [--at 1000 10000 50000] [--ops OP ...]
                                   [--pack K] [--json F]

`--pack K` launches the stream as a campaign packing K cases a launch does (`--pack K`): in
batches of `BATCH["cuda"]` cases, each pack of in-contract cases of one class one launch
(`packing.launches`), the rest alone; a pack's merged tensors can specialise otherwise than
its members' (a row count, a table's width), so packing can compile kernels of its own.

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
    ap.add_argument("--pack", type=int, default=1, metavar="K", help="cases per packed launch (1: none)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from kvfuzz import device as devmod

    devmod.select("cpu")  # the interpreter's launch path, before any kernel is defined
    from kvfuzz.device import torch_device
    from kvfuzz import packing
    from kvfuzz.engines.batch_engine import BATCH, STINT, case_stream
    from kvfuzz.engines.common import fit_target
    from kvfuzz.execute import prepare
    from kvfuzz.materialize import to_device, views_at
    from kvfuzz.ops import CONTRACTS
    from kvfuzz.specialize import recorder
    from kvfuzz.targets import load_target

    target = load_target(args.target, "cpu")
    rec = recorder()
    rec.install()
    rec.dry = True
    out = {"command": "python scripts/compile_rate.py " + " ".join(sys.argv[1:]), "target": args.target,
           "seed": args.seed, "stint": STINT["cuda"], "pack": args.pack, "ops": {}}
    dev = torch_device("cpu")
    for op in args.ops or sorted(CONTRACTS):
        if not target.supports(op):
            continue
        start, marks, n = set(rec.keys), {}, max(args.at)
        packs = args.pack > 1 and packing.spec_of(op) is not None
        batch: list = []
        counts = {"packed": 0}  # cases launched in packs

        def launch(prepared: list) -> None:
            """A batch's launches, packed where `--pack` packs them (as the batched engine's)."""
            import torch

            if not packs:
                for p in prepared:
                    call(p.case, to_device(p.plan, dev)[1])
                return
            image, launches, packed = packing.launches(prepared, [False] * len(prepared), [False] * len(prepared), args.pack)
            counts["packed"] += packed.packed() if packed is not None else 0
            arena = torch.from_numpy(image)
            for b in launches:
                if b.run:
                    call(b.case, views_at(arena, b.regions, b.base))

        def call(case, views) -> None:
            try:
                target.invoke(op, views, case.scalars, case.meta.get("as_called"))
            except Exception:
                pass  # refused: no kernel launched

        for i, (_, case) in enumerate(case_stream(op, args.seed, n, "cuda", stint=STINT["cuda"]), 1):
            batch.append(prepare(fit_target(case, target.lacks), i - 1))
            if len(batch) == BATCH["cuda"] or i in args.at:
                launch(batch)
                batch = []
            if i in args.at:
                marks[i] = (len(set(rec.keys) - start), counts["packed"])
        out["ops"][op] = {str(k): {"kernels": v, "per_1000": round(1000 * v / k, 2), "packed_cases": p}
                          for k, (v, p) in sorted(marks.items())}
        print(f"{op:<32}" + "  ".join(f"{k:>6} cases: {v:>3} kernels ({1000 * v / k:5.2f}/1000" +
                                      (f", {p} packed)" if packs else ")") for k, (v, p) in sorted(marks.items())),
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
