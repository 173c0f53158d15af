"""The mutants report: per op and per kernel (function) counts, time to kill, survivors.

`kill_rate` is killed over the mutants that count: killed and survived (out of reach, or
killed only after the budget). Not counted: stillborn (they do not compile or load),
equivalent (shown beside the original), outside the contract (only an out-of-contract call
tells them apart), likely equivalent (not run beside the original) and errors (their campaign
failed; the exit status says so). Every mutant not killed is listed under its reason (`why`)
with its diff and the evidence.
"""

from __future__ import annotations

from .run import (EQUIVALENT, ERROR, KILLED, OUTSIDE, SHOWN_EQUIVALENT, STILLBORN, SURVIVED, MutantsConfig, OpPlan,
                  median_or_none)

STATUSES = (KILLED, SURVIVED, SHOWN_EQUIVALENT, OUTSIDE, EQUIVALENT, STILLBORN, ERROR)
# a not-killed mutant's reason -> its heading, in the order the report lists them
REASONS = {"out of reach": "Out of reach: not killed, not shown equivalent",
           "slow": "Killed only after the budget (by the confirmation run)",
           "unknown": "Not explained (the equivalence run failed)",
           None: "Not killed, not run beside the original",
           "outside contract": "Outside the contract: only an out-of-contract call tells them apart",
           "equivalent": "Equivalent"}


def why(m: dict) -> str | None:
    return m.get("why")


def not_killed(mutants: list[dict]) -> list[tuple[str, list[dict]]]:
    """(heading, mutants) for every reason a mutant was not killed, in REASONS' order."""
    rest = [m for m in mutants if m["status"] in (SURVIVED, SHOWN_EQUIVALENT, OUTSIDE, EQUIVALENT)]
    return [(title, group) for key, title in REASONS.items() if (group := [m for m in rest if why(m) == key])]


def tally(states: list[dict]) -> dict:
    """Counts, kill rate and time-to-kill figures of a group of mutants."""
    counts = {s: sum(1 for m in states if m["status"] == s) for s in STATUSES}
    counted = counts[KILLED] + counts[SURVIVED]
    killed = [m for m in states if m["status"] == KILLED]
    times = sorted(m["time_to_kill_s"] for m in killed if m.get("time_to_kill_s") is not None)
    cases = sorted(m["found_at_case"] for m in killed if m.get("found_at_case") is not None)
    return {"made": len(states), **counts, "kill_rate": round(counts[KILLED] / counted, 4) if counted else None,
            "median_s": median_or_none(times), "worst_s": times[-1] if times else None,
            # cases run before the kill: the seed fixes them, so unlike seconds they do not depend on the host
            "median_cases": median_or_none(cases), "worst_cases": cases[-1] if cases else None}


def build(cfg: MutantsConfig, plans: list[OpPlan], skipped: dict[str, str], refs: dict, states: list[dict],
          device: str) -> dict:
    ops = {}
    for p in plans:
        mine = [s for s in states if s["op"] == p.op]
        ops[p.op] = tally(mine) | {
            "population": p.population or len(p.mutants),  # made there; `made` is the sample
            "file": str(p.source), "functions": p.functions, "variant": refs[p.op]["variant"],
            "original_findings": refs[p.op]["signatures"], "original_paths": refs[p.op].get("paths", {}),
            "kernels": {f: tally([s for s in mine if s["function"] == f])
                        for f in dict.fromkeys(s["function"] for s in mine)}}
    first = next(iter(refs.values()), {})
    return {"kvfuzz_mutants": 1, "target": cfg.target, "seed": cfg.seed, "budget_per_mutant_s": cfg.budget_s,
            "confirm_factor": cfg.confirm_factor, "in_contract_only": cfg.in_contract_only,
            "max_mutants": cfg.max_mutants, "functions": cfg.functions, "device": device,
            "device_name": first.get("device_name"), "versions": first.get("versions", {}),
            "skipped": skipped, "totals": tally(states), "ops": ops,
            "mutants": sorted(states, key=lambda s: (s["op"], s["file"], s["line"], s["key"]))}


def _secs(x) -> str:
    return "-" if x is None else f"{x:.1f} s"


def _rate(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _counts(t: dict) -> str:
    return (f"{t['made']} mutants, {t[KILLED]} killed, {t[SURVIVED]} survived, {t[SHOWN_EQUIVALENT]} equivalent, "
            f"{t[OUTSIDE]} outside the contract" + (f", {t[EQUIVALENT]} likely equivalent" if t[EQUIVALENT] else "")
            + f", {t[STILLBORN]} stillborn" + (f", {t[ERROR]} errors" if t[ERROR] else ""))


def _because(m: dict) -> str:
    return m.get("evidence") or m.get("reason") or ""


def summary_lines(report: dict) -> list[str]:
    """The console's closing lines: one per op, then every mutant not killed under its reason,
    with its diff, and the errors."""
    out = []
    for op, t in report["ops"].items():
        out.append(f"{op}: {_counts(t)}; kill rate {_rate(t['kill_rate'])}, time to kill median "
                   f"{_secs(t['median_s'])}, worst {_secs(t['worst_s'])}")
    for title, group in not_killed(report["mutants"]):
        out.append(f"  {title}:")
        out += [f"    {m['op']} {m['file']} {m['diff']}" + (f" ({_because(m)})" if _because(m) else "") for m in group]
    out += [f"  ERROR {m['op']} {m['file']} {m['diff']} ({m.get('reason')})" for m in report["mutants"]
            if m["status"] == ERROR]
    return out


def markdown(report: dict) -> str:
    lines = [f"# Mutants of {report['target']}", "",
             f"{report['budget_per_mutant_s']:g} s of fuzzing per mutant, seed {report['seed']}, "
             f"{'in-contract cases only' if report['in_contract_only'] else 'every case'}, on "
             f"{report.get('device_name') or report['device']}; a survivor is run again for "
             f"{report['confirm_factor']:g}x the budget on the next seed.", "",
             "| op | kernel | mutants | killed | survived | equivalent | outside contract | likely equivalent | "
             "stillborn | kill rate | median time to kill | worst |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for op, t in report["ops"].items():
        rows = [("**all**", t)] + list(t["kernels"].items())
        for name, k in rows:
            lines.append(f"| {op} | {name if name.startswith('**') else f'`{name}`'} | {k['made']} | {k[KILLED]} | "
                         f"{k[SURVIVED]} | {k[SHOWN_EQUIVALENT]} | {k[OUTSIDE]} | {k[EQUIVALENT]} | {k[STILLBORN]} | "
                         f"{_rate(k['kill_rate'])} | {_secs(k['median_s'])} | {_secs(k['worst_s'])} |")
    groups = not_killed(report["mutants"]) + [
        (title, group) for status, title in ((STILLBORN, "Stillborn"), (ERROR, "Errors"))
        if (group := [m for m in report["mutants"] if m["status"] == status])]
    for title, group in groups:
        lines += ["", f"## {title}", ""]
        lines += [f"* {m['op']} `{m['file']}` ({m['operator']}) `{m['diff']}`"
                  + (f": {_because(m)}" if _because(m) else "") for m in group]
    for op, t in report["ops"].items():
        paths = ", ".join(f"`{k}` {n}" for k, n in t.get("original_paths", {}).items())
        lines += ["", f"Cases per kernel path of {op}'s unmutated copy ({report['confirm_factor']:g}x the budget): "
                  f"{paths or 'none recorded'}. A survivor in a kernel whose path no case took says nothing "
                  "about that kernel."]
        if t["original_findings"]:
            lines += ["", f"The original's own findings for {op} (a mutant showing only these is not killed): "
                      + ", ".join(f"`{s}`" for s in t["original_findings"])]
    return "\n".join(lines) + "\n"


RECORD_COLUMNS = [
    {"key": "op", "label": "op", "code": True},
    {"key": "made", "label": "mutants", "format": "d"},
    {"key": KILLED, "label": "killed", "format": "d"},
    {"key": SURVIVED, "label": "survived", "format": "d"},
    {"key": SHOWN_EQUIVALENT, "label": "equivalent", "format": "d"},
    {"key": OUTSIDE, "label": "outside contract", "format": "d"},
    {"key": EQUIVALENT, "label": "likely equivalent", "format": "d"},
    {"key": STILLBORN, "label": "stillborn", "format": "d"},
    {"key": "kill_rate", "label": "kill rate", "format": ".0%"},
    {"key": "median_s", "label": "median time to kill", "format": ".1f", "suffix": " s"},
    {"key": "worst_s", "label": "worst", "format": ".1f", "suffix": " s"},
    {"key": "median_cases", "label": "median cases to kill", "format": ".0f"},
]


def scope_notes(report: dict) -> list[str]:
    """What a report covers, said plainly: a sample of K per op (of how many made), a run cut
    short (the mutants it never judged), the ops without a file to mutate."""
    ops = report["ops"]
    totals = report["totals"]
    judged = sum(t[s] for t in ops.values() for s in STATUSES)
    out = []
    if report.get("max_mutants"):
        made = ", ".join(f"{op} {t.get('population', t['made'])}" for op, t in ops.items())
        out.append(f"A sample of {report['max_mutants']} mutants per op, drawn by seed {report['seed']}, of those "
                   f"the operators make ({made}); {report['budget_per_mutant_s']:g} s of fuzzing each.")
    if report.get("cut_short"):
        out.append(f"Cut short by {report['cut_short']}: {judged} of {totals['made']} mutants judged; the others "
                   "(never run, or awaiting their confirmation run) are in no column.")
    if report.get("skipped"):
        out.append("No mutants: " + "; ".join(f"{op} ({why_})" for op, why_ in report["skipped"].items()) + ".")
    return out


def benchmark_record(report: dict, command: str, commit: str, machine: str, title: str, order: int) -> dict:
    """A benchmarks/*.json record of a mutants report (scripts/render_performance.py renders it
    into docs/performance.md): one row per op, and each killed mutant's key and cases to kill,
    which tests/test_mutants_record.py holds later runs to."""
    rows = [{c["key"]: (op if c["key"] == "op" else t[c["key"]] if t[c["key"]] is not None else "-")
             for c in RECORD_COLUMNS} for op, t in report["ops"].items()]
    versions = report.get("versions") or {}
    return {"order": order, "title": title, "command": command, "kvfuzz_commit": commit,
            "versions": {k: versions.get(k, "?") for k in ("torch", "triton", "numpy")}, "machine": machine,
            "columns": RECORD_COLUMNS, "rows": rows,
            "notes": scope_notes(report) + [
                f"{m['op']} `{m['diff']}` ({why(m) or m['status'].replace('_', ' ')}"
                + (f": {_because(m)}" if why(m) in ("out of reach", "outside contract") else "") + ")"
                for _, group in not_killed(report["mutants"]) for m in group],
            "killed": {m["key"]: m.get("found_at_case") for m in report["mutants"] if m["status"] == KILLED}}
