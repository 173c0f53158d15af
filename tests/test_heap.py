"""kvfuzz's processes give large freed buffers back (kvfuzz/heap.py): a campaign's memory
follows its live data instead of its peak."""

import subprocess
import sys
import textwrap

import pytest

from kvfuzz.heap import return_large_frees

# batches of a few-MiB arrays, kept alive a batch at a time with small objects between them
# (a campaign's arenas, images and oracle arrays), freed; then the process's resident memory
CHURN = textwrap.dedent("""
    import gc, sys
    import numpy as np
    if sys.argv[1] == "fixed":
        from kvfuzz.heap import return_large_frees
        assert return_large_frees()
    def rss_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    small = []
    for batch in range(6):
        big = []
        for i in range(64):
            big.append(np.ones((3 << 20) + 4096 * (i % 7), dtype=np.uint8))  # 3-3.03 MiB each
            small.append(np.ones(1024, dtype=np.uint8))  # malloc'd, kept: above the big ones on the heap
        del big
        gc.collect()
    print(rss_mib())
""")


def _rss_after(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True, timeout=120)
    return float(out.stdout.strip())


@pytest.mark.skipif(not return_large_frees(), reason="not glibc: kvfuzz leaves the allocator as it is")
def test_freed_batches_of_large_buffers_go_back_to_the_system():
    # 64 x 3 MiB = 192 MiB live a batch: freed, the process drops back near where it started
    fixed = _rss_after("fixed")
    assert fixed < 150, f"{fixed:.0f} MiB resident after the batches were freed"


def test_kvfuzz_processes_fix_the_threshold_at_start():
    # the three entry points of a campaign's processes: `kvfuzz ...`, its worker, a mutant's campaign
    import inspect

    from kvfuzz import cli, worker
    from kvfuzz.mutants import one

    for fn in (cli.main, worker._serve, one.main):
        assert "return_large_frees()" in inspect.getsource(fn), fn.__qualname__
