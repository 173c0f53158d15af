"""What writing a campaign's batch images costs over a long stream: microseconds a case of
`execute.launches` (canary, values, the wanted output bytes' tail), and beside it of drawing
the case (`generate`) and preparing it (`prepare`: the NumPy oracle, the plan), over the first `--cases`
cases of seed 0's stream as a campaign on `--device` draws it, in batches as the engine closes
them (`--batch` cases, or fewer where `batch_engine.BATCH_BYTES` says), with the batch engine's
image ring, three batches alive (as the engine keeps them), buffers of 1 MiB or more mapped
alone (heap.py, as a campaign's process). Also the process's peak resident memory.

    PYTHONPATH=. python scripts/batch_image_cost.py [--ops OP ...] [--device cuda] [--batch 64]
        [--cases 8000] [--repeats 2] [--against NAME=DIR] [--json F]

`--against NAME=DIR` also runs the kvfuzz package under DIR (another revision: `git archive REV
kvfuzz | tar -x -C DIR`), in its own process, in turn with this checkout's (a busy machine slows
both alike). Each measurement runs in a fresh process (the first batches of a process fault
their buffers in, as a campaign's do).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def measure(op: str, device: str, batch: int, cases: int) -> dict:
    """In this process: the stream's batch images written, as the engine writes them."""
    import resource
    import time

    from kvfuzz.engines import batch_engine
    from kvfuzz.execute import launches, prepare
    from kvfuzz.heap import return_large_frees
    from kvfuzz.materialize import ImageRing

    return_large_frees()
    bound = getattr(batch_engine, "BATCH_BYTES", None)  # None: a revision without the bound
    ring, alive, pending, size = ImageRing(), [], [], 0
    spent, batches, drawing, preparing = 0.0, 0, 0.0, 0.0

    def flush() -> None:
        nonlocal spent, batches, alive, pending, size
        t = time.perf_counter()
        launches(pending, [True] * len(pending), None, ring=ring)
        spent += time.perf_counter() - t
        batches += 1
        alive = (alive + [pending])[-3:]
        pending, size = [], 0

    list(batch_engine.case_stream(op, 0, 1, device))  # the class pool, once per process: not a case's cost
    stream = iter(batch_engine.case_stream(op, 0, cases, device))
    for i in range(cases):
        t0 = time.perf_counter()
        _, c = next(stream)
        t1 = time.perf_counter()
        p = prepare(c, i)
        drawing, preparing = drawing + t1 - t0, preparing + time.perf_counter() - t1
        if pending and bound and size + p.plan.size > bound:
            flush()
        pending.append(p)
        size += p.plan.size
        if len(pending) == batch:
            flush()
    if pending:
        flush()
    return {"us_per_case": round(spent / cases * 1e6, 1), "batches": batches,
            "generate_us_per_case": round(drawing / cases * 1e6, 1), "prepare_us_per_case": round(preparing / cases * 1e6, 1),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="*", default=["decode_metadata", "trtllm_mha_kv_indices", "swa_spec_page_table"])
    ap.add_argument("--device", default="cuda", help="whose stream (stints) to draw; nothing runs on it")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--cases", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--against", metavar="NAME=DIR")
    ap.add_argument("--json")
    ap.add_argument("--one", nargs=4, metavar=("OP", "DEVICE", "BATCH", "CASES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        op, device, batch, cases = args.one
        print(json.dumps(measure(op, device, int(batch), int(cases))))
        return 0
    trees = {"this": REPO}
    if args.against:
        name, _, path = args.against.partition("=")
        trees[name] = Path(path).resolve()
    out = {"command": "PYTHONPATH=. python scripts/batch_image_cost.py " + " ".join(sys.argv[1:]),
           "machine": f"{platform.machine()}, Python {platform.python_version()}", "ops": {}}
    for op in args.ops:
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, tree in trees.items():
                done = subprocess.run([sys.executable, __file__, "--one", op, args.device, str(args.batch), str(args.cases)],
                                      env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True,
                                      text=True, check=True)
                runs[name].append(json.loads(done.stdout))
        out["ops"][op] = {name: {"us_per_case": [r["us_per_case"] for r in rs],
                                 "median_us_per_case": statistics.median(r["us_per_case"] for r in rs),
                                 "batches": rs[0]["batches"], "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
                                 "generate_us_per_case": statistics.median(r["generate_us_per_case"] for r in rs),
                                 "prepare_us_per_case": statistics.median(r["prepare_us_per_case"] for r in rs)}
                          for name, rs in runs.items()}
        for name, r in out["ops"][op].items():
            print(f"{op:<24} {name:<8} {r['median_us_per_case']:>8.1f} us a case  {r['batches']:>5} batches  "
                  f"peak {r['peak_rss_mb']} MB  ({', '.join(map(str, r['us_per_case']))}); generate "
                  f"{r['generate_us_per_case']:.0f}, prepare {r['prepare_us_per_case']:.0f} us a case", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
