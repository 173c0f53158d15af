"""The host's own ceiling for `--jobs N` on the CPU: bare interpreter calls of one op (kvfuzz's
bench inputs, no checking), one process alone against N processes at once.

    python scripts/host_scaling.py [--op decode_metadata] [--cases 300] [--jobs 2]

Each process prepares the same cases and warms up; then process 0 runs a pass alone, all N run
a pass at once, and process 0 runs a pass alone again. The figure is N x (the two alone passes'
mean) / (the slowest pass at once): what N jobs can give at most on this host, before any of
kvfuzz's own work. `kvfuzz bench --jobs N`'s `jobs_speedup` is to be read against it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def _one(op: str, n: int, me: int, barrier, results) -> None:
    from kvfuzz import device as devmod

    devmod.select("cpu")
    from kvfuzz.bench import _Bare  # its passes run on a worker's torch threads
    bare = _Bare(op, "builtin", "cpu", 0, n)
    bare._one_pass()  # warm
    times = []
    for phase in ("alone", "together", "alone"):
        barrier.wait()
        if phase == "together" or me == 0:
            t0 = time.perf_counter()
            bare._one_pass()
            times.append(time.perf_counter() - t0)
        barrier.wait()  # the others wait while process 0 runs alone
    results.put((me, times))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="decode_metadata")
    p.add_argument("--cases", type=int, default=300)
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(args.jobs), ctx.Queue()
    procs = [ctx.Process(target=_one, args=(args.op, args.cases, i, barrier, results)) for i in range(args.jobs)]
    for proc in procs:
        proc.start()
    got = dict(results.get() for _ in procs)
    for proc in procs:
        proc.join()
    alone = (got[0][0] + got[0][2]) / 2
    together = max(t[1] if i == 0 else t[0] for i, t in got.items())
    print(f"{args.op}: a pass of {args.cases} cases alone {alone:.2f} s ({got[0][0]:.2f}, {got[0][2]:.2f}); "
          f"{args.jobs} at once, the slowest {together:.2f} s: {args.jobs} processes do "
          f"{args.jobs * alone / together:.2f}x one")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
