"""What a batch's second arena costs the worker's host: the alternate images built on the host
(`materialize.refill`, as `execute._alternate_into` writes them, then copied to the device as a
second batch-sized transfer) against the host's share of writing them on the device
(`alt_arena.py`: the element runs gathered, their metadata, and one strided copy per tensor whose
innermost stride is not 1; the device's own work and the saved transfer are not counted here).
Microseconds a case over batches of `--batch` cases, every case repeated, per op, the two ways in
turn `--repeats` times, the second pass onward (the runs' cache warm, as in a campaign); prints
each way's median and writes them as JSON with `--json`.

    PYTHONPATH=. python scripts/alt_arena_host_cost.py [--cases 1024] [--batch 64] [--repeats 5] [--ops OP ...] [--json F]

The cases are seed 0's in-contract stream as a GPU campaign draws it (stints of 128), small classes.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ops", nargs="*", default=["decode_metadata", "swa_spec_page_table", "flashinfer_kv_indices",
                                                 "trtllm_mha_kv_indices"])
    ap.add_argument("--json")
    args = ap.parse_args()

    import numpy as np

    from kvfuzz import alt_arena, execute
    from kvfuzz.engines.batch_engine import case_stream
    from kvfuzz.execute import prepare

    out = {"command": "PYTHONPATH=. python scripts/alt_arena_host_cost.py " + " ".join(
        f"--{k} {' '.join(v) if isinstance(v, list) else v}" for k, v in vars(args).items() if v is not None),
        "machine": platform.processor() or platform.machine(), "ops": {}}
    for op in args.ops:
        cases = [prepare(c, i) for i, (_, c) in enumerate(case_stream(op, 0, args.cases, "cuda", in_contract_only=True,
                                                                      sizes="small"))]
        batches = []
        for b0 in range(0, len(cases), args.batch):
            part = cases[b0 : b0 + args.batch]
            batches.append(execute.launches(part, [True] * len(part), prove_on_device=False))

        def host() -> float:
            t = time.perf_counter()
            for image, batch in batches:
                execute._alternate_into(image, batch, np.empty(image.size, dtype=np.uint8))
            return time.perf_counter() - t

        def device_share() -> tuple[float, int]:
            t, views = time.perf_counter(), 0
            for _, batch in batches:
                starts, lens = [], []
                for b in batch:
                    for layout in b.fill or b.regions:
                        runs = alt_arena.element_runs(layout)
                        if runs is None:
                            views += 1
                        elif runs[0].size:
                            starts.append(runs[0] + b.base // 4)
                            lens.append(runs[1])
                if starts:
                    np.stack([np.concatenate(starts), np.concatenate(lens)])
            return time.perf_counter() - t, views

        h, d = [], []
        views = 0
        for r in range(args.repeats + 1):
            hs = host()
            ds, views = device_share()
            if r:  # the first pass fills the runs' cache
                h.append(hs)
                d.append(ds)
        n = len(cases)
        row = {"cases": n, "host_refill_us": round(1e6 * statistics.median(h) / n, 1),
               "device_runs_host_us": round(1e6 * statistics.median(d) / n, 1),
               "strided_copies_per_case": round(views / n, 2)}
        out["ops"][op] = row
        print(f"{op:<26} host refill {row['host_refill_us']:>7.1f} us/case   on the device, the host's share "
              f"{row['device_runs_host_us']:>6.1f} us/case + {row['strided_copies_per_case']:.2f} strided copies a case")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
