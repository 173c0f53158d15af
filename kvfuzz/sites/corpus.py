"""`kvfuzz defects DIR ...`: the saved cases under DIR as defects, their sites attributed on the
CPU where the case has none.

A campaign attributes each finding as it saves it (pipeline.py), under Triton's interpreter. A
host whose interpreter kvfuzz refuses (docs/environment.md: the H200's numpy 2.5 with triton
3.6, say) saves its cases with `{"none": why}`; this command attributes them again from the saved
case, on a machine whose interpreter runs, and with `--write` keeps the site in the case's
meta, so a corpus found on the GPU is grouped as one found on the CPU is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..corpus import CASE_FILE, read_case_dir, set_meta
from ..errors import BadInput
from .choose import NO_SITE, site_meta
from .defects import defects_of, header
from .run import TIMEOUT_S, attribute_isolated


def case_dirs(roots: list[Path]) -> list[Path]:
    """Every case folder under `roots` (a root may be a case folder itself)."""
    for root in roots:
        if not root.exists():
            raise BadInput(f"{root}: no such file or directory")
    found = sorted({p.parent for root in roots for p in ([root / CASE_FILE] if (root / CASE_FILE).exists()
                                                          else root.rglob(CASE_FILE))})
    if not found:
        raise BadInput(f"no saved case under {', '.join(map(str, roots))}")
    return found


def needs_site(meta_site: dict | None, signature: str, target: str | None = None) -> bool:
    """Whether a saved case's site is worth attributing again: none recorded, one recorded without
    the inputs its case depends on (`depends`, which the grouping rule reads), one recorded against
    a kernel file of another name than the file `target` names (defect keys compare file names: a
    corpus attributed partly under one name and partly under another would key one statement
    twice), or none for a reason other than its kind (a run it must have refused has no statement
    to name, on any host)."""
    if meta_site and "none" not in meta_site:
        if target is not None and target.endswith(".py") and \
                Path(str(meta_site.get("file", ""))).name != Path(target).name:
            return True
        return "depends" not in meta_site
    return site_meta(signature, None).get("none") not in NO_SITE.values()


def attribute_dirs(dirs: list[Path], write: bool, target: str | None = None, timeout_s: float = TIMEOUT_S,
                   say: Callable[[str], None] = lambda line: None) -> list[dict]:
    """One report-style finding per saved case (op, signature, signatures, site, contract, case),
    its site attributed where `needs_site` against `target` (default: the target it was found
    with); with `write`, the site kept in the case's meta."""
    from ..ops import contract_status

    out = []
    for d in dirs:
        saved = read_case_dir(d)
        if saved.finding is None:
            continue
        sig, site = saved.finding.signature, saved.case.meta.get("site")
        if needs_site(site, sig, target):
            attribution, why = attribute_isolated(saved.case, target or saved.target, timeout_s)
            site = site_meta(sig, attribution, why)
            say(f"{d.name}: {sig}: " + (f"site {site['file']}:{site['line']}" if "none" not in site
                                        else f"no site ({site['none']})"))
            if write:
                set_meta(d, {"site": site})  # atomically; nothing else in the case changes
        out.append({"op": saved.case.op, "kind": saved.finding.kind, "signature": sig,
                    "signatures": list(saved.signatures), "site": site, "case": str(d),
                    "contract": contract_status(saved.case), "new": True})
    return out


def print_defects(findings: list[dict]) -> list[dict]:
    """The console's defects-first listing of `findings`; returns the defects."""
    defects = defects_of(findings)
    by_sig = {f["signature"]: f for f in findings}
    for n, d in enumerate(defects, 1):
        print(header(n, d))
        for s in d["findings"]:
            f = by_sig[s]
            print(f"FINDING {f['kind']} {s} -> {f['case']}")
            print(f"  {f['contract']}")
            if len(f["signatures"]) > 1:
                print(f"  also shows: {', '.join(f['signatures'][1:])}")
    print(f"kvfuzz: {len(findings)} saved finding(s), {len(defects)} defect(s)")
    return defects
