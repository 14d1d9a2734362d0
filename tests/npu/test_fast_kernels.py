"""The decode/prefill fast paths of the SHAVE kernels give the same results as the plain ones."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from ov_npu_emu.npu.device.kernels import make_kernel
from tests.npu.conftest import cpu_reference, rel_err

F32_TOL = 1e-4


def _all_halves() -> np.ndarray:
    return np.arange(65536, dtype=np.uint16).view(np.float16)


@pytest.mark.parametrize("with_specials", [False, True], ids=["finite", "inf_nan"])
def test_f16_to_f32_convert_is_bit_exact(with_specials):
    """Every f16 bit pattern (zeros, subnormals, ±max; inf/NaN take numpy's path) converts exactly."""
    h = _all_halves()
    if not with_specials:
        h = h[np.isfinite(h)].copy()
    out = np.full(h.shape, 7.0, np.float32)
    run = make_kernel("convert", [h], [out], np.zeros(0))
    for shift in (0, 1):  # a second run over new data: no state may leak from the first one
        src = np.roll(h, shift)
        h[...] = src
        run()
        np.testing.assert_array_equal(out.view(np.uint32), h.astype(np.float32).view(np.uint32))


def test_f16_to_f32_convert_on_kv_shaped_view():
    """A past-KV-like operand: [1, 4, S, 8] halves into f32, run twice with different contents."""
    rng = np.random.default_rng(3)
    x = np.zeros((1, 4, 300, 8), np.float16)
    o = np.empty(x.shape, np.float32)
    run = make_kernel("convert", [x], [o], np.zeros(0))
    for _ in range(2):
        x[...] = (rng.standard_normal(x.shape) * 4).astype(np.float16)
        x[0, 1, 5:9] = 0.0
        x[0, 2, 7] = -0.0
        run()
        np.testing.assert_array_equal(o.view(np.uint32), x.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("L, S, dtype", [(16, 40, np.float32), (9, 33, np.float16)], ids=["f32", "f16"])
def test_sdpa_many_query_rows_match_cpu(npu_core, L, S, dtype):
    """Prefill-shaped SDPA (the kernel stages a row-major K^T) against the CPU plugin."""
    rng = np.random.default_rng(11)
    shapes = {"q": [1, 2, L, 8], "k": [1, 2, S, 8], "v": [1, 2, S, 4], "m": [1, 1, L, S]}
    params = {n: ops.parameter(s, dtype, name=n) for n, s in shapes.items()}
    feed = {n: rng.standard_normal(s).astype(dtype) for n, s in shapes.items()}
    feed["m"][..., S // 2:] = -np.inf if dtype == np.float32 else -60000.0
    att = ops.scaled_dot_product_attention(params["q"], params["k"], params["v"], params["m"])
    model = ov.Model([ops.result(ops.convert(att, np.float32))], list(params.values()), "sdpa_prefill")
    cm = npu_core.compile_model(model, "NPU", {})
    req = cm.create_infer_request()
    ref = cpu_reference(model, feed)[0]
    a = np.array(req.infer(feed)[0])
    tol = F32_TOL if dtype == np.float32 else 2e-2
    assert rel_err(a, ref) <= tol
    feed2 = {n: (x * 0.5).astype(dtype) for n, x in feed.items()}  # a second inference re-stages K^T
    assert rel_err(np.array(req.infer(feed2)[0]), cpu_reference(model, feed2)[0]) <= tol
