"""kvfuzz: differential fuzzing of the Triton kernels that build KV-cache metadata.

commands:
  fuzz      generate cases, judge a target against the NumPy and torch oracles, save findings
  bench     measure throughput: bare target calls/s against fully checked cases/s, compiles
  replay    re-run one saved case and print what is wrong (or that it passes now)
  minimize  shrink one saved case while its finding's signature holds
  bisect    replay saved cases on every SGLang release: which introduced each defect, which fixed it
  corpus    ls | merge SRC... DST | prune: manage saved cases
  ops       list the ops, their entry points, kernel paths and contract variants
  mutants   mutate the target's kernels and fuzz each mutant: how much would a campaign catch

Exit status: 0 clean, 1 findings (or the replayed case still fails), 2 bad usage or input;
`fuzz` also 4 an internal error of kvfuzz, 130 cut short (SIGINT, SIGTERM, --time-limit), 3 an
op asked for ran no case (the first that applies, in this order: 1, 2, 4, 130, 3).
Only this module prints or exits; everything it calls is library code.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Sequence

from .engines import ENGINES
from .errors import BadCaseFile, BadInput


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit 2), not usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"kvfuzz: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kvfuzz", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    f = sub.add_parser("fuzz", help="fuzz a target (the main job)")
    f.add_argument("--op", action="append", dest="ops", metavar="NAME",
                   help="op to fuzz (repeatable; default: all)")
    _target_device(f)
    f.add_argument("--budget", type=float, default=60.0, metavar="SECONDS",
                   help="generation time, split evenly over the ops the target has; the batched "
                        "engine starts no case that its stint's measured cost says would end past "
                        "an op's share (default 60)")
    f.add_argument("--max-cases", type=int, default=1_000_000, metavar="N", help="at most N cases per op")
    f.add_argument("--seed", type=int, default=0, help="same seed, same cases (default 0)")
    f.add_argument("--corpus", type=Path, metavar="DIR", help="save each finding's minimized case here")
    f.add_argument("--report", type=Path, metavar="FILE.json", help="write a JSON report")
    f.add_argument("--junit", type=Path, metavar="FILE.xml",
                   help="write a JUnit report: one test per op and target, failing on new findings")
    f.add_argument("--markdown", type=Path, metavar="FILE.md",
                   help="write a Markdown report, with PNG plots beside it (matplotlib: kvfuzz[report])")
    f.add_argument("--in-contract-only", action="store_true", help="generate only in-contract cases")
    f.add_argument("--feature", action="append", dest="features", metavar="REGEX",
                   help="only cases having a feature that fully matches REGEX (repeatable: any of them), such "
                   "as a production launch mode (delta:verify, tombstone:.*); classes without it leave the pool, "
                   "other cases are drawn and dropped (the report counts them); an op none of whose cases can "
                   "have it is reported not run (exit 3)")
    f.add_argument("--variant", help="judge with this contract variant (e.g. live_prefix)")
    f.add_argument("--minimize-budget", type=float, default=30.0, metavar="SECONDS",
                   help="time to minimize each new finding (default 30; 0 to skip)")
    f.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="wall clock for the whole run, start-up, confirming and minimizing included: each op "
                   "gets an equal share of the time left when its turn comes (findings left unminimized are "
                   "saved as confirmed; an op left no time is reported not run, exit 3); past it, the run "
                   "stops as on SIGTERM, reports written (for a nightly's fixed slot)")
    f.add_argument("--engine", choices=tuple(ENGINES), default="batch",
                   help="batch: seeded generation, many cases per synchronisation (default); "
                   "hypothesis: one case at a time through Hypothesis, which shrinks as it goes; "
                   "atheris: coverage-guided (libFuzzer; the [atheris] extra)")
    f.add_argument("--rerun-every", type=int, metavar="N",
                   help="run every N-th case twice to check determinism (0: never; default 1 on CUDA, 10 on the CPU)")
    f.add_argument("--case-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="a run of a case (each of its runs, where it runs twice; or a batch, plus 1 s a "
                        "case) lasting longer is a hang: a crash finding (default 60)")
    f.add_argument("--batch", type=int, metavar="N", help="cases per synchronisation (default 64 on CUDA, 16 on the CPU; fewer where "
                   "their images would pass 64 MiB)")
    _pack_option(f)
    f.add_argument("--confirm-tries", type=int, default=3, metavar="N",
                   help="fresh processes every finding must reproduce in, else it is flaky and not saved (>= 2; default 3)")
    f.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="N shards in parallel processes (one per GPU on CUDA), one corpus, one report")
    f.add_argument("--shard", type=_shard, default=(1, 1), metavar="I/N",
                   help="run the I-th of N disjoint shards of this campaign (for a Slurm array or CI matrix)")
    f.add_argument("--campaign", type=Path, metavar="DIR", dest="campaign_dir",
                   help="keep the campaign's state in DIR (and its corpus, unless --corpus): running it "
                   "again continues where it stopped; findings it already holds are known")
    f.add_argument("--cross-check", choices=("cpu",), metavar="BACKEND",
                   help="also run each in-contract case on BACKEND (cpu: Triton's interpreter) and report "
                   "backend_divergence where the two differ (with --device cuda)")
    f.add_argument("--cross-check-every", type=int, default=1, metavar="N",
                   help="cross-check every N-th case only (default 1: every in-contract case)")
    f.add_argument("--baseline", metavar="TARGET",
                   help="also run each case on TARGET (the merge base, the previous release) and report "
                   "regression / fixed / changed against it; exit 1 for regressions and new crashes only; "
                   "--budget then bounds the whole run after start-up (docs/regressions.md)")
    f.add_argument("--call-sites", type=Path, metavar="FILE.json",
                   help="check these call sites of the target (a JSON list, as kvfuzz/callsites/data/callsites.json "
                   "holds a release's) instead of a release's own: binding findings, and each misbound site "
                   "launched with its own arguments (docs/callsites.md)")
    f.set_defaults(run=cmd_fuzz)

    b = sub.add_parser("bench", help="throughput: bare calls/s vs checked cases/s, compiles per 1,000 cases")
    b.add_argument("--op", action="append", dest="ops", metavar="NAME", help="op to measure (repeatable; default: all)")
    _target_device(b)
    b.add_argument("--budget", type=float, default=60.0, metavar="SECONDS",
                   help="time for the whole measurement, split over the ops (default 60)")
    b.add_argument("--seed", type=int, default=0, help="the case mix (default 0)")
    b.add_argument("--report", type=Path, metavar="FILE.json", help="write the figures as JSON")
    b.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="measure checked cases/s of N shards running at once (as `fuzz --jobs N`), against bare calls on the shards' own cases, at small sizes and, with --sizes all, at production sizes too (default 1)")
    b.add_argument("--baseline", metavar="TARGET",
                   help="check each case on TARGET too, as `fuzz --baseline` does (its cost against the bare calls)")
    b.add_argument("--pack", type=int, metavar="K",
                   help="cases per packed launch in the packed checked pass (default 16 on CUDA, 8 on the CPU)")
    b.add_argument("--sizes", choices=("all", "small"), default="all",
                   help="size classes measured: all (small, then production where the op has them) or small "
                        "(production tables under the CPU's interpreter take minutes; default all)")
    b.set_defaults(run=cmd_bench)

    mu = sub.add_parser("mutants", help="mutation self-check: mutate the target's kernels, fuzz each mutant, "
                        "report which the fuzzer kills and how fast (docs/mutants.md)")
    mu.add_argument("--target", default="builtin", metavar="SPEC",
                    help="builtin | PATH.py | module:NAME | sglang==X.Y.Z | git:REV:PATH (default builtin)")
    mu.add_argument("--op", action="append", dest="ops", metavar="NAME",
                    help="op whose reached code to mutate (repeatable; default: all)")
    mu.add_argument("--function", action="append", dest="functions", metavar="NAME",
                    help="only mutants in this function of the op's file (repeatable)")
    mu.add_argument("--budget-per-mutant", type=float, default=10.0, metavar="SECONDS",
                    help="fuzzing time of each mutant's campaign (default 10)")
    mu.add_argument("--confirm-factor", type=float, default=3.0, metavar="X",
                    help="a survivor is fuzzed again for X times the budget on the next seed; still alive, it is "
                    "likely equivalent (default 3; 0: no confirmation run)")
    mu.add_argument("--equivalence-cases", type=int, default=256, metavar="N",
                    help="a mutant not killed runs beside the original on N seeded cases, in and out of contract: "
                    "equivalent, outside the contract or out of reach (default 256; 0: not run)")
    mu.add_argument("--jobs", type=int, default=1, metavar="N",
                    help="campaigns at once, each its own process (on CUDA one GPU each, in turn)")
    mu.add_argument("--seed", type=int, default=0, help="the mutant sample and every campaign's seed (default 0)")
    mu.add_argument("--max-mutants", type=int, metavar="N", help="at most N mutants per op, drawn by --seed")
    mu.add_argument("--out-of-contract", action="store_true",
                    help="fuzz with out-of-contract cases too, and mutate argument checks (if ...: raise)")
    mu.add_argument("--case-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="each campaign's --case-timeout: a mutant that hangs is killed by this, later (default 60)")
    mu.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="cuda if present, else the CPU under Triton's interpreter (default auto)")
    mu.add_argument("--resume", type=Path, metavar="DIR",
                    help="work directory: each mutant's state is kept there and a finished one is not run again")
    mu.add_argument("--report", type=Path, metavar="FILE.json", help="write the JSON report")
    mu.add_argument("--markdown", type=Path, metavar="FILE.md", help="write a Markdown report")
    mu.set_defaults(run=cmd_mutants)

    r = sub.add_parser("replay", help="re-run one saved case")
    r.add_argument("case", type=Path, help="a case directory (or its case.json)")
    _target_device(r, default_target=None)
    r.add_argument("--emit-repro", type=Path, metavar="FILE.py",
                   help="also write a standalone script (torch + triton only) reproducing the case")
    r.add_argument("--short", action="store_true",
                   help="with --emit-repro: a plain torch script of a few dozen lines (explicit tensors, the call, "
                   "asserts on the expected cells) for a bug report; a finding only the guarded arena shows "
                   "(out-of-bounds writes, crashes) gets the full script, and replay says why")
    r.set_defaults(run=cmd_replay)

    dd = sub.add_parser("defects", help="saved cases as defects: sites attributed on the CPU where a case has none")
    dd.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a corpus, or case folders")
    dd.add_argument("--write", action="store_true", help="keep each attributed site in its case's meta")
    dd.add_argument("--target", metavar="SPEC", help="attribute against SPEC, not the target each case was "
                    "found with (a kernel file found at another path, on another machine)")
    dd.add_argument("--report", type=Path, metavar="FILE.json", help="write the defects as JSON")
    dd.set_defaults(run=cmd_defects)

    m = sub.add_parser("minimize", help="shrink one saved case")
    m.add_argument("case", type=Path, help="a saved case's folder (corpora/OP/KEY)")
    m.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="corpus to save the result in")
    _target_device(m, default_target=None)
    m.add_argument("--budget", type=float, default=30.0, metavar="SECONDS",
                   help="stop shrinking after this long and save the smallest case that still fails")
    m.set_defaults(run=cmd_minimize)

    bs = sub.add_parser("bisect", help="which SGLang release introduced a saved case's defect, which fixed it",
                        description="Replay saved cases on every SGLang release of a range, and on builtin (which must\n"
                        "be clean), each judged by the contract variant the release selects. Per case: the release\n"
                        "table, the first bad and the last good release, where the defect was introduced and where\n"
                        "it was fixed (docs/regressions.md). Exit status: 0 when it ran, 1 when builtin is not clean\n"
                        "on a case, 2 on bad input.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    bs.add_argument("cases", nargs="+", type=Path, metavar="CASE",
                    help="a saved case's folder (or its case.json), or a corpus folder: every case in it that "
                    "records a finding")
    bs.add_argument("--releases", default="0.5.6..0.5.23", metavar="RANGE",
                    help="A..B, a range over the SGLang releases kvfuzz knows (.post releases included), or a "
                    "list X,Y,Z; each distinct kernel file runs once (default 0.5.6..0.5.23)")
    bs.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="cuda if present, else the CPU under Triton's interpreter (default auto)")
    bs.add_argument("--write", action="store_true",
                    help="record meta.affects, meta.introduced_in and meta.fixed_in in each triaged case (an "
                    "xfail defect of an SGLang release); nothing else in it changes")
    bs.add_argument("--json", type=Path, metavar="FILE.json", help="write every case's cells and history as JSON")
    bs.set_defaults(run=cmd_bisect)

    c = sub.add_parser("corpus", help="ls | merge | prune")
    csub = c.add_subparsers(dest="corpus_command", required=True, parser_class=_Parser)
    ls = csub.add_parser("ls", help="list saved cases")
    ls.add_argument("paths", nargs="*", type=Path, default=[Path("corpora")],
                    help="corpus folders (default corpora/); exit 1 when a case cannot be read")
    ls.set_defaults(run=cmd_corpus_ls)
    mg = csub.add_parser("merge", help="merge corpora into DST, one case per signature and target")
    mg.add_argument("paths", nargs="+", type=Path, metavar="SRC... DST",
                    help="corpora to merge from, then the corpus to merge into (the last path)")
    mg.set_defaults(run=cmd_corpus_merge)
    pr = csub.add_parser("prune", help="report (or with --apply delete) xfail cases that no longer fail")
    pr.add_argument("paths", nargs="*", type=Path, default=[Path("corpora")],
                    help="corpus folders (default corpora/)")
    pr.add_argument("--apply", action="store_true", help="delete them instead of only reporting")
    pr.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="replay on this device; a case whose defect was seen on the other is skipped")
    pr.set_defaults(run=cmd_corpus_prune)

    o = sub.add_parser("ops", help="list the ops and their contracts")
    o.add_argument("--target", metavar="SPEC",
                   help="also say how kvfuzz calls this target's entry points and which variant judges each op, "
                   "and, for sglang==X, where that release calls each op (docs/callsites.md)")
    o.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help=argparse.SUPPRESS)
    o.set_defaults(run=cmd_ops)
    return p


def _target_device(p: argparse.ArgumentParser, default_target: str | None = "builtin") -> None:
    p.add_argument("--target", default=default_target, metavar="SPEC",
                   help="builtin | PATH.py | module:NAME | sglang==X.Y.Z | git:REV:PATH (PATH at git "
                   "revision REV; the first ':' ends REV)" +
                   (" (default builtin)" if default_target else " (default: the case's own)"))
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="cuda if present, else the CPU under Triton's interpreter (default auto)")
    p.add_argument("--in-process", action="store_true",
                   help="run the target in this process (faster; a crashing kernel ends the run)")


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N (e.g. 2/8), got {text!r}") from None
    if not (n >= 1 and 1 <= i <= n):
        raise argparse.ArgumentTypeError(f"expected I/N with 1 <= I <= N, got {text!r}")
    return i, n


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    from . import heap, stopping

    heap.return_large_frees()  # a long campaign's memory follows its live data (heap.py)

    # a job scheduler's SIGTERM ends a run like Ctrl-C: workers closed, findings and report kept
    try:
        with stopping.stop_on_signals():
            from .execute import device_oracle_bytes

            device_oracle_bytes()  # a malformed setting refused here, not in a worker
            return args.run(args)
    except BadInput as exc:
        print(f"kvfuzz: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvfuzz: interrupted", file=sys.stderr)
        return 130


def _say_notes(report: dict) -> None:
    """A report's notes about the environment (an untested triton), once per run: after it, so a
    refused run says only why; a `--jobs` shard leaves them to its parent."""
    from .progress import JSON_ENV

    if os.environ.get(JSON_ENV) != "1":
        for note in report.get("notes", ()):
            print(f"kvfuzz: note: {note}", file=sys.stderr)


# commands ---------------------------------------------------------------------------------


def _say_internal_errors(report: dict) -> None:
    """kvfuzz's own errors during the run (each ended one stage of one finding), one line each."""
    from .internal import describe

    for err in report.get("internal_errors", ()):
        print(f"kvfuzz: {err.get('signature') or 'campaign'}: {describe(err)}", file=sys.stderr)


def cmd_fuzz(args) -> int:
    from . import stopping
    from .campaign import CampaignConfig, run_campaign
    from .outcome import CUT_SHORT, NOT_RUN, exit_code, not_run_ops
    from .plan import reserve_s
    from .ops import CONTRACTS, contract_label, contract_status
    from .progress import make_display
    from .baseline import against_line
    from .reports import binding_line, engine_line
    from .sites.defects import header

    cfg = CampaignConfig(
        ops=args.ops or list(CONTRACTS), target=args.target, device=args.device, budget_s=args.budget,
        max_cases=args.max_cases, seed=args.seed, corpus=args.corpus, report=args.report,
        in_contract_only=args.in_contract_only, isolate=not args.in_process,
        minimize_budget_s=args.minimize_budget, variant=args.variant, engine=args.engine,
        rerun_every=args.rerun_every, case_timeout_s=args.case_timeout, batch=args.batch, pack=args.pack,
        confirm_tries=args.confirm_tries, shard=args.shard, campaign_dir=args.campaign_dir,
        cross_check=args.cross_check, cross_check_every=args.cross_check_every, ops_named=bool(args.ops),
        time_limit_s=args.time_limit, baseline=args.baseline, call_sites=args.call_sites,
        features=tuple(args.features or ()))
    if cfg.features:  # a pattern that does not compile: one line, before any worker starts
        from .strategies.feature_filter import feature_filter

        feature_filter(cfg.features)
    if args.cross_check:  # refused before any worker starts, and once (not per shard)
        from . import device as devmod
        from .cross import check_backend

        cfg.validate()
        check_backend(devmod.select(args.device), args.cross_check)
    for option, path in (("--report", args.report), ("--junit", args.junit), ("--markdown", args.markdown)):
        _check_writable(path, option)
    if args.jobs < 1:
        raise BadInput(f"--jobs must be >= 1, got {args.jobs}")
    if args.jobs > 1:
        return _fuzz_jobs(args, cfg)
    prefix = f"[shard {cfg.shard[0]}/{cfg.shard[1]}] " if cfg.shard != (1, 1) else ""
    display = make_display(prefix=prefix)  # a live table on a terminal, plain lines in a log
    # --time-limit: the campaign plans to end inside it; should a case or a worker start outlast
    # the plan, SIGALRM stops the run as SIGTERM does (findings and reports kept), early enough
    # that closing the workers and writing the reports still fit
    limit = args.time_limit
    alarm = stopping.alarm(limit - reserve_s(limit) / 2, f"the time limit ({limit:g} s)") if limit else nullcontext()
    try:
        with alarm:
            result = run_campaign(cfg, progress=display.event, status=display.update)
    finally:
        display.close()
    with stopping.deferred():  # a second SIGTERM while the reports are written waits for them
        report = result.report()
        _write_reports(args, report)
    for s in result.stats:
        line = report["ops"][s.op]
        status = f"skipped ({s.skipped})" if s.skipped else f"{s.cases} cases in {s.seconds:.1f} s" + (
            f" [variant {s.contract_variant}]" if s.contract_variant else "")
        if s.engine:  # the atheris engine's figures
            status += f"; {engine_line(s.engine)}"
        if s.feature_filter and s.cases:  # --feature: what the filter left of the stream
            ff = s.feature_filter
            status += (f"; --feature: {ff['classes']} classes, {ff['drawn']} cases drawn, "
                       f"{ff['dropped']} dropped")
        if line["status"] == NOT_RUN:
            status = f"NOT RUN: {line['reason']}"
        elif line["status"] == CUT_SHORT:
            status += f" ({line['reason']})"
        print(f"{s.op}: {status}")
    by_sig = {x.found.finding.signature: x for x in result.saved}
    stress = [x for x in result.saved if contract_label(x.case) == "stress"]
    stress_ids = {id(x) for x in stress}
    shown_defects = []  # (saved findings, defect): the run's saved findings by defect, stress apart and last
    for d in report.get("defects", []):
        xs = [by_sig[s] for s in d["findings"] if s in by_sig]
        if xs:  # a binding finding's defect is the call site's: listed below
            shown_defects.append((xs, d))
    shown_defects.sort(key=lambda xd: all(id(x) in stress_ids for x in xd[0]))
    for n, (xs, d) in enumerate(shown_defects, 1):  # defects first, each finding under its defect
        if stress and all(id(x) in stress_ids for x in xs) and not any(
                all(id(y) in stress_ids for y in ys) for ys, _ in shown_defects[:n - 1]):
            print(f"stress: {len(stress)} finding(s) on in-contract launches no SGLang call site makes")
        print(header(n, d))
        for x in xs:
            where = f" -> {x.path}" if x.path else f" (NOT SAVED: {x.save_error})" if x.save_error else ""
            label = "STRESS FINDING" if id(x) in stress_ids else "FINDING"
            print(f"{label} {x.found.finding.kind} {x.found.finding.signature}{where}{'' if x.new else ' (known)'}")
            print(f"  {x.found.finding.message}")
            print(f"  {contract_status(x.case)}")
            if x.unconfirmed:
                print(f"  UNCONFIRMED: {x.unconfirmed_why or 'not confirmed in fresh processes'}")
            if x.against_defect:  # a regression or change: new defect, or a known one's new symptom
                print(f"  against the baseline: {against_line(x.against_defect)}")
            if len(x.signatures) > 1:  # one defect that showed several signatures: one finding
                print(f"  also shows: {', '.join(x.signatures[1:])}")
    bound = [b for b in report["findings"] if b["kind"] == "binding"]
    for b in bound:  # call sites of the release binding an argument elsewhere than its name means
        print(f"BINDING {b['signature']}{'' if b.get('new', True) else ' (known)'}")
        print(f"  {binding_line(b)}")
    for x in result.flaky:
        print(f"FLAKY {x.finding.finding.signature}: {x.confirmation.describe()} (not saved)")
        print(f"  {contract_status(x.finding.first)}")
    for f in result.shared:  # --baseline: the baseline's defect too, not confirmed on the target alone
        print(f"SHARED {f.finding.signature}: baseline {args.baseline} gets it wrong the same way (not saved)")
    _say_notes(report)
    _say_internal_errors(report)
    known = len(result.saved) - len(result.new)
    not_run = not_run_ops(report)
    print(f"kvfuzz: {result.cases} cases, {len(result.new)} new findings" + (f", {known} known" if known else "")
          + (f" ({len(stress)} of them stress)" if stress else "")
          + (f", {len(bound)} binding finding(s) of call sites" if bound else "")
          + (f", {result.stress_dropped} on stress cases dropped (--in-contract-only)" if result.stress_dropped else "")
          + (f", {len(result.flaky)} flaky" if result.flaky else "")
          + (f", {len(report['defects'])} defect(s)" if report.get("defects") else "")
          + f", target {args.target} on {result.device_name} in {result.seconds:.1f} s"
          + (f" (cut short by {result.cut_short_by})" if result.interrupted else "")
          + (f"; {len(not_run)} op(s) ran no case: {', '.join(not_run)}" if not_run else ""))
    new_binding = any(b.get("new", True) for b in bound) and not args.baseline
    code = exit_code(failing=new_binding or any(fails_the_run([s for x in result.new for s in x.signatures],
                                                              bool(args.baseline))),
                     not_target=result.not_target, internal_errors=result.internal_errors,
                     cut_short=result.interrupted, not_run=not_run)
    if code == 2:
        first = next((m for s in result.stats for m in s.not_target_messages), "")
        print(f"kvfuzz: error: {result.not_target} runs failed for reasons that are not the target's "
              f"(this machine's Triton, or kvfuzz itself), e.g. {first}", file=sys.stderr)
    return code


def fails_the_run(signatures: list[str], baseline: bool) -> list[str]:
    """The new findings' signatures that make a campaign exit 1: all of them, or against a
    baseline only regressions and new crashes: a crash the baseline does not share (a
    regression, or a change whose target side crashes). A fix, another change, and a defect
    both share, a crash included, fail nothing (a pull request is not failed for its base's)."""
    from .findings import defect_kind, kind_of

    if not baseline:
        return signatures
    return [s for s in signatures
            if kind_of(s) == "regression" or (kind_of(s) == "changed" and defect_kind(s) == "crash")]


def _fuzz_jobs(args, cfg) -> int:
    from . import device as devmod
    from .campaign import check_forced_variant
    from .jobs import run_jobs
    from .outcome import not_run_ops
    from .progress import make_display
    from .reports import engine_line
    from .sites.defects import header

    if cfg.shard != (1, 1):
        raise BadInput("--jobs and --shard do not go together: --jobs runs the shards itself")
    cfg.validate()
    device = devmod.select(cfg.device)
    check_forced_variant(cfg)  # once, before any shard starts
    argv = _without(args.argv[1:], {"--jobs", "--report", "--junit", "--markdown"})  # [0] is "fuzz"
    display = make_display()  # the shards' progress, summed per op
    try:
        merged, code = run_jobs(argv, args.jobs, device, args.report, display.event, display.update,
                                fails=lambda new: fails_the_run(new, bool(args.baseline)))
    finally:
        display.close()
    _write_reports(args, merged)
    _say_notes(merged)
    _say_internal_errors(merged)
    for op, s in merged["ops"].items():
        if s.get("engine"):  # the atheris engine's figures, the shards' summed
            print(f"{op}: {s['cases']} cases; {engine_line(s['engine'])}")
    label = {"stress": "STRESS FINDING", "binding": "BINDING"}  # reported apart from in-contract findings
    by_sig = {f["signature"]: f for f in merged["findings"]}
    groups = [[by_sig[s] for s in d["findings"] if s in by_sig] for d in merged.get("defects", [])]
    listed = {f["signature"] for g in groups for f in g}
    shown = [(d, g) for d, g in zip(merged.get("defects", []), groups) if g]
    shown.sort(key=lambda dg: all(f.get("contract_status") in label for f in dg[1]))  # stress apart, last
    shown += [(None, [f]) for f in merged["findings"] if f["signature"] not in listed]  # binding: a call site's
    for n, (d, fs) in enumerate(shown, 1):  # defects first, each finding under its defect
        if d is not None:
            print(header(n, d))
        for f in fs:
            print(f"{label.get(f.get('contract_status'), 'FINDING')} {f['kind']} {f['signature']}"
                  + (f" -> {f['case']}" if f.get("case") else "")
                  + ("" if f.get("new", True) else " (known)"))
            if f.get("contract"):
                print(f"  {f['contract']}")
            if len(f.get("signatures", ())) > 1:
                print(f"  also shows: {', '.join(f['signatures'][1:])}")
    for f in merged["flaky"]:
        print(f"FLAKY {f['signature']}: {f['reproduced']} of {f['tries']} fresh runs reproduced it (not saved)")
        if f.get("contract"):
            print(f"  {f['contract']}")
    print(f"kvfuzz: {merged['cases']} cases, {len(merged['findings'])} findings, {args.jobs} jobs, "
          f"target {args.target} on {merged.get('device_name')} in {merged['seconds']:.1f} s")
    for op in not_run_ops(merged):
        print(f"{op}: NOT RUN: {merged['ops'][op].get('reason')}")
    return code  # against a baseline, only regressions and new crashes fail the run (`fails`)


def _write_reports(args, report: dict) -> None:
    from .reports import write_junit, write_markdown

    if args.junit:
        write_junit(args.junit, report)
    if args.markdown:
        write_markdown(args.markdown, report)


def _without(argv: list[str], options: set[str]) -> list[str]:
    """argv with each of `options` (and its value) removed."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in options:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def _pack_option(p) -> None:
    """--pack K / --no-pack: cases per packed launch (packing.py)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pack", type=int, metavar="K",
                   help="in-contract cases of one class per launch, where the op packs (default: the op's own, "
                   "16 for q8kv8_topk_length on a GPU, where packing measured to pay; else 1, none: "
                   "docs/performance.md)")
    g.add_argument("--no-pack", dest="pack", action="store_const", const=1, help="one launch per case (--pack 1)")


def cmd_bench(args) -> int:
    from .bench import invalid, render, run_bench
    from .ops import CONTRACTS

    _check_writable(args.report)
    t0, so_far = time.monotonic(), {}

    def measured(result: dict, op: str, what: str) -> None:
        # each size as it is measured: on stderr, and into the report, so a run cut short keeps it
        print(f"kvfuzz bench: {op}: {what} measured ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        so_far["result"] = result
        if args.report:
            from .campaign import write_json_atomic

            write_json_atomic(args.report, result)

    try:
        result = run_bench(args.ops or list(CONTRACTS), args.target, args.device, args.budget, args.seed,
                           isolate=not args.in_process, jobs=args.jobs, baseline=args.baseline, pack=args.pack,
                           sizes=args.sizes, on_measured=measured)
    except KeyboardInterrupt:  # what was measured is in the report already; show it too
        if so_far:
            print(render(so_far["result"]))
        raise
    print(render(result))
    _say_notes(result)
    if args.report:
        from .campaign import write_json_atomic

        write_json_atomic(args.report, result)
    void = invalid(result)
    if void:  # the report keeps what was measured; the void figures are null in it
        print(f"kvfuzz: error: --budget {args.budget:g} too short: {void[0]}"
              + (f" (and {len(void) - 1} more)" if len(void) > 1 else ""), file=sys.stderr)
        return 2
    return 0


def mutants_config(args):
    """`kvfuzz mutants`' options as a MutantsConfig (tests/test_mutants_record.py parses a record's command with it)."""
    from .mutants import MutantsConfig

    return MutantsConfig(target=args.target, ops=args.ops or [], functions=args.functions or [],
                         budget_s=args.budget_per_mutant, jobs=args.jobs, seed=args.seed,
                         max_mutants=args.max_mutants, confirm_factor=args.confirm_factor, device=args.device,
                         in_contract_only=not args.out_of_contract, validation=args.out_of_contract,
                         case_timeout_s=args.case_timeout, equivalence_cases=args.equivalence_cases,
                         workdir=args.resume)


def cmd_mutants(args) -> int:
    from .faults import one_line
    from .internal import where
    from .mutants import exit_status, markdown, run_mutants, summary_lines
    from .mutants.run import CutShort

    for option, path in (("--report", args.report), ("--markdown", args.markdown)):
        _check_writable(path, option)
    if args.resume is not None and args.resume.exists() and not args.resume.is_dir():
        raise BadInput(f"--resume {args.resume} is not a directory")
    cut = None
    try:
        report = run_mutants(mutants_config(args), say=lambda line: print(line, file=sys.stderr, flush=True))
    except CutShort as stopped:  # the mutants judged before the stop, reported as such
        report, cut = stopped.report, stopped
    except (BadInput, KeyboardInterrupt):
        raise
    except Exception as exc:  # kvfuzz's own
        print(f"kvfuzz: internal error: {one_line(exc)} ({where(exc)})", file=sys.stderr)
        return 4
    for line in summary_lines(report):
        print(line)
    if args.report:
        from .campaign import write_json_atomic

        write_json_atomic(args.report, report)
    if args.markdown:
        args.markdown.write_text(markdown(report))
    if cut is not None:
        left = sum(m["status"] in ("not_run", "unconfirmed") for m in report["mutants"])
        print(f"kvfuzz: cut short by {report['cut_short']}: {len(report['mutants']) - left} of "
              f"{len(report['mutants'])} mutants judged, {left} not (not_run, unconfirmed); reports written",
              file=sys.stderr)
        return 130
    return exit_status(report)


def _check_writable(path: Path | None, option: str = "--report") -> None:
    if path is not None and path.exists() and path.is_dir():
        raise BadInput(f"{option} {path} is a directory")


def _case_dir(path: Path) -> Path:
    """A case directory named by itself or by its case.json."""
    path = Path(path)
    return path.parent if path.name == "case.json" else path


def _read_case(path: Path):
    from .corpus import read_case_dir
    from .corpus.format import CASE_FILE, TENSORS_FILE

    path = _case_dir(path)
    if not path.exists():
        raise BadCaseFile(path, "no such case")
    if path.is_dir() and not any((path / name).exists() for name in (CASE_FILE, TENSORS_FILE)):
        # a corpus root or an op folder: name a case two levels down at most (never walk a whole tree)
        inside = next((p.parent for pattern in (f"*/{CASE_FILE}", f"*/*/{CASE_FILE}")
                       for p in sorted(path.glob(pattern))), None)
        raise BadInput(f"{path} is not a case folder: a case folder holds {CASE_FILE} and {TENSORS_FILE} "
                       "(docs/case-format.md)" + (f"; replay one of the cases inside, e.g. {inside}" if inside else ""))
    return read_case_dir(path)


def cmd_defects(args) -> int:
    """Group saved cases by defect site (docs/defects.md), attributing sites on the CPU."""
    from .campaign import write_json_atomic
    from .sites.corpus import attribute_dirs, case_dirs, print_defects

    if args.report:
        _check_writable(args.report, "--report")
    findings = attribute_dirs(case_dirs(args.dirs), args.write, args.target,
                              say=lambda line: print(line, flush=True))
    defects = print_defects(findings)
    if args.report:
        write_json_atomic(args.report, {"findings": findings, "defects": defects})
    return 0


def cmd_replay(args) -> int:
    from .replay import render, replay, version_warnings

    if args.short and not args.emit_repro:
        raise BadInput("--short goes with --emit-repro FILE.py")
    saved = _read_case(args.case)
    site = saved.case.meta.get("as_called")
    if args.emit_repro and site:  # the scripts launch by name: they would not make the site's call
        raise BadInput(f"--emit-repro: this case is launched as {site['file']}:{site['line']} calls it "
                       "(meta.as_called); the repro scripts launch by name only: replay it with kvfuzz")
    r = replay(saved, args.target, args.device, isolate=not args.in_process)
    for line in version_warnings(saved):
        print(f"kvfuzz: warning: {line}", file=sys.stderr)
    print(render(r, _case_dir(args.case).name))
    if args.emit_repro:
        from .repro import write_repro
        from .short_repro import why_not_short, write_short_repro

        why = why_not_short(saved) if args.short else None
        if args.short and why is None:
            write_short_repro(saved, args.emit_repro, _case_dir(args.case).name)
            print(f"repro    wrote {args.emit_repro} (short, plain torch): python {args.emit_repro} "
                  "[PATH/TO/KERNELS.py]")
        else:
            write_repro(saved, args.emit_repro, device=r.device)
            if why:
                print(f"repro    {why}: wrote the full script instead")
            print(f"repro    wrote {args.emit_repro}: python {args.emit_repro} PATH/TO/KERNELS.py")
    return 1 if r.fails else 0


def cmd_minimize(args) -> int:
    import dataclasses

    from . import device as devmod
    from .check import Checker
    from .corpus import DirectoryCorpus
    from .minimize import minimize
    from .worker import make_executor

    saved = _read_case(args.case)
    if saved.finding is None:
        raise BadInput(f"{args.case}: the case records no finding to keep while minimizing")
    dev = devmod.select(args.device)
    spec = args.target or saved.target
    executor = make_executor(spec, dev, isolate=not args.in_process)
    try:
        sig = saved.finding.signature
        checker = Checker(executor, saved.case.op)
        check = checker.still_fails(sig)
        if not check(saved.case):
            print(f"kvfuzz: {sig} does not show on {spec} now; nothing to minimize", file=sys.stderr)
            return 1
        m = minimize(saved.case, check, budget_s=args.budget, assess=checker.prepare)
    finally:
        executor.close()
    out = dataclasses.replace(saved, case=m.case, minimized=True, origin="minimizer",
                              minimize_log=tuple(saved.minimize_log) + tuple(m.log))
    res = DirectoryCorpus(args.output).save(out)
    for line in m.log:
        print(f"  {line}")
    print(f"kvfuzz: minimized in {m.seconds:.1f} s ({m.steps_tried} tries{'' if m.complete else ', budget ran out'})"
          f" -> {res.path} ({res.status})")
    return 0


def _bisect_cases(paths: list[Path]) -> list:
    """(case folder, saved case) of every case the paths name: a case folder (or its case.json)
    itself, a corpus folder every case in it that can be bisected (the others noted)."""
    from .bisect import why_not_bisected
    from .corpus import iter_cases
    from .corpus.format import CASE_FILE, TENSORS_FILE

    out, seen, skipped = [], set(), []
    for given in paths:
        path = _case_dir(given)
        if not path.exists():
            raise BadInput(f"{given}: no such case or corpus folder")
        if not path.is_dir():
            raise BadInput(f"{given} is not a case folder: a case folder holds {CASE_FILE} and {TENSORS_FILE} "
                           "(docs/case-format.md)")
        single = any((path / name).exists() for name in (CASE_FILE, TENSORS_FILE))
        found = list(iter_cases(path))
        if not found:
            raise BadInput(f"{given} is not a case folder and holds no saved case")
        for case_dir, saved in found:
            if isinstance(saved, BadCaseFile):
                raise saved
            if case_dir.resolve() in seen:
                continue
            seen.add(case_dir.resolve())
            why = why_not_bisected(saved)
            if why and single:
                raise BadInput(f"{given}: {why}")
            if why:
                skipped.append(why)
            else:
                out.append((case_dir, saved))
    if skipped:
        counts = {why: skipped.count(why) for why in skipped}
        for why, n in counts.items():
            print(f"kvfuzz: note: {n} case{'s' if n > 1 else ''} not bisected: {why}", file=sys.stderr)
    if not out:
        raise BadInput("no case to bisect: " + "; ".join(dict.fromkeys(skipped)))
    return out


def cmd_bisect(args) -> int:
    import time

    from . import bisect
    from . import device as devmod

    releases = bisect.parse_releases(args.releases)
    _check_writable(args.json, "--json")
    cases = _bisect_cases(args.cases)
    dev = devmod.select(args.device)
    t0 = time.monotonic()
    files = bisect.targets_of(releases, [saved for _, saved in cases])
    print(f"kvfuzz: bisecting {len(cases)} case{'s' if len(cases) > 1 else ''} over "
          f"{bisect.span_name(releases[0], releases[-1])} ({len(releases)} releases, {len(files)} kernel files) "
          f"and builtin on {devmod.describe(dev)}", file=sys.stderr)
    results = bisect.run(cases, releases, dev, progress=lambda line: print(f"kvfuzz: {line}", file=sys.stderr))
    for n, (defect, group) in enumerate(bisect.by_defect(results), 1):  # the rows grouped by defect
        print("\n".join(bisect.render_defect(n, defect, group)))
        for r in group:
            print("\n".join(bisect.render(r)))
    not_clean = [r for r in results if r.builtin not in (bisect.CLEAN, bisect.CANNOT)]
    if args.write:
        for r in results:
            why = bisect.writable(r.saved) or ("builtin is not clean on it" if r in not_clean else None)
            if why:
                print(f"kvfuzz: not written: {r.path}: {why}", file=sys.stderr)
            elif bisect.write_meta(r):
                print(f"kvfuzz: wrote meta.affects, introduced_in, fixed_in: {r.path}", file=sys.stderr)
    if args.json:
        from .campaign import write_json_atomic

        write_json_atomic(args.json, {"device": dev, "releases": list(releases),
                                      "files": [f"sglang=={f}" for f in files],
                                      "cases": [r.to_json() for r in results],
                                      "defects": [{"defect": d, "cases": [str(r.path) for r in g]}
                                                  for d, g in bisect.by_defect(results)]})
    print(f"kvfuzz: {len(results)} cases over {len(releases)} releases ({len(files)} kernel files) and builtin "
          f"in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    for r in not_clean:
        print(f"kvfuzz: BUILTIN IS NOT CLEAN on {r.path}: {r.builtin} (kvfuzz's own kernel must pass every "
              "case: the case or the contract is wrong)", file=sys.stderr)
    return 1 if not_clean else 0


def cmd_corpus_ls(args) -> int:
    from .corpus import list_cases

    rows = list_cases(args.paths)
    print("  ".join(LS_COLUMNS))
    for row in rows:
        print(_row(row))
    bad = [row for row in rows if row.error]
    for row in bad:
        print(f"kvfuzz: unreadable case {row.path}: {row.error}", file=sys.stderr)
    print(f"{len(rows)} cases" + (f", {len(bad)} unreadable" if bad else ""))
    return 1 if bad else 0


LS_COLUMNS = ("op", "key", "kind", "expected", "target", "signature", "path")  # `corpus ls`'s header line


def _row(row) -> str:
    if row.error:
        return "  ".join(("?", row.key, "UNREADABLE", "-", "-", row.error, str(row.path)))
    return "  ".join(str(getattr(row, n, "")) for n in LS_COLUMNS)


def cmd_corpus_merge(args) -> int:
    from .corpus import merge

    if len(args.paths) < 2:
        raise BadInput("corpus merge needs at least one SRC and a DST")
    *src, dst = args.paths
    for s in src:
        if not s.exists():
            raise BadInput(f"{s}: no such corpus")
    results = merge(src, dst)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(f"merged into {dst}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) if counts
          else f"nothing to merge into {dst}")
    return 0


def cmd_corpus_prune(args) -> int:
    from . import device as devmod
    from .corpus import prune
    from .corpus.store import REMOVED, WOULD_REMOVE
    from .replay import replay

    dev = devmod.select(args.device)

    def still_fails(saved) -> bool:
        return replay(saved, None, dev, trace=False).same_defect  # the saved finding only: no trace

    # a case whose defect was seen on the other device is skipped, not replayed here
    actions = prune(args.paths, still_fails, apply=args.apply, device=dev)
    for path, action in actions:
        print(f"{action}  {path}")
    gone = sum(action in (REMOVED, WOULD_REMOVE) for _, action in actions)
    skipped = len(actions) - gone
    print(f"{gone} xfail cases no longer fail on {dev}" + (f", {skipped} skipped" if skipped else "")
          + ("" if args.apply or not gone else " (use --apply to delete)"))
    return 0


def cmd_ops(args) -> int:
    from .ops import CONTRACTS

    if args.target:  # a signature kvfuzz cannot call is refused here, in one line (exit 2)
        from .targets import load_target

        t = load_target(args.target, args.device)
        print(f"target {args.target}: {t.description}")
        for line in t.describe_ops():
            print(f"  {line}")
        if args.target.startswith("sglang=="):  # SGLang's own call sites (docs/callsites.md)
            from .callsites import load
            from .callsites.table import cli_lines

            print("\n".join(cli_lines(load(), args.target.split("==", 1)[1])))
        return 0
    for c in CONTRACTS.values():
        print(f"{c.name}  (entry point: {c.entry})")
        for name, doc in c.paths.items():
            print(f"  path {name}: {doc}")
        for name, doc in c.variants.items():
            print(f"  variant {name}: {doc}")
        for a in c.args:
            print(f"  {a.role:3} {a.name} {'|'.join(a.dtypes)} [{a.shape}]{' optional' if a.optional else ''}")
        for sc in c.scalars:
            print(f"  scalar {sc.name}: {sc.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
