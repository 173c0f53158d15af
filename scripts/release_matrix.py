"""The release x defect table of docs/findings.md: `kvfuzz bisect` over a corpus's triaged cases
(xfail defects of SGLang releases), one column per distinct kernel file and one for `builtin`.

usage: python scripts/release_matrix.py [CORPUS...] [--releases A..B | X,Y,Z] [--device cpu|cuda|auto]
                                        [--json FILE] [--markdown FILE] [--write]

The replaying is kvfuzz.bisect's (the cells, the releases that share a file, `--write`'s
meta.affects, introduced_in and fixed_in); `kvfuzz bisect` prints each case's history. This
prints one line per case and writes the Markdown table. Exit status as `kvfuzz bisect`'s: 1 when
builtin is not clean on a case, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's kvfuzz

from kvfuzz import bisect  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="*", default=["corpora"])
    ap.add_argument("--releases", default=bisect.DEFAULT_RANGE)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--write", action="store_true", help="record meta.affects, introduced_in, fixed_in in each case")
    args = ap.parse_args(argv)

    from kvfuzz import device as devmod
    from kvfuzz.corpus import iter_cases
    from kvfuzz.errors import BadInput

    try:
        releases = bisect.parse_releases(args.releases)
        cases = [(p, s) for p, s in iter_cases(args.corpus)
                 if not isinstance(s, Exception) and bisect.writable(s) is None and bisect.why_not_bisected(s) is None]
    except BadInput as exc:
        print(f"release_matrix: error: {exc}", file=sys.stderr)
        return 2
    device = devmod.select(args.device)
    results = bisect.run(cases, releases, device, progress=lambda line: print(line, file=sys.stderr))
    # a case has a cell on the copies of its op's file only ('' elsewhere)
    targets = [f"sglang=={f}" for f in bisect.targets_of(releases, [s for _, s in cases])] + [bisect.BUILTIN]
    for r in results:
        print(r.signature, " ".join(f"{t.split('==')[-1]}={r.cells[t]}" for t in targets if t in r.cells), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": device, "targets": targets,
                                         "rows": [r.to_json() for r in results]}, indent=1))
    if args.markdown:
        lines = ["| defect (signature) | case (found with) | " + " | ".join(t.split("==")[-1] for t in targets) + " |",
                 "|" + " --- |" * (len(targets) + 2)]
        for r in results:
            cells = (f"**{c}**" if c == bisect.DEFECT else c for c in (r.cells.get(t, "") for t in targets))
            lines.append(f"| `{r.signature}` | `{r.path.name}` ({r.saved.target.split('==')[-1]}) | "
                         + " | ".join(cells) + " |")
        args.markdown.write_text("\n".join(lines) + "\n")
    not_clean = [r for r in results if r.builtin not in (bisect.CLEAN, bisect.CANNOT)]
    if args.write:
        for r in results:
            if r not in not_clean:
                bisect.write_meta(r)
    return 1 if not_clean else 0


if __name__ == "__main__":
    sys.exit(main())
