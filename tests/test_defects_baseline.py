"""Against `--baseline`, a regression's defect label (new defect or new symptom) needs the
baseline's run of its case attributed. The pipeline starts that attribution beside the target's
(`FindingPipeline._attribute`), not after it: where the target's attribution takes the time
left, the label is still told, not "site unknown (no time left ...)"."""

from __future__ import annotations

import threading
import time

import cases as hand
from kvfuzz import baseline as bl
from kvfuzz.campaign import CampaignConfig
from kvfuzz.engines.common import Found
from kvfuzz.findings import Finding
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.sites.attribute import Attribution
from kvfuzz.sites.site import Site

TARGET, BASELINE = "/tmp/regressed.py", "/cache/metadata.py"
STORE = dict(kernel="_decode_kernel", op="tl.store", what="wrong_value", says="stores a wrong value")
TARGET_SITE = dict(STORE, file=TARGET, line=97, text="tl.store(page_table + offs, val, mask=mask)")
BASE_SAME = dict(STORE, file=BASELINE, line=91, text="tl.store(page_table + offs,  val, mask=mask)")
REGRESSION = Finding("regression", "decode_metadata", "general", "page_table", "mismatch.all", "r")


def _pipeline(monkeypatch, target_seconds: float):
    """A --baseline pipeline whose target attribution takes `target_seconds` and names
    TARGET_SITE, and whose baseline attribution names BASE_SAME at once; `log` records when
    each started and ended, and whether the baseline's had started when the target's ended."""
    log: list[tuple[str, str]] = []
    baseline_started = threading.Event()

    def attribute_isolated(case, spec, timeout_s=60.0, guard=False):
        if spec == BASELINE:
            log.append(("start", "baseline"))
            baseline_started.set()
            return Attribution({"wrong_value": Site.from_json(BASE_SAME)}), ""
        log.append(("start", "target"))
        time.sleep(target_seconds)
        log.append(("end", "target" + (" (baseline started)" if baseline_started.is_set() else "")))
        return Attribution({"wrong_value": Site.from_json(TARGET_SITE)}), ""

    monkeypatch.setattr("kvfuzz.sites.run.attribute_isolated", attribute_isolated)
    cfg = CampaignConfig(ops=["decode_metadata"], target=TARGET, baseline=BASELINE)
    return FindingPipeline(cfg, None, None, "cpu", {}, None), log


def test_the_baseline_is_attributed_beside_the_target(monkeypatch):
    case = hand.decode(ps=1, delta=3)
    pl, log = _pipeline(monkeypatch, 0.5)
    pl._attribute(Found(REGRESSION, case, case), case, None)
    assert ("end", "target (baseline started)") in log and log.count(("start", "baseline")) == 1
    assert pl.against_defect[REGRESSION.signature] == {
        "is": bl.NEW_SYMPTOM, "baseline_site": f"{BASELINE}:91", "cases": 1}


def test_the_label_is_told_where_the_targets_attribution_took_the_time_left(monkeypatch):
    """4 s left; the target's attribution takes 1.5 s, leaving less than the 3 s the label's own
    pass needs to ask the baseline: the attribution started beside it answers."""
    case = hand.decode(ps=1, delta=3)
    pl, log = _pipeline(monkeypatch, 1.5)
    pl._attribute(Found(REGRESSION, case, case), case, time.monotonic() + 4.0)
    assert pl.against_defect[REGRESSION.signature]["is"] == bl.NEW_SYMPTOM
    assert log.count(("start", "baseline")) == 1


def test_no_baseline_no_class_finding_no_thread(monkeypatch):
    case = hand.decode(ps=1, delta=3)
    pl, log = _pipeline(monkeypatch, 0.0)
    mismatch = Finding("mismatch", "decode_metadata", "general", "page_table", "all", "m")
    pl._attribute(Found(mismatch, case, case), case, None)
    assert log == [("start", "target"), ("end", "target")] and pl.against_defect == {}
