"""Attribution of one case, in this process or in a subprocess of its own.

`attribute` runs in a process whose kernels run under Triton's interpreter (the CPU). A
campaign or a replay on any device calls `attribute_isolated`: a fresh `python -m
kvfuzz.sites.run` with TRITON_INTERPRET=1, the case and the target spec pickled on its stdin,
the attribution as JSON on its stdout, killed past its timeout. A run a wild access kills (a
signal) is traced again guarded: it stops before its first access outside every tensor of its
launch, and that access is the site (`fault`). A target the interpreter refuses, a run that
dies guarded too, or a timeout gives no attribution and says why.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import time

from ..case import Case
import dataclasses

from .attribute import Attribution, analyse, misread, run_traced

TIMEOUT_S = 60.0


def depends_on(case: Case, reasons: list[str]) -> list[str]:
    """The case's tensors and scalars the first broken precondition names ([]: in contract): the
    inputs an out-of-contract finding depends on (docs/defects.md, "The grouping rule")."""
    if not reasons:
        return []
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", reasons[0]))
    return sorted(n for n in (*case.tensors, *case.scalars) if n in words)


def attribute(case: Case, spec: str, guard: bool = False) -> Attribution:
    """`case` run traced on the CPU against the target `spec`, attributed; `guard`: stopped
    before its first access outside every tensor argument of its launch."""
    from ..execute import prepare
    from ..ops import CONTRACTS
    from ..targets import load_target

    target = load_target(spec, "cpu")
    prepared = prepare(case)
    contract = CONTRACTS[case.op]
    trace, after, base, error = run_traced(target, case, prepared.plan, guard)
    if trace.failed:
        raise RuntimeError(f"the trace failed: {trace.failed}")
    judged = prepared.status == "in_contract" and error is None
    cells = contract.cells(case) if judged else None
    accepted = prepared.expected.accepted() if judged and prepared.expected is not None else ()
    out = analyse(case, prepared.plan, trace, after, base, contract.outputs, cells, accepted)
    for name, (flat, store) in out.first_wrong.items():
        site = out.outputs[name].get("wrong_value")
        if site is None or site.load is not None:
            continue
        wrong = misread(case, prepared.plan, trace, base, contract, accepted, name, flat, store)
        if wrong is not None:  # computed from elements read at the wrong place
            new = dataclasses.replace(site, misread=wrong)
            out.outputs[name]["wrong_value"] = new
            if out.sites.get("wrong_value") is site:
                out.sites["wrong_value"] = new
    out.error = None if trace.stopped is not None else error  # the guard's own stop is no error of the target's
    out.guarded = guard
    out.depends = depends_on(case, contract.out_of_contract(case))
    return out


def attribute_isolated(case: Case, spec: str, timeout_s: float = TIMEOUT_S,
                       guard: bool = False) -> tuple[Attribution | None, str]:
    """(the attribution, "") or (None, why there is none), from a subprocess of its own; a run
    killed by a signal is traced again guarded, in the time left."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "kvfuzz.sites.run"], input=pickle.dumps((case, spec, guard)),
                              capture_output=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return None, f"attribution under the interpreter timed out after {timeout_s:.0f} s"
    if proc.returncode < 0 and not guard and timeout_s - (time.monotonic() - start) >= 1.0:
        return attribute_isolated(case, spec, timeout_s - (time.monotonic() - start), guard=True)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        why = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else tail[0][:200]
        return None, f"attribution under the interpreter failed{' (guarded)' if guard else ''}: {why}"
    try:
        return Attribution.from_json(json.loads(proc.stdout.decode().strip().splitlines()[-1])), ""
    except (ValueError, IndexError, KeyError) as exc:
        return None, f"attribution under the interpreter gave no answer: {exc}"


def main() -> int:
    from .. import device as devmod

    case, spec, guard = pickle.loads(sys.stdin.buffer.read())
    devmod.select("cpu")
    out = attribute(case, spec, guard)
    sys.stdout.write(json.dumps(out.to_json()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
