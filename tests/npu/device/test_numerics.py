"""Outputs of device NPU equal the OpenVINO CPU plugin's (f32) and stay within tolerance in f16."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from tests.npu.conftest import (
    cpu_reference,
    llm_feed,
    make_add_relu_model,
    make_group_conv_cnn,
    make_mlp,
    rel_err,
    static_llm,
)

F32_TOL = 1e-4
#: f16 storage of activations (compute in f32): ~2^-11 per rounding, a few roundings deep
F16_TOL = 2e-2


def _run(core, model, feed, config=None):
    cm = core.compile_model(model, "NPU", config or {})
    res = cm.create_infer_request().infer(feed)
    return [np.array(res[i]) for i in range(len(model.outputs))]


@pytest.mark.parametrize("builder", [make_add_relu_model, make_mlp, make_group_conv_cnn], ids=["add", "mlp", "cnn"])
def test_small_models_match_cpu(npu_core, builder):
    m = builder()
    rng = np.random.default_rng(0)
    feed = {p.get_any_name(): rng.standard_normal(list(p.get_shape())).astype(np.float32) for p in m.inputs}
    ours, ref = _run(npu_core, m, feed), cpu_reference(m, feed)
    for a, b in zip(ours, ref, strict=False):
        assert a.shape == b.shape
        assert rel_err(a, b) <= F32_TOL


@pytest.mark.parametrize("which", ["stories_decode", "stories_prefill"])
def test_llm_static_shapes_match_cpu(npu_core, which, request):
    m = request.getfixturevalue(which)
    feed = llm_feed(m)
    ours, ref = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert len(ours) == 11
    for a, b in zip(ours, ref, strict=False):
        assert rel_err(a, b) <= F32_TOL
    # the greedy token agrees too
    assert np.array_equal(ours[0][0, -1].argmax(), ref[0][0, -1].argmax())


def test_f16_mode_within_documented_tolerance(npu_core, stories_decode):
    feed = llm_feed(stories_decode)
    ours = _run(npu_core, stories_decode, feed, {"INFERENCE_PRECISION_HINT": "f16"})
    ref = cpu_reference(stories_decode, feed)
    errs = [rel_err(a, b) for a, b in zip(ours, ref, strict=False)]
    assert max(errs) <= F16_TOL
    # f16 storage really happened: results are not bit-identical to the f32 run
    f32 = _run(npu_core, stories_decode, feed)
    assert any(not np.array_equal(a, b) for a, b in zip(ours, f32, strict=False))


def _unary_model(fn, shape=(2, 5)):
    x = ops.parameter(list(shape), np.float32, name="x")
    return ov.Model([ops.result(fn(x))], [x], "op")


OPS = {
    "erf": lambda x: ops.erf(x),
    "gelu_erf": lambda x: ops.gelu(x, "erf"),
    "gelu_tanh": lambda x: ops.gelu(x, "tanh"),
    "tanh": lambda x: ops.tanh(x),
    "sigmoid": lambda x: ops.sigmoid(x),
    "exp": lambda x: ops.exp(x),
    "negative": lambda x: ops.negative(x),
    "sin_cos": lambda x: ops.add(ops.sin(x), ops.cos(x)),
    "strided_slice": lambda x: ops.strided_slice(
        x, np.array([0, 1]), np.array([2, 5]), np.array([1, 2]), [0, 0], [0, 0]
    ),
    "slice_neg": lambda x: ops.slice(x, np.array([4]), np.array([-6]), np.array([-1]), np.array([1])),
    "variadic_split": lambda x: ops.multiply(*ops.variadic_split(x, 1, np.array([2, 3])).outputs()[:1] * 2),
    "transpose_concat": lambda x: ops.concat(
        [ops.transpose(x, np.array([1, 0])), ops.transpose(x, np.array([1, 0]))], 1
    ),
    "reduce": lambda x: ops.reduce_sum(ops.power(x, ops.constant(np.float32(2.0))), np.array([1]), True),
    "select": lambda x: ops.select(ops.greater(x, ops.constant(np.float32(0))), x, ops.constant(np.float32(-1))),
    "broadcast": lambda x: ops.broadcast(ops.unsqueeze(x, np.array([0])), np.array([3, 2, 5])),
    "tile": lambda x: ops.tile(x, np.array([2, 1])),
    "softmax_axis0": lambda x: ops.softmax(x, 0),
    "divide_sqrt": lambda x: ops.divide(x, ops.sqrt(ops.add(ops.abs(x), ops.constant(np.float32(1))))),
    "prelu": lambda x: ops.prelu(x, np.array([0.1], np.float32)),
    "elu": lambda x: ops.elu(x, 0.7),
    "pad_constant": lambda x: ops.pad(x, np.array([1, 0]), np.array([0, 2]), "constant", np.float32(0.5)),
    "pad_reflect": lambda x: ops.pad(x, np.array([1, 1]), np.array([1, 2]), "reflect"),
    "mvn": lambda x: ops.mvn(x, np.array([1]), True, 1e-5, "inside_sqrt"),
    "cumsum_rev_excl": lambda x: ops.cumsum(x, np.int64(1), exclusive=True, reverse=True),
    "convert_i32": lambda x: ops.convert(ops.convert(ops.multiply(x, ops.constant(np.float32(3))), "i32"), "f32"),
    # ops of optimum-intel exports (mask construction, Gemma-2 soft-cap) that builder graphs lack
    "bitwise_bool": lambda x: ops.select(
        ops.bitwise_xor(
            ops.bitwise_and(
                ops.greater(x, ops.constant(np.float32(-1))),
                ops.bitwise_not(ops.less(x, ops.constant(np.float32(0.5)))),
            ),
            ops.bitwise_or(ops.less(x, ops.constant(np.float32(-1.5))), ops.greater(x, ops.constant(np.float32(1.2)))),
        ),
        x,
        ops.constant(np.float32(-7)),
    ),
    "bitwise_int": lambda x: ops.convert(
        ops.bitwise_or(
            ops.bitwise_and(_i32(x, 9), ops.constant(np.int32(6))),
            ops.bitwise_xor(ops.bitwise_not(_i32(x, 5)), ops.constant(np.int32(3))),
        ),
        "f32",
    ),
    # halves (k/2) for ties: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2
    "round_half_to_even": lambda x: ops.round(
        ops.multiply(ops.floor(ops.multiply(x, ops.constant(np.float32(8)))), ops.constant(np.float32(0.5))),
        "half_to_even",
    ),
    "mod_int": lambda x: ops.convert(ops.mod(_i32(x, 10), ops.constant(np.int32(3))), "f32"),
    "floor_mod_int": lambda x: ops.convert(ops.floor_mod(_i32(x, 10), ops.constant(np.int32(3))), "f32"),
    "softcap_tanh": lambda x: ops.multiply(
        ops.tanh(ops.divide(x, ops.constant(np.float32(0.3)))), ops.constant(np.float32(30))
    ),
    "scatter_nd_update": lambda x: ops.scatter_nd_update(
        x,
        np.array([[0, 1], [1, 3], [1, 0]]),
        ops.reshape(ops.slice(x, np.array([0, 2]), np.array([1, 5]), np.array([1, 1])), np.array([3]), False),
    ),
    "scatter_update_axis1": lambda x: ops.scatter_update(
        x,
        np.array([4, 0]),
        ops.multiply(
            ops.slice(x, np.array([0]), np.array([2]), np.array([1]), np.array([1])), ops.constant(np.float32(2))
        ),
        np.int64(1),
    ),
    "scatter_elements_update": lambda x: ops.scatter_elements_update(
        x,
        np.array([[1, 3], [4, 0]]),
        ops.negative(ops.slice(x, np.array([0]), np.array([2]), np.array([1]), np.array([1]))),
        np.int64(1),
    ),
    "gather_elements": lambda x: ops.gather_elements(
        ops.tile(x, np.array([1, 2])), ops.convert(ops.abs(_i32(x, 3)), "i64"), 1
    ),
    "topk_max_values_and_indices": lambda x: ops.concat(
        [
            ops.topk(x, np.int64(3), 1, "max", "value").output(0),
            ops.convert(ops.topk(x, np.int64(3), 1, "max", "value").output(1), "f32"),
        ],
        1,
    ),
    "topk_min_by_index_axis0": lambda x: ops.concat(
        [
            ops.topk(x, np.int64(1), 0, "min", "index").output(0),
            ops.convert(ops.topk(x, np.int64(1), 0, "min", "index").output(1), "f32"),
        ],
        0,
    ),
    # computed indices (MoE routing): the runtime kernels, not the compile-time index map
    "scatter_elements_runtime": lambda x: ops.scatter_elements_update(
        ops.multiply(x, ops.constant(np.float32(0))),
        ops.topk(x, np.int64(2), 1, "max", "value").output(1),
        ops.topk(x, np.int64(2), 1, "max", "value").output(0),
        np.int64(1),
    ),
    "scatter_update_runtime": lambda x: ops.scatter_update(
        x,
        ops.topk(ops.reduce_sum(x, np.array([0])), np.int64(2), 0, "min", "index").output(1),
        ops.negative(ops.slice(x, np.array([0]), np.array([2]), np.array([1]), np.array([1]))),
        np.int64(1),
    ),
    "scatter_nd_runtime": lambda x: ops.scatter_nd_update(
        x,
        ops.reshape(
            ops.topk(ops.reduce_sum(x, np.array([1])), np.int64(1), 0, "max", "value").output(1),
            np.array([1, 1]),
            False,
        ),
        ops.negative(ops.slice(x, np.array([1]), np.array([2]), np.array([1]), np.array([0]))),
    ),
    "reduce_prod": lambda x: ops.reduce_prod(ops.add(x, ops.constant(np.float32(2))), np.array([1]), True),
}


def _i32(x, scale):
    """x·scale as i32 (negative values included): integer operands for the integer ops."""
    return ops.convert(ops.multiply(x, ops.constant(np.float32(scale))), "i32")


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_match_cpu(npu_core, name):
    m = _unary_model(OPS[name])
    feed = {"x": np.random.default_rng(3).standard_normal((2, 5)).astype(np.float32)}
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert a.shape == b.shape
    assert rel_err(a, b) <= F32_TOL


def test_gather_embedding_and_sdpa_causal(npu_core):
    rng = np.random.default_rng(4)
    ids = ops.parameter([1, 4], np.int64, name="ids")
    emb = ops.gather(ops.constant(rng.standard_normal((10, 8)).astype(np.float32)), ids, np.int64(0))
    q = ops.reshape(emb, np.array([1, 2, 4, 4]), False)
    att = ops.scaled_dot_product_attention(q, q, q, causal=True)
    m = ov.Model([ops.result(att)], [ids], "att")
    feed = {"ids": np.array([[1, 3, 9, 0]], np.int64)}
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert rel_err(a, b) <= F32_TOL


def test_weight_decompression_subgraph(npu_core):
    """u8 / u4 weights with zero point and scale (the optimum-intel compressed-weights pattern)."""
    rng = np.random.default_rng(5)
    x = ops.parameter([1, 2, 16], np.float32, name="x")
    outs = []
    for et in ("u8", "u4", "i4"):
        lo, hi = {"u8": (0, 255), "u4": (0, 15), "i4": (-8, 7)}[et]
        # ov.Type, not the string: ops.constant(..., dtype="u4") silently makes a u32 constant
        ot = {"u8": ov.Type.u8, "u4": ov.Type.u4, "i4": ov.Type.i4}[et]
        w = ops.constant(rng.integers(lo, hi + 1, (8, 16)).astype(np.int8 if et == "i4" else np.uint8), dtype=ot)
        assert w.get_output_element_type(0) == ot
        wf = ops.convert(w, "f32")
        if et != "i4":
            wf = ops.subtract(wf, ops.convert(ops.constant(np.full((8, 1), (lo + hi) // 2, np.uint8), dtype=ot), "f32"))
        wf = ops.multiply(wf, ops.constant(rng.random((8, 1)).astype(np.float32) * 0.1))
        outs.append(ops.result(ops.matmul(x, wf, False, True)))
    m = ov.Model(outs, [x], "wdq")
    feed = {"x": rng.standard_normal((1, 2, 16)).astype(np.float32)}
    for a, b in zip(_run(npu_core, m, feed), cpu_reference(m, feed), strict=False):
        assert rel_err(a, b) <= F32_TOL


@pytest.mark.parametrize("fixture", ["tiny_model_dir", "tiny_model_dir_f16", "tiny_model_dir_int8", "small_model_dir"])
@pytest.mark.parametrize(("seq", "past"), [(1, 31), (16, 0)], ids=["decode", "prefill"])
def test_builder_llms_match_cpu(npu_core, request, fixture, seq, past):
    """The builder's Llama presets (f32, f16 and int8-compressed weights) at static shapes."""
    if fixture == "small_model_dir" and seq > 1:
        pytest.skip("decode is enough for the small preset (keeps the suite fast)")
    m = static_llm(request.getfixturevalue(fixture) / "openvino_model.xml", seq, past)
    feed = llm_feed(m)
    ours, ref = _run(npu_core, m, feed), cpu_reference(m, feed)
    for a, b in zip(ours, ref, strict=False):
        assert rel_err(a, b) <= F32_TOL


def test_builder_small_cnn_matches_cpu(npu_core):
    from ov_npu_emu.testing import make_small_cnn as builder_cnn

    m = builder_cnn()
    feed = {"data": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert rel_err(a, b) <= F32_TOL


@pytest.mark.parametrize("mask_kind", ["bool", "float", "none_scaled"])
def test_sdpa_masks_and_scale(npu_core, mask_kind):
    rng = np.random.default_rng(6)
    q = ops.parameter([1, 2, 3, 8], np.float32, name="q")
    k = ops.parameter([1, 2, 5, 8], np.float32, name="k")
    v = ops.parameter([1, 2, 5, 4], np.float32, name="v")
    feed = {
        n: rng.standard_normal(s).astype(np.float32)
        for n, s in (("q", [1, 2, 3, 8]), ("k", [1, 2, 5, 8]), ("v", [1, 2, 5, 4]))
    }
    params = [q, k, v]
    if mask_kind == "bool":
        m = ops.parameter([1, 1, 3, 5], np.bool_, name="m")
        feed["m"] = rng.random((1, 1, 3, 5)) > 0.3
        feed["m"][..., 0] = True  # no fully masked row
        att = ops.scaled_dot_product_attention(q, k, v, m)
        params.append(m)
    elif mask_kind == "float":
        m = ops.parameter([1, 1, 3, 5], np.float32, name="m")
        feed["m"] = rng.standard_normal((1, 1, 3, 5)).astype(np.float32)
        att = ops.scaled_dot_product_attention(q, k, v, m)
        params.append(m)
    else:
        att = ops.scaled_dot_product_attention(
            q, k, v, ops.constant(np.zeros((1, 1, 3, 5), np.float32)), ops.constant(np.float32(0.3))
        )
    model = ov.Model([ops.result(att)], params, "sdpa")
    (a,), (b,) = _run(npu_core, model, feed), cpu_reference(model, feed)
    assert rel_err(a, b) <= F32_TOL


@pytest.mark.parametrize("which", ["cnn", "tiny_prefill"])
def test_f16_mode_on_cnn_and_builder_prefill(npu_core, tiny_model_dir, which):
    if which == "cnn":
        m = make_group_conv_cnn()
        feed = {"image": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    else:
        m = static_llm(tiny_model_dir / "openvino_model.xml", 16, 0)
        feed = llm_feed(m)
    ours = _run(npu_core, m, feed, {"INFERENCE_PRECISION_HINT": "f16"})
    for a, b in zip(ours, cpu_reference(m, feed), strict=False):
        assert rel_err(a, b) <= F16_TOL


@pytest.mark.parametrize("exclude_pad", [True, False])
@pytest.mark.parametrize("rounding", ["floor", "ceil"])
def test_pooling_pads_and_rounding(npu_core, exclude_pad, rounding):
    x = ops.parameter([1, 2, 7, 7], np.float32, name="x")
    a = ops.avg_pool(x, [2, 2], [1, 1], [1, 1], [3, 3], exclude_pad, rounding)
    mx = ops.max_pool(x, [2, 2], [1, 1], [1, 1], [0, 0], [3, 3], rounding).output(0)
    m = ov.Model([ops.result(a), ops.result(mx)], [x], "pool")
    feed = {"x": np.random.default_rng(7).standard_normal((1, 2, 7, 7)).astype(np.float32)}
    for a_, b_ in zip(_run(npu_core, m, feed), cpu_reference(m, feed), strict=False):
        assert a_.shape == b_.shape
        assert rel_err(a_, b_) <= F32_TOL


def test_overflow_gives_ieee_results_without_warnings(npu_core):
    """A finite + finite past f32's range is inf, as on the CPU plugin, and numpy's "overflow
    encountered" warning does not reach the user (nor fail a run under ``-W error``)."""
    import warnings

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    model = ov.Model([ops.result(ops.add(x, x))], [x], "overflow")
    feed = {"x": np.array([[3e38, -3e38, 1.0, np.nan]], np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (ours,) = _run(npu_core, model, feed, {"INFERENCE_PRECISION_HINT": "f32"})
    (ref,) = cpu_reference(model, feed)
    np.testing.assert_array_equal(ours, ref)
    assert np.isposinf(ours[0, 0]) and np.isneginf(ours[0, 1])
