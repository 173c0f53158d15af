"""Why a mutant was not killed: equivalent, outside the contract, or out of reach.

A mutant that survives its campaigns (and their confirmation run) is run beside the unmutated
copy of its file on one long seeded stream of the op's generator (`strategies.random_cases`,
in and out of contract, under the variant that judges it), each case from its image and from
its alternate image, and their arenas are compared byte for byte (`compare`):

* `equivalent`: every case gives byte-identical arenas and the same errors (`evidence` says how
  many cases, in and out of contract, and which kernel paths they took); or the mutants
  differ only where the contract leaves the output free (the judge finds nothing on them);
* `outside contract`: they differ only on out-of-contract cases (the first such case's
  reason is given): only a call outside the contract tells them apart;
* `out of reach`: a case of the stream tells them apart in contract and kills the mutant, but
  the campaigns never made one like it within their budget (the case is described), or the
  stream never took the kernel path the mutant is on.

`why` adds the input dimension a mutant's line is about where its names make it clear (an
out-of-reach mutant of `(row < P)` is about the pool's size, `P`).
"""

from __future__ import annotations

import json
import re
import time

# names in kvfuzz's kernels -> the input dimension they hold (for "out of reach" reasons)
DIMENSIONS = {
    "P": "the pool's rows (req_to_token / page-table rows)", "C": "the table's columns (max context)",
    "W": "the output's width", "PS": "the page size", "R": "the requests' count", "N": "the index map's size",
    "out_n": "the output's length", "map_n": "the token map's size", "topk": "the top-k width",
    "bs": "the batch size", "PL": "the page-table rows", "stride": "a non-contiguous layout",
}


def compare(original, mutant, op: str, variant: str | None, seed: int, n: int, device: str,
            deadline: float | None = None) -> dict:
    """Run `original` and `mutant` (loaded targets) on `n` seeded cases; the verdict as a dict:
    why, evidence, and the counts behind it."""
    from ..execute import run_case
    from ..judge import judge
    from ..ops import CONTRACTS
    from ..strategies import random_cases
    from .run import killing

    contract = CONTRACTS[op]
    counts = {"in_contract": 0, "out_of_contract": 0}
    paths: dict[str, int] = {}
    outside = free = None
    ran = 0
    for i, case in enumerate(random_cases(op, seed, n, variant=variant)):
        if deadline is not None and time.monotonic() > deadline:
            break
        status, reasons = contract.classify(case)
        inside = status == "in_contract"
        counts["in_contract" if inside else "out_of_contract"] += 1
        if inside:
            path = contract.kernel_path(case)
            paths[path] = paths.get(path, 0) + 1
        a = run_case(original, case, device, repeats=2, torch_ref=False)
        b = run_case(mutant, case, device, repeats=2, torch_ref=False)
        ran += 1
        if _same(a, b):
            continue
        if not inside:
            outside = outside or {"case": i, "reason": reasons[0] if reasons else status, "describe": case.describe()}
            continue
        mine, theirs = judge(case, b).signatures(), judge(case, a).signatures()
        if mine and killing(mine, "in contract", set(theirs)):
            return {"why": "out of reach", "cases": ran, **counts, "paths": paths,
                    "evidence": f"case {i} of the seeded stream (seed {seed}) kills it ({mine[0]}): "
                                f"{case.describe()}; the campaigns made none like it in their budget"}
        free = free or {"case": i, "describe": case.describe()}
    stream = (f"{ran} cases of the seeded stream (seed {seed}): {counts['in_contract']} in contract "
              f"(paths: {', '.join(f'{k} {v}' for k, v in sorted(paths.items())) or 'none'}), "
              f"{counts['out_of_contract']} out of contract")
    base = {"cases": ran, **counts, "paths": paths}
    if outside is not None:
        return base | {"why": "outside contract", "evidence": f"differs from the original only out of contract "
                       f"(first: case {outside['case']}, {outside['reason']}); {stream}"}
    if free is not None:
        return base | {"why": "equivalent", "evidence": f"differs only where the contract leaves the output free "
                       f"(the judge finds nothing; first: case {free['case']}); {stream}"}
    return base | {"why": "equivalent", "evidence": f"byte-identical arenas and errors on {stream}"}


def _same(a, b) -> bool:
    """Two outcomes of a case: the same errors and arenas on its first two runs (image, alternate image)."""
    if len(a.runs) < 2 or len(b.runs) < 2 or a.device_lost or b.device_lost:
        return False
    for x, y in zip(a.runs[:2], b.runs[:2]):
        if x.error != y.error or (x.after is None) != (y.after is None):
            return False
        if x.after is not None and x.after.tobytes() != y.after.tobytes():
            return False
    return True


def dimension(diff: str) -> str | None:
    """The input dimension a mutant's changed line names, where it names one kvfuzz knows."""
    _, _, change = diff.partition(": ")
    before, _, after = change.partition("  ->  ")
    words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", before)) | set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", after))
    named = [f"`{w}` ({DIMENSIONS[w]})" for w in sorted(words) if w in DIMENSIONS]
    strides = sorted(w for w in words if "stride" in w or w.endswith(("_s", "_s0")))
    if strides:
        named.append(f"`{strides[0]}` ({DIMENSIONS['stride']})")
    return ", ".join(named) or None


def main_equivalence(job_path: str) -> int:
    """`python -m kvfuzz.mutants.one --equivalence JOB.json`: the verdict, as JSON, into the job's `out`."""
    from pathlib import Path

    from .. import device as devmod
    from ..targets import load_target

    job = json.loads(Path(job_path).read_text())
    device = devmod.select(job["device"])
    original, mutant = load_target(job["original"], device), load_target(job["mutant"], device)
    got = compare(original, mutant, job["op"], job.get("variant"), job["seed"], job["cases"], device,
                  time.monotonic() + job["seconds"] if job.get("seconds") else None)
    Path(job["out"]).write_text(json.dumps(got, indent=1))
    return 0
