"""The decode/prefill fast paths of the SHAVE kernels give the same results as the plain ones."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from ov_npu_emu_npu.device.kernels import make_kernel
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


@pytest.mark.parametrize("n", [7, 64, 172, 4097])
def test_reduce_mean_has_np_mean_bits(n):
    """The f32 division by the count gives np.mean's bits (it divides in f64 and rounds)."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((300, n)) * rng.uniform(1e-3, 1e3, (300, 1))).astype(np.float32)
    o = np.empty((300, 1), np.float32)
    make_kernel("reduce_mean", [x], [o], np.array([1.0]))()
    np.testing.assert_array_equal(o.view(np.uint32), x.mean(axis=1, keepdims=True).view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_swish_constants_keep_the_input_precision(dtype):
    """Swish's -beta multiplies in the input's precision (as a Python float would)."""
    x = np.random.default_rng(2).standard_normal((1, 1, 172)).astype(dtype)
    y = np.empty_like(x)
    make_kernel("swish", [x], [y], np.array([1.7]))()
    den = np.exp(np.multiply(x, -1.7).astype(np.float32)) + np.float32(1.0)
    np.testing.assert_array_equal(y, np.divide(x, den).astype(dtype))


def _attention64(q, k, v, m, groups):
    """float64 reference; m is additive (bool: True attends)."""
    k, v = np.repeat(k, groups, axis=1).astype(np.float64), np.repeat(v, groups, axis=1).astype(np.float64)
    if m.dtype == np.bool_:
        m = np.where(m, 0.0, -np.inf)
    with np.errstate(invalid="ignore"):
        s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + m
        s = np.exp(s - s.max(-1, keepdims=True))
        return (s / s.sum(-1, keepdims=True)) @ v


def _chunk_mask(L, S, filled, dtype, low=-65504.0):
    """NPUW's chunked-prefill mask: ``filled`` past slots, unfilled ones, then L causal new rows."""
    m = np.zeros((1, 1, L, S), bool)
    m[..., :filled] = True
    m[..., S - L:] = np.tril(np.ones((L, L), bool))
    return m if dtype == np.bool_ else np.where(m, 0.0, low).astype(dtype)


@pytest.fixture
def skip_spy(monkeypatch):
    """Records whether each SDPA run took the masked-column path."""
    from ov_npu_emu_npu.device.kernels import attention as kernels

    taken: list[bool] = []
    real = kernels._masked_column_skipper

    def spy(*a, **kw):
        run = real(*a, **kw)
        if run is None:
            return None

        def wrapped() -> bool:
            taken.append(run())
            return taken[-1]
        return wrapped
    monkeypatch.setattr(kernels, "_masked_column_skipper", spy)
    return taken


@pytest.mark.parametrize("groups, mask_dtype, in_dtype", [
    (2, np.float32, np.float32), (1, np.float32, np.float32), (2, np.bool_, np.float32), (2, np.float16, np.float16),
], ids=["grouped", "plain", "bool_mask", "f16"])
def test_sdpa_skips_masked_columns_exactly(skip_spy, groups, mask_dtype, in_dtype):
    rng = np.random.default_rng(5)
    L, S, hkv = 32, 512, 4 // groups  # 4 query heads: a score matrix big enough to skip columns
    q = rng.standard_normal((1, hkv * groups, L, 8)).astype(in_dtype)
    k = rng.standard_normal((1, hkv, S, 8)).astype(in_dtype)
    v = rng.standard_normal((1, hkv, S, 8)).astype(in_dtype)
    m = _chunk_mask(L, S, 100, mask_dtype)
    o = np.empty(q.shape, in_dtype)
    if groups == 1:
        run = make_kernel("sdpa", [q, k, v, m], [o], np.array([0.0, 1.0, 0.0]))
    else:
        run = make_kernel("sdpa", [q, k, v, m], [o], np.array([0.0, 1.0, 0.0, float(groups)]))
    run()
    assert skip_spy == [True]
    tol = 1e-5 if in_dtype == np.float32 else 5e-3
    np.testing.assert_allclose(o, _attention64(q, k, v, m, groups), atol=tol)
    m[...] = _chunk_mask(L, S, S - L, mask_dtype)  # window full: the next run takes the full path
    run()
    assert skip_spy == [True, False]
    np.testing.assert_allclose(o, _attention64(q, k, v, m, groups), atol=tol)


@pytest.mark.parametrize("case", ["nan_in_masked_v", "fully_masked_row", "scores_beyond_mask", "inf_in_masked_k"])
def test_sdpa_masked_column_skip_falls_back(skip_spy, case):
    """Whenever skipping could change a result, the kernel computes every column."""
    from ov_npu_emu_npu.device.kernels import attention as kernels

    rng = np.random.default_rng(8)
    L, S = 32, 512
    q = rng.standard_normal((1, 4, L, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, S, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, S, 8)).astype(np.float32)
    m = _chunk_mask(L, S, 100, np.float32)
    if case == "nan_in_masked_v":
        v[0, 1, 300] = np.nan  # 0 * NaN poisons the full computation's outputs
    elif case == "fully_masked_row":
        m[0, 0, 3] = -65504.0  # softmax over equal scores: every column counts
    elif case == "scores_beyond_mask":
        q *= 300.0
        k *= 300.0  # |q.k| can exceed the mask's 65504: masked columns may not vanish
    else:
        k[0, 0, 250] = np.inf
    outs = []
    for min_scores in (kernels._SKIP_MIN_SCORES, 1 << 60):  # with the skipper, then the plain kernel
        kernels._SKIP_MIN_SCORES, saved = min_scores, kernels._SKIP_MIN_SCORES
        try:
            o = np.empty(q.shape, np.float32)
            with np.errstate(invalid="ignore"):  # inf * 0 in the plain kernel's matmul
                make_kernel("sdpa", [q, k, v, m], [o], np.array([0.0, 1.0, 0.0, 2.0]))()
        finally:
            kernels._SKIP_MIN_SCORES = saved
        outs.append(o)
    assert skip_spy == [False]
    np.testing.assert_array_equal(outs[0], outs[1])


def test_chunked_prefill_attention_matches_cpu(npu_core, skip_spy):
    """A GQA prefill chunk over a mostly unfilled KV window, compiled, against the CPU plugin."""
    L, S = 32, 512
    model = _gqa_model(L, S, "float", False)
    cm = npu_core.compile_model(model, "NPU", {})
    req = cm.create_infer_request()
    for filled in (0, 200, S - L):
        feed = _gqa_feed(model, filled)
        feed["m"] = _chunk_mask(L, S, filled, np.float32)
        a = np.array(req.infer(feed)[0])
        assert rel_err(a, cpu_reference(model, feed)[0]) <= F32_TOL
    assert skip_spy == [True, True, False]


@pytest.mark.parametrize("low, skipped", [(-3000.0, False), (-1e6, True)], ids=["gap_within_slack", "wide_gap"])
def test_sdpa_masked_column_skip_with_huge_mask_offsets(skip_spy, low, skipped):
    """A mask shifted by -1e9 (f32 spacing 64 there): skip only past the rounding slack, same result."""
    from ov_npu_emu_npu.device.kernels import attention as kernels

    rng = np.random.default_rng(9)
    L, S = 32, 512
    q = rng.standard_normal((1, 4, L, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, S, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, S, 8)).astype(np.float32)
    m = (_chunk_mask(L, S, 100, np.float32, low=low) - np.float32(1e9)).astype(np.float32)
    outs = []
    for min_scores in (kernels._SKIP_MIN_SCORES, 1 << 60):  # with the skipper, then the plain kernel
        kernels._SKIP_MIN_SCORES, saved = min_scores, kernels._SKIP_MIN_SCORES
        try:
            o = np.empty(q.shape, np.float32)
            make_kernel("sdpa", [q, k, v, m], [o], np.array([0.0, 1.0, 0.0, 2.0]))()
        finally:
            kernels._SKIP_MIN_SCORES = saved
        outs.append(o)
    assert skip_spy == [skipped]
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-6)
