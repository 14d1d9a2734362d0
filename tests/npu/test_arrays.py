"""same_contents: np.array_equal's answer without a whole-array temporary."""

from __future__ import annotations

import numpy as np

from ov_npu_emu_npu import arrays
from ov_npu_emu_npu.arrays import same_contents


def test_answers_as_array_equal_chunk_by_chunk(monkeypatch):
    monkeypatch.setattr(arrays, "_COMPARE_CHUNK", 64)  # many chunks and a partial last one
    a = np.arange(1000, dtype=np.uint8)
    b = a.copy()
    assert same_contents(a, b)
    for i in (0, 63, 64, 999):  # a difference in the first, a boundary and the last chunk
        c = a.copy()
        c[i] ^= 1
        assert not same_contents(a, c)
    assert not same_contents(a, a[:-1]) and not same_contents(a, a.view(np.int8))
    assert same_contents(a[:0], b[:0])


def test_same_memory_is_equal_without_reading_except_nan():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert same_contents(a, a.view())
    f = np.array([1.0, np.nan], np.float32)
    assert not same_contents(f, f) and not np.array_equal(f, f)  # NaN != NaN, as before
