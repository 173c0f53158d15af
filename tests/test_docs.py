"""The manual stays true to itself: the performance page is what its data renders, README.md and
docs/*.md speak about kvfuzz as it is (no log of how it was built), every relative link points
to a file, and README's two commands for a fresh machine are the ones CI runs."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.nokernel  # no kernel runs here (conftest: runs where the interpreter is refused)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _render_module():
    spec = importlib.util.spec_from_file_location("render_performance", ROOT / "scripts" / "render_performance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the performance page


def test_the_performance_page_is_what_the_benchmark_data_renders():
    render = _render_module()
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert text == render.rendered_page(text, render.load()), \
        "docs/performance.md differs from benchmarks/*.json: run python3 scripts/render_performance.py"


def test_every_benchmark_file_names_its_command_commit_versions_and_machine():
    render = _render_module()
    for run in render.load():
        assert run["command"].strip() and run["machine"].strip(), run["_file"]
        assert re.fullmatch(r"[0-9a-f]{7,40}", run["kvfuzz_commit"]), run["_file"]
        assert all(run["versions"][name] for name in ("torch", "triton", "numpy")), run["_file"]


def test_the_check_mode_fails_on_a_stale_page_and_refuses_bad_data(tmp_path, capsys):
    render = _render_module()
    page, data = tmp_path / "performance.md", tmp_path / "benchmarks"
    shutil.copy(ROOT / "docs" / "performance.md", page)
    shutil.copytree(ROOT / "benchmarks", data)
    assert render.main(["--check", "--page", str(page), "--data", str(data)]) == 0

    # a figure changed in the data: the page no longer matches until it is rendered again
    path = sorted(data.glob("*.json"))[0]
    run = json.loads(path.read_text())
    key = next(c["key"] for c in run["columns"] if "format" in c)
    run["rows"][0][key] = 123456
    path.write_text(json.dumps(run))
    assert render.main(["--check", "--page", str(page), "--data", str(data)]) == 1
    assert "stale" in capsys.readouterr().err
    assert render.main(["--page", str(page), "--data", str(data)]) == 0
    assert "123,456" in page.read_text() or "123456" in page.read_text()
    assert render.main(["--check", "--page", str(page), "--data", str(data)]) == 0

    # a data file without its commit: one line, exit 2, the page untouched
    del run["kvfuzz_commit"]
    path.write_text(json.dumps(run))
    before = page.read_text()
    assert render.main(["--page", str(page), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert "kvfuzz_commit" in err and err.count("\n") == 1
    assert page.read_text() == before


# ---------------------------------------------------------------- no history in the manual

# How and when kvfuzz was built is not what its documents are about.
HISTORY = [
    re.compile(r"\bsessions?\b", re.I),
    re.compile(r"\bnext time\b", re.I),
    re.compile(r"\b(first|second|third|\w+th) rounds?\b", re.I),
    re.compile(r"\bleft for the next\b", re.I),
    re.compile(r"\bnot checked yet\b", re.I),
    re.compile(r"\bTODO\b"),
    re.compile(r"\bWORKER NOTE\b|\bcoordinator's\b|/work/prompts/"),  # instructions to whoever edits the page
    # a date of work; a timestamp in a format example (`found_at`) is not one
    re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b(?!T\d)"),
]


def _prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def test_the_history_pattern_catches_a_log_and_passes_the_manual():
    log = ("## Seventh round (seventh session, 2026-12-02)\nLeft for the next session's device time.\n"
           "Not checked yet (the rest of the issue).\nWe will measure it next time.\n"
           "> WORKER NOTE (remove before committing): read /work/prompts/common.md now.\n")
    assert all(any(p.search(line) for p in HISTORY) for _, line in _prose(log))
    manual = ('three rounds, each a checked pass\n"found_at": "2025-06-01T12:00:00+00:00"\n'
              "```\n2026-12-02 inside a code block\n```\n")
    assert not [line for _, line in _prose(manual) if any(p.search(line) for p in HISTORY)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_speaks_about_kvfuzz_not_its_history(page):
    hits = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
            for number, line in _prose(page.read_text(encoding="utf-8"))
            if any(p.search(line) for p in HISTORY)]
    assert not hits, "history in the manual:\n" + "\n".join(hits)


# ---------------------------------------------------------------- links

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _broken_links(page: Path) -> list[str]:
    broken = []
    for number, line in _prose(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor on the same page
            if not (page.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{page.name}:{number}: {target}")
    return broken


def test_the_link_check_finds_a_link_to_nothing(tmp_path):
    (tmp_path / "there.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text("[a](there.md#part) [b](https://example.org/x) [c](#top) [d](gone.md)\n"
                    "```\n[e](also-gone.md)\n```\n")
    assert _broken_links(page) == ["page.md:1: gone.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file(page):
    broken = _broken_links(page)
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_the_docs_index_links_every_page():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = {target.split("#", 1)[0] for target in LINK.findall(index)}
    pages = {p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"}
    assert not pages - linked, f"docs/README.md does not link {sorted(pages - linked)}"


# ---------------------------------------------------------------- README's commands

INSTALL_TORCH = ("python3 -c 'import torch' 2>/dev/null || python3 -m pip install torch==2.13.0 "
                 "--index-url https://download.pytorch.org/whl/cpu && ")
FIRST_RUN = INSTALL_TORCH + ("python3 -m pip install -c constraints/cpu.txt -e . && "
                             "kvfuzz fuzz --budget 60 --report fuzz-report.json")
TESTS = INSTALL_TORCH + ('python3 -m pip install -c constraints/cpu.txt -e ".[report,atheris]" && '
                         "python3 -m pytest -n auto")


def test_readme_gives_the_two_commands_for_a_fresh_machine_each_on_its_own_line():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert "    " + FIRST_RUN in lines
    assert "    " + TESTS in lines
