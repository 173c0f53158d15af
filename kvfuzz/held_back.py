"""A known crash does not eat an op's time: cases like one that crashed are drawn much less often.

A memory fault or a hang costs far more than a case: the worker process dies (or waits out the
case timeout) and a new one starts, seconds under the interpreter, 8-16 s for a fresh CUDA
process. A target with a native defect that many cases reach (sglang 0.5.23's
`draft_extend_metadata` faults on in-contract SWA cases with a strided `out_cache_loc`) would
spend its whole share restarting workers, and every other defect of the op hides behind it.

So once a crash signature is known (the engine has recorded it: confirmed, or shared with the
baseline), the features of the cases that showed it make its key: the adversarial features
(`strategies.coverage`: each tensor's dtype, layout kind, odd strides and misalignment, the op's
kernel path, block edges and zero sizes) that every case seen crashing with that signature has,
the intersection over them. A drawn case with every feature of a key is likely to crash the same
way. Such cases are held back in `HOLD_OUT_OF - 1` stints of every `HOLD_OUT_OF` (the choice is
made per stint and key, so a compile class that crashes as a whole is skipped as a whole, and in
a class where only some cases crash the others still run); in the remaining stint they are drawn
as usual, so a second defect that needs the same features is still reachable, and each crash
seen there narrows the key. The report counts the cases held back under each key and lists its
features.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

HOLD_OUT_OF = 10  # cases like a known crash are drawn in one stint of this many


@dataclass
class CrashKey:
    signature: str
    features: frozenset[str]
    seen: int = 1  # crash cases the key was made from
    held: int = 0  # cases held back under it

    def to_json(self) -> dict:
        return {"signature": self.signature, "features": sorted(self.features), "crash_cases": self.seen,
                "held_back": self.held}


@dataclass
class HeldBack:
    """The crash keys of one op's fuzzing; `learn` from each crash seen, `holds` for each case drawn."""

    keys: dict[str, CrashKey] = field(default_factory=dict)

    def learn(self, signature: str, features: set[str] | frozenset[str]) -> None:
        """A case that crashed with `signature` had `features`: the key keeps what every such
        case had. A case with no features makes no key (it would hold back every case)."""
        key = self.keys.get(signature)
        if key is None:
            if features:
                self.keys[signature] = CrashKey(signature, frozenset(features))
            return
        narrowed = key.features & frozenset(features)
        if narrowed:  # never the empty key: it would match every case
            key.features, key.seen = narrowed, key.seen + 1

    def holds(self, features: set[str] | frozenset[str], stint_no: int) -> CrashKey | None:
        """The key that holds back a case with `features` drawn in stint `stint_no`, or None."""
        for key in self.keys.values():
            if key.features <= features and not _drawn_in(key.signature, stint_no):
                key.held += 1
                return key
        return None

    @property
    def cases(self) -> int:
        return sum(k.held for k in self.keys.values())

    def to_json(self) -> list[dict]:
        return [k.to_json() for k in self.keys.values() if k.held]


def _drawn_in(signature: str, stint_no: int) -> bool:
    """Whether cases like the crash `signature` are drawn in stint `stint_no` (one in HOLD_OUT_OF, seeded)."""
    digest = hashlib.blake2b(f"{signature}:{stint_no}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") % HOLD_OUT_OF == 0


def held_line(op: str, held: list[dict]) -> str:
    """The console's line for an op's held-back cases (empty where none were)."""
    if not held:
        return ""
    parts = [f"{k['held_back']} like {k['signature']} ({', '.join(k['features'][:6])}"
             + (", ..." if len(k["features"]) > 6 else "") + ")" for k in held]
    return (f"[{op}] held back {sum(k['held_back'] for k in held)} cases like a known crash (drawn in one stint "
            f"of {HOLD_OUT_OF}): " + "; ".join(parts))
