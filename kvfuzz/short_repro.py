"""`kvfuzz replay CASE --emit-repro FILE.py --short`: a saved case as a plain torch script of a few
dozen lines, the kind one attaches to an upstream bug report.

The script holds the case's tensors as explicit `torch.tensor([...])` literals (each tensor's
whole storage, so stride gaps keep the canary kvfuzz fills them with, and `.as_strided(...)`
where the layout is not plain contiguous; such an input's storage is followed by GUARD canary
elements, as the arena's guard band, so a kernel that ignores its strides reads canary, not
whatever the allocator put there), calls the entry point as SGLang does, by keyword
where releases renamed or moved arguments, and asserts the oracle's expected values on the
required cells (any accepted answer, for a float32 rounding boundary), the poison left in the
cells the contract leaves untouched, the inputs unchanged, and for a case the target must
refuse, that it raises. No kvfuzz import, no memory image:

    python FILE.py [PATH/TO/metadata.py]     # without a path: the entry point from sglang

(the path is the release file holding the op's entry point: kv_indices.py for flashinfer_kv_indices)

The script judges the kernel file it is given as `kvfuzz replay --target FILE` does: where the
verdict depends on the contract variant, it holds the expected values under each variant kvfuzz
may select and picks the file's own by its entry point's signature (kvfuzz/variant_choice.py,
embedded), refusing (exit 2) a file under whose variant the case is in another class (must
refuse or not) than the one the script checks.

Exit status: 0 clean, 1 the defect shows (an AssertionError saying which cells, or the
target's own exception), 2 this file cannot run the case, in one line on stderr: a kernel path
that does not exist, a file that does not load or defines no entry point, a signature that does
not take the call (a TypeError raised at the call itself), no path and no importable sglang.

Kinds a short script cannot show (`why_not_short`): bytes written outside the tensors'
elements (`out_of_bounds_write`: only the guarded arena sees them), crashes (the full script
isolates the call in a child process), nondeterminism and backend divergences (repeated or
paired runs compared byte for byte), oracle disagreements (kvfuzz's own), and decode's SWA
through SGLang's unified pool objects (`swa_v2p`, `swa_src_table`). For those `kvfuzz replay
--short` writes the full script (kvfuzz/repro.py) and says why.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .case import Case, TensorSpec
from .corpus import SavedCase
from .findings import kind_of
from .materialize import CANARY_BYTE, POISON, elements_view
from .ops import CONTRACTS, ShortCall, contract_status, record
from .variant_choice import release_variant

SHOWN_KINDS = ("mismatch", "untouched_write", "input_modified", "invalid_accepted")
NOT_SHOWN = {
    "out_of_bounds_write": "it writes outside the tensors' elements, which only the guarded arena shows",
    "crash": "the call kills or hangs its process, or raises, which the full script isolates in a child process",
    "nondeterministic": "it needs repeated runs compared byte for byte",
    "backend_divergence": "it compares two backends' arenas byte for byte",
    "oracle_disagreement": "it is a disagreement between kvfuzz's two oracles, not the target's defect",
}
CANARY = {dt: int(np.frombuffer(bytes([CANARY_BYTE]) * np.dtype(dt).itemsize, dtype=dt)[0]) for dt in POISON}
LINE = 100  # characters per source line of a tensor literal
RUN = 8  # equal values in a row written as [v] * n
GUARD = 256  # canary elements after a strided input's storage, as the arena's guard band after it
SMALL = 32  # elements: a plain tensor this small is written as its nested list
UNTOUCHED_SHOWN = 64  # untouched cells checked (all of them for an untouched_write finding)

# where the entry points live in an installed sglang (0.5.16 on; 0.5.13-0.5.15)
SGLANG_MODULES = ("sglang.kernels.ops.attention.metadata", "sglang.srt.layers.attention.triton_ops.metadata")
# a release's kernel file other than metadata.py -> (first release, the sglang module holding it), newest first
SGLANG_FILE_MODULES = {
    "kv_indices.py": (((0, 5, 23), "sglang.kernels.ops.attention.kv_indices"),
                      ((0, 5, 16), "sglang.kernels.ops.kvcache.kv_indices"),
                      ((0, 5, 13), "sglang.srt.layers.attention.triton_ops.kv_indices"),
                      ((0, 0, 0), "sglang.srt.layers.attention.utils")),
    "trtllm_mha_page_table.py": (((0, 5, 23), "sglang.kernels.ops.attention.trtllm_mha_page_table"),
                                 ((0, 5, 16), "sglang.kernels.ops.kvcache.trtllm_mha_page_table"),
                                 ((0, 5, 14), "sglang.srt.layers.attention.triton_ops.trtllm_mha_page_table")),
    "pa_page_table.py": (((0, 5, 16), "sglang.kernels.ops.attention.pa_page_table"),
                         ((0, 5, 15), "sglang.srt.layers.attention.flashattention_backend")),
    "trtllm_mha_graph_metadata.py": (((0, 5, 23), "sglang.kernels.ops.attention.trtllm_mha_graph_metadata"),
                                     ((0, 5, 16), "sglang.kernels.ops.kvcache.trtllm_mha_graph_metadata"),
                                     ((0, 5, 15), "sglang.srt.layers.attention.triton_ops.trtllm_mha_graph_metadata")),
    "aiter_unified_attention.py": (((0, 5, 23), "sglang.kernels.ops.attention.aiter_unified_page_table"),
                                   ((0, 5, 16), "sglang.kernels.ops.kvcache.aiter_unified_attention"),
                                   ((0, 5, 12), "sglang.srt.layers.attention.triton_ops.aiter_unified_attention")),
}
# an entry point that earlier releases keep outside its file's module -> (first release, the sglang
# module holding it; None: its file's), newest first
SGLANG_ENTRY_MODULES = {
    "create_chunked_prefix_cache_kv_indices": (((0, 5, 14), None),
                                               ((0, 5, 8), "sglang.srt.model_executor.forward_batch_deepseek_mha_mixin"),
                                               ((0, 0, 0), "sglang.srt.model_executor.forward_batch_info")),
}


def why_not_short(saved: SavedCase) -> str | None:
    """Why a short script cannot show this case's finding (None: it can)."""
    case, f = saved.case, saved.finding
    if f is not None and f.kind not in SHOWN_KINDS:
        return f"a short repro cannot show {f.kind}: {NOT_SHOWN.get(f.kind, 'it needs the guarded arena')}"
    # a finding merged with others shows through them: an input changed by a wild write lands in
    # the arena's next tensor, which the short script's separate allocations do not place there
    for other in case.meta.get("signatures", ()):
        kind = kind_of(other)
        if kind not in SHOWN_KINDS:
            return (f"a short repro cannot show this case: it also shows {other}, and "
                    f"{NOT_SHOWN.get(kind, 'it needs the guarded arena')}")
    if case.meta.get("cross_check"):
        return "a short repro cannot show a cross-check case: " + NOT_SHOWN["backend_divergence"]
    refuses = record(case.op).short_refuses
    return refuses(case) if refuses is not None else None


# --------------------------------------------------------------------------- literals


def _run_list(values: list[int]) -> str:
    """A Python list expression of `values`, equal runs of RUN or more as `[v] * n`."""
    parts, plain, i = [], [], 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        if j - i >= RUN:
            if plain:
                parts.append("[" + ", ".join(plain) + "]")
                plain = []
            parts.append(f"[{values[i]}] * {j - i}")
        else:
            plain += [str(v) for v in values[i:j]]
        i = j
    if plain or not parts:
        parts.append("[" + ", ".join(plain) + "]")
    return " + ".join(parts)


def wrap(text: str, indent: int) -> str:
    """`text` broken after commas into lines of at most LINE characters."""
    if len(text) + indent <= LINE:
        return text
    lines, cur = [], ""
    for piece in text.split(", "):
        if cur and len(cur) + len(piece) + 2 + indent > LINE:
            lines.append(cur + ",")
            cur = piece
        else:
            cur = f"{cur}, {piece}" if cur else piece
    lines.append(cur)
    return ("\n" + " " * indent).join(lines)


def _storage(spec: TensorSpec, values: np.ndarray | None) -> np.ndarray:
    """The tensor's whole storage as kvfuzz's arena holds it: canary in the gaps, the input's
    values or the output's poison on its elements."""
    storage = np.full(spec.storage_size, CANARY[spec.dtype], dtype=spec.dtype)
    if spec.numel:
        elements_view(spec, storage)[...] = POISON[spec.dtype] if values is None else values
    return storage


def _tensor_source(name: str, spec: TensorSpec, values: np.ndarray | None) -> str:
    """`name = torch.tensor(...)`, with as_strided where the layout needs it."""
    dtype = f"dtype=torch.{spec.dtype}, device=DEVICE"
    storage = _storage(spec, values)
    plain = spec.is_contiguous and spec.offset == 0 and spec.storage_size == spec.numel
    if not plain and values is not None and storage.size:  # reads that ignore the layout land on canary
        storage = np.concatenate([storage, np.full(GUARD, CANARY[spec.dtype], dtype=spec.dtype)])
    if not storage.size:
        made = f"torch.empty({tuple(spec.shape)}, {dtype})"
    elif plain and spec.numel <= SMALL and 0 not in spec.shape:  # written as its shape's nested list
        made = f"torch.tensor({storage.reshape(spec.shape).tolist()}, {dtype})"
    elif len(set(storage.tolist())) == 1:
        made = f"torch.full(({storage.size},), {int(storage[0])}, {dtype})"
        made += f".reshape({tuple(spec.shape)})" if plain and len(spec.shape) != 1 else ""
    else:
        made = f"torch.tensor({_run_list(storage.tolist())}, {dtype})"
        made += f".reshape({tuple(spec.shape)})" if plain and len(spec.shape) != 1 else ""
    if not plain and storage.size:
        made += f".as_strided({tuple(spec.shape)}, {tuple(spec.strides)}, {spec.offset})"
    return wrap(f"{name} = {made}", 4)


def _cells_dict(mask: np.ndarray, values: np.ndarray | None = None) -> str:
    idx = [tuple(int(i) for i in ix) for ix in np.argwhere(mask)]
    if values is None:
        return "[" + ", ".join(str(ix) for ix in idx) + "]"
    return "{" + ", ".join(f"{ix}: {int(values[ix])}" for ix in idx) + "}"


# --------------------------------------------------------------------------- the calls
# How SGLang calls each entry point (kvfuzz/targets/calls.py, where every release's
# signature is handled; here what the case's arguments need).


def _short_call(case: Case) -> ShortCall:
    """The op record's `short_call`, else every argument the case has, by keyword."""
    rec = record(case.op)
    entry = rec.contract.entry
    if rec.short_call is not None:
        return rec.short_call(case, entry)
    args = [f"{n}={n}" for n in (a.name for a in rec.contract.args) if n in case.tensors]
    args += [f"{n}={v!r}" for n, v in case.scalars.items()]
    call = f"{entry}(" + wrap(", ".join(args), 4) + ")"
    returns = rec.call.returns
    return ShortCall((f"{returns}.copy_({call})  # it returns its output" if returns else call,))


SWA_POOL = '''

def swa_pool(mapping):
    """An SWAKVPool holding only the mapping the kernels read (a stand-in without sglang)."""
    try:
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    except ImportError:
        SWAKVPool = type("SWAKVPool", (), {})
        for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.swa_memory_pool"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["sglang.srt.mem_cache.swa_memory_pool"].SWAKVPool = SWAKVPool
    pool = SWAKVPool.__new__(SWAKVPool)
    pool.full_to_swa_index_mapping = mapping
    return pool
'''

LOAD = '''

def load(path):
    """The kernel file (or package directory) at `path`, imported as a module."""
    init = os.path.join(path, "__init__.py") if os.path.isdir(path) else None
    spec = importlib.util.spec_from_file_location("kernels_under_test", init or path,
                                                  submodule_search_locations=[path] if init else None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
'''

HELPERS = {"swa_pool": SWA_POOL}  # what a record's ShortCall.helpers may name


def _sglang_module(target: str, file: str = "metadata.py", entry: str | None = None) -> str:
    """The sglang module holding the entry point `entry` of kernel file `file` in the target's
    release (the newest layout when the target names none)."""
    version = target.split("==", 1)[1] if target.startswith("sglang==") else ""
    try:
        v = tuple(int(x) for x in version.split(".")[:3]) if version else None
    except ValueError:
        v = None
    own = next((m for first, m in SGLANG_ENTRY_MODULES.get(entry, ()) if v is None or v >= first), None)
    if own is not None:
        return own
    if file in SGLANG_FILE_MODULES:
        return next((m for first, m in SGLANG_FILE_MODULES[file] if v is None or v >= first),
                    SGLANG_FILE_MODULES[file][-1][1])
    return SGLANG_MODULES[1] if v is not None and v < (0, 5, 16) else SGLANG_MODULES[0]


def render_short(saved: SavedCase, name: str | None = None) -> str:
    """The short script's source for `saved` (ValueError when `why_not_short` says it cannot).
    `name`: the case's corpus name (default its key)."""
    why = why_not_short(saved)
    if why:
        raise ValueError(why)
    case, f = saved.case, saved.finding
    contract = CONTRACTS[case.op]
    judged = _judged(saved)
    status = judged[case.variant][0]
    chooses = len(set(judged.values())) > 1  # the verdict depends on the kernel file's variant
    entry, name = contract.entry, name or saved.key()
    what = f"{f.kind} {f.signature}: {f.message}" if f else "no finding recorded: the case must pass"
    what = what.replace("\\", "/").replace('"', "'")  # it sits in the docstring
    call = _short_call(case)
    helpers = LOAD + "".join(HELPERS[h] for h in call.helpers)
    out = ['#!/usr/bin/env python3',
           f'"""kvfuzz case {name} ({case.op}, contract variant {case.variant}): {entry}',
           f"{what}",
           f"Found with target {saved.target} on {saved.device}; {contract_status(case)}.",
           "",
           f"Run: python {{this file}} [PATH/TO/{record(case.op).source_file}]  (no path: {entry} from sglang)",
           "A file is judged by the contract variant of the SGLang API its signature matches, as replay does.",
           "Exit 0: clean; 1: the defect shows; 2: this file cannot run the case (no such file, one that",
           'does not load or lacks the entry point, a signature that does not take the call)."""',
           "import importlib.util"] + [
           f"import {m}" for m in sorted(set(call.imports) | ({"inspect"} if chooses else set()))] + [
           "import os", "import sys"] + (["import types"] if "SWAKVPool" in helpers else []) + ["",
           "import torch", "",
           'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"',
           'if DEVICE == "cpu":  # Triton\'s interpreter, set before triton is imported',
           '    os.environ["TRITON_INTERPRET"] = "1"',
           f"POISON = {{torch.int32: {int(POISON['int32'])}, torch.int64: {int(POISON['int64'])}}}  "
           "# what outputs hold before the call"]
    out += helpers.split("\n")
    out += ["", "if len(sys.argv) > 1:",
            "    if not os.path.exists(sys.argv[1]):",
            '        print(f"no such kernel file: {sys.argv[1]}", file=sys.stderr)',
            "        sys.exit(2)",
            "    try:",
            "        kernels = load(sys.argv[1])",
            "    except Exception as exc:",
            '        print(f"cannot load {sys.argv[1]}: {type(exc).__name__}: {exc}", file=sys.stderr)',
            "        sys.exit(2)",
            f'    if not hasattr(kernels, "{entry}"):',
            f'        print(f"{{sys.argv[1]}} defines no {entry}", file=sys.stderr)',
            "        sys.exit(2)",
            f"    {entry} = kernels.{entry}",
            "else:",
            "    try:",
            f"        from {_sglang_module(saved.target, record(case.op).source_file, entry)} import {entry}",
            "    except ImportError as exc:",
            '        print(f"cannot import sglang ({exc}): give the kernel file\'s path", file=sys.stderr)',
            "        sys.exit(2)",
            "", "# inputs, then outputs (filled with POISON); gaps between strided elements hold kvfuzz's canary"]
    for tname, spec in sorted(case.tensors.items(), key=lambda kv: (kv[0] not in case.values, kv[0])):
        out.append(_tensor_source(tname, spec, case.values.get(tname)))
    out += [wrap("inputs = {" + ", ".join(f'"{n}": {n}' for n in sorted(case.values)) + "}", 4),
            "inputs_before = {n: t.clone() for n, t in inputs.items()}", ""]
    out += _variant_lines(saved, judged)
    not_called = [f"except TypeError as exc:  # the signature does not take this call: this file cannot run the case",
                  f'    if exc.__traceback__.tb_next is not None or not str(exc).startswith("{entry}("):',
                  "        raise",
                  '    print(f"cannot call {sys.argv[1] if len(sys.argv) > 1 else \'sglang\'}\'s " + str(exc), '
                  "file=sys.stderr)",
                  "    sys.exit(2)"]
    call = list(call.lines)
    if status == "must_refuse":
        rule = contract.broken_rule(case)
        out += ["try:"] + [f"    {line}" for line in call] + not_called + [
            "except Exception as exc:",
            '    print(f"OK: refused: {type(exc).__name__}: {exc}")',
            "    sys.exit(0)",
            f"raise AssertionError({('ran a case it must refuse: ' + rule)!r})"]
        return "\n".join(out) + "\n"
    out += ["try:"] + [f"    {line}" for line in call] + not_called
    out += _checks(saved, judged)
    return "\n".join(out) + "\n"


def _expectations(saved: SavedCase, variant: str) -> tuple[str, str, str]:
    """(the case's contract class, ACCEPTED's and UNTOUCHED's values) under `variant`: the
    oracle's value of every required cell (each accepted answer), and the cells the contract
    leaves untouched (all of them for an untouched_write finding, else where few)."""
    case, f = saved.case.replace(variant=variant), saved.finding
    contract = CONTRACTS[case.op]
    status, _ = contract.classify(case)
    if status != "in_contract":
        return status, "[{}]", "{}"
    outs = [n for n in contract.outputs if n in case.tensors]
    expected = contract.numpy_ref(case)
    cells = contract.cells(case)
    dicts = []
    for answer in [expected.values, *expected.alternatives]:
        parts = [f'"{n}": {_cells_dict(cells[n].required, np.asarray(answer[n]))}' for n in outs
                 if cells[n].required.any()]
        dicts.append("{" + ", ".join(parts) + "}")
    untouched = {n: cells[n].untouched for n in outs if cells[n].untouched.any()}
    shown = untouched and (f is not None and f.kind == "untouched_write"
                           or sum(int(m.sum()) for m in untouched.values()) <= UNTOUCHED_SHOWN)
    return (status, "[" + ", ".join(dicts) + "]",
            "{" + ", ".join(f'"{n}": {_cells_dict(m)}' for n, m in untouched.items()) + "}" if shown else "{}")


def _judged(saved: SavedCase) -> dict[str, tuple[str, str, str]]:
    """variant -> _expectations, for every variant kvfuzz may judge a kernel file by."""
    from .repro import judged_variants

    return {v: _expectations(saved, v) for v in judged_variants(saved.case.op, saved.case.variant)}


def _variant_lines(saved: SavedCase, judged: dict[str, tuple[str, str, str]]) -> list[str]:
    """Where the verdict depends on the contract variant: the lines choosing the one kvfuzz
    selects for the kernel file (by `generation_of`, embedded from kvfuzz/variant_choice.py, and
    each generation's variant, told by that module's `release_variant` here), and refusing a file
    whose variant has the case in another class of the contract than `saved`'s variant."""
    case = saved.case
    if len(set(judged.values())) == 1:
        return []
    rec = record(case.op)
    default = next(iter(rec.contract.variants))
    own = judged[case.variant][0]
    refused = {v: j[0] for v, j in judged.items() if (j[0] == "must_refuse") != (own == "must_refuse")}
    gens = "".join(f"\n    ({g.name!r}, {g.params!r})," for g in rec.generations)
    variant_of = {g.name: release_variant(rec.release_variants, default, g.name) for g in rec.generations}
    out = ["", "# the contract variant judging a kernel file: that of the SGLang API generation whose parameters",
           "# its entry point's equal, else of the one sharing most parameter names with it",
           wrap(f"GENERATIONS = [{gens}\n]", 4), wrap(f"VARIANT_OF = {variant_of!r}", 4)]
    out += _variant_choice_source().split("\n")
    entry = rec.contract.entry
    out += ["", "",
            f"entry = getattr({entry}, \"fn\", {entry})  # a Triton kernel: its Python function",
            "names = [p.name for p in inspect.signature(entry).parameters.values()",
            "         if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]",
            "equal, closest = generation_of(GENERATIONS, names)",
            "VARIANT = VARIANT_OF[equal or closest]",
            f'print(f"judged as contract variant {{VARIANT}} (SGLang {{equal or closest}}; saved under {case.variant})", '
            "file=sys.stderr)"]
    if refused:
        out += [f"REFUSED = {refused!r}  # variant -> the case's class under it: the full script judges it",
                "if VARIANT in REFUSED:",
                '    print(f"under variant {VARIANT} the case is {REFUSED[VARIANT]}: use the full repro script", '
                "file=sys.stderr)",
                "    sys.exit(2)"]
    return out


def _variant_choice_source() -> str:
    """kvfuzz/variant_choice.py's `generation_of`, as a short script embeds it."""
    import ast

    from . import variant_choice

    text = Path(variant_choice.__file__).read_text(encoding="utf-8")
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "generation_of")
    return "\n".join(["", ""] + text.split("\n")[node.lineno - 1 : node.end_lineno])


def _checks(saved: SavedCase, judged: dict[str, tuple[str, str, str]]) -> list[str]:
    case = saved.case
    contract = CONTRACTS[case.op]
    outs = [n for n in contract.outputs if n in case.tensors]
    lines = ["", wrap("outputs = {" + ", ".join(f'"{n}": {n}' for n in outs) + "}", 4), "wrong = []"]
    checked = {v: j for v, j in judged.items() if j[0] != "must_refuse"}
    one = len(set(checked.values())) == 1
    status, accepted, untouched = judged[case.variant]
    if one and status != "in_contract":
        pass
    else:
        if one:
            expected = contract.numpy_ref(case)
            n = 1 + len(expected.alternatives)
            lines.append("# the oracle's value of every cell the contract requires" +
                         (f"; {n} answers accepted ({expected.boundary})" if n > 1 else ""))
            lines.append(wrap(f"ACCEPTED = {accepted}", 4))
            if untouched != "{}":
                lines.append("# cells the contract leaves untouched: they must keep POISON")
            lines.append(wrap(f"UNTOUCHED = {untouched}", 4))
        else:
            groups: dict[tuple[str, str], list[str]] = {}
            for v, j in checked.items():
                groups.setdefault(j[1:], []).append(v)
            lines.append("# per contract variant (those judging the case alike together): the oracle's value of")
            lines.append("# every cell the contract requires (each accepted answer), and the cells it leaves")
            lines.append("# untouched, which must keep POISON")
            lines.append("BY_VARIANT = {")
            lines += [wrap(f"    {tuple(vs)!r}: ({acc}, {unt}),", 8) for (acc, unt), vs in groups.items()]
            lines += ["}", "ACCEPTED, UNTOUCHED = next(j for variants, j in BY_VARIANT.items() if VARIANT in variants)"]
        lines += [
            "misses = [[f\"{n}{list(c)} expected {want}, got {outputs[n][c].item()}\" for n, cs in answer.items()",
            "           for c, want in cs.items() if outputs[n][c].item() != want] for answer in ACCEPTED]",
            "wrong += min(misses, key=len)",
            "wrong += [f\"{n}{list(c)} must keep {POISON[outputs[n].dtype]}, got {outputs[n][c].item()}\"",
            "          for n, cs in UNTOUCHED.items() for c in cs if outputs[n][c].item() != POISON[outputs[n].dtype]]"]
    lines += ["changed = [n for n, t in inputs.items() if not torch.equal(t, inputs_before[n])]",
              'assert not changed, f"the call changed its inputs {changed}"',
              "assert not wrong, f\"{len(wrong)} wrong cells: \" + \"; \".join(wrong[:8])",
              'print("OK: every required cell right, untouched cells and inputs unchanged")']
    return lines


def write_short_repro(saved: SavedCase, path: Path, name: str | None = None) -> None:
    """Write the short script for `saved` to `path` (ValueError when it cannot show the case)."""
    src = render_short(saved, name)
    compile(src, str(path), "exec")  # a template bug must fail here, not in a maintainer's hands
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(src, encoding="utf-8")
