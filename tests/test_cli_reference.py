"""docs/cli.md is what scripts/gen_cli_reference.py renders from kvfuzz.cli's parser, and it
names every command and every option the parser has."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gen_cli_reference.py"
CLI_MD = REPO / "docs" / "cli.md"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


def _commands(parser: argparse.ArgumentParser, prog: str = "kvfuzz") -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its full name, walked here independently of the generator."""
    found = {prog: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_commands(sub, f"{prog} {name}"))
    return found


def _sections(text: str) -> dict[str, str]:
    """docs/cli.md's `## <command>` sections by command."""
    parts = text.split("\n## ")[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def test_docs_cli_md_is_what_the_script_renders():
    assert CLI_MD.read_text() == gen.render(), (
        "docs/cli.md is stale: run python3 scripts/gen_cli_reference.py")


def test_every_command_and_option_is_in_its_section():
    from kvfuzz.cli import build_parser

    commands = _commands(build_parser())
    assert {"kvfuzz fuzz", "kvfuzz bench", "kvfuzz replay", "kvfuzz minimize", "kvfuzz corpus ls",
            "kvfuzz corpus merge", "kvfuzz corpus prune", "kvfuzz ops"} <= set(commands)
    sections = _sections(CLI_MD.read_text())
    assert set(sections) == set(commands)
    for prog, parser in commands.items():
        section = sections[prog]
        assert f"```\n{prog}" in section, prog  # its usage line
        for action in parser._actions:
            if action.help is argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert f"`{flag}`" in section, (prog, flag)
            if action.help and not isinstance(action, argparse._SubParsersAction):
                assert " ".join(action.help.split()).replace("|", "\\|") in section, (prog, action.dest)
            if action.option_strings and action.default not in (None, False) and action.nargs != 0:
                assert f"`{gen.default(action)}`" in section, (prog, action.dest)
    assert "`--shard` | `I/N` | `1/1` |" in sections["kvfuzz fuzz"]
    assert "kvfuzz corpus merge SRC... DST\n" in sections["kvfuzz corpus merge"]
    assert "`--help`" not in CLI_MD.read_text()  # argparse's own option is left out
    assert "`--device`" not in sections["kvfuzz ops"]  # a suppressed option stays hidden


def test_a_changed_help_string_makes_the_reference_stale(tmp_path):
    from kvfuzz.cli import build_parser

    parser = build_parser()
    budget = next(a for a in _commands(parser)["kvfuzz fuzz"]._actions if "--budget" in a.option_strings)
    budget.help = "a help string the file does not have"
    changed = gen.render(parser)
    assert changed != CLI_MD.read_text()
    assert "| `--budget` | `SECONDS` | `60.0` | a help string the file does not have |" in changed
    stale = tmp_path / "cli.md"
    stale.write_text(changed)
    p = subprocess.run([sys.executable, str(SCRIPT), "--check", "-o", str(stale)], capture_output=True, text=True)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [f"{stale} is stale: run python3 scripts/gen_cli_reference.py"]


def test_check_passes_and_the_output_ignores_the_terminal_width(tmp_path):
    out = tmp_path / "cli.md"
    for columns in ("30", "250"):
        env = {**os.environ, "COLUMNS": columns}
        p = subprocess.run([sys.executable, str(SCRIPT), "-o", str(out)], capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stderr
        assert out.read_text() == CLI_MD.read_text()
    p = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (0, "")


def test_bad_usage_is_one_line_and_exit_2(tmp_path):
    for args in (["--nope"], ["-o", str(tmp_path / "no" / "such" / "dir" / "cli.md")]):
        p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "Traceback" not in p.stderr
