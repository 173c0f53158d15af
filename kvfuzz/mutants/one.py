"""One mutant's campaign, in a process of its own: `python -m kvfuzz.mutants.one JOB.json`
(`--variants SPEC DEVICE OP...` prints the contract variant the original target is judged by,
per op, as JSON: the variant every copy of its file is then held to; `--equivalence JOB.json`
runs a survivor beside the original, equivalence.py).

The campaign is `run_campaign` on the mutant's kernel file with the options a campaign on that
file would take (`campaign` in the job). It stops at its first confirmed in-contract finding
whose signatures are not all among the original target's own (`reference` in the job; those
are the original's defects, not the mutant's): that finding kills the mutant, and fuzzing on
would only spend time. Its report is written as `kvfuzz fuzz --report` writes one.

Exit status: 0 the report is written; 2 the campaign refused to start (the one line on
stderr: a mutant that does not load is stillborn); 4 an exception of kvfuzz's own.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from ..errors import BadInput
from .run import killing


class FirstKill(KeyboardInterrupt):
    """Ends a mutant's campaign at its first killing finding; the campaign handles it as it
    handles an interrupt (what it found is kept, the report written)."""


def _stopper(corpus: Path, reference: set[str]):
    """A campaign `status` callback raising FirstKill once the corpus holds a killing case (every
    confirmed finding is saved there at once)."""
    from ..corpus import read_case_dir
    from ..ops import contract_status

    seen = [0]

    def status(p) -> None:
        if p.new + p.known == seen[0]:
            return
        seen[0] = p.new + p.known
        for path in corpus.glob("*/*/case.json"):
            try:
                saved = read_case_dir(path.parent)
            except BadInput:
                continue
            if killing(list(saved.signatures), contract_status(saved.case), reference):
                raise FirstKill()
    return status


def variants(spec: str, device: str, ops: list[str]) -> dict[str, str]:
    """op -> the contract variant target `spec` is judged by (its release's, or its signature's)."""
    from .. import device as devmod
    from ..targets import load_target

    target = load_target(spec, devmod.select(device))
    return {op: target.variants[op] for op in ops if op in target.variants}


def main(argv: list[str]) -> int:
    from ..campaign import CampaignConfig, run_campaign
    from ..heap import return_large_frees

    return_large_frees()  # a mutant's campaign, like `kvfuzz fuzz` (heap.py)

    try:
        if argv[0] == "--variants":  # --variants SPEC DEVICE OP...: the JSON on stdout
            print(json.dumps(variants(argv[1], argv[2], argv[3:])))
            return 0
        if argv[0] == "--equivalence":  # --equivalence JOB.json: a survivor beside the original
            from .equivalence import main_equivalence

            return main_equivalence(argv[1])
        job = json.loads(Path(argv[0]).read_text())
        cfg = CampaignConfig(**{k: Path(v) if k in ("corpus", "report") else v for k, v in job["campaign"].items()})
        status = _stopper(Path(cfg.corpus), set(job["reference"])) if job.get("stop_at_kill") else None
        run_campaign(cfg, status=status)
    except BadInput as exc:
        print(f"{exc}".splitlines()[0] if str(exc) else type(exc).__name__, file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc()
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
