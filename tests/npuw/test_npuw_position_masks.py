"""Classification of attention masks evaluated on a contiguous prompt (position_masks.classify_mask)."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npuw.position_masks import PositionMask, classify_mask

N = 12
FILL = np.float32(np.finfo(np.float16).min)
DIST = np.arange(N)[:, None] - np.arange(N)[None, :]  # pos(q) - pos(k)


def _additive(allowed, bias=0.0):
    return np.where(allowed, bias, FILL).astype(np.float32)[None, None]


def test_causal_is_left_as_it_is():
    assert classify_mask(_additive(DIST >= 0), N) is None
    assert classify_mask((DIST >= 0)[None, None], N) is None  # boolean form


def test_window_narrower_than_the_prompt_is_found():
    assert classify_mask(_additive((DIST >= 0) & (DIST < 5)), N) == PositionMask(window=5)
    assert classify_mask(((DIST >= 0) & (DIST < 3))[None, None], N) == PositionMask(window=3)


def test_window_as_wide_as_the_prompt_is_causal():
    assert classify_mask(_additive((DIST >= 0) & (DIST < N)), N) is None


def test_alibi_slopes_per_head_with_any_row_offset():
    slopes = np.array([0.5, 0.25, 0.125])
    # MPT's form: slope * (k - (N-1)) — a per-row constant away from slope * (k - q)
    bias = -slopes[:, None, None] * (N - 1 - np.arange(N))[None, None, :]
    mask = np.where(DIST >= 0, bias, FILL).astype(np.float32)[None]
    spec = classify_mask(mask, N)
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
        classify_mask(mask, N)


def test_unknown_reader_of_the_past_is_a_compile_error_naming_it():
    """A past KV input read by something NPUW cannot resolve in the no-past prefill: typed error."""
    import openvino as ov
    from openvino import opset13 as ops

    from ov_npu_emu.errors import CompileError
    from ov_npu_emu_npuw.model_io import find_param
    from ov_npu_emu_npuw.transform import make_prefill_model, to_stateless
    from tools.conformance import FIXTURES

    model = ov.Core().read_model(FIXTURES / "llama-fp32" / "openvino_model.xml")
    stateless, kv = to_stateless(model)
    past = find_param(stateless, kv.past_names[0])
    odd = ops.reduce_sum(past, np.array([2]), True)
    odd.set_friendly_name("odd_reader")
    stateless.add_results([ops.result(odd)])
    with pytest.raises(CompileError, match="ReduceSum 'odd_reader' reads it"):
        make_prefill_model(stateless, kv, 32, 0, ov.Type.f32)
