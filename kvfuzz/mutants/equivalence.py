"""Why a mutant was not killed: equivalent, outside the contract, or out of reach.

A mutant that survives its campaigns (and their confirmation run) is run beside the unmutated
copy of its file on one long seeded stream of the op's generator (`strategies.random_cases`,
in and out of contract, under the variant that judges it), each case from its image and from
its alternate image, and their arenas are compared byte for byte (`compare`):

* `equivalent`: every case gives byte-identical arenas and the same errors (`evidence` says how
  many cases, in and out of contract, and which kernel paths they took); or the mutants
  differ only where the contract leaves the output free (the judge finds nothing on them);
* `outside contract`: they differ only on out-of-contract cases (the first such case's
  reason is given): only a call outside the contract tells them apart;
* `out of reach`: a case of the stream tells them apart in contract and kills the mutant, but
  the campaigns never made one like it within their budget (the case is described), or the
  stream never took the kernel path the mutant is on.

Before the stream, a static rule (`static_equivalent`) settles the shape it can prove: a
dropped stride (`x * out_s` -> `x`) whose argument at the kernel's launch (directly, or through
a local name assigned once) is the last-dimension stride of a tensor the launching function
allocates itself with a literal shape (`torch.empty(n)`, `torch.zeros((a, b))`) or makes
contiguous (`seq_lens = seq_lens.contiguous()`; the last dimension by the op's contract): that
stride is 1, so the mutant is equivalent, and the evidence says which lines show it.

`dimension` names the input dimension a mutant's line is about where its names make it clear
(an out-of-reach mutant of `(row < P)` is about the pool's rows, `P`).
"""

from __future__ import annotations

import ast
import json
import re
import time

# names in kvfuzz's kernels -> the input dimension they hold (for "out of reach" reasons)
DIMENSIONS = {
    "P": "the pool's rows (req_to_token / page-table rows)", "C": "the table's columns (max context)",
    "W": "the output's width", "PS": "the page size", "R": "the requests' count", "N": "the index map's size",
    "out_n": "the output's length", "map_n": "the token map's size", "topk": "the top-k width",
    "bs": "the batch size", "PL": "the page-table rows", "stride": "a non-contiguous layout",
}


def compare(original, mutant, op: str, variant: str | None, seed: int, n: int, device: str,
            deadline: float | None = None) -> dict:
    """Run `original` and `mutant` (loaded targets) on `n` seeded cases; the verdict as a dict:
    why, evidence, and the counts behind it."""
    from ..execute import run_case
    from ..judge import judge
    from ..ops import CONTRACTS
    from ..strategies import random_cases
    from .run import killing

    contract = CONTRACTS[op]
    counts = {"in_contract": 0, "out_of_contract": 0}
    paths: dict[str, int] = {}
    outside = free = None
    ran = 0
    for i, case in enumerate(random_cases(op, seed, n, variant=variant)):
        if deadline is not None and time.monotonic() > deadline:
            break
        status, reasons = contract.classify(case)
        inside = status == "in_contract"
        counts["in_contract" if inside else "out_of_contract"] += 1
        if inside:
            path = contract.kernel_path(case)
            paths[path] = paths.get(path, 0) + 1
        a = run_case(original, case, device, repeats=2, torch_ref=False)
        b = run_case(mutant, case, device, repeats=2, torch_ref=False)
        ran += 1
        if _same(a, b):
            continue
        if not inside:
            outside = outside or {"case": i, "reason": reasons[0] if reasons else status, "describe": case.describe()}
            continue
        mine, theirs = judge(case, b).signatures(), judge(case, a).signatures()
        if mine and killing(mine, "in contract", set(theirs)):
            return {"why": "out of reach", "cases": ran, **counts, "paths": paths, "path": path,
                    "evidence": f"case {i} of the seeded stream (seed {seed}) kills it ({mine[0]}): "
                                f"{case.describe()}; the campaigns made none like it in their budget"}
        free = free or {"case": i, "describe": case.describe()}
    stream = (f"{ran} cases of the seeded stream (seed {seed}): {counts['in_contract']} in contract "
              f"(paths: {', '.join(f'{k} {v}' for k, v in sorted(paths.items())) or 'none'}), "
              f"{counts['out_of_contract']} out of contract")
    base = {"cases": ran, **counts, "paths": paths}
    if outside is not None:
        return base | {"why": "outside contract", "evidence": f"differs from the original only out of contract "
                       f"(first: case {outside['case']}, {outside['reason']}); {stream}"}
    if free is not None:
        return base | {"why": "equivalent", "evidence": f"differs only where the contract leaves the output free "
                       f"(the judge finds nothing; first: case {free['case']}); {stream}"}
    return base | {"why": "equivalent", "evidence": f"byte-identical arenas and errors on {stream}"}


def _same(a, b) -> bool:
    """Two outcomes of a case: the same errors and arenas on its first two runs (image, alternate image)."""
    if len(a.runs) < 2 or len(b.runs) < 2 or a.device_lost or b.device_lost:
        return False
    for x, y in zip(a.runs[:2], b.runs[:2]):
        if x.error != y.error or (x.after is None) != (y.after is None):
            return False
        if x.after is not None and x.after.tobytes() != y.after.tobytes():
            return False
    return True


def dimension(diff: str) -> str | None:
    """The input dimension a mutant's changed line names, where it names one kvfuzz knows."""
    _, _, change = diff.partition(": ")
    before, _, after = change.partition("  ->  ")
    words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", before)) | set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", after))
    named = [f"`{w}` ({DIMENSIONS[w]})" for w in sorted(words) if w in DIMENSIONS]
    strides = sorted(w for w in words if "stride" in w or w.endswith(("_s", "_s0")))
    if strides:
        named.append(f"`{strides[0]}` ({DIMENSIONS['stride']})")
    return ", ".join(named) or None


def main_equivalence(job_path: str) -> int:
    """`python -m kvfuzz.mutants.one --equivalence JOB.json`: the verdict, as JSON, into the job's `out`."""
    from pathlib import Path

    from .. import device as devmod
    from ..targets import load_target

    job = json.loads(Path(job_path).read_text())
    device = devmod.select(job["device"])
    original, mutant = load_target(job["original"], device), load_target(job["mutant"], device)
    got = compare(original, mutant, job["op"], job.get("variant"), job["seed"], job["cases"], device,
                  time.monotonic() + job["seconds"] if job.get("seconds") else None)
    Path(job["out"]).write_text(json.dumps(got, indent=1))
    return 0


ALLOCATORS = ("empty", "zeros", "ones", "full")


def static_equivalent(source: bytes, m, ranks: dict[str, int] | None = None) -> str | None:
    """The evidence that mutant `m` (operators.Mutant) of `source` is equivalent, where a static
    rule shows it; else None. `ranks`: the op's tensors' ranks (its contract), for a tensor the
    wrapper makes contiguous."""
    if m.operator != "drop_stride":
        return None
    from .operators import STRIDE_NAME

    dropped = [n.id for n in ast.walk(ast.parse(m.original, mode="eval")) if isinstance(n, ast.Name)
               and STRIDE_NAME.search(n.id) and n.id not in m.replacement]
    tree = ast.parse(source)
    kernels = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    kernel = kernels.get(m.function)
    if len(dropped) != 1 or kernel is None:
        return None
    name = dropped[0]
    params = [a.arg for a in kernel.args.args]
    for fn in kernels.values():
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript)
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == m.function):
                continue
            arg = _argument(call, params, name)
            arg, via = _through_name(fn, arg)
            shown = _unit_stride(fn, arg, ranks or {}) if arg is not None else None
            if shown:
                return (f"static: `{name}` is `{ast.unparse(arg)}` at the launch (L{call.lineno}{via}), and {shown}: "
                        "it is 1, so dropping it changes nothing")
    return None


def _argument(call: ast.Call, params: list[str], name: str) -> ast.expr | None:
    """The expression a launch passes for kernel parameter `name`."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    positional = [p for p in params if p not in {kw.arg for kw in call.keywords}]
    stars = [i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)]
    if name not in positional or len(stars) > 1:
        return None
    i = positional.index(name)
    if not stars:
        return call.args[i] if i < len(call.args) else None
    before, after = call.args[:stars[0]], call.args[stars[0] + 1:]
    if i < len(before):
        return before[i]
    j = len(positional) - i  # counted from the end: the arguments after the starred one
    return after[-j] if 0 < j <= len(after) and len(call.args) - stars[0] - 1 == len(after) else None


def _only_assignment(fn: ast.FunctionDef, name: str) -> ast.Assign | None:
    """`name`'s one assignment in `fn`, if it is a statement of the function's own body
    (unconditional) with `name` as its whole target."""
    made = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for target in n.targets for t in ast.walk(target))]
    if len(made) != 1 or made[0] not in fn.body or len(made[0].targets) != 1 \
            or not isinstance(made[0].targets[0], ast.Name):
        return None
    return made[0]


def _through_name(fn: ast.FunctionDef, arg: ast.expr | None) -> tuple[ast.expr | None, str]:
    """A launch argument that is a local name (`seq_lens_stride_0`) as the expression it was
    assigned once, and where."""
    if isinstance(arg, ast.Name):
        made = _only_assignment(fn, arg.id)
        if made is not None:
            return made.value, f", `{arg.id}` from L{made.lineno}"
    return arg, ""


def _unit_stride(fn: ast.FunctionDef, arg: ast.expr, ranks: dict[str, int]) -> str | None:
    """Why `arg` (`X.stride(k)`) is 1 in function `fn`: X's one assignment there allocates it
    with a literal shape whose last dimension k is, or makes it contiguous (`X = X.contiguous()`,
    X possibly the wrapper's parameter) and k is its last dimension (-1, or its rank in the
    contract less one)."""
    if not (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "stride"
            and isinstance(arg.func.value, ast.Name) and len(arg.args) == 1):
        return None
    try:
        k = ast.literal_eval(arg.args[0])
    except ValueError:
        return None
    tensor = arg.func.value.id
    made = _only_assignment(fn, tensor)
    if made is None or not isinstance(made.value, ast.Call) or not isinstance(made.value.func, ast.Attribute):
        return None
    value, how = made.value, made.value.func.attr
    if how == "contiguous" and (k == -1 or (tensor in ranks and k == ranks[tensor] - 1)):
        return f"`{tensor}` is made contiguous (L{made.lineno}) and {k} is its last dimension"
    # not a parameter the caller may pass instead (pa_page_table allocates its outputs only when given None)
    if tensor in {a.arg for a in fn.args.args + fn.args.kwonlyargs}:
        return None
    ndim = _literal_rank(value.args if how != "full" else value.args[:1], fn)
    if how in ALLOCATORS and ndim and k in (-1, ndim - 1):
        return f"`{tensor}` is the {ndim}-D `torch.{how}` the wrapper allocates (L{made.lineno})"
    return None


NUMBERS = (ast.Constant, ast.BinOp, ast.Call, ast.Subscript)  # a shape's one argument that is plainly a number


def _literal_rank(args: list[ast.expr], fn: ast.FunctionDef) -> int | None:
    """The rank of an allocation's shape as written: `(a, b)` or `a, b` (2), `n` (1) where `n`
    is plainly a number (a constant, arithmetic, a call, an indexed size, or a name `fn` unpacks
    from a tuple, `n, w = ...`); None otherwise (a name may hold a tuple)."""
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = args[0].elts
    elif len(args) == 1 and not isinstance(args[0], NUMBERS) and not _unpacked(args[0], fn):
        return None
    if not args or any(isinstance(a, ast.Starred) for a in args):
        return None
    return len(args)


def _unpacked(e: ast.expr, fn: ast.FunctionDef) -> bool:
    """Whether name `e` is only ever assigned in `fn` as one element of a tuple (`n, w = x.shape`)."""
    if not isinstance(e, ast.Name):
        return False
    targets = [t for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets]
    whole = [t for t in targets if isinstance(t, ast.Name) and t.id == e.id]
    parts = [t for t in targets if isinstance(t, ast.Tuple)
             and any(isinstance(x, ast.Name) and x.id == e.id for x in t.elts)]
    return bool(parts) and not whole
