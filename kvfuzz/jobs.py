"""`kvfuzz fuzz --jobs N`: the campaign split into N shards, each its own `kvfuzz fuzz --shard
I/N` process, all saving into one corpus; then one report for the whole.

A shard is a full campaign (its own worker, generator and judge) on a disjoint part of the
work: the I-th of every N compile classes of each op's pool, and its own case stream (see
`CampaignConfig.shard`). On CUDA shard I is pinned to GPU (I - 1) mod the GPU count; on the
CPU each shard is one more interpreter process. The corpus store is safe under concurrent
writers (docs/case-format.md), so the shards need no coordination. SIGINT/SIGTERM are passed
on to the shards, which save what they found and write their reports as usual. Each shard's
stderr comes here: its progress snapshots (`progress.JSON_ENV`) go to `status`, every other
line to `say`, as it comes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
from collections import Counter
from pathlib import Path

from . import spawn
from .outcome import CUT_SHORT, NOT_RUN, RAN, SKIPPED, exit_code, not_run_ops
from .progress import JSON_ENV, parse

REPORT_FIELDS_SUMMED = ("cases", "shrink_runs", "reruns", "batches", "lost_batches", "classes", "variants",
                        "compiled", "not_target", "cross_checked", "confirm_seconds", "confirm_batches")


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def shard_env(index: int, device: str, gpus: int) -> dict[str, str]:
    """The environment of shard `index` (1-based): its own GPU on CUDA."""
    env = dict(os.environ)
    if device == "cuda" and gpus > 0 and "CUDA_VISIBLE_DEVICES" not in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = str((index - 1) % gpus)
    return env


def _relay(stream, say, status) -> None:
    """A shard's stderr, line by line: snapshots to `status`, the rest to `say`."""
    for line in stream:
        snapshot = parse(line)
        if snapshot is None:
            say(line.rstrip("\n"))
        elif status is not None:
            status(snapshot)


def _drain(p: subprocess.Popen) -> str:
    out = p.stdout.read()
    p.wait()
    return out


def run_jobs(argv: list[str], jobs: int, device: str, report: Path | None, say, status=None,
             fails=bool) -> tuple[dict, int]:
    """Run `kvfuzz fuzz ARGV --shard I/JOBS` for I = 1..JOBS; (merged report, exit status).
    `fails(signatures)`: whether the new findings' signatures fail the run."""
    gpus = gpu_count() if device == "cuda" else 0
    with tempfile.TemporaryDirectory(prefix="kvfuzz-jobs-") as tmp:
        procs, relays = [], []
        for i in range(1, jobs + 1):
            cmd = spawn.command("kvfuzz.cli", "fuzz", *argv, "--shard", f"{i}/{jobs}",
                                "--report", str(Path(tmp) / f"shard-{i}.json"))
            # a session of its own: a terminal's Ctrl-C reaches this process only, which then
            # stops every shard once, with SIGTERM
            p = subprocess.Popen(cmd, env=spawn.environment(shard_env(i, device, gpus) | {JSON_ENV: "1"}),
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
            procs.append(p)
            relays.append(threading.Thread(target=_relay, args=(p.stderr, say, status), daemon=True))
            relays[-1].start()
        outputs: dict[int, str] = {}
        interrupted = False
        try:
            for i, p in enumerate(procs, 1):
                outputs[i] = _drain(p)
        except KeyboardInterrupt:
            interrupted = True
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for i, p in enumerate(procs, 1):
                outputs[i] = outputs.get(i) or _drain(p) or ""
        for t in relays:
            t.join(timeout=10)
        codes = [p.returncode for p in procs] + ([130] if interrupted else [])
        for i in sorted(outputs):
            for line in (outputs[i] or "").splitlines():
                if line.startswith(("FINDING", "FLAKY", "  ")):
                    say(f"[shard {i}/{jobs}] {line}")
        reports = []
        for i in range(1, jobs + 1):
            path = Path(tmp) / f"shard-{i}.json"
            if path.is_file():
                reports.append(json.loads(path.read_text()))
    merged = merge_reports(reports, jobs)
    if interrupted:  # this process was stopped, and stopped its shards
        from . import stopping

        merged["interrupted"] = merged["cut_short"] = True
        merged["cut_short_by"] = merged.get("cut_short_by") or stopping.stopped_by()
    if report is not None:
        from .campaign import write_json_atomic

        write_json_atomic(report, merged)
    new = [s for f in merged["findings"] if f.get("new", True) for s in f.get("signatures") or [f["signature"]]]
    # the shards' own statuses count too: one that died (2), or had an internal error (4)
    return merged, exit_code(failing=bool(fails(new)), bad_input=any(c == 2 for c in codes),
                             internal_errors=merged.get("internal_errors") or [c for c in codes if c == 4],
                             cut_short=interrupted or merged["cut_short"] or any(c == 130 for c in codes),
                             not_run=not_run_ops(merged))


def _summed(timelines: list[list]) -> list[list]:
    """The shards' timelines ([seconds, cases, findings] points) added up, second by second."""
    end = int(max((t[-1][0] for t in timelines if t), default=0))
    out = []
    for sec in range(end + 1):
        cases = findings = 0
        for t in timelines:
            last = [p for p in t if p[0] <= sec]
            if last:
                cases += last[-1][1]
                findings = max(findings, last[-1][2])
        out.append([sec, cases, findings])
    return out


def _merged_status(merged: dict, shards: list[dict]) -> tuple[str, str | None]:
    """An op's status over its shards (outcome.py): cut short if any shard's was, not run if no
    shard ran a case of it, skipped where the target lacks it, else ran."""
    if merged.get("skipped"):
        return SKIPPED, str(merged["skipped"])
    cut = [s.get("reason") for s in shards if s.get("status") == CUT_SHORT]
    if cut:
        return CUT_SHORT, cut[0]
    if not merged.get("cases"):
        return NOT_RUN, next((s.get("reason") for s in shards if s.get("reason")), "no shard ran a case of it")
    return RAN, None


def merge_reports(reports: list[dict], jobs: int) -> dict:
    """One report from the shards' reports: counts summed, coverage added up, findings listed
    once per defect (entries that share a signature are one, with every signature listed) and
    flaky findings once per signature."""
    out: dict = {"kvfuzz_report": 1, "jobs": jobs, "shards": reports}
    if not reports:  # every shard failed before its report (bad usage, a refused environment: said above)
        out.update(cases=0, findings=[], flaky=[], ops={}, seconds=0.0, interrupted=False, cut_short=False,
                   cut_short_by=None, not_target=0, internal_errors=[], error="no shard wrote a report")
        return out
    first = reports[0]
    for key in ("target", "target_description", "device", "device_name", "versions", "seed", "engine", "cross_check",
                "baseline", "feature"):
        out[key] = first.get(key)
    out["seconds"] = max(r["seconds"] for r in reports)
    for key in ("startup_s", "since_import_s"):  # the job starts when its slowest shard has
        got = [r[key] for r in reports if r.get(key) is not None]
        out[key] = max(got) if got else None
    out["notes"] = list(dict.fromkeys(n for r in reports for n in r.get("notes", ())))
    out["interrupted"] = out["cut_short"] = any(r.get("interrupted") for r in reports)
    out["cut_short_by"] = next((r["cut_short_by"] for r in reports if r.get("cut_short_by")), None)
    out["cases"] = sum(r["cases"] for r in reports)
    out["cases_per_s"] = round(out["cases"] / max(out["seconds"], 1e-9), 1)
    out["not_target"] = sum(r.get("not_target", 0) for r in reports)
    ops: dict = {}
    for r in reports:
        for op, s in r["ops"].items():
            m = ops.setdefault(op, {"coverage": Counter(), "stages": Counter(), "by_status": Counter(),
                                    "skipped": s.get("skipped"), "seconds": 0.0, "batch_only": [],
                                    "not_target_messages": []})
            for k in REPORT_FIELDS_SUMMED:
                m[k] = m.get(k, 0) + s.get(k, 0)
            m["seconds"] = max(m["seconds"], s.get("seconds", 0.0))
            m["coverage"].update(s.get("coverage", {}))
            m["stages"].update(s.get("stages", {}))
            m["by_status"].update(s.get("by_status", {}))
            m["batch_only"] += [x for x in s.get("batch_only", []) if x not in m["batch_only"]]
            m.setdefault("timelines", []).append(s.get("timeline", []))
            m["not_target_messages"] += s.get("not_target_messages", [])
            if s.get("engine"):  # shards fuzz side by side: counts and rates add up, coverage is the widest
                e = m.setdefault("engine", {})
                for k, v in s["engine"].items():  # only the keys the engine reported (batch: launches)
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        e[k] = max(e.get(k, 0), v) if k in ("cov", "ft") else round(e.get(k, 0) + v, 1)
    for op, m in ops.items():
        m["timeline"] = _summed(m.pop("timelines", []))
        m["status"], m["reason"] = _merged_status(m, [r["ops"][op] for r in reports if op in r["ops"]])
    out["ops"] = {op: {k: dict(v) if isinstance(v, Counter) else v for k, v in m.items()} for op, m in ops.items()}
    seen: dict = {}  # signature -> the merged finding that stands for it
    out["findings"] = []
    for r in reports:
        for f in r["findings"]:
            sigs = f.get("signatures") or [f["signature"]]
            into = next((seen[s] for s in sigs if s in seen), None)
            if into is None:
                into = dict(f, signatures=list(sigs))
                out["findings"].append(into)
            else:  # new to the corpus if the shard that saved it first says so
                into["new"] = into.get("new", True) or f.get("new", True)
                into["signatures"] += [s for s in sigs if s not in into["signatures"]]
            for s in sigs:  # one defect that two shards saw with other signatures: one finding
                seen.setdefault(s, into)
    from .sites.defects import defects_of

    out["defects"] = defects_of(out["findings"])
    out["flaky"] = [f for r in reports for f in r.get("flaky", []) if f["signature"] not in seen]
    out["internal_errors"] = [e for r in reports for e in r.get("internal_errors", ())]
    from .reports import by_status

    out["findings_by_status"] = by_status(out["findings"])
    if any("stress_dropped" in r for r in reports):
        out["stress_dropped"] = sum(r.get("stress_dropped", 0) for r in reports)
    if out.get("baseline"):
        from .reports import against_baseline

        out["against_baseline"] = against_baseline(out["findings"])
        out["shared_with_baseline"] = list({f["signature"]: f for r in reports
                                            for f in r.get("shared_with_baseline", [])}.values())
    return out
