"""What writing a batch's image costs in fresh memory and in a reused buffer (`materialize.ImageRing`,
as the batched engine packs): microseconds a case of `execute.launches` over batches of
`--batch` cases (the clean images computed beforehand, as the engine's judge needs them anyway),
per op, the two ways in turn `--repeats` times (a busy machine slows both alike); prints each
way's median and best, and writes them as JSON with `--json`.

    PYTHONPATH=. python scripts/image_ring_speed.py [--cases 1024] [--batch 64] [--repeats 6] [--ops OP ...] [--json F]

The cases are seed 1's in-contract stream as a GPU campaign draws it (stints of 128), small classes.
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
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--ops", nargs="*", default=["decode_metadata", "swa_spec_page_table", "flashinfer_kv_indices",
                                                 "trtllm_mha_kv_indices"])
    ap.add_argument("--json")
    args = ap.parse_args()

    from kvfuzz.engines.batch_engine import case_stream
    from kvfuzz.execute import launches, prepare
    from kvfuzz.heap import return_large_frees
    from kvfuzz.judge import clean_image
    from kvfuzz.materialize import ImageRing

    return_large_frees()  # as a campaign's process (cli.main)
    out = {"command": "PYTHONPATH=. python scripts/image_ring_speed.py " + " ".join(
        f"--{k} {' '.join(v) if isinstance(v, list) else v}" for k, v in vars(args).items() if v is not None),
        "machine": platform.processor() or platform.machine(), "ops": {}}
    for op in args.ops:
        cases = [c for _, c in case_stream(op, 1, args.cases, "cuda", in_contract_only=True, stint=128, sizes="small")]
        ring = ImageRing()
        us: dict[str, list[float]] = {"fresh": [], "ring": []}
        for _ in range(args.repeats):
            for way in us:
                prepared = [prepare(c, i) for i, c in enumerate(cases)]
                for p in prepared:
                    clean_image(p)
                t = time.perf_counter()
                for k in range(0, len(prepared), args.batch):
                    part = prepared[k : k + args.batch]
                    launches(part, [True] * len(part), ring=ring if way == "ring" else None)
                us[way].append(1e6 * (time.perf_counter() - t) / max(len(prepared), 1))
        out["ops"][op] = {way: {"median": round(statistics.median(v), 1), "best": round(min(v), 1)}
                          for way, v in us.items()}
        print(op, "  ".join(f"{way}: median {r['median']:.0f} us, best {r['best']:.0f} us"
                            for way, r in out["ops"][op].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
