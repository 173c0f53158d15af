"""Give large freed buffers back to the system, so a long campaign's memory follows its live data.

glibc's malloc serves a buffer below its mmap threshold from the heap, and raises that threshold
to the size of each mmapped buffer freed (up to 32 MiB on 64-bit). A campaign at production
sizes frees arenas, images and oracle arrays of a few MiB every batch: once the threshold has
risen past them they come from the heap, which fragments and is not returned. Measured: 64
prepared `swa_spec_page_table` production cases a batch, freed, left the process at their
peak (about 1.1 GiB) where it should drop to about 0.1 GiB; GPU campaigns of such cases
(batches of 64, two in flight, several threads) reached 13-23 GiB each (docs/releases.md).
A fixed threshold keeps every buffer of at least `THRESHOLD` bytes in a mapping of its own,
unmapped when freed. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
THRESHOLD = 1 << 20  # bytes: a buffer this large or larger is mapped on its own


@functools.lru_cache(maxsize=1)
def return_large_frees() -> bool:
    """Fix glibc's mmap threshold at `THRESHOLD` in this process (once); whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, THRESHOLD) == 1
