"""Decode attention on the KV blocks the mask opens (kernels/decode_attention.py): the full
kernel's bits, or the full kernel when that cannot be proven."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu.npu.blob.kernel_params import SdpaParams
from ov_npu_emu.npu.device.kernels import attention

LOW = np.finfo(np.float32).min  # NPUW's additive mask for an unused KV slot


@pytest.fixture
def narrow_spy(monkeypatch):
    """Records whether each decode SDPA run took the narrow path."""
    taken: list[bool] = []
    real = attention.narrow_decode

    def spy(*a, **kw):
        run = real(*a, **kw)
        if run is None:
            return None

        def wrapped() -> bool:
            taken.append(run())
            return taken[-1]
        return wrapped
    monkeypatch.setattr(attention, "narrow_decode", spy)
    return taken


def _decode(rng, heads, hkv, S, used, mask_dtype=np.float32):
    """One decode step as NPUW lays it out: ``used`` past slots at the front, the new token last."""
    q = rng.standard_normal((1, heads, 1, 64)).astype(np.float32)
    k = rng.standard_normal((1, hkv, S, 64)).astype(np.float32)
    v = rng.standard_normal((1, hkv, S, 64)).astype(np.float32)
    open_ = np.zeros((1, 1, 1, S), bool)
    open_[..., :used] = True
    open_[..., -1] = True
    m = open_ if mask_dtype == np.bool_ else np.where(open_, 0.0, LOW).astype(mask_dtype)
    return q, k, v, m


def _both(q, k, v, m, groups):
    """(narrow-enabled output, full-kernel output) for the same operands."""
    p = SdpaParams(False, True, 0.0, groups)
    outs = []
    for narrow in (True, False):
        o = np.full(q.shape[:-1] + (v.shape[-1],), np.nan, np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            attention._sdpa([q, k, v, m], [o], p, None, narrow=narrow)()
        outs.append(o)
    return outs


@pytest.mark.parametrize("heads, hkv, mask_dtype", [(14, 2, np.float32), (4, 4, np.float32), (8, 2, np.bool_)],
                         ids=["grouped", "plain", "bool_mask"])
def test_decode_sdpa_on_open_blocks_has_the_full_bits(narrow_spy, heads, hkv, mask_dtype):
    rng = np.random.default_rng(3)
    S = 1152
    for used in (1, 30, 63, 64, 65, 200, 450):
        q, k, v, m = _decode(rng, heads, hkv, S, used, mask_dtype)
        a, b = _both(q, k, v, m, heads // hkv)
        np.testing.assert_array_equal(a, b)
    assert narrow_spy == [True] * 7  # each step on its open blocks (the probe agreed)


@pytest.mark.parametrize("case", ["nan_in_masked_v", "inf_in_masked_k", "scores_beyond_mask", "most_slots_open",
                                  "nan_in_open_k"])
def test_decode_sdpa_keeps_the_full_path_when_unproven(narrow_spy, case):
    rng = np.random.default_rng(4)
    q, k, v, m = _decode(rng, 8, 2, 1024, 40)
    if case == "nan_in_masked_v":
        v[0, 1, 700] = np.nan  # 0 * NaN poisons the full computation
    elif case == "inf_in_masked_k":
        k[0, 0, 500] = np.inf
    elif case == "scores_beyond_mask":
        m = np.where(m == 0, 0.0, -65504.0).astype(np.float32)
        q *= 300.0
        k *= 300.0  # |q.k| can pass the mask's 65504: masked slots may not vanish
    elif case == "most_slots_open":
        m[..., :700] = 0.0
    else:
        k[0, 1, 10] = np.nan
    a, b = _both(q, k, v, m, 4)
    np.testing.assert_array_equal(a, b)
    assert narrow_spy == [False]
