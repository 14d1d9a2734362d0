"""Classification of attention masks evaluated on a contiguous prompt (transform._classify)."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npuw.transform import PositionMask, _classify

N = 12
FILL = np.float32(np.finfo(np.float16).min)
DIST = np.arange(N)[:, None] - np.arange(N)[None, :]  # pos(q) - pos(k)


def _additive(allowed, bias=0.0):
    return np.where(allowed, bias, FILL).astype(np.float32)[None, None]


def test_causal_is_left_as_it_is():
    assert _classify(_additive(DIST >= 0), N) is None
    assert _classify((DIST >= 0)[None, None], N) is None  # boolean form


def test_window_narrower_than_the_prompt_is_found():
    assert _classify(_additive((DIST >= 0) & (DIST < 5)), N) == PositionMask(window=5)
    assert _classify(((DIST >= 0) & (DIST < 3))[None, None], N) == PositionMask(window=3)


def test_window_as_wide_as_the_prompt_is_causal():
    assert _classify(_additive((DIST >= 0) & (DIST < N)), N) is None


def test_alibi_slopes_per_head_with_any_row_offset():
    slopes = np.array([0.5, 0.25, 0.125])
    # MPT's form: slope * (k - (N-1)) — a per-row constant away from slope * (k - q)
    bias = -slopes[:, None, None] * (N - 1 - np.arange(N))[None, None, :]
    mask = np.where(DIST >= 0, bias, FILL).astype(np.float32)[None]
    spec = _classify(mask, N)
    assert spec is not None and spec.window == 0
    assert np.allclose(spec.slopes, slopes)


@pytest.mark.parametrize(
    "mask",
    [
        _additive(DIST <= 0),  # anti-causal
        _additive(np.ones((N, N), bool) & (np.abs(DIST) < 3)),  # bidirectional band
        _additive(DIST >= 0, bias=np.sin(DIST)),  # a bias that is not linear in the distance
    ],
    ids=["anti_causal", "bidirectional", "nonlinear_bias"],
)
def test_other_masks_are_rejected(mask):
    with pytest.raises(ValueError):
        _classify(mask, N)
