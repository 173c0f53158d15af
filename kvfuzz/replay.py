"""Re-run one saved case and say, for a kernel author, what is wrong with it now.

`render` names the case as the corpus does (its directory), says whether it is in or out of
contract and which rule it breaks, prints its inputs (small ones in full, larger ones
summarised with the rows that matter: kvfuzz/show.py) and, per finding, the wrong cells'
expected and actual values.

A case whose verdict varies by nature (a `nondeterministic` finding saved or shown: a race, a
read of stray memory) is run `RUNS` times (`check_runs`) and judged by all of them: a finding
any run shows counts, said as "shown in k of n runs" where not every run shows it, so a replay
of such a case fails (exit 1) every time the defect shows in any of its runs, not by chance.

Every replay also runs the case once more under Triton's interpreter with its loads and stores
traced (kvfuzz/sites, in a subprocess of its own), whatever the device: the site of the saved
finding is printed as a line a maintainer can open, and a load outside every tensor argument of
its launch (a read past a copy the target's wrapper made, where no guard band of kvfuzz's lies
and what is read varies) is an `out_of_bounds_read` on every replay, naming the statement.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from . import device as devmod
from .corpus import SavedCase
from .errors import BadInput
from .findings import VARIES, defect_kind
from .judge import Verdict
from .worker import make_executor

RUNS = 5  # runs of a case whose verdict varies by nature; a defect that shows in 1 of 2 runs is missed in 3%


@dataclass
class Replayed:
    saved: SavedCase
    target: str
    device: str
    verdict: Verdict  # every run's findings (check_runs)
    description: str
    runs: int = 1  # runs judged
    shown: dict[str, int] = field(default_factory=dict)  # signature -> runs that showed it
    failing: int = 0  # runs with any finding
    site: dict | None = None  # the saved finding's site as the traced run names it (sites.choose.site_meta)

    @property
    def varies(self) -> bool:
        """Whether some runs failed and others did not."""
        return 0 < self.failing < self.runs

    @property
    def fails(self) -> bool:
        return self.verdict.failed

    @property
    def same_defect(self) -> bool:
        return self.saved.finding is not None and self.saved.finding.signature in self.verdict.signatures()


def replay(saved: SavedCase, target: str | None = None, device: str = "auto", isolate: bool = True,
           trace: bool = True) -> Replayed:
    """Against the case's own target the case keeps its contract variant; against another
    target (`target`) it is judged by the variant that target selects (its SGLang release).
    A case found by a cross-check (`meta["cross_check"]`: a `backend_divergence`) runs on this
    device and again on that backend, which must be another one (refused in one line). A case
    found against a baseline (`meta["baseline"]`) runs on its own target beside the baseline again."""
    from . import cross

    dev = devmod.select(device)
    spec = target or saved.target
    backend = saved.case.meta.get("cross_check")
    if backend:
        try:
            cross.check_backend(dev, backend)
        except BadInput:
            raise BadInput(f"the case is a divergence between {saved.device} and {backend}: replay it on a "
                           f"device other than {backend} (--device cuda)") from None
    executor = make_executor(spec, dev, isolate=isolate)
    against = saved.case.meta.get("baseline") if spec == saved.target else None
    if against:  # a regression, fix or change: it shows only beside the baseline's run
        from . import baseline as baseline_mod

        try:
            executor = baseline_mod.pair(executor, None, spec, against, dev, 60.0, isolate=isolate,
                                         ops=[saved.case.op])
        except BaseException:
            executor.close()
            raise
    if backend:
        try:
            executor = cross.pair(executor, lambda: make_executor(spec, dev), spec, dev, backend, 60.0)
        except BaseException:
            executor.close()
            raise
    try:
        if saved.case.op in executor.missing:
            from .errors import TargetLoadError

            raise TargetLoadError(f"target {spec} has no {saved.case.op}: {executor.missing.get(saved.case.op)}")
        lacked = [n for n in getattr(executor, "lacks", {}).get(saved.case.op, ()) if n in saved.case.tensors]
        if lacked:
            from .errors import TargetLoadError

            raise TargetLoadError(f"target {spec}'s {saved.case.op} cannot take {', '.join(lacked)}, "
                                  f"which this case holds (a later SGLang release added it)")
        from .check import Checker

        checker = Checker.for_saved(executor, saved.case, spec, spec == saved.target,
                                    "replay it with --target naming a release that takes them")
        case = checker.adopt(saved.case)
        if case is not saved.case:
            saved = dataclasses.replace(saved, case=case)
        verdict, runs, shown, failing = check_runs(checker, case, saved)
        site = traced(saved, spec, verdict, shown, runs) if trace else None
        if runs in shown.values():  # a finding every run shows (the traced read): every run fails
            failing = runs
        return Replayed(saved, spec, dev, verdict, executor.description, runs, shown, failing, site)
    finally:
        executor.close()


def traced(saved: SavedCase, spec: str, verdict: Verdict, shown: dict[str, int], runs: int) -> dict:
    """The case run traced under the interpreter (sites.run): the saved finding's site
    (`meta["site"]` form), and a stray load it shows added to `verdict` as an
    `out_of_bounds_read` shown in every run, where no such finding names that tensor."""
    from .findings import Finding
    from .sites.choose import site_meta
    from .sites.run import attribute_isolated

    attribution, why = attribute_isolated(saved.case, spec)
    sig = saved.finding.signature if saved.finding is not None else "-:-:mismatch:-:-"
    site = site_meta(sig, attribution, why)
    # a guarded trace stopped at its first wild access (the run died unguarded): the crash's site, not a read to add
    read = attribution.sites.get("stray_read") if attribution is not None and not attribution.guarded else None
    if read is not None:
        from .sites.site import where

        f = Finding("out_of_bounds_read", saved.case.op, saved.finding.path if saved.finding else "-",
                    read.tensor or "-", read.place or "outside",
                    f"the kernel {read.says}: `{where(read.file, read.line)}` `{read.text}` (a load outside "
                    "every tensor argument of its launch, under the interpreter's trace)")
        if not any(x.kind == "out_of_bounds_read" and x.tensor == f.tensor for x in verdict.findings):
            verdict.findings.append(f)
            shown[f.signature] = runs
        if "line" not in site:  # the saved finding's own wrong does not show: the read does
            site = read.to_json()
    return site


def varies_by_nature(saved: SavedCase, verdict: Verdict) -> bool:
    """Whether a case's verdict can differ between runs: its saved finding, or one its run
    shows, is of a kind whose runs differ by nature."""
    kinds = {defect_kind(s) for s in saved.signatures} | {f.kind for f in verdict.findings}
    return bool(kinds & VARIES)


def check_runs(checker, case, saved: SavedCase, runs: int = RUNS) -> tuple[Verdict, int, dict[str, int], int]:
    """(the verdict on every run, runs judged, {signature: runs that showed it}, runs with a
    finding): one run (two calls, the probes where they differ) for a case whose verdict
    cannot vary; `runs` of them, every finding of any run in the verdict, for one that can."""
    prepared = checker.prepare(case)
    verdict = checker.check(prepared, repeats=2)
    n = runs if varies_by_nature(saved, verdict) else 1
    shown = {s: 1 for s in dict.fromkeys(verdict.signatures())}
    failing = int(verdict.failed)
    for _ in range(n - 1):
        again = checker.check(prepared, repeats=2)
        failing += again.failed
        for f in again.findings:
            if f.signature not in shown:
                verdict.findings.append(f)
            shown[f.signature] = shown.get(f.signature, 0) + 1
        if verdict.refused is None:
            verdict.refused = again.refused
    return verdict, n, shown, failing


VERSIONS_CHECKED = ("torch", "triton", "numpy", "gpu")


def version_warnings(saved: SavedCase) -> list[str]:
    """One line per version that differs from the one the case was found on: a defect that no
    longer shows (or a new one) may be the environment's doing."""
    from .corpus import environment_versions

    gpu = devmod.gpu_name(devmod.selected()) if devmod.selected() else None
    now = environment_versions(gpu)
    out = []
    for key in VERSIONS_CHECKED:
        was = saved.versions.get(key)
        if was is not None and was != now.get(key):
            out.append(f"the case was found with {key} {was}, this is {now.get(key)}")
    return out


def render(r: Replayed, name: str | None = None) -> str:
    """What `kvfuzz replay` prints; `name`: the case directory's name (default: the corpus key,
    the name the corpus gives it)."""
    from .contract import status_text
    from .ops import CONTRACTS
    from .show import cell_lines, input_lines

    c, v = r.saved.case, r.verdict
    lines = [f"case     {name or r.saved.key()}  ({c.op} [{c.variant}], content digest {c.digest()})",
             f"target   {r.target}  ({r.description}) on {devmod.describe(r.device)}"
             + (f", cross-checked on {c.meta['cross_check']}" if c.meta.get("cross_check") else "")]
    if r.saved.finding is not None:
        lines.append(f"saved    {r.saved.finding.kind}: {r.saved.finding.signature} (expected: {r.saved.expected})")
    site = c.meta.get("as_called")
    if site:  # launched with a call site's own argument list (callsites/launch.py)
        from .callsites.launch import binding_of

        lines.append(f"as called {site['file']}:{site['line']} ({site.get('function')}): "
                     f"{site['entry']}({', '.join(site['args'] + [f'{k}={v}' for k, v in site['kwargs'].items()])})")
        lines += [f"binding  {b['message']}" for b in binding_of(site, r.target)]
    else:  # the target release's own call sites of the op that bind elsewhere (docs/callsites.md)
        from .callsites.launch import binding_findings, run_sites

        lines += [f"binding  {b['message']}" for b in binding_findings(c.op, run_sites(r.target), r.target)]
    stress = CONTRACTS[c.op].stress_reasons(c) if v.status == "in_contract" else []
    lines.append(f"contract {status_text(v.status, v.reasons, stress)}"
                 + (" (judged as in contract; reported apart from in-contract findings)" if stress else ""))
    lines += [f"         also: {why}" for why in v.reasons[1:3]]
    if v.expected is not None and v.expected.boundary:
        lines.append(f"boundary {v.expected.boundary}")
    if v.refused:
        lines.append(f"raised   {v.refused}")
    lines.append("scalars  " + ", ".join(f"{k}={val}" for k, val in sorted(c.scalars.items())))
    lines.append("inputs")
    lines += input_lines(c, v.findings)
    lines.append("outputs")
    lines += [f"  {out}: {spec.describe()}" for out, spec in sorted(c.tensors.items()) if out not in c.values]
    if not v.findings:
        lines.append("verdict  PASS: no findings" + (f" in {r.runs} runs" if r.runs > 1 else ""))
        return "\n".join(lines)
    lines.append(f"verdict  FAIL: {len(v.findings)} finding(s)"
                 + (f", shown in {r.failing} of {r.runs} runs (its runs differ by nature)" if r.varies else ""))
    if r.site:
        from .sites import site_line

        lines.append(f"site     {site_line({'site': r.site})}")
    for f in v.findings:
        k = r.shown.get(f.signature, r.runs)
        lines.append(f"  {f.kind}: {f.signature}" + (f"  (shown in {k} of {r.runs} runs)" if k < r.runs else ""))
        lines.append(f"    {f.message}")
        lines += [f"    {line}" for line in cell_lines(f, c)]
    return "\n".join(lines)
