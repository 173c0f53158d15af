"""The atheris engine's fuzzing process: libFuzzer drives it, kvfuzz judges every input.

`python -m kvfuzz.engines.atheris_child CONFIG_JSON`, started by `atheris_engine.fuzz_op`, one
process per op and life: libFuzzer owns its process and its argv and ends it with exit().

* Coverage. kvfuzz's generators, contracts, oracles and judge are instrumented as they are
  imported (`atheris.instrument_imports`), so this module imports nothing of kvfuzz at its top
  beyond what `python -m` must. After the target is loaded, its host functions are instrumented
  (`atheris.instrument_func`) and so, under the interpreter, are its kernels: Triton's
  interpreter does not run a `@triton.jit` function's `.fn` but a copy it re-parses from the
  source file and compiles (`InterpretedFunction.rewrite`, cached in
  `InterpretedFunction.rewritten_fn`), so that copy is made here first and instrumented. Its
  branches (the spec kernel's all-A, all-B and mixed blocks, the decode kernels' `if`s) are then
  libFuzzer edges. Compiled kernels on a GPU run no Python: only kvfuzz's and the host code's
  branches count there.
* Each input is decoded into a case (`atheris_engine.decode`: `FuzzedDraw` and the op's
  generator), run in this process (coverage is this process's) and judged by the same code as
  every engine. Every verdict, and each signature with its case the first time this process sees
  it, goes to the campaign over a pipe; the campaign records, confirms, minimizes and saves.
* A case that kills this process (a segfault under the interpreter, a hang past `-timeout`)
  ends it: libFuzzer writes the input under `-artifact_prefix`, and the campaign replays it in
  its isolated worker. A Python exception never reaches libFuzzer: kvfuzz's own failure on a
  case is reported as such, not as a crash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time

# kvfuzz's own code whose branches count as coverage (the engine, worker and corpus do not)
INSTRUMENTED = ("kvfuzz.strategies", "kvfuzz.ops", "kvfuzz.contract", "kvfuzz.oracles", "kvfuzz.judge")
REPORT_EVERY_S = 0.5  # telemetry (launch keys, classes) at most this often


def target_modules(*modules) -> list:
    """The target's modules (a release's kernel files) and their submodules (kvfuzz's builtin
    kernels are a package)."""
    out = []
    for module in modules:
        name = module.__name__
        out += [module] + [m for n, m in list(sys.modules.items()) if m is not None and n.startswith(name + ".")]
    return list({id(m): m for m in out}.values())


def instrument_target(modules: list, atheris, host_code: bool = True, kernel_code: bool = True) -> tuple[int, int]:
    """Instrument the target's host functions and its interpreted kernels (the rewritten copy
    the interpreter runs). Returns (host functions, kernels) instrumented."""
    import inspect

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - a Triton without an interpreter
        InterpretedFunction = ()
    host = kernels = 0
    done: set[int] = set()
    for module in modules:
        for obj in list(vars(module).values()):
            if id(obj) in done:
                continue
            done.add(id(obj))
            if InterpretedFunction and isinstance(obj, InterpretedFunction):
                if not kernel_code or getattr(obj.fn, "__module__", None) != module.__name__:
                    continue
                atheris.instrument_func(obj.rewrite())  # the function the interpreter calls
                kernels += 1
            elif host_code and inspect.isfunction(obj) and obj.__module__ == module.__name__:
                atheris.instrument_func(obj)
                host += 1
    return host, kernels


def main(argv: list[str]) -> None:
    cfg = json.loads(argv[1])
    import atheris
    from multiprocessing.connection import Connection

    from kvfuzz import device as devmod

    conn = Connection(cfg["fd"], readable=False)
    device = devmod.select(cfg["device"])
    hook = atheris.instrument_imports(include=list(INSTRUMENTED)) if "kvfuzz" in cfg["instrument"] \
        else contextlib.nullcontext()
    with hook:
        from kvfuzz.check import Checker
        from kvfuzz.engines.atheris_engine import decode
        from kvfuzz.strategies import GENERATORS
        from kvfuzz.worker import InProcessExecutor
    executor = InProcessExecutor(cfg["target"], device)
    host, kernels = instrument_target(target_modules(*executor.target.all_modules), atheris,
                                      "host" in cfg["instrument"], "kernels" in cfg["instrument"])
    gen = GENERATORS[cfg["op"]]
    op, rerun_every, variant = cfg["op"], cfg["rerun_every"], cfg["variant"]
    checker = Checker(executor, op, variant)
    sent: set[str] = set()  # signatures this process has reported with their case
    classes: set[str] = set()
    keys: set[str] = set()  # Triton specialisation keys already reported
    state = {"n": 0, "at": 0.0}

    def test_one_input(data: bytes) -> None:
        state["n"] += 1
        try:
            case, k = decode(op, data, cfg["in_contract_only"], variant)
            repeats = 2 if rerun_every and state["n"] % rerun_every == 0 else 1
            verdict = checker.check(case, repeats)
            features = sorted(gen.all_features(case))  # its branches count too
        except Exception as exc:  # kvfuzz's own failure: never a libFuzzer crash
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            return
        new = [f for f in verdict.findings if f.signature not in sent]
        sent.update(f.signature for f in new)
        cls = hashlib.sha1(k.describe().encode()).hexdigest()[:12]
        new_class = cls not in classes
        classes.add(cls)
        new_keys: list[str] = []
        if time.monotonic() - state["at"] >= REPORT_EVERY_S:
            state["at"] = time.monotonic()
            new_keys = [x for x in map(repr, executor.launch_keys) if x not in keys]
            keys.update(new_keys)
        conn.send(("case", verdict.status, verdict.not_target, verdict.findings, repeats - 1, features,
                   cls if new_class else None, case if new else None, new_keys))

    max_total_time = max(int(cfg["deadline"] - time.time()), 1)  # what is left once started
    conn.send(("ready", {"host_functions": host, "kernels": kernels, "max_total_time": max_total_time}))
    args = [sys.argv[0], cfg["corpus"], f"-max_total_time={max_total_time}",
            f"-seed={cfg['seed']}", f"-artifact_prefix={cfg['artifacts']}/", f"-timeout={cfg['timeout']}",
            f"-rss_limit_mb={cfg['rss_limit_mb']}", f"-max_len={cfg['max_len']}", "-print_final_stats=1"]
    args += [f"-runs={cfg['runs']}", *cfg["extra_args"]]  # a later flag overrides an earlier one
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
