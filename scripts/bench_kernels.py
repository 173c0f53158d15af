"""Time kvfuzz's builtin kernels against SGLang's (the seed) on a CUDA GPU.

usage: python scripts/bench_kernels.py --seed-path PATH [--only SUBSTR] [--max-ratio 1.10]

PATH is SGLang's ``metadata_kernels.py`` (for example ``shared/seed/metadata_kernels.py``);
it is loaded with importlib from that path. When ``import sglang`` fails, a stand-in
``sglang.srt.mem_cache.swa_memory_pool`` with a ``SWAKVPool`` class is put in
``sys.modules`` first, because the seed's SWA path imports it and checks ``isinstance``.

Cases are SGLang-sized: decode metadata for B in {1, 8, 64, 256} and contexts of 1k, 8k
and 32k tokens, at page size 1, 16 and 16 with SWA (int64 seq_lens and req_pool_indices,
int32 req_to_token); the speculative SWA page table for bs 8 and 64, 4 draft tokens, an 8k
context; num_kv_splits for 1, 64, 256 and 1024 sequences with int64 and int32 lengths
(the bare kernel, as SGLang launches it, and kvfuzz's validating launcher). Before timing
a case the two implementations run once on identical inputs; their outputs must be equal.

Each case is timed three ways, per call in microseconds:
  do_bench  triton.testing.do_bench(fn, return_mode="median") (L2 flushed between calls)
  graph     one CUDA graph of --graph-calls back-to-back calls, replayed --replays times;
            the median replay divided by the number of calls (device time)
  host      the host side alone: the wall time to issue --host-calls back-to-back calls,
            with no synchronisation among them (fewer launches than the launch queue
            holds, so none waits for the GPU), divided by the number of calls; the median
            of --replays runs, the GPU drained between runs
The ratio is builtin / seed (below 1: builtin faster). Exit status: 0, or 1 when outputs
differ or a ratio (any of the three) exceeds --max-ratio, or 2 without CUDA. The host ratio
of a "(launcher)" row is shown but not held to --max-ratio: it compares kvfuzz's validating
launcher with a bare launch of the seed's kernel, which checks nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import types
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
DEVICE = "cuda"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- loading


def install_sglang_stand_in():
    """Make ``from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool`` work without SGLang."""
    try:
        import sglang  # noqa: F401
        return "sglang installed"
    except ImportError:
        pass
    names = ["sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.swa_memory_pool"]
    for name in names:
        mod = types.ModuleType(name)
        mod.__path__ = []  # a package, so the submodule import resolves through sys.modules
        sys.modules[name] = mod
    for parent, child in zip(names, names[1:]):
        setattr(sys.modules[parent], child.rsplit(".", 1)[1], sys.modules[child])

    class SWAKVPool:  # what the seed's isinstance check needs; nothing else is used
        full_to_swa_index_mapping: torch.Tensor

    sys.modules[names[-1]].SWAKVPool = SWAKVPool
    return "stand-in SWAKVPool"


def load_seed(path: Path):
    spec = importlib.util.spec_from_file_location("kvfuzz_bench_seed", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"bench_kernels: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_pool(mapping: torch.Tensor):
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    pool = SWAKVPool.__new__(SWAKVPool)  # no __init__: only the mapping is read
    pool.full_to_swa_index_mapping = mapping
    return pool


# --------------------------------------------------------------------------- cases


class Case:
    """Two zero-argument callables writing to separate, identically initialised outputs."""

    def __init__(self, name, seed_fn, builtin_fn, outputs, same_api=True):
        self.name = name
        self.seed_fn = seed_fn
        self.builtin_fn = builtin_fn
        self.outputs = outputs  # [(label, seed tensor, builtin tensor)]
        # False when the builtin side does more than the seed's call (kvfuzz's validating
        # launcher against the bare kernel): its host ratio is shown, not held to --max-ratio
        self.same_api = same_api

    def mismatch(self):
        self.seed_fn()
        self.builtin_fn()
        torch.cuda.synchronize()
        for label, s, b in self.outputs:
            if not torch.equal(s, b):
                n = int((s != b).sum())
                return f"{label}: {n} of {s.numel()} cells differ"
        return None


def decode_case(seed, kernels, B, ctx, ps, swa, gen):
    dev = DEVICE
    pool_rows = 2 * B + 8
    width = cdiv(ctx, ps)  # SGLang's page_table buffer: cdiv(max_context_len, page_size)
    n_pages = pool_rows * width
    # req_to_token holds whole pages: token c of a request lies in page (its page id) * ps + c % ps
    page_ids = torch.randint(0, n_pages, (pool_rows, width), generator=gen)
    offs = torch.arange(ctx) % ps
    req_to_token = (page_ids.repeat_interleave(ps, dim=1)[:, :ctx] * ps + offs).to(torch.int32).to(dev)
    seq_lens = torch.randint(max(ctx // 2, 1), ctx, (B,), generator=gen)
    seq_lens[0] = ctx - 1
    seq_lens = seq_lens.to(dev)  # int64
    req_pool_indices = torch.randperm(pool_rows, generator=gen)[:B].to(dev)  # int64
    strided_indices = torch.arange(0, ctx, ps, device=dev)
    max_seq_pages = cdiv(ctx - 1, ps)  # callers: cdiv(max(seq_lens) + delta, page_size)
    pool = None
    if swa:
        n_tokens = n_pages * ps
        pool = make_pool(torch.randint(0, n_tokens // 2, (n_tokens + 1,), generator=gen).to(dev))

    def outputs():
        z = dict(dtype=torch.int32, device=dev)
        return (torch.zeros(B, **z), torch.zeros(B + 1, **z), torch.zeros(B, width, **z),
                torch.zeros(B, width, **z) if swa else None)

    out_s, out_b = outputs(), outputs()

    def call(fn, out):
        cs, cu, pt, swa_pt = out
        return lambda: fn(cs, cu, pt, req_to_token, req_pool_indices, strided_indices, max_seq_pages,
                          seq_lens, 0, ps, swa_pt, pool)

    labels = ["cache_seqlens_int32", "cu_seqlens_k", "page_table", "swa_page_table"]
    name = f"decode B={B} ctx={ctx // 1024}k ps={ps}{' swa' if swa else ''}"
    return Case(name, call(seed.normal_decode_set_metadata, out_s),
                call(kernels.normal_decode_set_metadata, out_b),
                [(lab, s, b) for lab, s, b in zip(labels, out_s, out_b) if s is not None])


def spec_case(seed, kernels, bs, R, ctx, gen):
    dev = DEVICE
    a = torch.randint(0, 1 << 20, (bs, ctx), generator=gen, dtype=torch.int32).to(dev)
    b = torch.randint(0, 1 << 20, (bs * R, R), generator=gen, dtype=torch.int32).to(dev)
    # within the contract for both: la + lb <= dst width
    seq_len_a = torch.randint(ctx // 2, ctx - R + 1, (bs,), generator=gen, dtype=torch.int32).to(dev)
    seq_len_b = torch.randint(1, R + 1, (bs * R,), generator=gen, dtype=torch.int32).to(dev)
    dst_s = torch.zeros(bs * R, ctx, dtype=torch.int32, device=dev)
    dst_b = torch.zeros_like(dst_s)
    return Case(
        f"spec bs={bs} R={R} ctx={ctx // 1024}k",
        lambda: seed.prepare_swa_spec_page_table_triton(dst_s, a, b, seq_len_a, seq_len_b, R),
        lambda: kernels.prepare_swa_spec_page_table_triton(dst_b, a, b, seq_len_a, seq_len_b, R),
        [("page_table_dst", dst_s, dst_b)])


def splits_cases(seed, kernels, n, dtype, cores, gen):
    dev = DEVICE
    seq_lens = torch.randint(1, 32768, (n,), generator=gen).to(dtype).to(dev)  # all >= 1: the seed's domain
    out_s = torch.zeros(n, dtype=torch.int32, device=dev)
    out_b, out_l = torch.zeros_like(out_s), torch.zeros_like(out_s)
    max_num_seq = kernels.sglang_max_num_seq(n)
    args = (n, 1, 32, 8, 8, cores)  # num_seq, num_group, num_head, num_kv_head, max_kv_splits, cores

    def seed_fn():
        seed.get_num_kv_splits_triton[(1,)](out_s, seq_lens, *args, MAX_NUM_SEQ=max_num_seq)

    def bare_fn():
        kernels.get_num_kv_splits_triton[(1,)](out_b, seq_lens, *args, MAX_NUM_SEQ=max_num_seq)

    name = f"num_kv_splits n={n} {str(dtype).replace('torch.', '')}"
    return [
        Case(name, seed_fn, bare_fn, [("num_kv_splits", out_s, out_b)]),
        Case(f"{name} (launcher)", seed_fn,
             lambda: kernels.get_num_kv_splits(out_l, seq_lens, *args), [("num_kv_splits", out_s, out_l)],
             same_api=False),
    ]


def all_cases(seed, kernels, cores):
    """(name, factory) pairs; a factory allocates its case's tensors only when called."""
    gen = torch.Generator().manual_seed(0)
    for ps, swa in ((1, False), (16, False), (16, True)):
        for ctx in (1024, 8192, 32768):
            for B in (1, 8, 64, 256):
                yield (f"decode B={B} ctx={ctx // 1024}k ps={ps}{' swa' if swa else ''}",
                       lambda B=B, ctx=ctx, ps=ps, swa=swa:
                       [decode_case(seed, kernels, B, ctx, ps, swa, gen)])
    for bs in (8, 64):
        yield f"spec bs={bs} R=4 ctx=8k", lambda bs=bs: [spec_case(seed, kernels, bs, 4, 8192, gen)]
    for n in (1, 64, 256, 1024):
        for dtype in (torch.int64, torch.int32):  # SGLang has both (batch tensors, graph buffers)
            yield (f"num_kv_splits n={n} {str(dtype).replace('torch.', '')}",
                   lambda n=n, dtype=dtype: splits_cases(seed, kernels, n, dtype, cores, gen))


# --------------------------------------------------------------------------- timing


def time_do_bench(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, return_mode="median") * 1e3


def time_graph(fn, calls: int, replays: int) -> float:
    for _ in range(3):  # compile and warm up outside the capture
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    return statistics.median(times)


def time_host(fn, calls: int, runs: int) -> float:
    """Host µs per call: issuing ``calls`` calls without waiting for the GPU in between."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(times)


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_seed = os.environ.get("KVFUZZ_SEED_PATH", "")
    parser.add_argument("--seed-path", default=default_seed or None, required=not default_seed,
                        help="SGLang's metadata_kernels.py (default: $KVFUZZ_SEED_PATH)")
    parser.add_argument("--only", default="", help="run only cases whose name contains this")
    parser.add_argument("--graph-calls", type=int, default=100, help="calls captured in one CUDA graph")
    parser.add_argument("--replays", type=int, default=20,
                        help="graph replays and host-timing runs; the median is reported")
    parser.add_argument("--host-calls", type=int, default=200,
                        help="calls per host-timing run (keep it below the launch queue's depth, ~1000)")
    parser.add_argument("--max-ratio", type=float, default=None,
                        help="exit 1 when a builtin/seed ratio exceeds this (e.g. 1.10)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("bench_kernels: needs compiled kernels: unset TRITON_INTERPRET", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_kernels: needs CUDA (no GPU visible)", file=sys.stderr)
        return 2
    seed_path = Path(args.seed_path)
    if not seed_path.is_file():
        print(f"bench_kernels: no such file: {seed_path}", file=sys.stderr)
        return 2

    pool_kind = install_sglang_stand_in()
    seed = load_seed(seed_path)
    sys.path.insert(0, str(REPO))
    import triton

    import kvfuzz.kernels as kernels

    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{pool_kind}; seed {seed_path}")
    print(f"# per-call µs; graph = median of {args.replays} replays of {args.graph_calls} captured calls")
    print(f"# host = wall time to issue {args.host_calls} calls without synchronising, per call")
    header = (f"{'case':38s} {'seed':>9s} {'builtin':>9s} {'ratio':>6s}   "
              f"{'seed(g)':>9s} {'builtin(g)':>10s} {'ratio(g)':>8s}   "
              f"{'seed(h)':>9s} {'builtin(h)':>10s} {'ratio(h)':>8s}")
    print(header)
    print("-" * len(header))
    failed, worst = [], (0.0, "")
    cores = torch.cuda.get_device_properties(0).multi_processor_count
    for group_name, make in all_cases(seed, kernels, cores):
        if args.only and args.only not in group_name:
            continue
        for case in make():
            problem = case.mismatch()
            if problem:
                print(f"{case.name:38s} OUTPUTS DIFFER: {problem}", flush=True)
                failed.append(case.name)
                continue
            seed_us, builtin_us = time_do_bench(case.seed_fn), time_do_bench(case.builtin_fn)
            seed_g = time_graph(case.seed_fn, args.graph_calls, args.replays)
            builtin_g = time_graph(case.builtin_fn, args.graph_calls, args.replays)
            seed_h = time_host(case.seed_fn, args.host_calls, args.replays)
            builtin_h = time_host(case.builtin_fn, args.host_calls, args.replays)
            ratio, ratio_g, ratio_h = builtin_us / seed_us, builtin_g / seed_g, builtin_h / seed_h
            held = max(ratio, ratio_g, ratio_h) if case.same_api else max(ratio, ratio_g)
            over = args.max_ratio is not None and held > args.max_ratio
            print(f"{case.name:38s} {seed_us:9.2f} {builtin_us:9.2f} {ratio:6.2f}   "
                  f"{seed_g:9.2f} {builtin_g:10.2f} {ratio_g:8.2f}   "
                  f"{seed_h:9.2f} {builtin_h:10.2f} {ratio_h:8.2f}{'  <-- over' if over else ''}", flush=True)
            worst = max(worst, (held, case.name))
            if over:
                failed.append(case.name)
        torch.cuda.empty_cache()
    print(f"# worst ratio {worst[0]:.2f} ({worst[1]})")
    if failed:
        print(f"# failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
