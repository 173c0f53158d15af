"""Host-side launch overhead of kvfuzz's builtin kernels against SGLang's (the seed), on CPU.

usage: python scripts/host_overhead.py --seed-path PATH [--number N] [--repeat R] [--only SUBSTR]

No GPU is needed (nor used). Triton is pointed at a stand-in driver that reports an sm_90
CUDA target, and every kernel that would be compiled is replaced by a stand-in compiled
kernel whose ``run`` does nothing; so a call runs everything a real launch runs on the host
except the generated C launcher (which unpacks each argument: ``data_ptr()`` for a tensor,
an integer conversion for a scalar) and the driver call. For each launcher path it reports,
per call, in µs (the least of --repeat runs of --number calls, CPU tensors of SGLang's sizes):

  pre       the Python wrapper alone: the kernel object is swapped for a stub whose launch
            returns at once (validation, tensor creation, strides, grid)
  run       the whole host path: the wrapper plus Triton's ``JITFunction.run`` (argument
            binding and specialisation, cache-key lookup, global-value checks, grid)
  args      parameters the launch binds (constexpr ones and defaults included: Triton binds
            and the C launcher unpacks each) and, in brackets, tensors among them

and the builtin/seed ratio of ``run``. A real launch adds the same fixed cost to both
(the driver call, about 2-4 µs) plus a little per argument. The seed path is loaded from
SGLang's ``metadata_kernels.py`` (``--seed-path`` or $KVFUZZ_SEED_PATH); a stand-in
``SWAKVPool`` is installed when SGLang is not.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- fake Triton runtime


class FakeCompiledKernel:
    """What ``JITFunction.run`` needs of a compiled kernel; launching does nothing."""

    function = None
    packed_metadata = None

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, *args):
        pass


def install_fake_triton_runtime(compile_kernel=None):
    """Point Triton at an sm_90 stand-in driver, with launches that do nothing.

    `compile_kernel(jit_fn, signature, device, constexprs, options, attrs)`, if given, runs at
    each compile (tests/gpu_compile_check.py compiles for real there); else nothing is compiled."""
    os.environ.pop("TRITON_INTERPRET", None)
    from triton.backends.compiler import GPUTarget
    from triton.runtime import jit
    from triton.runtime.driver import driver

    class FakeDriver:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    def fake_do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        if compile_kernel is not None:
            compile_kernel(self, signature, device, constexprs, options, attrs)
        else:
            _ = self.cache_key  # records the kernel's globals, as a real compile does
        kernel = FakeCompiledKernel()
        self.device_caches[device][0][key] = kernel
        return kernel

    driver.set_active(FakeDriver())
    jit.JITFunction._do_compile = fake_do_compile


class LaunchStub:
    """Stands in for a jitted kernel: ``kernel[grid](*args, **kwargs)`` records and returns."""

    def __init__(self):
        self.last = None

    def __getitem__(self, grid):
        return self._launch

    def _launch(self, *args, **kwargs):
        self.last = (args, kwargs)

    def run(self, *args, grid, warmup, **kwargs):
        self.last = (args, kwargs)


# --------------------------------------------------------------------------- cases


def cdiv(a, b):
    return -(-a // b)


def decode_call(impl, B, ctx, ps, swa):
    import torch

    pool_rows = 2 * B + 8
    width = cdiv(ctx, ps)
    i32 = dict(dtype=torch.int32)
    req_to_token = torch.zeros(pool_rows, ctx, **i32)
    seq_lens = torch.full((B,), ctx - 1, dtype=torch.int64)
    req_pool_indices = torch.arange(B, dtype=torch.int64)
    strided_indices = torch.arange(0, ctx, ps)
    max_seq_pages = cdiv(ctx - 1, ps)
    cs, cu, pt = torch.zeros(B, **i32), torch.zeros(B + 1, **i32), torch.zeros(B, width, **i32)
    swa_pt = torch.zeros(B, width, **i32) if swa else None
    pool = None
    if swa:
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

        pool = SWAKVPool.__new__(SWAKVPool)
        pool.full_to_swa_index_mapping = torch.zeros(pool_rows * ctx + 1, dtype=torch.int64)
    fn = impl.normal_decode_set_metadata
    return lambda: fn(cs, cu, pt, req_to_token, req_pool_indices, strided_indices, max_seq_pages,
                      seq_lens, 0, ps, swa_pt, pool)


def spec_call(impl, bs, R, ctx):
    import torch

    i32 = dict(dtype=torch.int32)
    a, b = torch.zeros(bs, ctx, **i32), torch.zeros(bs * R, R, **i32)
    la, lb = torch.full((bs,), ctx // 2, **i32), torch.ones(bs * R, **i32)
    dst = torch.zeros(bs * R, ctx, **i32)
    fn = impl.prepare_swa_spec_page_table_triton
    return lambda: fn(dst, a, b, la, lb, R)


def splits_call(impl, n, launcher):
    import torch

    seq_lens = torch.full((n,), 1000, dtype=torch.int64)
    out = torch.zeros(n, dtype=torch.int32)
    args = (n, 1, 32, 8, 8, 132)
    if launcher and hasattr(impl, "get_num_kv_splits"):  # the seed has no launcher: its bare kernel
        return lambda: impl.get_num_kv_splits(out, seq_lens, *args)
    mns = 256 if n < 256 else 1 << (n - 1).bit_length()  # what SGLang passes
    return lambda: impl.get_num_kv_splits_triton[(1,)](out, seq_lens, *args, MAX_NUM_SEQ=mns)


# (name, seed factory, builtin factory, kernel attribute per module: (seed, builtin))
PS1 = ("_fused_metadata_kernel_ps1_no_swa", "_decode_metadata_ps1_kernel")
GENERAL = ("_fused_metadata_kernel_general", "_decode_metadata_general_kernel")
SPEC = ("_prepare_swa_spec_page_table_kernel", "_swa_spec_page_table_kernel")


def cases():
    for B, ctx in ((1, 1024), (8, 32768), (256, 32768)):
        yield (f"decode B={B} ctx={ctx // 1024}k ps=1", "decode", PS1,
               lambda impl, B=B, ctx=ctx: decode_call(impl, B, ctx, 1, False))
    yield ("decode B=8 ctx=8k ps=16", "decode", GENERAL, lambda impl: decode_call(impl, 8, 8192, 16, False))
    yield ("decode B=8 ctx=8k ps=16 swa", "decode", GENERAL, lambda impl: decode_call(impl, 8, 8192, 16, True))
    for bs in (8, 64):
        yield (f"spec bs={bs} R=4 ctx=8k", "spec", SPEC, lambda impl, bs=bs: spec_call(impl, bs, 4, 8192))
    yield ("num_kv_splits n=64 (bare kernel)", "bare", ("get_num_kv_splits_triton",) * 2,
           lambda impl: splits_call(impl, 64, False))
    yield ("num_kv_splits n=64 (launcher)", "splits", ("get_num_kv_splits_triton", "_get_num_kv_splits_strided"),
           lambda impl: splits_call(impl, 64, True))


# --------------------------------------------------------------------------- timing


def per_call_us(fn, number, repeat):
    """Least per-call time of ``repeat`` runs: the machine's noise only ever adds time."""
    for _ in range(3):
        fn()  # compile (stand-in) and warm up
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def count_args(module, attr, fn):
    """(parameters, tensors) of one launch: Triton binds and specialises every parameter of
    the kernel (constexpr ones and defaults included) and the C launcher unpacks each; a
    tensor costs more (``data_ptr()``, and on CUDA a pointer-attribute query)."""
    import torch

    kernel, stub = getattr(module, attr), LaunchStub()
    setattr(module, attr, stub)
    try:
        fn()
    finally:
        setattr(module, attr, kernel)
    args, kwargs = stub.last
    values = list(args) + list(kwargs.values())
    return len(kernel.params), sum(isinstance(v, torch.Tensor) for v in values)


def preamble_us(module, attr, fn, number, repeat):
    kernel = getattr(module, attr)
    setattr(module, attr, LaunchStub())
    try:
        return per_call_us(fn, number, repeat)
    finally:
        setattr(module, attr, kernel)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_seed = os.environ.get("KVFUZZ_SEED_PATH", "")
    parser.add_argument("--seed-path", default=default_seed or None, required=not default_seed)
    parser.add_argument("--number", type=int, default=2000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=30, help="timing runs; the least is reported")
    parser.add_argument("--only", default="", help="run only cases whose name contains this")
    parser.add_argument("--builtin-root", default=str(REPO),
                        help="directory to import kvfuzz.kernels from (default: this checkout); "
                             "for before/after comparisons")
    args = parser.parse_args(argv)

    install_fake_triton_runtime()
    sys.path.insert(0, str(REPO / "scripts"))
    sys.path.insert(0, args.builtin_root)
    from bench_kernels import install_sglang_stand_in, load_seed

    install_sglang_stand_in()
    seed = load_seed(Path(args.seed_path))
    import kvfuzz.kernels.decode_metadata as decode_mod
    import kvfuzz.kernels.num_kv_splits as splits_mod
    import kvfuzz.kernels.swa_spec_page_table as spec_mod
    import kvfuzz.kernels as kernels

    print(f"# builtin: {Path(kernels.__file__).parent}")
    builtin_module = {"decode": decode_mod, "spec": spec_mod, "splits": splits_mod, "bare": kernels}
    import platform

    import torch
    import triton

    print(f"# host-side µs per call on CPU ({platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}); "
          f"least of {args.repeat} runs of {args.number} calls")
    header = (f"{'case':34s} {'seed pre':>8s} {'bi pre':>8s}   {'seed run':>8s} {'bi run':>8s} {'ratio':>6s}"
              f"   {'seed args':>9s} {'bi args':>8s}")
    print(header)
    print("-" * len(header))
    for name, kind, attrs, factory in cases():
        if args.only and args.only not in name:
            continue
        seed_fn, bi_fn = factory(seed), factory(kernels)
        run_s = per_call_us(seed_fn, args.number, args.repeat)
        run_b = per_call_us(bi_fn, args.number, args.repeat)
        pre_s = preamble_us(seed, attrs[0], seed_fn, args.number, args.repeat)
        pre_b = preamble_us(builtin_module[kind], attrs[1], bi_fn, args.number, args.repeat)
        n_s = "%d (%d)" % count_args(seed, attrs[0], seed_fn)
        n_b = "%d (%d)" % count_args(builtin_module[kind], attrs[1], bi_fn)
        print(f"{name:34s} {pre_s:8.2f} {pre_b:8.2f}   {run_s:8.2f} {run_b:8.2f} {run_b / run_s:6.2f}"
              f"   {n_s:>9s} {n_b:>8s}", flush=True)
    print("# pre: the Python wrapper alone; run: wrapper + Triton's JITFunction.run up to the C launcher;"
          " args: kernel parameters bound per launch (tensors passed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
