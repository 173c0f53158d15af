"""How fast the batched engine draws cases: ms per case of what `fuzz_op` does per case on the
host before planning (`stream_case`, `fit_target`, `all_features`), per op, the minimum over
repeats of the same stream; and the class pool's cost, once per campaign.

    PYTHONPATH=. python scripts/gen_speed.py [--cases 1000] [--repeats 5] [--ops OP ...] [--variant V]

Time it on a quiet machine: the minimum of the repeats is the figure to compare.
"""

from __future__ import annotations

import argparse
import time

from kvfuzz.engines.batch_engine import POOL, STINT, stream_case
from kvfuzz.engines.common import fit_target
from kvfuzz.strategies import GENERATORS


def per_case_ms(op: str, seed: int, n: int, device: str, variant: str | None) -> float:
    gen = GENERATORS[op]
    classes = gen.pool(seed, POOL, variant)
    stint = STINT[device]
    t = time.perf_counter()
    for i in range(n):
        _, case = stream_case(gen, classes, seed, i, stint)
        if variant:
            case = case.replace(variant=variant)
        case = fit_target(case, {})
        gen.all_features(case)
    return (time.perf_counter() - t) * 1e3 / n


def pool_ms(op: str, seed: int, variant: str | None) -> float:
    t = time.perf_counter()
    GENERATORS[op].pool(seed, POOL, variant)
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=tuple(STINT))
    ap.add_argument("--variant", default=None, help="a contract variant (decode_metadata: strict, fused, ...)")
    ap.add_argument("--ops", nargs="*", default=list(GENERATORS))
    args = ap.parse_args()
    for op in args.ops:
        case = min(per_case_ms(op, args.seed, args.cases, args.device, args.variant) for _ in range(args.repeats))
        pool = min(pool_ms(op, args.seed, args.variant) for _ in range(max(args.repeats // 2, 1)))
        print(f"{op:24s} {case:7.4f} ms/case   pool {pool:7.1f} ms")


if __name__ == "__main__":
    main()
