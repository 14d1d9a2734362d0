"""Core.query_model on the emulated NPU: a per-op answer from the compiler (front end folding and
lifting, then lowering in query mode), so a model with a refused op gets the supported rest."""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset1, opset8
from openvino import opset13 as ops

from tests.npu.conftest import make_group_conv_cnn


def _named(node, name):
    node.set_friendly_name(name)
    return node


def test_a_model_the_npu_compiles_is_claimed_whole(npu_core, stories_decode):
    for m in (make_group_conv_cnn(), stories_decode):
        ans = npu_core.query_model(m, "NPU")
        assert set(ans.values()) == {"NPU"}
        assert set(ans) == {op.get_friendly_name() for op in m.get_ops()}


def test_an_unsupported_op_leaves_the_rest_claimed(npu_core):
    x = ops.parameter([4, 4], np.float32, name="x")
    r1 = _named(ops.relu(x), "r1")
    ein = _named(ops.einsum([r1, r1], "ij,jj->ij"), "ein")
    c = _named(ops.constant(np.ones((4, 4), np.float32)), "ones")
    add = _named(ops.add(ein, c), "add")
    only_ein = _named(ops.constant(np.ones((4, 4), np.float32)), "only_for_ein")
    ein2 = _named(ops.einsum([r1, only_ein], "ij,jj->ij"), "ein2")
    m = ov.Model([_named(ops.result(add), "out"), _named(ops.result(ein2), "out2")], [x], "q")
    ans = npu_core.query_model(m, "NPU")
    assert set(ans) == {"x", "r1", "ones", "add", "out"}
    assert set(npu_core.query_model(m, "CPU")) == {op.get_friendly_name() for op in m.get_ops()}


def test_ops_refused_for_their_attributes_are_not_claimed(npu_core):
    x = ops.parameter([1, 2, 6, 6], np.float32, name="x")
    amp = _named(opset8.adaptive_max_pool(x, np.array([3, 3], np.int64), "i32"), "amp")
    old = _named(opset1.interpolate(x, np.array([3, 3], np.int64), {"axes": [2, 3], "mode": "area"}), "old")
    mp = _named(opset8.adaptive_max_pool(x, np.array([2, 2], np.int64), "i32"), "values_only")
    m = ov.Model([ops.result(amp.output(0)), ops.result(amp.output(1)), ops.result(old), ops.result(mp.output(0))],
                 [x], "attrs")
    ans = npu_core.query_model(m, "NPU")
    assert "values_only" in ans and "x" in ans
    assert not {"amp", "old"} & set(ans)


def test_shape_subgraphs_that_fold_are_claimed(npu_core):
    image = ops.parameter([1, 3, 32, 32], np.float32, name="image")
    f = ops.parameter([1, 8, 4, 4], np.float32, name="feat")
    shape = _named(ops.shape_of(f), "feat_shape")
    pb = _named(ops.prior_box(ops.gather(shape, np.array([2, 3]), np.int64(0)),
                              ops.gather(ops.shape_of(image), np.array([2, 3]), np.int64(0)),
                              {"min_size": [4.0], "aspect_ratio": [2.0], "flip": True, "variance": [0.1],
                               "offset": 0.5}), "priors")
    m = ov.Model([ops.result(pb), ops.result(ops.relu(f))], [image, f], "priors")
    ans = npu_core.query_model(m, "NPU")
    assert {"feat_shape", "priors", "image", "feat"} <= set(ans)
    assert set(ans) == {op.get_friendly_name() for op in m.get_ops()}
