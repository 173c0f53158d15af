"""What a run did with the ops it was asked for, and the exit status that says it.

Each op of a report gets a `status`: "ran" (it ran its share), "cut_short" (it was running when
SIGINT, SIGTERM or the time limit stopped the run), "not_run" (it ran no case: the time limit
left it none, or the run was stopped before its turn; `reason` says which) or "skipped" (the
target lacks it). An op with no case is never a pass: a JUnit failure, a console line, and
exit 3 when nothing worse applies.

Exit status, the first that applies: 1 a new finding that fails the run; 2 bad usage, or runs
that failed for reasons that are not the target's; 4 an internal error of kvfuzz (a finding
kept unminimized, the run went on); 130 cut short (SIGINT, SIGTERM, the time limit); 3 an op
asked for ran no case; 0 clean.
"""

from __future__ import annotations

RAN, CUT_SHORT, NOT_RUN, SKIPPED = "ran", "cut_short", "not_run", "skipped"

FINDINGS, BAD_INPUT, INTERNAL_ERROR, CUT, OP_NOT_RUN, CLEAN = 1, 2, 4, 130, 3, 0


def op_status(stats: dict, not_run: str | None = None, cut: str | None = None) -> tuple[str, str | None]:
    """(status, reason) of an op from its JSON stats; `not_run`: why it ran no case, `cut`: what
    stopped the run while this op ran."""
    if stats.get("skipped"):
        return SKIPPED, str(stats["skipped"])
    if cut is not None:
        return CUT_SHORT, f"cut short by {cut} after {stats.get('cases', 0)} cases"
    if not stats.get("cases"):
        return NOT_RUN, not_run or "it ran no case"
    return RAN, None


def not_run_ops(report: dict) -> list[str]:
    """The ops of a report that ran no case and were not skipped (cut short ones included)."""
    return [op for op, s in report.get("ops", {}).items()
            if not s.get("skipped") and not s.get("cases")]


def exit_code(*, failing: bool, not_target: int = 0, internal_errors=(), cut_short: bool = False,
              not_run: list[str] = (), bad_input: bool = False) -> int:
    """The precedence 1 > 2 > 4 > 130 > 3 > 0 (the module docstring)."""
    if failing:
        return FINDINGS
    if bad_input or not_target:
        return BAD_INPUT
    if internal_errors:
        return INTERNAL_ERROR
    if cut_short:
        return CUT
    if not_run:
        return OP_NOT_RUN
    return CLEAN
