"""Write docs/cli.md, the command-line reference, from kvfuzz.cli's argument parser.

    python3 scripts/gen_cli_reference.py           (re)write docs/cli.md
    python3 scripts/gen_cli_reference.py --check   exit 1, one line, when docs/cli.md is stale

Every command and nested command (`kvfuzz corpus merge`) gets its usage line, its description
and a table of its options: flags, value, default, help. The text is formatted here, not by
argparse's help formatter, so it depends neither on the terminal's width nor on the Python
version's help layout: the same parser always gives the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's kvfuzz, whatever kvfuzz is installed

from kvfuzz.cli import build_parser  # noqa: E402

OUTPUT = ROOT / "docs" / "cli.md"
USAGE_WIDTH = 96  # usage lines wrap here, continuation lines indented


def commands(parser: argparse.ArgumentParser, prog: str = "kvfuzz", summary: str | None = None):
    """(name, parser, one-line summary) of `parser` and every command below it, depth first."""
    yield prog, parser, summary
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield from commands(sub, f"{prog} {name}", helps.get(name))


def shown(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions a user can give: no --help, nothing suppressed, no subcommand slot."""
    return [a for a in parser._actions
            if a.help is not argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def value(action: argparse.Action) -> str:
    """What follows the flag (or stands for a positional), as argparse's usage writes it."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        one = action.metavar
    elif action.choices is not None:
        one = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        one = action.dest.upper() if action.option_strings else action.dest
    if " " in one:  # a metavar that spells out the whole list ("SRC... DST")
        return one
    if action.nargs == "?":
        return f"[{one}]"
    if action.nargs == "*":
        return f"[{one} ...]"
    if action.nargs == "+":
        return f"{one} [{one} ...]"
    return one


def usage(prog: str, parser: argparse.ArgumentParser) -> str:
    parts = []
    for a in shown(parser):
        if a.option_strings:
            flag = " ".join(x for x in (a.option_strings[0], value(a)) if x)
            parts.append(flag if a.required else f"[{flag}]")
        else:
            parts.append(value(a))
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            parts.append("{" + ",".join(a.choices) + "} ...")
    lines, line = [], prog
    for part in parts:
        if len(line) + 1 + len(part) > USAGE_WIDTH and line.strip():
            lines.append(line)
            line = " " * (len(prog) + 1) + part
        else:
            line += " " + part
    return "\n".join(lines + [line])


def default(action: argparse.Action) -> str:
    d = action.default
    if d is None or d is argparse.SUPPRESS or action.nargs == 0 or action.required:
        return ""
    if isinstance(d, (list, tuple)):
        if action.option_strings and all(isinstance(x, int) for x in d):  # e.g. --shard's (1, 1)
            return "/".join(str(x) for x in d)
        return " ".join(str(x) for x in d)
    return str(d)


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    return f"`{text}`" if text else ""


def help_text(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:  # argparse's own expansion (%(default)s, ...)
        text = text % {**vars(action), "prog": prog}
    if action.metavar is not None and action.choices is not None:  # the metavar hides the choices
        text += f" (one of: {', '.join(str(c) for c in action.choices)})"
    return cell(text)


def render(parser: argparse.ArgumentParser | None = None) -> str:
    parser = parser or build_parser()
    found = list(commands(parser))
    out = ["# kvfuzz command-line reference", "",
           "Generated from `kvfuzz.cli`'s argument parser by `scripts/gen_cli_reference.py`: change the",
           "parser, then run `python3 scripts/gen_cli_reference.py` (`--check` says whether this file is",
           "current; `tests/test_cli_reference.py` fails while it is not).", ""]
    out += [f"- [`{prog}`](#{prog.replace(' ', '-')})" + (f": {cell(s)}" if s else "") for prog, _, s in found]
    for prog, p, summary in found:
        out += ["", f"## {prog}", ""]
        if summary:
            out += [cell(summary), ""]
        out += ["```", usage(prog, p), "```"]
        if p.description:
            # the top level's description is preformatted text (RawDescriptionHelpFormatter)
            out += ["", "```", p.description.strip("\n"), "```"]
        actions = shown(p)
        if actions:
            out += ["", "| option | value | default | what it does |", "| --- | --- | --- | --- |"]
            for a in actions:
                if a.option_strings:
                    names, val = ", ".join(f"`{x}`" for x in a.option_strings), code(value(a))
                else:  # a positional: its value is the option
                    names, val = code(value(a)), "(positional)"
                out.append(f"| {names} | {val} | {code(cell(default(a)))} | {help_text(a, prog)} |")
    return "\n".join(out) + "\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"gen_cli_reference.py: error: {message}\n")
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(description="Write docs/cli.md from kvfuzz.cli's argument parser.")
    ap.add_argument("--check", action="store_true", help="exit 1 when the file differs from what would be written")
    ap.add_argument("-o", "--output", type=Path, default=OUTPUT, help="the file (default docs/cli.md)")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        try:
            current = args.output.read_text()
        except OSError as exc:
            current = None
            why = f"cannot be read ({exc.strerror})"
        else:
            why = "is stale"
        if current != text:
            print(f"{args.output} {why}: run python3 scripts/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    try:
        args.output.write_text(text)
    except OSError as exc:
        print(f"gen_cli_reference.py: error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
