"""Reports people and CI read, made from a campaign's JSON report (a single run's or the
merge of `--jobs` shards).

`junit_xml`: one test per op and target. It fails when the op has a new finding (one the
corpus did not already hold), lists known findings in its output, and is skipped when the
target lacks the op. CI pages (GitHub Actions, GitLab, Jenkins) render it as they render any
test run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def junit_xml(report: dict) -> str:
    target = report.get("target", "?")
    ops = report.get("ops", {})
    findings = report.get("findings", [])
    suite = ET.Element("testsuite", name="kvfuzz", tests=str(len(ops)),
                       time=f"{report.get('seconds', 0):.2f}")
    failures = skipped = 0
    for op, stats in ops.items():
        case = ET.SubElement(suite, "testcase", classname=f"kvfuzz.{target}", name=op,
                             time=f"{stats.get('seconds', 0):.2f}")
        props = ET.SubElement(case, "properties")
        for key in ("cases", "classes", "variants", "compiled", "not_target"):
            ET.SubElement(props, "property", name=key, value=str(stats.get(key, 0)))
        mine = [f for f in findings if f["op"] == op]
        new = [f for f in mine if f.get("new", True)]
        if stats.get("skipped"):
            skipped += 1
            ET.SubElement(case, "skipped", message=str(stats["skipped"]))
        elif new:
            failures += 1
            failure = ET.SubElement(case, "failure", message=f"{len(new)} new finding(s): "
                                    + ", ".join(f["signature"] for f in new))
            failure.text = "\n".join(f"{f['signature']}: {f['message']} ({f.get('case')})" for f in new)
        known = [f for f in mine if not f.get("new", True)]
        flaky = [f for f in report.get("flaky", []) if f["op"] == op]
        lines = [f"known: {f['signature']} ({f.get('case')})" for f in known]
        lines += [f"flaky: {f['signature']}: {f['reproduced']} of {f['tries']} fresh runs" for f in flaky]
        if lines:
            ET.SubElement(case, "system-out").text = "\n".join(lines)
    suite.set("failures", str(failures))
    suite.set("skipped", str(skipped))
    suite.set("errors", "0")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: Path, report: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(junit_xml(report))
    tmp.replace(path)
