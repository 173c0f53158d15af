"""How each op's entry point is called: bound by parameter NAME, once, when a target loads.

SGLang changed its entry points' signatures between releases (0.5.19 dropped
`strided_indices`, so a positional call in 0.5.14's order puts every later argument one
place off). kvfuzz therefore reads the entry point's signature (`inspect.signature`; for a
bare `@triton.jit` kernel, the signature of the function it wraps, which is what its
`arg_names`/`params` come from) and builds, per op, a `Binding`: for every parameter, where
its value comes from.

* A parameter kvfuzz has a contract for gets the case's tensor or scalar of that name
  (`num_kv_splits_ptr` is the `num_kv_splits` tensor, `seq_lens_ptr` the `seq_lens` one).
  0.5.17's `v2p_page_table` (the case's `full_v2p`) and `kernel_page_multiplier`, 0.5.18's
  unified SWA pool (`token_to_kv_pool` a `UnifiedSWAKVPool` holding the case's `swa_v2p`),
  0.5.19's `src_is_read_table` / `swa_src_table`, 0.5.20's `skip_page_table` and 0.5.23's
  `zero_tail`, `full_v2p`, `swa_v2p` come from the case too (optional case fields: absent means
  False / None / 1, the value that turns their path off). Which of them a signature can pass
  is `Binding.takes` (`OpCall.carries`): a forced variant needing others is refused
  (`targets.check_variant`), since a parameter the signature lacks is never passed.
* A parameter of a later SGLang release that kvfuzz has no contract for yet, but knows, gets
  the value that turns its new path off, so that the call does what the contract kvfuzz
  checks describes (`OpCall.neutral`; empty today: every later parameter of a checked op
  comes from the case). Those paths would not be checked.
* An optional output kvfuzz has a contract for (`OpCall.optional`: 0.5.23's `uneven_batch_ptr`)
  gets the case's tensor, or None when the case has none. A signature without its parameter
  `lacks` it: campaigns leave it out of that target's cases (`engines.common.fit_target`), and
  a case that holds it anyway cannot be called (`HarnessError`; `kvfuzz replay` refuses it).
* An entry point that returns its output instead of writing one (0.5.23's
  `q8kv8_topk_length_from_indices`, `OpCall.returns`) has the result copied into the case's
  tensor; a result of another shape or dtype raises `WrongResult`, the target's crash. An entry
  point that writes the case's outputs or allocates its own (pa_page_table's host wrapper:
  CUDA-graph replay passes its buffers, eager decode passes None) has its returned outputs
  copied in only where the case makes the eager call (`OpCall.returns_when`).
* A bare `@triton.jit` entry point is launched on one program, `entry[(1,)]`, unless its op's
  `OpCall.grid` builds the grid from the case (flashinfer_kv_indices: `(bs,)`, as SGLang's
  FlashInfer backend launches it; chunked_prefix_kv_indices: `(bs,)`; flashmla_kv_indices:
  `(bs, get_num_kv_index_blocks_flashmla(W, page_size))`, as the MLA backends launch them;
  trtllm_mha_kv_indices: `(bs, get_num_mha_kv_index_blocks(W, page_size))`, as the TRT-LLM MHA
  backend's builder launches it; aiter_ragged_page_table and aiter_req_to_token_page_table:
  `(bs, cdiv(max(W, 1), 1024))`, as the AITER backend launches them).
* A parameter kvfuzz does not know at all is left at its default (listed in
  `Binding.defaulted`: behaviour kvfuzz does not check); one without a default cannot be
  supplied, and the target is refused when it loads (`TargetLoadError`, one line).
* A signature whose parameters are 0.5.14's in 0.5.14's order, some renamed (`out` for
  `num_kv_splits_ptr`), or one that takes `*args`, is called positionally in 0.5.14's order, as
  kvfuzz always did; a known name out of that order refuses it.

Binding happens at load time, so a call cannot fail to bind. Building a call's arguments from
a case is kvfuzz's own work: an exception there is raised as `HarnessError`, which the judge
counts as kvfuzz's failure, never the target's (its type name is `execute.HARNESS`).

Each op's `OpCall` and its SGLang API generations (`Generation`, read from the release wheels'
kernel files, docs/releases.md) live in its record (`kvfuzz/ops/<op>/call.py`); a signature
equal to one of them is named after it. This module is the binding logic every op shares;
the caller passes the op's `OpCall` and generations (`bind`).

Standalone (the standard library, torch and triton; of kvfuzz, only errors.py): the repro
script embeds this module and the op's call.py and calls the kernel through `bind` as kvfuzz
does (kvfuzz.repro.standalone_modules).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import TargetLoadError
from ..variant_choice import generation_of

Getter = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]


class WrongResult(Exception):
    """An entry point that returns its output returned something else than the output's shape
    and dtype: the target's failure (a crash on an in-contract case)."""


def store_result(out: Any, result: Any) -> None:
    """Copy a returned output into the case's tensor, or WrongResult."""
    import torch

    if not isinstance(result, torch.Tensor):
        raise WrongResult(f"returned {type(result).__name__}, not a tensor")
    if tuple(result.shape) != tuple(out.shape) or result.dtype != out.dtype:
        raise WrongResult(f"returned {str(result.dtype).replace('torch.', '')}{list(result.shape)}, expected "
                          f"{str(out.dtype).replace('torch.', '')}{list(out.shape)}")
    out.copy_(result)


def store_results(t: Mapping[str, Any], names: str | tuple[str, ...], result: Any) -> None:
    """Copy the returned output (`names` a str) or outputs (a tuple: a tuple returned) in, or WrongResult."""
    if isinstance(names, str):
        return store_result(t[names], result)
    if not isinstance(result, tuple) or len(result) != len(names):
        raise WrongResult(f"returned {type(result).__name__}, not a tuple of {len(names)} tensors")
    for name, one in zip(names, result):
        store_result(t[name], one)


class HarnessError(Exception):
    """kvfuzz failed to build a call's arguments from a case: kvfuzz's bug, not the target's.
    The name is `kvfuzz.execute.HARNESS`, the error type the judge never counts as a finding."""


def tensor(name: str) -> Getter:
    return lambda t, s: t[name]


def scalar(name: str) -> Getter:
    return lambda t, s: s[name]


def const(value: Any) -> Getter:
    return lambda t, s: value


def optional_tensor(name: str) -> Getter:  # an optional tensor (input or output): None when the case has none
    return lambda t, s: t.get(name)


def flag(name: str) -> Getter:
    return lambda t, s: bool(s.get(name, False))


def given(name: str) -> Getter:  # whether the case has the optional tensor `name` (a HAS_... constexpr)
    return lambda t, s: t.get(name) is not None


def row_stride(name: str) -> Getter:  # a tensor's row stride, for a kernel that takes it as an argument
    return lambda t, s: t[name].stride(0)


def one_program_per_row(name: str) -> Getter:  # a bare kernel's grid (`OpCall.grid`): (rows of `name`,)
    return lambda t, s: (t[name].shape[0],)


@dataclass(frozen=True)
class OpCall:
    """What kvfuzz can pass to one op's entry point."""

    supplied: Mapping[str, Getter]  # parameter name -> value from the case (contract arguments)
    required: tuple[tuple[str, ...], ...]  # each group: at least one of these names must be a parameter
    neutral: Mapping[str, Any]  # known later-release parameters -> the value that turns their path off
    legacy: tuple[str, ...]  # 0.5.14's positional order (names as in `supplied`)
    legacy_kw: tuple[str, ...] = ()  # passed by keyword after the positional ones, in 0.5.14's call
    legacy_kw_bare: tuple[str, ...] = ()  # the same, for a bare kernel only
    aliases: Mapping[str, str] = field(default_factory=dict)  # another name -> the name in `legacy`
    optional: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # optional tensor -> its parameters
    returns: str | tuple[str, ...] | None = None  # the output(s) the entry point returns (kvfuzz copies them in)
    # whether this case's call takes the returned outputs (None: always); else it writes the case's in place
    returns_when: Getter | None = None
    # a later release's optional argument (Contract.variant_args) -> the parameters that pass it
    carries: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # such an argument -> a parameter every release has that passes it in some releases only (0.5.18's
    # swa_v2p inside token_to_kv_pool): only the release tells whether it is taken (Target.takes)
    rides: Mapping[str, str] = field(default_factory=dict)
    # a bare @triton.jit entry point's launch grid, from the case (None: one program, (1,))
    grid: Getter | None = None

    def canonical(self, name: str) -> str:
        return self.aliases.get(name, name)


@dataclass(frozen=True)
class Generation:
    """One SGLang API generation of an op's entry point: its exact parameter names, in order."""

    name: str  # the first release with this signature
    releases: str  # the releases that have it (read from the wheels)
    params: tuple[str, ...]
    new: str = ""  # what it added or changed, and what kvfuzz passes for it


@dataclass(frozen=True)
class Binding:
    """How one op's entry point is called, fixed when the target loads."""

    op: str
    entry: Any
    bare: bool  # a @triton.jit kernel, launched as entry[grid](...) (OpCall.grid; default (1,))
    by_name: bool  # False: positionally, in 0.5.14's order
    generation: str | None  # the SGLang API generation the signature equals, if any
    closest: str  # the generation sharing most parameter names with it (the newest on a tie)
    signature: str
    supplied: tuple[str, ...]  # parameters filled from the case
    neutral: Mapping[str, Any]  # known later-release parameters -> the value that turns their path off
    defaulted: tuple[str, ...]  # unknown parameters left at their defaults: not checked
    neutral_passed: tuple[str, ...] = ()  # the neutral parameters whose default differs: passed explicitly
    lacks: tuple[str, ...] = ()  # the contract's optional tensors this signature cannot take
    returns: str | tuple[str, ...] | None = None  # the output(s) the entry point returns (OpCall.returns)
    returns_when: Getter | None = field(default=None, repr=False)  # OpCall.returns_when
    _positional: tuple[Getter, ...] = field(default=(), repr=False)
    _keywords: tuple[tuple[str, Getter], ...] = field(default=(), repr=False)
    takes: tuple[str, ...] = ()  # the later releases' optional arguments its parameters pass (OpCall.carries)
    grid: Getter | None = field(default=None, repr=False)  # a bare kernel's grid from the case (None: (1,))

    def arguments(self, t: Mapping[str, Any], s: Mapping[str, Any]) -> tuple[list, dict]:
        unsupported = [name for name in self.lacks if name in t]
        if unsupported:  # campaigns leave such tensors out for this target (engines.common)
            raise HarnessError(f"building the {self.op} call: this entry point takes no "
                               f"{', '.join(unsupported)}")
        try:
            return [g(t, s) for g in self._positional], {k: g(t, s) for k, g in self._keywords}
        except Exception as exc:  # kvfuzz's case lacks what its own binding asks for
            raise HarnessError(f"building the {self.op} call: {type(exc).__name__}: {exc}") from exc

    def __call__(self, t: Mapping[str, Any], s: Mapping[str, Any]) -> None:
        args, kwargs = self.arguments(t, s)
        if self.bare:
            try:
                grid = self.grid(t, s) if self.grid else (1,)
            except Exception as exc:  # kvfuzz's case lacks what its own grid asks for
                raise HarnessError(f"building the {self.op} grid: {type(exc).__name__}: {exc}") from exc
            self.entry[grid](*args, **kwargs)
        elif self.returns and (self.returns_when is None or self.returns_when(t, s)):
            store_results(t, self.returns, self.entry(*args, **kwargs))
        else:
            self.entry(*args, **kwargs)

    def getters(self) -> dict[str, Getter]:
        """Parameter name -> what kvfuzz passes it: the case's values (by name, or in 0.5.14's
        order) and the later releases' parameters it turns off (`neutral`)."""
        named = {} if self.by_name else dict(zip(self.supplied, self._positional))
        named.update(self._keywords)
        named.update({k: const(v) for k, v in self.neutral.items() if k not in named})
        return named

    def describe(self) -> str:
        how = (f"by name, SGLang {self.generation} API" if self.generation else
               f"by name, closest to SGLang {self.closest} API" if self.by_name else
               "positionally, in SGLang 0.5.14's order")
        out = [how]
        if self.neutral:
            out.append("new paths off: " + ", ".join(
                f"{k}={v!r} ({'passed' if k in self.neutral_passed else 'its default'})"
                for k, v in self.neutral.items()))
        if self.defaulted:
            out.append("left at their defaults (unchecked): " + ", ".join(self.defaulted))
        if self.lacks:
            out.append("cannot take the optional " + ", ".join(self.lacks))
        if self.returns:
            what = self.returns if isinstance(self.returns, str) else ", ".join(self.returns)
            when = " where the case makes the eager call" if self.returns_when else ""
            out.append(f"returns {what} (kvfuzz copies it into the case's tensor{when})")
        return "; ".join(out)


def is_bare_kernel(entry: Any) -> bool:
    """A @triton.jit function (compiled or interpreted), launched as kernel[grid](...)."""
    from triton.runtime.jit import KernelInterface

    return isinstance(entry, KernelInterface)


def signature_of(entry: Any) -> inspect.Signature:
    """The entry point's signature; for a Triton kernel (or an autotuner/heuristics wrapper
    around one), that of the Python function it was made from."""
    fn = entry
    for _ in range(8):
        if inspect.isfunction(fn) or not hasattr(fn, "fn"):
            break
        fn = fn.fn
    return inspect.signature(fn)


def _known(call: OpCall) -> set[str]:
    return set(call.supplied) | set(call.neutral)


def _generation(gens: Sequence[Generation], names: tuple[str, ...]) -> tuple[str | None, str]:
    """(the generation equal to `names`, if any; the one sharing most names, newest on a tie)."""
    return generation_of([(g.name, g.params) for g in gens], names)


def bind(op: str, entry: Any, call: OpCall, generations: Sequence[Generation], where: str = "target") -> Binding:
    """The Binding of `entry` for `op` (its record's `call` and `generations`), or
    TargetLoadError (one line) naming what kvfuzz cannot supply."""
    bare = is_bare_kernel(entry)
    name = getattr(entry, "__name__", None) or getattr(getattr(entry, "fn", None), "__name__", op)
    try:
        sig = signature_of(entry)
    except (TypeError, ValueError) as exc:
        raise TargetLoadError(f"{where}: cannot read the signature of {name}: {exc}") from None
    params = list(sig.parameters.values())
    names = tuple(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    equal, closest = _generation(generations, names)
    text = f"{name}{sig}"
    reason = _bind_by_name(call, params)
    if isinstance(reason, tuple):
        positional, keywords, supplied, neutral, defaulted = reason
        passed = tuple(k for k, _ in keywords if k in neutral)
        return Binding(op, entry, bare, True, equal, closest, text, supplied, neutral, defaulted, passed,
                       _lacks(call, supplied), call.returns, call.returns_when, positional, keywords,
                       _takes(call, supplied), call.grid)
    legacy = _bind_legacy(call, params, bare)
    if legacy is not None:
        positional, keywords = legacy
        supplied = call.legacy + tuple(k for k, _ in keywords)
        return Binding(op, entry, bare, False, equal, closest, text, supplied, {}, (), (), _lacks(call, supplied),
                       call.returns, call.returns_when, positional, keywords, _takes(call, supplied), call.grid)
    raise TargetLoadError(f"{where}: kvfuzz cannot call {name}: {reason} (it knows SGLang's "
                          f"{', '.join(g.name for g in generations)} signatures; see docs/releases.md)")


def _lacks(call: OpCall, supplied: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name, params in call.optional.items() if not set(params) & set(supplied))


def _takes(call: OpCall, supplied: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name, params in call.carries.items() if set(params) & set(supplied))


def _same(default: Any, value: Any) -> bool:
    return default is value or (type(default) is type(value) and isinstance(value, (bool, int, float, str))
                                and default == value)


def _bind_by_name(call: OpCall, params: list[inspect.Parameter]):
    """(positional getters, keyword getters, supplied, neutral, defaulted), or why not."""
    known = _known(call)
    positional: list[Getter] = []
    keywords: list[tuple[str, Getter]] = []
    supplied, defaulted = [], []
    neutral: dict[str, Any] = {}
    by_keyword_from = None  # once a parameter is skipped, later ones go by keyword
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in known:
            if p.default is p.empty:
                return f"required parameter {p.name!r} is unknown to kvfuzz"
            defaulted.append(p.name)
            by_keyword_from = by_keyword_from or p.name
            continue
        if p.name in call.supplied:
            getter = call.supplied[p.name]
            supplied.append(p.name)
        else:
            value = neutral[p.name] = call.neutral[p.name]
            if _same(p.default, value):  # its default already turns the new path off: leave it unset
                by_keyword_from = by_keyword_from or p.name
                continue
            getter = const(value)
        if p.kind is p.POSITIONAL_ONLY:
            if by_keyword_from:
                return f"positional-only parameter {p.name!r} follows {by_keyword_from!r}, which kvfuzz leaves unset"
            positional.append(getter)
        else:
            keywords.append((p.name, getter))
    have = {p.name for p in params}
    for group in call.required:
        if not have & set(group):
            return f"it has no parameter {' or '.join(map(repr, group))}"
    return tuple(positional), tuple(keywords), tuple(supplied), neutral, tuple(defaulted)


def _bind_legacy(call: OpCall, params: list[inspect.Parameter], bare: bool):
    """(positional getters, keyword getters) for 0.5.14's positional call, or None when the
    signature does not take it: a known name out of 0.5.14's place, a parameter beyond it
    without a default, or too few parameters."""
    known = _known(call)
    takes_args = any(p.kind is p.VAR_POSITIONAL for p in params)
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params)
    plain = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(plain) < len(call.legacy) and not takes_args:
        return None
    for p, want in zip(plain, call.legacy):
        if p.name in known and call.canonical(p.name) != want:  # a known name out of 0.5.14's place
            return None
    kw_names = call.legacy_kw + (call.legacy_kw_bare if bare else ())
    rest = plain[len(call.legacy):] + [p for p in params if p.kind is p.KEYWORD_ONLY]
    keywords = []
    for name in kw_names:
        if any(p.name == name for p in rest) or takes_kwargs:
            keywords.append((name, call.supplied[name]))
        elif name in call.legacy_kw:  # 0.5.14's call passes it: a signature without it cannot take that call
            return None
    for p in rest:
        if p.default is p.empty and p.name not in kw_names:
            return None
    return tuple(call.supplied[n] for n in call.legacy), tuple(keywords)
