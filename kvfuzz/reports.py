"""Reports people and CI read, made from a campaign's JSON report (a single run's or the
merge of `--jobs` shards).

`markdown`: a page for a CI summary or a wiki: per op the cases, speed, classes, compiled
variants and findings, the findings (new or known), flaky ones, the coverage record, and PNG
plots beside it (cases over time, speed/compiles/findings per op, features exercised) when
matplotlib is installed (the `[report]` extra: `report_extra_hint` says how to install it).

Both say of every finding whether its saved case is in or out of contract, and the rule it
breaks (the report's `contract`, `Contract.status_text`).

`junit_xml`: one test per op and target. It fails when the op has a new finding (one the
corpus did not already hold) or ran no case (its `reason` the message), lists known findings in
its output (and that the op was cut short, if it was), and is skipped when the target lacks the
op. CI pages (GitHub Actions, GitLab, Jenkins) render it as they render any
test run.

Both list kvfuzz's internal errors (the report's `internal_errors`): a Markdown section, and a JUnit
`<error>` of the op whose finding met one (its `system-err` where a new finding already fails it).

Both carry the atheris engine's figures where a run has them (`engine` in an op's JSON: execs,
execs/s, libFuzzer's coverage edges and features, ...): a table in the Markdown, `engine.*`
properties of each op's JUnit test. Runs of the other engines have none, and get none.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

# the atheris engine's figures (an op's `engine` in the JSON report), as the reports name them;
# a `--jobs` report merges the first five only (jobs.merge_reports)
ENGINE_FIGURES = (("execs", "execs"), ("execs_per_s", "execs/s"), ("cov", "coverage edges"), ("ft", "features"),
                  ("lives", "fuzzing processes"), ("corpus_units", "corpus inputs"), ("startup_s", "start-up s"))
ENGINE_LISTS = (("artifacts", "artifacts replayed"), ("fuzzer_only", "fuzzer-only signatures"))  # reported as counts


def engine_figures(engine: dict | None) -> dict[str, object]:
    """The figures of an op's `engine` dict that it holds, by JSON key (lists as counts); {}
    for an engine that reports none (batch, Hypothesis)."""
    if not engine:
        return {}
    out: dict[str, object] = {k: engine[k] for k, _ in ENGINE_FIGURES if k in engine}
    out.update({k: len(engine[k]) for k, _ in ENGINE_LISTS if isinstance(engine.get(k), list)})
    return out


def engine_line(engine: dict | None) -> str:
    """The figures in words, for the plain summary: "1462 execs, 48.7 execs/s, ..."."""
    figures = engine_figures(engine)
    names = dict(ENGINE_FIGURES + ENGINE_LISTS)
    return ", ".join(f"{figures[k]} {names[k]}" for k in names if k in figures)


STATUSES = ("in_contract", "stress", "out_of_contract", "must_refuse")
BINDING = "binding"  # a call site's finding (kvfuzz/callsites/launch.py), beside the cases' statuses


def is_stress(f: dict) -> bool:
    """A finding on a stress case (in contract, a launch no SGLang call site makes)."""
    return f.get("contract_status") == "stress"


def is_binding(f: dict) -> bool:
    """A call site's binding finding (no case of its own: `site`, `argument`, `lands_in`, `means`)."""
    return f.get("kind") == BINDING


def by_status(findings: list[dict]) -> dict[str, int]:
    """The findings per contract status, and the call sites' binding findings (the report's
    `findings_by_status`)."""
    return {k: sum(f.get("contract_status") == k for f in findings) for k in (*STATUSES, BINDING)}


def binding_line(f: dict) -> str:
    """A binding finding in one line: where, the argument as written, where it lands, what it means,
    and what its site's own launch gave."""
    line = f["message"]
    called = f.get("as_called")
    if called:
        line += (f"; launched as called: {called['signature']} on {called['cases']} case(s)" if called.get("signature")
                 else f"; launched as called: right output on {called['cases']} case(s)")
    return line


def against_baseline(findings: list[dict]) -> dict[str, list[dict]]:
    """With --baseline: {"regression": [...], "fixed": [...], "changed": [...]}, each entry a
    class signature with the saved case that shows it and the finding it was merged into (its
    host), apart from the ordinary findings."""
    from .baseline import defect_words
    from .findings import CLASSES, kind_of

    out: dict[str, list[dict]] = {k: [] for k in CLASSES}
    for f in findings:
        for sig in f.get("signatures") or [f["signature"]]:
            if kind_of(sig) in out:
                entry = {"signature": sig, "case": f.get("case"), "finding": f["signature"],
                         "new": f.get("new", True), "contract": f.get("contract")}
                if kind_of(sig) != "fixed":  # new defect, new symptom of a known one, or site unknown
                    entry["defect"] = defect_words(f.get("against_defect")) or "site unknown"
                    entry["site"] = f.get("site")
                out[kind_of(sig)].append(entry)
    return out


def junit_xml(report: dict) -> str:
    target = report.get("target", "?")
    ops = report.get("ops", {})
    findings = report.get("findings", [])
    suite = ET.Element("testsuite", name="kvfuzz", tests=str(len(ops)),
                       time=f"{report.get('seconds', 0):.2f}")
    failures = skipped = errors = extra = 0
    for op, stats in ops.items():
        case = ET.SubElement(suite, "testcase", classname=f"kvfuzz.{target}", name=op,
                             time=f"{stats.get('seconds', 0):.2f}")
        props = ET.SubElement(case, "properties")
        for key in ("cases", "classes", "variants", "compiled", "not_target"):
            ET.SubElement(props, "property", name=key, value=str(stats.get(key, 0)))
        if stats.get("held_back"):  # cases like a known crash, held back (held_back.py)
            ET.SubElement(props, "property", name="held_back", value=str(sum(k["held_back"] for k in stats["held_back"])))
        for key, value in engine_figures(stats.get("engine")).items():
            ET.SubElement(props, "property", name=f"engine.{key}", value=str(value))
        mine = [f for f in findings if f["op"] == op and not is_stress(f) and not is_binding(f)]
        new = [f for f in mine if f.get("new", True)]
        status, reason = stats.get("status"), stats.get("reason")
        if status:
            ET.SubElement(props, "property", name="status", value=status)
        if stats.get("skipped"):
            skipped += 1
            ET.SubElement(case, "skipped", message=str(stats["skipped"]))
        elif not stats.get("cases"):  # an op asked for that ran no case is not a pass
            failures += 1
            ET.SubElement(case, "failure", message=f"ran no case: {reason or 'no case finished'}")
        elif new:
            failures += 1
            defects = [d for d in report.get("defects", ()) if d["op"] == op and d.get("new", True)]
            failure = ET.SubElement(case, "failure", message=(f"{len(defects)} new defect(s), " if defects else "")
                                    + f"{len(new)} new finding(s): " + ", ".join(f["signature"] for f in new))
            failure.text = _defect_text(defects) if defects else "\n".join(
                f"{f['signature']}: {f['message']} ({f.get('case')}){_contract(f)}{_unconfirmed(f)}" for f in new)
        known = [f for f in mine if not f.get("new", True)]
        flaky = [f for f in report.get("flaky", []) if f["op"] == op]
        lines = [f"known: {f['signature']} ({f.get('case')}){_contract(f)}" for f in known]
        lines += [f"flaky: {f['signature']}: {f['reproduced']} of {f['tries']} fresh runs{_contract(f)}"
                  for f in flaky]
        if status == "cut_short":
            lines.insert(0, f"{reason}: the op ran part of its share")
        if lines:
            ET.SubElement(case, "system-out").text = "\n".join(lines)
        faults = [e for e in report.get("internal_errors", ()) if (e.get("signature") or "").split(":")[0] == op]
        if faults:  # kvfuzz's own errors: an error of the test where no finding already fails it
            text = "\n".join(f"{e.get('signature')}: {_fault_line(e)}" for e in faults)
            if not new and not stats.get("skipped"):
                errors += 1
                ET.SubElement(case, "error", message=f"{len(faults)} internal error(s) of kvfuzz").text = text
            else:
                ET.SubElement(case, "system-err").text = text
    for f in [f for f in findings if is_binding(f)]:  # a test per binding finding: its call site
        extra += 1
        site = f.get("site") or {}
        case = ET.SubElement(suite, "testcase", classname=f"kvfuzz.{target}.binding",
                             name=f"{f['op']} {site.get('file')}:{site.get('line')}", time="0.00")
        if f.get("new", True):
            failures += 1
            ET.SubElement(case, "failure", message=f"binding: {f['message']}").text = binding_line(f)
        else:
            ET.SubElement(case, "system-out").text = f"known: {binding_line(f)}"
    for op in ops:  # stress findings apart: a test of their own per op that has any
        stress = [f for f in findings if f["op"] == op and is_stress(f)]
        if not stress:
            continue
        extra += 1
        case = ET.SubElement(suite, "testcase", classname=f"kvfuzz.{target}.stress", name=op, time="0.00")
        new = [f for f in stress if f.get("new", True)]
        text = "\n".join(f"{f['signature']}: {f['message']} ({f.get('case')}){_contract(f)}" for f in new)
        if new:
            failures += 1
            ET.SubElement(case, "failure", message=f"{len(new)} new stress finding(s) (launches no SGLang call "
                          "site makes): " + ", ".join(f["signature"] for f in new)).text = text
        known = [f"known: {f['signature']} ({f.get('case')}){_contract(f)}" for f in stress if not f.get("new", True)]
        if known:
            ET.SubElement(case, "system-out").text = "\n".join(known)
    if report.get("baseline"):  # one test per class: a regression fails, a fix or a change is told
        classes = report.get("against_baseline") or against_baseline(findings)
        for kind, entries in classes.items():
            case = ET.SubElement(suite, "testcase", classname=f"kvfuzz.{target}.against.{report['baseline']}",
                                 name=kind, time="0.00")
            text = "\n".join(f"{e['signature']} ({e.get('case')}){_contract(e)}"
                             + (f"; {e['defect']}" if e.get("defect") else "") for e in entries)
            if kind == "regression" and any(e.get("new", True) for e in entries):
                failures += 1
                ET.SubElement(case, "failure", message=f"{len(entries)} regression(s) against "
                              f"{report['baseline']}").text = text
            elif entries:
                ET.SubElement(case, "system-out").text = text
        extra += len(classes)
    suite.set("tests", str(len(ops) + extra))
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _defect_text(defects: list[dict]) -> str:
    """Each defect, then its symptoms (signature, path, contract status, case) under it."""
    lines = []
    for d in defects:
        lines.append(f"defect {d['defect']}" + (f": {d['site_line']}" if d.get("site_line") else ""))
        lines += [f"  {s['signature']} [{s['path']}] ({s.get('case')}){'; ' + s['contract'] if s.get('contract') else ''}"
                  for s in d["symptoms"]]
    return "\n".join(lines)


def _fault_line(e: dict) -> str:
    from .internal import describe

    return describe(e)


def _unconfirmed(f: dict) -> str:
    """"; UNCONFIRMED: why" for a finding saved unconfirmed, else ""."""
    return f"; UNCONFIRMED: {f.get('unconfirmed_why') or 'not confirmed'}" if f.get("unconfirmed") else ""


def _contract(f: dict) -> str:
    """"; in contract" / "; out of contract: RULE" for a finding's line (nothing for a report
    written before findings carried their contract status)."""
    return f"; {f['contract']}" if f.get("contract") else ""


def write_junit(path: Path, report: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(junit_xml(report))
    tmp.replace(path)


# Markdown with plots ------------------------------------------------------------------------

PLOT_FEATURES = 12  # features shown per op in the coverage plot (the most and least exercised)


def _plots(report: dict, folder: Path, stem: str) -> list[tuple[str, str]]:
    """(title, file name) of PNG plots written beside the Markdown file; none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    ops = report.get("ops", {})
    made = []

    def save(fig, name: str, title: str) -> None:
        fig.tight_layout()
        fig.savefig(folder / name, dpi=100)
        plt.close(fig)
        made.append((title, name))

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for op, s in ops.items():
        points = s.get("timeline") or []
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=op)
    ax.set_xlabel("seconds into the op")
    ax.set_ylabel("cases checked")
    ax.legend(fontsize=8)
    save(fig, f"{stem}-cases.png", "Cases over time")

    names = list(ops)
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    rates = [s["cases"] / max(s.get("seconds", 0) or 1e-9, 1e-9) for s in ops.values()]
    axes[0].bar(names, rates)
    axes[0].set_title("cases/s")
    axes[1].bar(names, [s.get("variants", 0) for s in ops.values()], label="by Triton's rules")
    axes[1].bar(names, [s.get("compiled", 0) for s in ops.values()], alpha=0.5, label="compiled or loaded")
    axes[1].set_title("kernel variants")
    axes[1].legend(fontsize=7)
    kinds = sorted({f["kind"] for f in report.get("findings", [])})
    bottom = [0] * len(names)
    for kind in kinds:
        counts = [sum(f["kind"] == kind and f["op"] == op for f in report["findings"]) for op in names]
        axes[2].bar(names, counts, bottom=bottom, label=kind)
        bottom = [b + c for b, c in zip(bottom, counts)]
    axes[2].set_title("findings by kind")
    if kinds:
        axes[2].legend(fontsize=7)
    else:
        axes[2].bar(names, [0] * len(names))
        axes[2].text(0.5, 0.5, "no findings", transform=axes[2].transAxes, ha="center")
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=20, labelsize=7)
    save(fig, f"{stem}-ops.png", "Speed, compiles and findings per op")

    fig, axes = plt.subplots(1, max(len(ops), 1), figsize=(4 * max(len(ops), 1), 4), squeeze=False)
    for ax, (op, s) in zip(axes[0], ops.items()):
        cov = sorted(s.get("coverage", {}).items(), key=lambda kv: -kv[1])
        shown = cov[: PLOT_FEATURES // 2] + cov[-(PLOT_FEATURES // 2):] if len(cov) > PLOT_FEATURES else cov
        ax.barh([k for k, _ in shown], [v for _, v in shown])
        ax.set_title(op, fontsize=9)
        ax.tick_params(labelsize=6)
        ax.invert_yaxis()
    save(fig, f"{stem}-coverage.png", "Adversarial features exercised (cases), most and least")
    return made


def report_extra_hint() -> str:
    """How to install the `[report]` extra for the kvfuzz that runs: from its checkout when it
    runs from one (an editable install, as the README's), else from the package index."""
    from .spawn import ROOT

    pyproject = ROOT / "pyproject.toml"
    if pyproject.is_file() and 'name = "kvfuzz"' in pyproject.read_text(errors="replace"):
        return f'`python3 -m pip install -e ".[report]"` in the kvfuzz checkout ({ROOT})'
    return '`python3 -m pip install "kvfuzz[report]"`'


def markdown(report: dict, plots: list[tuple[str, str]] = ()) -> str:
    ops = report.get("ops", {})
    findings = report.get("findings", [])
    new = [f for f in findings if f.get("new", True)]
    lines = [f"# kvfuzz: {report.get('target')} on {report.get('device_name')}", "",
             f"{report.get('cases', 0)} cases in {report.get('seconds', 0)} s, {len(new)} new findings, "
             f"{len(findings) - len(new)} known, {len(report.get('flaky', []))} flaky; seed {report.get('seed')}"
             + (f", {report['jobs']} jobs" if report.get("jobs") else "")
             + (f" (cut short by {report.get('cut_short_by') or 'an interrupt'})" if report.get("interrupted") else ""),
             "",
             "| op | cases | cases/s | classes | variants | compiled | findings | not the target's |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for op, s in ops.items():
        if s.get("skipped"):
            lines.append(f"| {op} | skipped: {s['skipped']} | | | | | | |")
            continue
        if not s.get("cases"):
            lines.append(f"| {op} | **ran no case**: {s.get('reason') or 'no case finished'} | | | | | | |")
            continue
        rate = s["cases"] / max(s.get("seconds", 0) or 1e-9, 1e-9)
        lines.append(f"| {op} | {s['cases']} | {rate:.0f} | {s.get('classes', 0)} | {s.get('variants', 0)} | "
                     f"{s.get('compiled', 0)} | {sum(f['op'] == op for f in findings)} | {s.get('not_target', 0)} |")
    cut = [f"{op} ({s['reason']})" for op, s in ops.items() if s.get("status") == "cut_short" and s.get("cases")]
    from .held_back import held_line

    held = [held_line(op, s["held_back"]) for op, s in ops.items() if s.get("held_back")]
    if held:
        lines += [""] + [f"- {line}" for line in held]
    if cut:
        lines += ["", "Cut short while running: " + ", ".join(cut) + "."]
    lines += _engine_table(ops)
    if report.get("baseline"):
        classes = report.get("against_baseline") or against_baseline(findings)
        lines += ["", f"## Against the baseline {report['baseline']}", "",
                  f"{len(classes['regression'])} regressions, {len(classes['fixed'])} fixed, "
                  f"{len(classes['changed'])} changed.", ""]
        for kind, title in (("regression", "Regressions"), ("fixed", "Fixed"), ("changed", "Changed")):
            if classes[kind]:
                lines += [f"### {title}", "", "| signature | defect | case | contract |", "| --- | --- | --- | --- |"]
                lines += [f"| `{e['signature']}` | {e.get('defect') or '-'} | {e.get('case') or '-'} | "
                          f"{e.get('contract') or ''} |" for e in classes[kind]]
                lines.append("")
    if report.get("defects"):  # defects first: the findings grouped by the statement that went wrong
        lines += ["", "## Defects", "", "| defect | site | symptoms |", "| --- | --- | --- |"]
        for d in report["defects"]:
            symptoms = "<br>".join(f"`{s['signature']}`" for s in d["symptoms"])
            lines.append(f"| {d['defect']} | {(d.get('site_line') or '-').replace('|', '/')} | {symptoms} |")
    bound = [f for f in findings if is_binding(f)]
    if bound:
        lines += ["", "## Binding findings", "",
                  "Call sites of the target's release whose positional arguments land in another parameter than "
                  "they mean, or cannot bind; `as called`: the kernel launched with the site's own arguments.", "",
                  "| op | site | argument | lands in | means | | as called | case |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for f in bound:
            site, called = f.get("site") or {}, f.get("as_called") or {}
            shown = (f"`{called['signature']}`" if called.get("signature") else
                     f"right output on {called['cases']} case(s)" if called else "-")
            lines.append(f"| {f['op']} | `{site.get('file')}:{site.get('line')}` | `{f.get('argument') or '-'}` | "
                         f"`{f.get('lands_in') or '-'}` | `{f.get('means') or '-'}` | "
                         f"{'new' if f.get('new', True) else 'known'} | {shown} | `{f.get('case') or '-'}` |")
    for title, shown in (("Findings", [f for f in findings if not is_stress(f) and not is_binding(f)]),
                         ("Stress findings", [f for f in findings if is_stress(f)])):
        if not shown:
            continue
        lines += ["", f"## {title}", ""]
        if title == "Stress findings":
            lines += ["In contract, judged as in-contract cases are, but launches no SGLang call site makes.", ""]
        lines += ["| signature | | case | what | contract |", "| --- | --- | --- | --- | --- |"]
        for f in shown:
            lines.append(f"| `{f['signature']}` | {'new' if f.get('new', True) else 'known'}"
                         f"{', unconfirmed' if f.get('unconfirmed') else ''} | "
                         f"`{f.get('case') or f.get('save_error')}` | {f['message'].replace('|', '/')} | "
                         f"{f.get('contract', '?').replace('|', '/')} |")
    if report.get("internal_errors"):  # kvfuzz's own: each ended one stage of one finding, which was kept
        lines += ["", "## Internal errors of kvfuzz", ""]
        lines += [f"- `{e.get('signature') or 'campaign'}`: {_fault_line(e)}" for e in report["internal_errors"]]
    if report.get("flaky"):
        lines += ["", "## Flaky (not saved)", ""]
        lines += [f"- `{f['signature']}`: {f['reproduced']} of {f['tries']} fresh runs{_contract(f)}"
                  for f in report["flaky"]]
    lines += ["", "## Coverage", "", "Cases that had each adversarial feature, per op.", ""]
    for op, s in ops.items():
        cov = s.get("coverage", {})
        if cov:
            lines.append(f"- **{op}**: " + ", ".join(f"`{k}` {v}" for k, v in sorted(cov.items())))
    for title, name in plots:
        lines += ["", f"## {title}", "", f"![{title}]({name})"]
    if not plots:
        lines += ["", f"(Plots need matplotlib: {report_extra_hint()}.)"]
    return "\n".join(lines) + "\n"


def _engine_table(ops: dict) -> list[str]:
    """The atheris engine's figures per op (no section when no op has any)."""
    rows = {op: engine_figures(s.get("engine")) for op, s in ops.items()}
    rows = {op: f for op, f in rows.items() if f}
    if not rows:
        return []
    columns = ENGINE_FIGURES + ENGINE_LISTS
    out = ["", "## atheris engine", "",
           "libFuzzer's figures per op: inputs run (execs) and their rate over the fuzzing time, coverage "
           "edges (`cov`) and features (`ft`) at the end, fuzzing processes started (one more after each "
           "crash), libFuzzer corpus inputs, seconds spent starting processes, inputs that killed a process "
           "(replayed in the worker), signatures the worker's re-run did not show.", "",
           "| op | " + " | ".join(name for _, name in columns) + " |",
           "| --- |" + " ---: |" * len(columns)]
    for op, f in rows.items():
        out.append(f"| {op} | " + " | ".join(str(f.get(k, "-")) for k, _ in columns) + " |")
    return out


def write_markdown(path: Path, report: dict) -> list[Path]:
    """The Markdown report and its PNG plots beside it; returns the files written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plots = _plots(report, path.parent, path.stem)
    path.write_text(markdown(report, plots))
    return [path, *(path.parent / name for _, name in plots)]
