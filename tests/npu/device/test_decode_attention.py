"""Decode attention's grouped QK^T as one broadcast matmul: the per-group calls' bits."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npu.blob.kernel_params import SdpaParams
from ov_npu_emu_npu.device.kernels import attention


@pytest.mark.parametrize("heads, hkv, S", [(14, 2, 1152), (8, 4, 64), (32, 8, 320)],
                         ids=["qwen0.5b_kv1152", "bench_small_kv64", "llama1b_kv320"])
def test_grouped_decode_qk_in_one_call_has_the_per_group_bits(monkeypatch, heads, hkv, S):
    rng = np.random.default_rng(6)
    q = rng.standard_normal((1, heads, 1, 64)).astype(np.float32)
    k = rng.standard_normal((1, hkv, S, 64)).astype(np.float32)
    v = rng.standard_normal((1, hkv, S, 64)).astype(np.float32)
    m = np.where(rng.random((1, 1, 1, S)) < 0.5, 0.0, np.finfo(np.float32).min).astype(np.float32)
    m[..., -1] = 0.0
    p = SdpaParams(False, True, 0.0, heads // hkv)
    asked: list[bool] = []
    real = attention._grouped_gemv_ok

    def spy(*a):
        asked.append(real(*a))
        return asked[-1]

    outs = []
    for probe in (spy, lambda *a: False):  # one broadcast call, then the G per-group calls
        monkeypatch.setattr(attention, "_grouped_gemv_ok", probe)
        o = np.empty(q.shape, np.float32)
        attention._sdpa([q, k, v, m], [o], p)()
        outs.append(o)
    assert asked == [True]  # this host's BLAS: the one call was probed equal and taken
    np.testing.assert_array_equal(outs[0], outs[1])
    assert np.isfinite(outs[0]).all()
