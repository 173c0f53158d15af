"""Digests of the batched engine's case streams, to check that a change to the generators
keeps every stream byte for byte (same seed -> same cases, same features, same Draw calls).

    PYTHONPATH=. python scripts/stream_digest.py > after.txt && diff before.txt after.txt

One line per (op, contract variant, device, seed, in_contract_only): a sha256 over the class
pool, every case's full content (op, variant, scalars, meta and tensors in insertion order
with their Python types, every TensorSpec field, every value array's dtype, shape, strides
and bytes) and its sorted features, and one over their pickles (what a worker receives). A
last line per (op, variant) hashes the sequence of Draw calls (method, arguments, answer) of
`random_cases`-like draws, which Hypothesis and atheris replay: it must not change either.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
from typing import Any

import numpy as np

from kvfuzz.case import Case, TensorSpec
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.engines.common import fit_target
from kvfuzz.ops import CONTRACTS
from kvfuzz.strategies import GENERATORS
from kvfuzz.strategies.draw import RandomDraw


def canon(x: Any) -> str:
    """A text form that tells apart int, bool, np.int64, tuple and list."""
    if isinstance(x, np.ndarray):
        return f"nd({x.dtype},{x.shape},{x.strides},{x.flags.writeable},{x.tobytes().hex()})"
    if isinstance(x, TensorSpec):
        return "TS(" + ",".join(canon(getattr(x, f)) for f in ("dtype", "shape", "strides", "offset",
                                                                "storage_size")) + ")"
    if isinstance(x, dict):
        return "{" + ",".join(f"{canon(k)}:{canon(v)}" for k, v in x.items()) + "}"
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__}(" + ",".join(canon(v) for v in x) + ")"
    return f"{type(x).__name__}:{x!r}"


def case_text(case: Case) -> str:
    return "|".join((case.op, case.variant, canon(case.scalars), canon(dict(case.meta)), canon(case.tensors),
                     canon(case.values)))


class LoggingDraw(RandomDraw):
    """A RandomDraw that records every call a generator makes (what Hypothesis would replay)."""

    def __init__(self, seed: str, log: list) -> None:
        super().__init__(seed)
        self.log = log

    def integer(self, lo: int, hi: int) -> int:
        v = super().integer(lo, hi)
        self.log.append(("integer", lo, hi, v))
        return v

    def choice(self, options):
        v = super().choice(options)
        self.log.append(("choice", canon(tuple(options)), canon(v)))
        return v

    def boolean(self) -> bool:
        v = super().boolean()
        self.log.append(("boolean", v))
        return v

    def seed(self) -> int:
        v = super().seed()
        self.log.append(("seed", v))
        return v


LACKS = {"num_kv_splits": ("uneven_batch",), "decode_metadata": ("full_v2p",)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--draw-cases", type=int, default=200)
    ap.add_argument("--ops", nargs="*", default=list(GENERATORS))
    args = ap.parse_args()
    for op in args.ops:
        gen = GENERATORS[op]
        for variant in CONTRACTS[op].variants:
            var = None if variant == "default" else variant
            for device, stint in (("cpu", None), ("cuda", 128)):
                for seed in range(args.seeds):
                    for flag in (False, True):
                        h, hp = hashlib.sha256(), hashlib.sha256()  # content; pickled bytes (what a worker gets)
                        pool = gen.pool(seed, 48, var)
                        h.update(canon(pool).encode())
                        hp.update(pickle.dumps(pool, protocol=pickle.HIGHEST_PROTOCOL))
                        for k, case in case_stream(op, seed, args.cases, device=device, in_contract_only=flag,
                                                   stint=stint, variant=var):
                            h.update(f"{k}|{case_text(case)}|".encode())
                            h.update(canon(sorted(gen.all_features(case))).encode())
                            h.update(case_text(fit_target(case, LACKS)).encode())
                            hp.update(pickle.dumps(case, protocol=pickle.HIGHEST_PROTOCOL))
                        print(f"{op} {variant} {device} seed={seed} in_contract_only={flag} {h.hexdigest()} "
                              f"pickle={hp.hexdigest()[:16]}")
                        sys.stdout.flush()
            log: list = []
            draw_class = gen.class_for(var)
            for i in range(args.draw_cases):
                d = LoggingDraw(f"draws:{op}:{i}", log)
                k = draw_class(d)
                gen.draw_case(d, k)
                case = gen.in_class(d, k)
                for kind in gen.violations:  # as a stint applies them: to an in-contract case
                    gen.violation(LoggingDraw(f"draws:{op}:{i}:{kind}", log), case, k, kind)
            print(f"{op} {variant} draw-calls {hashlib.sha256(canon(log).encode()).hexdigest()}")


if __name__ == "__main__":
    main()
