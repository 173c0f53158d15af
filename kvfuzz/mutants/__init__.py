"""`kvfuzz mutants`: how much would a campaign catch? One-point mutants of a target's kernel
file (operators.py), each fuzzed as a campaign on that file would be (one.py, run.py), and a
report of which were killed and how fast (report.py). docs/mutants.md is the manual."""

from .operators import OPERATORS, Mutant, find_mutants
from .report import markdown, summary_lines
from .run import MutantsConfig, exit_status, plan, run_mutants

__all__ = ["OPERATORS", "Mutant", "MutantsConfig", "exit_status", "find_mutants", "markdown", "plan",
           "run_mutants", "summary_lines"]
