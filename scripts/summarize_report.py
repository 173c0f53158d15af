"""One line per op of a `kvfuzz fuzz --report` file: cases, rate, classes, compiles, findings."""

import json
import sys

for path in sys.argv[1:]:
    r = json.load(open(path))
    print(f"{path}: {r['cases']} cases in {r['seconds']} s, startup {r.get('startup_s')} s "
          f"(from kvfuzz's import: {r.get('since_import_s')} s)")
    for op, s in r["ops"].items():
        rate = s["cases"] / max(s["seconds"], 1e-9)
        print(f"  {op}: {s['cases']} cases, {rate:.0f}/s, {s['classes']} classes, {s['variants']} variants "
              f"by Triton's rules, {s['compiled']} compiled or loaded, {s['lost_batches']} lost batches, "
              f"{1000 * s['variants'] / max(s['cases'], 1):.2f} variants per 1000 cases")
    print("  findings:", [f["signature"] for f in r["findings"]], "flaky:", [f["signature"] for f in r["flaky"]],
          "not the target's:", r["not_target"])
