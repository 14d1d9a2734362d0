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


def _gqa_model(L: int, S: int, mask: str, extra_reader: bool, hkv: int = 2, g: int = 3) -> ov.Model:
    """SDPA over K/V heads expanded the optimum way: Unsqueeze -> Broadcast -> Reshape."""
    h, d = hkv * g, 8
    q = ops.parameter([1, h, L, d], np.float32, name="q")
    k = ops.parameter([1, hkv, S, d], np.float32, name="k")
    v = ops.parameter([1, hkv, S, 4], np.float32, name="v")

    def expand(x, dd):
        b = ops.broadcast(ops.unsqueeze(x, ops.constant(np.array([2], np.int64))),
                          ops.constant(np.array([1, hkv, g, S, dd], np.int64)))
        return b, ops.reshape(b, ops.constant(np.array([1, h, S, dd], np.int64)), False)

    kb, ke = expand(k, d)
    _, ve = expand(v, 4)
    params = [q, k, v]
    if mask == "none":
        att = ops.scaled_dot_product_attention(q, ke, ve, causal=True)
    else:
        m = ops.parameter([1, h if mask == "bool_per_head" else 1, L, S],
                          np.bool_ if mask.startswith("bool") else np.float32, name="m")
        params.append(m)
        att = ops.scaled_dot_product_attention(q, ke, ve, m)
    results = [ops.result(att)]
    if extra_reader:  # the broadcast is read by something else too: it must stay a task
        results.append(ops.result(ops.multiply(kb, ops.constant(np.float32(2.0)))))
    return ov.Model(results, params, "gqa")


def _gqa_feed(model: ov.Model, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for p in model.inputs:
        shape, name = list(p.get_shape()), p.get_any_name()
        if p.get_element_type() == ov.Type.boolean:
            feed[name] = rng.random(shape) > 0.4
            feed[name][..., 0] = True  # no fully masked row
        else:
            feed[name] = rng.standard_normal(shape).astype(np.float32)
    return feed


@pytest.mark.parametrize("L, S, mask, extra_reader", [
    (1, 70, "float", False),  # decode
    (3, 20, "bool_per_head", False),
    (10, 24, "none", False),  # causal, prefill-sized (staged K^T)
    (2, 16, "float", True),
], ids=["decode", "per_head_bool", "causal_prefill", "broadcast_kept"])
def test_grouped_query_sdpa_reads_kv_heads_once(npu_core, L, S, mask, extra_reader):
    """The compiler drops the KV head broadcast only when SDPAs alone read it; results match CPU."""
    model = _gqa_model(L, S, mask, extra_reader)
    cm = npu_core.compile_model(model, "NPU", {})
    kernels = [t["kernel"] for t in cm.impl.parsed.meta["tasks"]]
    # kept K broadcast: the SDPA stays plain, so V's heads are expanded for it as well
    assert kernels.count("broadcast") == (2 if extra_reader else 0)
    assert kernels.count("sdpa") == 1
    req = cm.create_infer_request()
    for seed in (0, 1):  # a second inference with new data through the same command list
        feed = _gqa_feed(model, seed)
        res = req.infer(feed)
        for i, ref in enumerate(cpu_reference(model, feed)):
            assert rel_err(np.array(res[i]), ref) <= F32_TOL
