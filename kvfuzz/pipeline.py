"""The finding pipeline: what happens to a finding from the moment an engine records it.

A campaign makes one `FindingPipeline`; every engine hands it each new finding (`add`, the
`sink` of `engines.base.OpRun`). There it is confirmed in fresh worker processes from its saved
form (`confirm.py`) and saved to the corpus at once, so even SIGKILL loses nothing confirmed;
one that does not reproduce there is flaky and never saved. When the op's fuzzing is over,
`settle` minimizes each confirmed finding in the warm worker (`minimize.py`), confirms the
minimized case the same way and saves it over the first one; if minimizing lost the
signature, the confirmed case saved earlier stays. The op's minimizing time (`--time-limit`)
is shared out among the findings that need it, the smallest case first, so that what a quick
one leaves goes to the large ones (`fair_share`). Where the shards of one campaign find the same
defect, the shard whose case the corpus kept minimizes it; the others spend none of their
share on it (`held_elsewhere`). A finding whose share was spent before it came up (slow fresh
processes on a busy machine, a fuzz phase that ran long) is saved as confirmed and is
`starved`: once every op has run, `settle_starved` minimizes it in the minimizing time the
later ops left unused.

One defect often shows several signatures (where a wild write lands, which tensor a race
touches): a finding whose minimized case shows the signature of another finding of the op, or
equals its minimized case, takes that finding in (`_settle`, `_absorb`). The corpus then holds
one case, whose meta lists every signature it shows, and the report one finding with its
signatures. The report's findings come out of `saved` and `flaky`.

Nothing kvfuzz does to a finding may lose it: an exception of kvfuzz's own while one finding is
confirmed, minimized, saved or merged ends that stage for that finding only (`internal.py`). The
finding is kept as far as it got: a case whose confirmation raised is saved unconfirmed, one
whose minimizing raised is saved as confirmed; the error goes into `internal_errors`, the saved
case's `meta["internal_errors"]` and the report, and the campaign goes on.

Against a baseline (baseline.py) each ordinary finding carries its class on the case it was
first seen on (`Finding.against`). One the baseline shares (wrong the same way on every unit)
is the baseline's defect: it is listed (`shared`, the report's `shared_with_baseline`) and
costs nothing more: no confirmation, no minimizing, no saved case. One under a regression or
change stands with that class finding, which the same case shows: it is not confirmed alone
but merged into the class finding when the op settles (`under_class`); only where no class
finding of the op shows it is it confirmed and settled on its own.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .case import Case
from .check import Checker
from .confirm import Confirmation, confirm, confirm_many
from .corpus import DirectoryCorpus, SavedCase, SaveResult, read_case_dir
from .corpus.format import key_of
from .engines.common import Found
from .errors import BadInput
from .execute import one_line
from .findings import CLASSES, kind_of, runs_to_show
from .internal import describe, internal_error
from .minimize import minimize
from .worker import Executor, WorkerExecutor

if TYPE_CHECKING:
    from .campaign import CampaignConfig

LISTED = "listed"  # first_saved's mark of a finding another saved case lists (known)
PENDING = "pending"  # add_many's outcome of a finding piled up to be confirmed with later ones
SHARD_START_SPREAD_S = 30.0  # how far apart the shards of one campaign may start
# less minimizing time than this, cut by a --time-limit slot, leaves a finding starved: on the
# H200 a large case's first candidate alone outlasted such slivers, and the case stayed as found
MIN_MINIMIZE_S = 3.0


@dataclass
class Saved:
    found: Found
    case: Case
    path: Path | None
    minimize_log: list[str] = field(default_factory=list)
    minimize_seconds: float = 0.0  # kvfuzz's reducer (Hypothesis' shrink ran during fuzzing)
    save_error: str | None = None  # the corpus refused it (say, its slot holds an unreadable case)
    confirmation: Confirmation | None = None  # of the case saved
    minimized_confirmed: bool | None = None  # None: not minimized further
    new: bool = True  # False: the corpus already held this finding (an earlier run, another shard)
    signatures: list[str] = field(default_factory=list)  # the findings it stands for, its own first
    shows: frozenset[str] = frozenset()  # the signatures its case showed when last judged
    starved: bool = False  # its op's minimizing time was spent before it came up (settle_starved)
    unconfirmed: bool = False  # not confirmed (`unconfirmed_why`): saved as found, never minimized
    unconfirmed_why: str | None = None  # its confirmation raised, or the run's time left none
    site: dict | None = None  # its defect site (kvfuzz/sites: meta["site"]), or {"none": why}
    against_defect: dict | None = None  # a regression or change: new defect or new symptom (baseline.defect_against)

    def __post_init__(self) -> None:
        if not self.signatures:
            self.signatures = [self.found.finding.signature]


@dataclass
class Flaky:
    finding: Found
    confirmation: Confirmation


def fair_share(until: float | None, waiting: int) -> float | None:
    """When the next of `waiting` findings must be settled by, so that the op's minimizing
    time is shared out and the first findings do not leave the last ones unminimized (one
    merged into another uses none of its share, which goes to those after it)."""
    if until is None:
        return None
    now = time.monotonic()
    return now + max(0.0, until - now) / max(waiting, 1)


def minimize_seconds(wanted: float, until: float | None, confirmation: Confirmation | None) -> float:
    """A finding's minimizing time: `wanted`, cut so that the confirmation and re-run of the
    minimized case that follow (about 1.5 times what its first confirmation took) still end
    by `until`; else one finding overruns its share and the last ones get none."""
    reserve = 1.5 * confirmation.seconds if confirmation is not None else 0.0
    return within(wanted, None if until is None else until - reserve)


def within(seconds: float, until: float | None) -> float:
    """`seconds`, cut to what is left before `until` (a monotonic time; None: no cut)."""
    return seconds if until is None else max(0.0, min(seconds, until - time.monotonic()))


class FindingPipeline:
    """Confirm, save, minimize, confirm again, merge and save: every finding of a campaign.
    `fresh()` gives a worker that has run no case (for confirmations); `executor` is the
    campaign's warm worker (for minimizing); `store` the corpus, or None."""

    def __init__(self, cfg: CampaignConfig, executor: Executor, fresh: Callable[[], WorkerExecutor], device: str,
                 versions: dict, store: DirectoryCorpus | None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.cfg, self.executor, self.fresh, self.device = cfg, executor, fresh, device
        self.versions, self.store, self.progress = versions, store, progress
        self.saved: list[Saved] = []
        self.flaky: list[Flaky] = []
        self.shared: list[Found] = []  # --baseline: findings the baseline shows the same way
        self.under_class: dict[str, Found] = {}  # --baseline: ordinary findings a class finding stands for
        self.confirmed: dict[str, Confirmation] = {}
        self.first_saved: dict[str, str] = {}  # signature -> store status when first seen ("new", "kept", LISTED)
        self.listed_at: dict[str, Path] = {}  # signature -> the saved case of another finding that lists it
        # signature -> the corpus case, no larger than this process's, that another process of this
        # campaign (a shard) saved first or that is minimized already: that one is minimized there
        self.held_elsewhere: dict[str, Path] = {}
        # a case found after this (less a margin for shards starting a little apart) is this run's
        self.since = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=SHARD_START_SPREAD_S)
        self.internal_errors: list[dict] = []  # kvfuzz's own exceptions, each of one stage of one finding
        self.sites: dict[str, dict] = {}  # signature -> its site (meta["site"]), attributed as it settles
        # the run's end (a monotonic time; None: unbounded): no confirmation starts that cannot
        # end by then (`time_to_confirm`); a finding it leaves unconfirmed is saved as found
        self.deadline: float | None = None
        self.confirm_guess_s = 0.0  # what a confirmation costs before one has been timed (a process start)
        self.confirm_took: list[float] = []  # each confirmation batch's seconds
        self.confirming: dict[str, list] = {}  # op -> [seconds confirming, confirmation batches] (the report's)
        self.piled: list[Found] = []  # found while the spares were starting, not confirmed yet (add_many)
        self.unconfirmed_why: dict[str, str] = {}  # signature -> why it was saved unconfirmed
        self.against_defect: dict[str, dict] = {}  # class signature -> new defect or new symptom (baseline.py)
        self.baseline_sites: dict[str, list[dict] | None] = {}  # case digest -> where the baseline goes wrong on it

    def _fault(self, stage: str, exc: BaseException, sig: str | None) -> dict:
        """Record an exception of kvfuzz's own that ended `stage` for the finding `sig`."""
        err = internal_error(stage, exc, sig)
        self.internal_errors.append(err)
        self._say(f"  {sig}: {describe(err)}")
        return err

    def errors_of(self, sigs) -> list[dict]:
        """The internal errors recorded for the findings `sigs`."""
        sigs = set(sigs)
        return [e for e in self.internal_errors if e.get("signature") in sigs]

    def add(self, f: Found) -> str:
        """A finding an engine has just recorded (`add_many` of one)."""
        return self.add_many([f])[0]

    def add_many(self, founds: list[Found], may_wait: bool = False) -> list[str]:
        """Findings an engine has just recorded together (one case's signatures, one batch's):
        confirmed in one set of fresh processes before they count, then on disk at once (a
        SIGKILL during the long minimization that follows must not lose them). Returns, per
        finding, "flaky", "known" or "new" (new to the corpus). A confirmation that raises, or
        that the run's deadline leaves no time for, saves the case unconfirmed
        (`_keep_unconfirmed`). Against a baseline, a finding it shares, or one a class finding
        stands for, is not confirmed here: "known".

        `may_wait` (the op is fuzzing): while the spares the last confirmation took are still
        starting (`WorkerExecutor.spares_ready`), the findings pile up, PENDING, and fuzzing
        goes on; the next call that finds the spares ready confirms them with its own, and their
        outcomes follow its findings' in what it returns; `confirm_piled` confirms the rest
        when the op's fuzzing ends."""
        outcome: dict[int, str] = {}
        todo: list[Found] = []
        for i, f in enumerate(founds):
            if f.finding.against == "shared":
                self.shared.append(f)
                self._say(f"  shared with the baseline: {f.finding.signature} (not confirmed alone)")
                outcome[i] = "known"
            elif f.finding.against in CLASSES:
                self.under_class[f.finding.signature] = f
                outcome[i] = "known"
            else:
                todo.append(f)
        mine = [i for i in range(len(founds)) if i not in outcome]
        if not may_wait:
            done = self._confirm_found(todo)
        elif todo and not self._spares_ready():
            self.piled += todo
            done = [PENDING] * len(todo)
        else:  # what piled up meanwhile goes with them (piled until confirmed: an interrupt saves them)
            self.piled = todo + self.piled
            done = self._confirm_found(self.piled)
            self.piled = []
        outcome.update(zip(mine, done))
        return [outcome[i] for i in range(len(founds))] + done[len(mine):]

    def confirm_piled(self) -> list[str]:
        """The findings piled up while spares were starting (`add_many`), confirmed together."""
        done = self._confirm_found(self.piled)
        self.piled = []
        return done

    def _spares_ready(self) -> bool:
        owner = getattr(self.fresh, "__self__", None)
        ready = getattr(owner, "spares_ready", None)
        return ready is None or ready(self.cfg.confirm_tries)

    def _confirm_found(self, todo: list[Found]) -> list[str]:
        """`todo` confirmed in one set of fresh processes (`add_many`): each one's outcome."""
        if todo and not self.time_to_confirm():
            return [self._keep_unconfirmed(f, self.no_time_why()) for f in todo]
        if not todo:
            return []
        try:
            confirmations = self._confirm([self._saved_case(f, f.case) for f in todo])
        except Exception as exc:
            out = []
            for f in todo:
                self._fault("confirm", exc, f.finding.signature)
                out.append(self._keep_unconfirmed(f, "its confirmation raised"))
            return out
        return [self._confirmed(f, c) for f, c in zip(todo, confirmations)]

    def _confirmed(self, f: Found, c: Confirmation) -> str:
        """`f` after its confirmation `c`: flaky (not saved), or saved at once."""
        if not c.confirmed:  # stays in the engine's findings, so the engine does not report it again
            self.flaky.append(Flaky(f, c))
            self._say(f"  flaky: {f.finding.signature}: {c.describe()}; not saved")
            return "flaky"
        self.confirmed[f.finding.signature] = c
        try:
            return self._first_save(f)
        except Exception as exc:  # not on disk yet: settling the op saves it (`_finish`, `_keep`)
            self._fault("save", exc, f.finding.signature)
            return "new"

    def _confirm(self, cases: list[SavedCase]) -> list[Confirmation]:
        """`cases` confirmed in one set of fresh processes, timed and counted for their op."""
        t = time.monotonic()
        try:
            if len(cases) == 1:
                return [confirm(cases[0], self.fresh, self.cfg.confirm_tries)]
            return confirm_many(cases, self.fresh, self.cfg.confirm_tries)
        finally:
            seconds = time.monotonic() - t
            self.confirm_took.append(seconds)
            tally = self.confirming.setdefault(cases[0].case.op, [0.0, 0])
            tally[0] += seconds
            tally[1] += 1

    def confirm_cost(self) -> float:
        """What the next confirmation will take: the longer of the last two timed, else the
        guess. The first one starts its processes; later ones find spares started
        (`WorkerExecutor.fresh_many`) and cost their cases, so an old maximum would overstate it."""
        return max(self.confirm_took[-2:], default=self.confirm_guess_s)

    def time_to_confirm(self) -> bool:
        """Whether a confirmation started now ends by the run's deadline."""
        return self.deadline is None or time.monotonic() + self.confirm_cost() <= self.deadline

    def no_time_why(self) -> str:
        return (f"the run's time ran out: confirming takes about {self.confirm_cost():.1f} s, "
                f"{max(0.0, self.deadline - time.monotonic()):.1f} s were left")

    def _first_save(self, f: Found) -> str:
        """A confirmed finding on disk at once, unless another saved case lists it: "new" or "known"."""
        res = None
        sc = self._saved_case(f, f.case)
        listed = self._listed_elsewhere(sc) if self.store is not None else None
        if listed is not None:  # shown by a case saved under another finding: known
            self.first_saved[f.finding.signature] = LISTED
            self.listed_at[f.finding.signature] = listed
            return "known"
        if self.store is not None:
            res, error = self._try_save(sc)
            if res is not None:
                self.first_saved[f.finding.signature] = res.status
                if res.status == "kept" and self._minimized_elsewhere(res.path):
                    self.held_elsewhere[f.finding.signature] = res.path
            else:  # _finish saves again, and reports it
                self._say(f"  {f.finding.signature}: not saved yet: {error}")
        return "new" if res is None or res.status == "new" else "known"

    def _keep_unconfirmed(self, f: Found, why: str) -> str:
        """A finding not confirmed (its confirmation raised, or the run's deadline left no time
        for one): saved as found, marked unconfirmed with `why` (and an error in its meta);
        never minimized (nothing showed it reproduces)."""
        sig = f.finding.signature
        self.unconfirmed_why[sig] = why
        path, error, res = None, None, None
        if self.store is not None:
            try:
                res, error = self._try_save(self._saved_case(f, f.case))
            except Exception as exc:
                error = one_line(exc)
                self._fault("save", exc, sig)
            path = res.path if res is not None else None
        new = res is None or res.status == "new"
        self.saved.append(Saved(f, f.case, path, save_error=error, new=new, shows=frozenset({sig}), unconfirmed=True,
                                unconfirmed_why=why))
        self._say(f"  {f.finding.kind}: {sig} -> {path or 'NOT SAVED'} (unconfirmed: {why})")
        return "new" if new else "known"

    def waiting(self, found: dict[str, Found]) -> bool:
        """Whether any of an op's findings is confirmed and waits to be settled."""
        piled = {f.finding.signature for f in self.piled}
        return any(sig in self.confirmed or sig in piled for sig in found)

    def settle(self, found: dict[str, Found], until: float | None = None) -> None:
        """The end of an op: each confirmed finding of `found` minimized, confirmed again,
        merged with the op's others and saved, within `until` (a monotonic time, shared out
        among them); `found` is emptied as they settle."""
        groups_from = len(self.saved)  # this op's findings, merged as they settle, are saved[groups_from:]
        # those another process minimizes, or another saved case lists, take no time: first;
        # then the rest by size, so that time a small case leaves goes to the large ones; a
        # regression (fix, change) against a baseline before the ordinary findings of its size
        # class, so that it hosts those its case shows, not the other way round
        order = sorted((sig for sig in found if sig in self.confirmed),
                       key=lambda sig: (self._needs_time(sig), kind_of(sig) not in CLASSES,
                                        found[sig].case.size_key()))
        waiting = sum(map(self._needs_time, order))
        for sig in order:
            needs = self._needs_time(sig)
            try:
                self._settle(found[sig], groups_from, fair_share(until, waiting))
            except Exception as exc:  # the finding stays, as confirmed and saved when first seen
                self._fault("settle", exc, sig)
                self._keep(found[sig])
            waiting -= needs
        try:
            self._group_defects(groups_from)
        except Exception as exc:  # the findings stay apart, as their merge left them
            self._fault("group", exc, None)
        for sig in [s for s in found if s in self.under_class]:
            f = self.under_class.pop(sig)
            try:
                self._settle_under_class(f, groups_from, until)
            except Exception as exc:
                self._fault("settle", exc, sig)
                self._keep(f)
        found.clear()

    def _group_defects(self, groups_from: int) -> None:
        """One defect, one case per symptom kind: this op's findings with one defect key
        (sites/defects.py) and one kind merged into the smallest case of them, which lists
        their signatures; those with no site stay as they are."""
        from .sites.defects import defect_key

        hosts: dict[tuple, Saved] = {}
        for x in sorted(self.saved[groups_from:], key=lambda x: x.case.size_key()):
            key = defect_key(x.found.finding.op, x.site)
            if key is None or x.unconfirmed:
                continue
            host = hosts.setdefault((key, x.found.finding.kind), x)
            if host is not x:
                self.saved.remove(x)
                self._absorb(host, list(x.signatures), [x.new] * len(x.signatures), [x.found])

    def _keep(self, f: Found) -> None:
        """After an internal error settling `f`: it is in `saved`, as it stands, unless it is there."""
        sig = f.finding.signature
        if any(sig in x.signatures for x in self.saved):
            return
        try:
            self.saved.append(self._finish(f, interrupted=True))
        except Exception as exc:
            self._fault("save", exc, sig)
            path = self.store.path_of(key_of(sig, self.cfg.target)) if self._in_store(sig) else None
            self.saved.append(Saved(f, f.case, path, save_error=one_line(exc), confirmation=self.confirmed.get(sig),
                                    shows=frozenset({sig})))

    def _in_store(self, sig: str) -> bool:
        try:
            return self.store is not None and key_of(sig, self.cfg.target) in self.store
        except Exception:
            return False

    def _settle_under_class(self, f: Found, groups_from: int, until: float | None) -> None:
        """An ordinary finding a regression or change stands for: taken in by the op's class
        finding whose case shows it; else (that one was flaky, or its case no longer shows it)
        confirmed and settled on its own."""
        sig = f.finding.signature
        if any(sig in g.shows for g in self.saved[groups_from:]):
            self._settle(f, groups_from, until)  # a host shows it: absorbed, nothing run
            return
        if self.add(dataclasses.replace(f, finding=dataclasses.replace(f.finding, against=""))) == "flaky" \
                or sig in self.unconfirmed_why:
            return
        self._settle(f, groups_from, fair_share(until, 1))

    def settle_starved(self, until: float | None) -> None:
        """Once every op has run: each starved finding (its op's minimizing time was spent
        before it came up) minimized in the time left before `until`, smallest first. The
        smaller case replaces the saved one only if it still shows every signature that case
        stands for; else the saved case stays."""
        starved = sorted((x for x in self.saved if x.starved and x.path is not None),
                         key=lambda x: x.case.size_key())
        for k, x in enumerate(starved):
            share = fair_share(until, len(starved) - k)
            try:
                m = self._minimized(x.found, share)
            except Exception as exc:  # the saved case stays
                self._fault("minimize", exc, x.found.finding.signature)
                continue
            if m is None or m[0] == x.case or not set(x.signatures) <= m[4]:
                continue
            case, log, seconds, minimized_confirmed, shows, confirmation = m
            res, error = self._try_save(self._saved_case(x.found, case, tuple(log), x.signatures))
            if res is None:
                self._say(f"  {x.found.finding.signature}: minimized at the end, NOT SAVED: {error}")
                continue
            x.case, x.minimize_log, x.minimize_seconds = case, list(log), x.minimize_seconds + seconds
            x.minimized_confirmed, x.shows, x.path, x.starved = minimized_confirmed, frozenset(shows), res.path, False
            x.confirmation = confirmation
            self._say(f"  {x.found.finding.kind}: {x.found.finding.signature} -> {res.path} "
                      f"(minimized after the last op: {x.found.first.size_key()[0]} -> {case.size_key()[0]} elements)")

    def _needs_time(self, sig: str) -> bool:
        """Whether settling `sig` minimizes here (not another process's case, nor a listed one)."""
        return sig not in self.held_elsewhere and self.first_saved.get(sig) != LISTED

    def save_unminimized(self, found: dict[str, Found]) -> None:
        """Interrupted: each confirmed finding of `found` saved as it stands, running nothing;
        one still piled up for confirmation saved unconfirmed."""
        piled, self.piled = self.piled, []
        for f in piled:
            if f.finding.signature not in self.confirmed:  # the cut came while its confirmation ran
                self._keep_unconfirmed(f, "the run was cut short before its confirmation")
        for sig, f in found.items():
            if sig in self.confirmed and self.first_saved.get(sig) == LISTED:
                self.saved.append(Saved(f, f.case, self.listed_at[sig], new=False))
            elif sig in self.confirmed:
                self._keep(f)

    def _say(self, line: str) -> None:
        if self.progress:
            self.progress(line)

    def _try_save(self, sc: SavedCase) -> tuple[SaveResult | None, str | None]:
        """`store.save`, or why it refused (say, the slot holds an unreadable case): one refused
        save must not cost the run its other findings. Any other exception is kvfuzz's own: an
        internal error."""
        try:
            return self.store.save(sc), None
        except (OSError, ValueError, BadInput) as exc:
            return None, one_line(exc)
        except Exception as exc:
            self._fault("save", exc, sc.finding.signature)
            return None, one_line(exc)

    def _saved_case(self, f: Found, case: Case, log: tuple[str, ...] = (),
                    signatures: list[str] | None = None) -> SavedCase:
        cfg = self.cfg
        external = cfg.target != "builtin"
        meta = dict(seed=cfg.seed, first_seen=f.first.digest())
        if signatures and len(signatures) > 1:  # the findings merged into this one (SavedCase.signatures)
            meta["signatures"] = list(signatures)
        if f.finding.kind == "backend_divergence":  # what `kvfuzz replay` compares the device with
            meta["cross_check"] = cfg.cross_check
        if cfg.baseline:  # the case was judged against it: replay runs both again
            meta["baseline"] = cfg.baseline
        if f.finding.signature in self.sites:  # the statement that went wrong (docs/defects.md)
            meta["site"] = self.sites[f.finding.signature]
        if f.finding.signature in self.against_defect:  # new defect, or a known one's new symptom
            meta["against_defect"] = self.against_defect[f.finding.signature]
        errors = self.errors_of(signatures or [f.finding.signature])
        if errors:  # kvfuzz's own exceptions on the way here (docs/case-format.md)
            meta["internal_errors"] = errors
        if f.finding.signature in self.unconfirmed_why and f.finding.signature not in self.confirmed:
            meta["unconfirmed"] = True
            meta["unconfirmed_why"] = self.unconfirmed_why[f.finding.signature]
        return SavedCase(
            case=case.with_meta(**meta), finding=f.finding, target=cfg.target,
            device=self.device, versions=self.versions, origin=cfg.engine,
            expected="xfail" if external else "pass",
            reason=f"known defect of {cfg.target}: {f.finding.message}" if external else None,
            minimized=case != f.first, minimize_log=log)

    def _minimized_elsewhere(self, path: Path) -> bool:
        """Whether the corpus case at `path`, which the store kept over this process's, is
        minimized or will be: minimized already, or found during this run (by another shard of
        the campaign, which minimizes what it saved). An earlier run's unminimized case is not:
        this process minimizes its own."""
        try:
            existing = read_case_dir(path)
            found = datetime.datetime.fromisoformat(existing.found_at)
        except (OSError, ValueError, BadInput):
            return False
        if found.tzinfo is None:
            found = found.replace(tzinfo=datetime.timezone.utc)
        return existing.minimized or found >= self.since

    def _listed_elsewhere(self, sc: SavedCase) -> Path | None:
        """The saved case of another finding that lists `sc`'s signature (a campaign merged it
        there), or None; a case under `sc`'s own key is for `save` to compare with."""
        try:
            where = self.store.listing(sc.case.op, sc.target, sc.finding.signature)
        except OSError:
            return None
        return where if where is not None and where.name != sc.key() else None

    def _finish(self, f: Found, interrupted: bool = False, until: float | None = None) -> Saved:
        """kvfuzz's reducer after the engine's own shrinking; the result is confirmed in a fresh
        process and saved over the case saved when the finding was first seen. If minimizing lost
        the signature, the confirmed case stays. Interrupted: save the case as it stands (it was
        confirmed when first seen), running nothing. Its share spent before it starts: saved as
        it stands, and starved (`settle_starved`)."""
        sig = f.finding.signature
        first_saved = self.first_saved.get(sig)
        confirmation = self.confirmed.get(sig)
        case, log, seconds, shows = f.case, [], 0.0, {sig}
        minimized_confirmed = None
        starved = False
        if not interrupted:
            try:
                m = self._minimized(f, until)
            except Exception as exc:  # minimizing ended: the confirmed case stays
                self._fault("minimize", exc, sig)
                m = False
            if m is None:  # the op's --time-limit slot is spent, or its share less the reserve
                starved = True
                try:
                    shows |= set(Checker(self.executor, f.finding.op).check(case, runs_to_show(sig)).signatures())
                except Exception as exc:  # what else it shows is for merging only
                    self._fault("settle", exc, sig)
            elif m:
                case, log, seconds, minimized_confirmed, shows, c = m
                confirmation = c or confirmation
        finding = f.finding
        if not interrupted:
            self._attribute(f, case, until)
        path, error, res = None, None, None
        if self.store is not None:
            res, error = self._try_save(self._saved_case(f, case, tuple(log)))
            if res is None:
                self._say(f"  {finding.kind}: {sig}: NOT SAVED: {error}")
            else:
                path = res.path
                # "new": new to the corpus, though its first form was saved earlier
                self._say(f"  {finding.kind}: {sig} -> {res.path} ({'new' if first_saved == 'new' else res.status}"
                          f"{'; no minimizing time left, minimized after the last op if time allows' if starved else ''})")
        else:
            self._say(f"  {finding.kind}: {sig}")
        # known: saved before this run saw it (by an earlier campaign, or a shard beside this one);
        # where its first save failed, this save says
        return Saved(f, case, path, log, seconds, error, confirmation, minimized_confirmed,
                     new=first_saved == "new" or (first_saved is None and (res is None or res.status == "new")),
                     shows=frozenset(shows), starved=starved, site=self.sites.get(sig),
                     against_defect=self.against_defect.get(sig))

    def _attribute(self, f: Found, case: Case, until: float | None) -> None:
        """The site of `f` on the case it is saved with (kvfuzz/sites: the case run traced under
        Triton's interpreter, in a subprocess of its own), into `sites`; none, said so, for a
        crash, a timeout or an interpreter that refuses the target."""
        import threading

        from .sites.choose import NO_SITE, site_meta
        from .sites.run import TIMEOUT_S, attribute_isolated

        sig = f.finding.signature
        if not self.cfg.sites:
            return
        # the baseline's run of a class finding's case, attributed beside the target's (each in
        # its own subprocess) rather than after it: the label does not wait on the target's
        # attribution, nor go without time where that took the rest
        against = self.cfg.baseline and kind_of(sig) in ("regression", "changed")
        early, digest, seconds = None, case.digest() if against else "", within(TIMEOUT_S, until)
        if against and digest not in self.baseline_sites and seconds >= MIN_MINIMIZE_S:
            def beside() -> None:
                try:
                    got, _ = attribute_isolated(case, self.cfg.baseline, seconds)
                except Exception:  # the label's own pass tries again, in the time then left
                    return
                self.baseline_sites[digest] = [x.to_json() for x in got.sites.values()] if got else None

            early = threading.Thread(target=beside, name="kvfuzz-baseline-site", daemon=True)
            early.start()
        try:
            attribution, why = None, ""
            if site_meta(sig, None).get("none") not in NO_SITE.values():
                attribution, why = attribute_isolated(case, self.cfg.target, within(TIMEOUT_S, until) or 1.0)
            self.sites[sig] = site_meta(sig, attribution, why)
        except Exception as exc:  # no site: the finding stays as it is
            self._fault("site", exc, sig)
        if against:
            try:
                self.against_defect[sig] = self._defect_against(f, case, until, early)
            except Exception as exc:  # not told: the finding stays as it is
                self._fault("site", exc, sig)

    def _defect_against(self, f: Found, case: Case, until: float | None, early=None) -> dict:
        """Whether the class finding `f` is a new defect or a new symptom of one the baseline
        has: its site against where the baseline goes wrong, attributed under the interpreter on
        `f`'s case (`early`: the thread `_attribute` started attributing it), then (no
        match yet) on the cases of the op's findings it shares (two at most), each once per run."""
        from .baseline import NEW_SYMPTOM, SITE_UNKNOWN, defect_against, statement
        from .sites.run import TIMEOUT_S, attribute_isolated

        site = self.sites.get(f.finding.signature)
        if statement(site) is None:
            return defect_against(site, [], "" if self.cfg.sites else "sites not attributed (--no-sites)")
        if early is not None:
            early.join()
        shared = {x.case.digest(): x.case for x in self.shared if x.finding.op == f.finding.op}
        seen: list[dict] = []
        checked = 0
        for c in [case] + list(shared.values())[:2]:
            digest = c.digest()
            if digest not in self.baseline_sites:
                seconds = within(TIMEOUT_S, until)
                if seconds < MIN_MINIMIZE_S:  # no time to ask the baseline
                    break
                attribution, _ = attribute_isolated(c, self.cfg.baseline, seconds)
                self.baseline_sites[digest] = [x.to_json() for x in attribution.sites.values()] if attribution else None
            if self.baseline_sites[digest] is None:  # the baseline's run was not attributed: says nothing
                continue
            checked += 1
            seen += self.baseline_sites[digest]
            if defect_against(site, seen)["is"] == NEW_SYMPTOM:
                break
        if not checked:
            return {"is": SITE_UNKNOWN, "why": "no time left to attribute the baseline's run"}
        return dict(defect_against(site, seen), cases=checked)

    def _minimized(self, f: Found, until: float | None):
        """`f` minimized by `until` and its smaller case confirmed in fresh processes: (case, log,
        seconds, minimized_confirmed, shows, confirmation of the case), the case `f.case` if
        minimizing lost the signature; None if no time is left (`minimize_seconds`)."""
        cfg, sig = self.cfg, f.finding.signature
        wanted = cfg.minimize_budget_s / 2 if f.shrunk_by else cfg.minimize_budget_s
        budget = minimize_seconds(wanted, until, self.confirmed.get(sig))
        if budget <= 0 or budget < min(wanted, MIN_MINIMIZE_S):  # a sliver: better spent after the last op
            return None
        checker = Checker(self.executor, f.finding.op)
        m = minimize(f.case, checker.still_fails(sig), budget_s=budget, assess=checker.prepare)
        for err in m.errors:  # the generic reducer's, which minimize outlived
            err = dict(err, signature=sig)
            self.internal_errors.append(err)
            self._say(f"  {sig}: {describe(err)}")
        case, log, seconds = m.case, list(m.log), m.seconds
        minimized_confirmed, c = None, None
        shows = {sig}
        if case != f.case:
            verdict = checker.check(case, runs_to_show(sig))
            shows |= set(verdict.signatures())
            finding = next((x for x in verdict.findings if x.signature == sig), None)
            no_time = finding is not None and not self.time_to_confirm()
            if finding is not None and not no_time:
                try:
                    c = self._confirm([self._saved_case(f, case, tuple(log))])[0]
                except Exception as exc:  # the minimized case is not confirmed: the first one stays
                    self._fault("confirm", exc, sig)
            minimized_confirmed = bool(c and c.confirmed)
            if minimized_confirmed:
                f.finding = finding
            else:  # the smaller case lost it, or the run's deadline left no time to confirm it
                self._say(f"  {sig}: " + ("no time left to confirm the minimized case" if no_time else
                                          "the minimized case did not reproduce in a fresh process")
                          + "; keeping the case it was confirmed on")
                case, log, c = f.case, [], None
        if case == f.case:  # what the case it keeps shows, for merging
            shows = {sig} | set(checker.check(case, runs_to_show(sig)).signatures())
        return case, log, seconds, minimized_confirmed, shows, c

    def _settle(self, f: Found, groups_from: int, until: float | None) -> None:
        """Minimize and save `f` (`_finish`), or merge it with this op's findings settled before it
        (`saved[groups_from:]`): one whose case already shows `f`'s signature takes it in without
        minimizing it; else `f`'s minimized case takes in each earlier one whose case it equals or
        whose signatures it all shows. One defect, one finding, one saved case."""
        sig = f.finding.signature
        groups = self.saved[groups_from:]
        host = next((g for g in groups if sig in g.shows), None)
        if host is not None:
            try:
                self._absorb(host, [sig], [self.first_saved.get(sig) in (None, "new")], [f])
            except Exception as exc:  # not merged: `f` stays a finding of its own, its first case saved
                self._fault("absorb", exc, sig)
                if sig not in host.signatures:
                    self._keep(f)
            return
        if sig in self.held_elsewhere:  # another shard minimizes the corpus's case: none of this one's time
            self.saved.append(Saved(f, f.case, self.held_elsewhere[sig], new=False, shows=frozenset({sig})))
            self._say(f"  {f.finding.kind}: {sig} -> {self.held_elsewhere[sig]} (kept: a case no larger is "
                      "minimized by the process that saved it)")
            return
        if self.first_saved.get(sig) == LISTED:  # known: another saved case lists it
            self.saved.append(Saved(f, f.case, self.listed_at[sig], new=False))
            self._say(f"  {f.finding.kind}: {sig} -> {self.listed_at[sig]} (known: that case lists it)")
            return
        x = self._finish(f, until=until)
        taken = [g for g in groups if g.case == x.case or set(g.signatures) <= x.shows]
        for g in taken:
            self.saved.remove(g)
        self.saved.append(x)
        if taken:
            try:
                self._absorb(x, [s for g in taken for s in g.signatures], [g.new for g in taken for _ in g.signatures],
                             [g.found for g in taken])
            except Exception as exc:  # not merged: the findings it would have taken in stay
                self._fault("absorb", exc, sig)
                for g in taken:
                    if not set(g.signatures) <= set(x.signatures):
                        self.saved.append(g)

    def _absorb(self, host: Saved, sigs: list[str], new: list[bool], founds: list[Found] = ()) -> None:
        """`host` stands for `sigs` too: its saved case is saved again listing them, and the cases
        this campaign saved for them are deleted once it holds the list (never a case that was in
        the corpus before: that is an earlier run's). `founds`, the findings it takes in: the
        defect was first seen at the earliest of theirs and its own (`found_after_s`,
        `found_at_case`), not when the case that stands for it was found."""
        earliest = min((g for g in (host.found, *founds) if g.found_after_s is not None),
                       key=lambda g: g.found_after_s, default=None)
        if earliest is not None and earliest is not host.found:
            host.found = dataclasses.replace(host.found, found_after_s=earliest.found_after_s,
                                             found_at_case=earliest.found_at_case)
        sigs = [s for s in sigs if s not in host.signatures]
        if not sigs:
            return
        host.signatures += sigs
        host.new = host.new or any(new)
        host.shows = host.shows | set(sigs)
        self._say(f"  {', '.join(sigs)}: shown by the case of {host.signatures[0]}; one finding")
        if self.store is None or host.path is None:
            return
        sc = self._saved_case(host.found, host.case, tuple(host.minimize_log), host.signatures)
        res, error = self._try_save(sc)
        if res is None or res.status == "kept":  # the corpus does not hold the list: keep every case
            if error:
                self._say(f"  {host.signatures[0]}: its merged signatures not saved: {error}")
            return
        host.path = res.path
        for s in sigs:
            key = key_of(s, self.cfg.target)
            if self.first_saved.get(s) == "new" and key != res.key:
                try:
                    self.store.delete(key)
                except (KeyError, OSError):
                    pass
