"""The human reports (`--markdown`, `--junit`) and the plain summary carry the atheris engine's
figures that the JSON report has, per op; runs of the other engines get none of them. Each test
is one short real `kvfuzz fuzz` run on the CPU."""

from __future__ import annotations

import importlib.util
import json
import sys
import xml.etree.ElementTree as ET

import pytest

from kvfuzz.reports import ENGINE_FIGURES, engine_figures, engine_line
from test_cli import run

OP = "num_kv_splits"
needs_atheris = pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                                   reason="the [atheris] extra is not installed")


def fuzz(tmp_path, engine: str, *extra: str):
    """`kvfuzz fuzz` of the builtin kernels (clean: exit 0) with every report; (JSON report,
    JUnit properties of the op's test, Markdown text, stdout)."""
    out = tmp_path / engine
    p = run("fuzz", "--engine", engine, "--op", OP, "--device", "cpu", "--target", "builtin",
            "--minimize-budget", "0", "--campaign", str(out / "campaign"), "--report", str(out / "r.json"),
            "--junit", str(out / "r.xml"), "--markdown", str(out / "r.md"), *extra)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    (case,) = ET.parse(out / "r.xml").getroot().iter("testcase")
    assert case.get("name") == OP
    props = {x.get("name"): x.get("value") for x in case.iter("property")}
    return json.loads((out / "r.json").read_text()), props, (out / "r.md").read_text(), p.stdout


def markdown_table(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first table under `## heading`, by column name."""
    lines = text.split("\n")
    at = lines.index(f"## {heading}")
    rows = []
    for line in lines[at + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    header, rule, *body = rows
    assert set(rule) == {"---", "---:"}
    return [dict(zip(header, r)) for r in body]


@pytest.mark.slow
@needs_atheris
@pytest.mark.interpreter
def test_an_atheris_run_reports_its_figures_in_markdown_junit_and_the_summary(tmp_path):
    report, props, md, stdout = fuzz(tmp_path, "atheris", "--budget", "5", "--max-cases", "150")
    engine = report["ops"][OP]["engine"]
    assert engine["execs"] > 0 and engine["cov"] > 0 and engine["ft"] > 0 and engine["lives"] >= 1
    figures = engine_figures(engine)
    assert set(figures) >= {k for k, _ in ENGINE_FIGURES}
    # JUnit: every figure, as the JSON has it
    assert {k[len("engine."):]: v for k, v in props.items() if k.startswith("engine.")} == \
        {k: str(v) for k, v in figures.items()}
    assert props["cases"] == str(report["ops"][OP]["cases"])
    # Markdown: one row for the op, a column per figure, the JSON's values
    (row,) = markdown_table(md, "atheris engine")
    assert row["op"] == OP
    for key, name in ENGINE_FIGURES:
        assert row[name] == str(engine[key]), (name, row, engine)
    assert row["artifacts replayed"] == str(len(engine["artifacts"]))
    # the plain summary: the op's line ends with the figures
    (line,) = [x for x in stdout.splitlines() if x.startswith(f"{OP}: ")]
    assert line.endswith(f"; {engine_line(engine)}") and f"{engine['execs']} execs, " in line


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_a_hypothesis_run_has_no_engine_figures(tmp_path):
    report, props, md, stdout = fuzz(tmp_path, "hypothesis", "--budget", "2", "--max-cases", "30")
    assert report["ops"][OP]["cases"] > 0 and "engine" not in report["ops"][OP]
    assert not [k for k in props if k.startswith("engine.")] and props["cases"] == str(report["ops"][OP]["cases"])
    assert "## atheris engine" not in md and "execs" not in md
    assert "execs" not in stdout and f"{OP}: {report['ops'][OP]['cases']} cases" in stdout


def test_a_merged_jobs_report_shows_the_figures_it_has():
    """A `--jobs` report merges execs, execs/s, lives, cov and ft only: the other columns say "-"."""
    from kvfuzz.reports import junit_xml, markdown

    merged = {"target": "builtin", "cases": 10, "seconds": 3.0, "findings": [], "ops": {
        OP: {"cases": 10, "seconds": 3.0, "engine": {"execs": 10, "execs_per_s": 7.5, "lives": 2, "cov": 40, "ft": 90}},
        "decode_metadata": {"cases": 4, "seconds": 3.0}}}
    rows = markdown_table(markdown(merged), "atheris engine")
    assert [r["op"] for r in rows] == [OP]  # no row for an op without figures
    assert (rows[0]["execs/s"], rows[0]["coverage edges"], rows[0]["corpus inputs"]) == ("7.5", "40", "-")
    cases = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in ET.fromstring(junit_xml(merged).split("\n", 1)[1]).iter("testcase")}
    assert cases[OP]["engine.lives"] == "2"
    assert not [k for k in cases["decode_metadata"] if k.startswith("engine.")]


def _markdown_without_matplotlib(tmp_path, monkeypatch) -> str:
    from kvfuzz.reports import write_markdown

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    written = write_markdown(tmp_path / "r.md", {"target": "builtin", "ops": {}, "findings": []})
    assert written == [tmp_path / "r.md"]  # no plots
    return (tmp_path / "r.md").read_text()


def test_without_matplotlib_the_hint_installs_the_report_extra_from_this_checkout(tmp_path, monkeypatch):
    from kvfuzz.spawn import ROOT

    assert (ROOT / "pyproject.toml").is_file()  # the tests run from a checkout
    text = _markdown_without_matplotlib(tmp_path, monkeypatch)
    assert f'(Plots need matplotlib: `python3 -m pip install -e ".[report]"` in the kvfuzz checkout ({ROOT}).)' in text


@pytest.mark.parametrize("pyproject", [None, '[project]\nname = "someone-else"\n'])
def test_without_matplotlib_outside_a_checkout_the_hint_names_the_package(tmp_path, monkeypatch, pyproject):
    import kvfuzz.spawn

    installed = tmp_path / "site-packages"  # kvfuzz installed beside no pyproject.toml of its own
    installed.mkdir()
    if pyproject:
        (installed / "pyproject.toml").write_text(pyproject)
    monkeypatch.setattr(kvfuzz.spawn, "ROOT", installed)
    text = _markdown_without_matplotlib(tmp_path, monkeypatch)
    assert '(Plots need matplotlib: `python3 -m pip install "kvfuzz[report]"`.)' in text
