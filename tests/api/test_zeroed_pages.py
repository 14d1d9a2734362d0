"""ov_npu_emu.runtime.pages.zeroed: zero-filled buffers whose resident memory follows the writes."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from ov_npu_emu.runtime.pages import zeroed


def _resident_kb(a: np.ndarray) -> int:
    """Resident KiB of the mappings holding ``a``'s bytes (/proc/self/smaps)."""
    lo, hi = a.ctypes.data, a.ctypes.data + a.nbytes
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
            if m:
                inside = int(m.group(1), 16) < hi and int(m.group(2), 16) > lo
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def test_small_buffers_are_plain_zeros():
    a = zeroed((3, 5), np.float32)
    assert a.shape == (3, 5) and a.dtype == np.float32 and not a.any() and a.flags.writeable


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_sparse_writes_commit_only_their_pages():
    """One element written every 8 MiB of a 64 MiB buffer commits a few pages, not the 2 MiB
    huge page around each (what numpy's own large allocations ask the kernel for)."""
    a = zeroed((16, 1 << 20), np.float32)
    assert a.shape == (16, 1 << 20) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    assert _resident_kb(a) <= 64
    a[::2, 7] = 1.5
    assert _resident_kb(a) <= 8 * 4 + 64
    assert a.sum() == 12.0 and not a[1::2].any()
    a[:] = 2  # every page, as an ordinary array
    assert _resident_kb(a) >= 60 * 1024 and np.all(a == 2)
