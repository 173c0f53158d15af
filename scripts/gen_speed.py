"""How fast the batched engine draws cases: ms per case of what `fuzz_op` does per case on the
host before planning (`stream_case`, `fit_target`, `all_features`), per op, over the first
`--cases` cases of seed 0's stream (timed in chunks of `--chunk`, each chunk's best of
`--repeats`), and the class pool's cost (once per campaign).

    PYTHONPATH=. python scripts/gen_speed.py [--cases 1000] [--repeats 5] [--ops OP ...] [--variant V]
                                             [--sizes small|production]
    git archive REV | tar -x -C /tmp/rev && PYTHONPATH=. python scripts/gen_speed.py --against rev=/tmp/rev

`--sizes production` draws from the pool's production-size classes alone (an op without any is
skipped), `small` from the rest. `--against NAME=DIR` also times the kvfuzz package under DIR (another revision), in the same
process, chunk by chunk in turn with this checkout's, so that a busy machine slows both alike.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path


def load(name: str, src: Path | None, scratch: Path):
    """(stream_case, fit_target, GENERATORS, POOL, STINT) of this checkout's kvfuzz, or of the
    one under `src` imported as package `name` (kvfuzz's own imports are relative)."""
    pkg = "kvfuzz"
    if src is not None:
        shutil.copytree(src / "kvfuzz", scratch / name)
        pkg = name
    engine = importlib.import_module(f"{pkg}.engines.batch_engine")
    common = importlib.import_module(f"{pkg}.engines.common")
    strategies = importlib.import_module(f"{pkg}.strategies")
    return engine.stream_case, common.fit_target, strategies.GENERATORS, engine.POOL, engine.STINT, engine.sized


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--chunk", type=int, default=250)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--variant", default=None, help="a contract variant (decode_metadata: strict, fused, ...)")
    ap.add_argument("--ops", nargs="*", default=None)
    ap.add_argument("--sizes", choices=("small", "production"), default=None,
                    help="the pool's small classes, or its production-size ones alone (default: the mix)")
    ap.add_argument("--against", nargs="*", default=[], metavar="NAME=DIR", help="other kvfuzz trees to time alike")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="gen_speed."))
    sys.path.insert(0, str(scratch))
    versions = {"this": load("this", None, scratch)}
    for spec in args.against:
        name, _, src = spec.partition("=")
        versions[name] = load(name, Path(src), scratch)
    ops = args.ops or list(versions["this"][2])
    for op in ops:
        runs = {}
        for name, (stream_case, fit_target, generators, pool_size, stint, sized) in versions.items():
            gen = generators[op]
            pool_ms = []
            for _ in range(3):
                t = time.perf_counter()
                pool = gen.pool(args.seed, pool_size, args.variant)
                pool_ms.append((time.perf_counter() - t) * 1e3)
            pool = sized(pool, args.sizes)
            runs[name] = (stream_case, fit_target, gen, pool, stint[args.device], min(pool_ms))
        if not all(run[3] for run in runs.values()):
            print(f"{op:24s} no {args.sizes} classes")
            continue
        best: dict[tuple[str, int], float] = {}
        for _ in range(args.repeats):
            for start in range(0, args.cases, args.chunk):
                stop = min(start + args.chunk, args.cases)
                for name, (stream_case, fit_target, gen, pool, stint, _) in runs.items():
                    t = time.perf_counter()
                    for i in range(start, stop):
                        _, case = stream_case(gen, pool, args.seed, i, stint)
                        if args.variant:
                            case = case.replace(variant=args.variant)
                        gen.all_features(fit_target(case, {}))
                    ms = (time.perf_counter() - t) * 1e3
                    best[name, start] = min(best.get((name, start), ms), ms)
        line = []
        for name, run in runs.items():
            per_case = sum(ms for (n, _), ms in best.items() if n == name) / args.cases
            line.append(f"{name} {per_case:.4f} ms/case (pool {run[-1]:.0f} ms)")
        print(f"{op:24s} " + "   ".join(line))
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
