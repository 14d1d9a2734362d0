"""The per-call fast path of InferRequest (memoised ports, pure-Python shape check) stays strict."""

from __future__ import annotations

import numpy as np
import openvino as real_ov
import pytest
from openvino import opset13 as ops

from ov_npu_emu.api.infer_request import _bounds, _compatible
from ov_npu_emu.errors import UserInputError
from ov_npu_emu.testing import make_add_model


def _dynamic_model() -> real_ov.Model:
    """``x`` [?, 2..6, 3] f32 → ``y`` = relu(x) and ``z`` = x * 2."""
    x = ops.parameter(real_ov.PartialShape([-1, real_ov.Dimension(2, 6), 3]), np.float32, name="x")
    x.output(0).get_tensor().set_names({"x"})
    y = ops.relu(x)
    y.output(0).get_tensor().set_names({"y"})
    z = ops.multiply(x, ops.constant(np.float32(2.0)))
    z.output(0).get_tensor().set_names({"z"})
    return real_ov.Model([y, z], [x], "dyn")


@pytest.mark.parametrize(
    "ps",
    [
        real_ov.PartialShape([2, 3]),
        real_ov.PartialShape([-1, 3]),
        real_ov.PartialShape([real_ov.Dimension(1, 4), -1]),
        real_ov.PartialShape([real_ov.Dimension(2, -1), 5, 1]),
        real_ov.PartialShape.dynamic(),
    ],
    ids=str,
)
def test_bounds_check_agrees_with_partial_shape_compatible(ps):
    shapes = [(), (0,), (3,), (2, 3), (1, 3), (4, 3), (5, 3), (2, 7), (2, 5, 1), (9, 5, 1), (1, 5, 2)]
    b = _bounds(ps)
    for shape in shapes:
        assert _compatible(b, shape) == ps.compatible(real_ov.PartialShape(list(shape))), shape


def test_wrong_shape_after_fast_calls_still_raises(core):
    req = core.compile_model(make_add_model(), "CPU").create_infer_request()
    a = np.ones((2, 3), np.float32)
    for _ in range(3):  # warm the memoised port and dtype lookups
        res = req.infer({"a": a, "b": a})
    np.testing.assert_array_equal(res["res"], a + a)
    with pytest.raises(UserInputError, match="expects shape"):
        req.infer({"a": np.ones((3, 2), np.float32), "b": a})
    with pytest.raises(UserInputError, match="expects shape"):
        req.infer([a, np.ones((2, 3, 1), np.float32)])  # by index after names were memoised
    with pytest.raises(UserInputError, match="was not found"):
        req.infer({"c": a})
    np.testing.assert_array_equal(req.infer({0: a, "b": 2 * a})["res"], 3 * a)


def test_rebinding_tensor_after_fast_path_validates_type_and_shape(core):
    req = core.compile_model(make_add_model(), "CPU").create_infer_request()
    a = np.ones((2, 3), np.float32)
    req.infer({"a": a, "b": a})
    req.infer({"a": a, "b": a}, share_inputs=True)
    with pytest.raises(UserInputError, match="element type"):
        req.set_tensor("a", real_ov.Tensor(np.ones((2, 3), np.int32)))
    with pytest.raises(UserInputError, match="expects shape"):
        req.set_tensor("b", real_ov.Tensor(np.ones((2, 4), np.float32)))
    with pytest.raises(UserInputError, match="element type"):
        req.infer({"a": real_ov.Tensor(np.ones((2, 3), np.float64)), "b": a}, share_inputs=True)
    # a valid rebind is used by the next call
    req.set_tensor("a", real_ov.Tensor(np.full((2, 3), 5, np.float32)))
    np.testing.assert_array_equal(req.infer({"b": a})["res"], np.full((2, 3), 6, np.float32))


def test_dynamic_port_growing_shapes_match_openvino(core):
    model = _dynamic_model()
    ours = core.compile_model(model, "CPU").create_infer_request()
    real = real_ov.Core().compile_model(model, "CPU").create_infer_request()
    rng = np.random.default_rng(0)
    for shape in [(1, 2, 3), (1, 3, 3), (4, 6, 3), (1, 2, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got, want = ours.infer({"x": x}), real.infer({"x": x})
        np.testing.assert_array_equal(got["y"], want["y"])
        np.testing.assert_array_equal(got[1], want[1])  # index lookups are memoised too
        np.testing.assert_array_equal(ours.get_tensor("z").data, want["z"])
    for bad in [(1, 7, 3), (1, 1, 3), (1, 2, 4), (2, 3)]:
        with pytest.raises(UserInputError, match="expects shape"):
            ours.infer({"x": np.zeros(bad, np.float32)})
    with pytest.raises(UserInputError):
        ours.infer({"x": np.zeros((1, 2, 3), np.float32)})["nope"]


def test_shared_outputs_are_views_until_the_next_call(core):
    req = core.compile_model(make_add_model(), "CPU").create_infer_request()
    a = np.ones((2, 3), np.float32)
    shared = req.infer({"a": a, "b": a}, share_outputs=True)["res"]
    copied = req.infer({"a": a, "b": a})["res"]
    req.infer({"a": a, "b": 3 * a})
    np.testing.assert_array_equal(copied, 2 * a)  # a copy keeps its values
    np.testing.assert_array_equal(shared, 4 * a)  # a shared view shows the latest call


def _chain_model(n: int) -> real_ov.Model:
    """``x`` [1, 64] f32 through ``n`` tanh(x·W) layers: a graph with many nodes."""
    rng = np.random.default_rng(1)
    x = ops.parameter([1, 64], np.float32, name="x")
    h = x
    for _ in range(n):
        w = ops.constant((rng.standard_normal((64, 64)) * 0.2).astype(np.float32))
        h = ops.tanh(ops.add(ops.matmul(h, w, False, False), ops.constant(np.float32(0.1))))
    h.output(0).get_tensor().set_names({"y"})
    return real_ov.Model([h], [x], f"chain{n}")


@pytest.mark.parametrize(("layers", "inline"), [(1, True), (12, False)], ids=["inline", "async"])
def test_cpu_device_inline_and_async_runs_match_openvino(core, layers, inline):
    model = _chain_model(layers)
    req = core.compile_model(model, "CPU").create_infer_request()
    assert req.impl._inline is inline  # which of the two execution paths this test covers
    real = real_ov.Core().compile_model(model, "CPU").create_infer_request()
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.standard_normal((1, 64)).astype(np.float32)
        np.testing.assert_array_equal(req.infer({"x": x})["y"], real.infer({"x": x})["y"])
