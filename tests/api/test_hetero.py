"""HETERO: a model split over devices by their query_model answers, as OpenVINO's HETERO does;
an op the emulated NPU refuses runs on the next listed device, with the CPU plugin's results."""

from __future__ import annotations

import numpy as np
import openvino as real_ov
import pytest
from openvino import opset8
from openvino import opset13 as ops

import ov_npu_emu as ov
from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError, UnsupportedOpError
from tests.npu.conftest import cpu_reference, make_group_conv_cnn, rel_err

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


@pytest.fixture(scope="module")
def core() -> ov.Core:
    return ov.Core()


def _named(node, name):
    node.set_friendly_name(name)
    return node


def _einsum_model() -> real_ov.Model:
    """relu -> Einsum with a diagonal (the NPU compiler refuses it) -> add -> multiply; two outputs."""
    x = ops.parameter([4, 4], np.float32, name="x")
    r1 = _named(ops.relu(x), "r1")
    ein = _named(ops.einsum([r1, r1], "ij,jj->ij"), "ein")
    add = _named(ops.add(ein, ops.constant(np.ones((4, 4), np.float32))), "add")
    mul = _named(ops.multiply(add, r1), "mul")
    return real_ov.Model([ops.result(mul), ops.result(r1)], [x], "einsum")


def _feed(model, seed=0):
    rng = np.random.default_rng(seed)
    return {p.get_any_name(): rng.standard_normal(list(p.get_shape())).astype(np.float32) for p in model.inputs}


def _check(cm, model, tol=1e-6):
    feed = _feed(model)
    res = cm.create_infer_request().infer(feed)
    for i, ref in enumerate(cpu_reference(model, feed)):
        assert rel_err(np.array(res[i]), ref) <= tol


def test_an_op_the_npu_refuses_runs_on_cpu(core):
    m = _einsum_model()
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    assert cm.get_property("EXECUTION_DEVICES") == ["NPU", "CPU"]
    assert [s.device for s in cm.impl.stages] == ["NPU", "CPU", "NPU"]
    _check(cm, m, 0.0)
    # MULTI_DEVICE_PRIORITIES as the list
    cm = core.compile_model(m, "HETERO", {"MULTI_DEVICE_PRIORITIES": "NPU,CPU", **F32})
    assert [s.device for s in cm.impl.stages] == ["NPU", "CPU", "NPU"]
    _check(cm, m, 0.0)


def test_query_model_gives_each_op_its_device(core):
    m = _einsum_model()
    ans = core.query_model(m, "HETERO:NPU,CPU")
    assert ans["ein"] == "CPU"
    assert {ans[n] for n in ("r1", "add", "mul", "x")} == {"NPU"}
    assert set(ans) == {op.get_friendly_name() for op in m.get_ops()}
    assert set(core.query_model(m, "HETERO:CPU,NPU").values()) == {"CPU"}


def test_a_model_one_device_runs_whole_is_one_stage(core):
    m = make_group_conv_cnn()
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    assert cm.get_property("EXECUTION_DEVICES") == ["NPU"] and len(cm.impl.stages) == 1
    _check(cm, m, 1e-4)
    assert core.compile_model(m, "HETERO:CPU,NPU", F32).get_property("EXECUTION_DEVICES") == ["CPU"]


def test_a_dynamic_model_goes_to_the_device_that_takes_it(core):
    x = ops.parameter(real_ov.PartialShape([1, -1]), real_ov.Type.f32, name="x")
    m = real_ov.Model([ops.result(ops.relu(x))], [x], "dyn")
    cm = core.compile_model(m, "HETERO:NPU,CPU")
    assert cm.get_property("EXECUTION_DEVICES") == ["CPU"]
    out = cm.create_infer_request().infer({"x": np.array([[-1.0, 2.0]], np.float32)})[0]
    np.testing.assert_array_equal(out, [[0.0, 2.0]])


def test_ssd_head_with_a_refused_detection_output(core):
    """DetectionOutput with the auxiliary (ARM) inputs, which the emulated NPU refuses: the head's
    MatMuls and softmax run on the NPU, the DetectionOutput on the CPU."""
    rng = np.random.default_rng(4)
    p, classes = 16, 3
    f = ops.parameter([1, 32], np.float32, name="feat")
    loc = ops.matmul(f, ops.constant(rng.standard_normal((p * 4, 32)).astype(np.float32) * 0.1), False, True)
    logits = ops.matmul(f, ops.constant(rng.standard_normal((p * classes, 32)).astype(np.float32)), False, True)
    conf = ops.reshape(ops.softmax(ops.reshape(logits, np.array([1, p, classes]), False), 2),
                       np.array([1, p * classes]), False)
    arm_conf = ops.reshape(ops.softmax(ops.reshape(ops.matmul(f, ops.constant(
        rng.standard_normal((p * 2, 32)).astype(np.float32)), False, True), np.array([1, p, 2]), False), 2),
        np.array([1, p * 2]), False)
    xy = rng.uniform(0, 0.7, (p, 2))
    priors = np.stack([np.concatenate([xy, xy + 0.3], 1).reshape(-1), np.tile([0.1, 0.1, 0.2, 0.2], p)])
    det = _named(opset8.detection_output(loc, conf, ops.constant(priors[None].astype(np.float32)), {
        "background_label_id": 0, "top_k": -1, "keep_top_k": [8], "nms_threshold": 0.5, "confidence_threshold": 0.1,
        "code_type": "caffe.PriorBoxParameter.CENTER_SIZE", "normalized": True, "objectness_score": 0.2},
        arm_conf, ops.multiply(loc, ops.constant(np.float32(0.5)))), "det_arm")
    m = real_ov.Model([ops.result(det)], [f], "ssd_arm")
    ans = core.query_model(m, "NPU")
    assert "det_arm" not in ans and len(ans) > 10
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    assert cm.get_property("EXECUTION_DEVICES") == ["NPU", "CPU"]
    _check(cm, m, 1e-5)
    ref = cpu_reference(m, _feed(m))[0]
    assert (ref[0, 0, :, 0] >= 0).sum() >= 2  # detections compared, not an empty output


def test_no_device_claiming_an_op_is_a_typed_error(core):
    with pytest.raises(UnsupportedOpError, match="HETERO:NPU: no listed device supports Einsum 'ein'") as e:
        core.compile_model(_einsum_model(), "HETERO:NPU")
    assert (e.value.op_type, e.value.node_name) == ("Einsum", "ein")
    with pytest.raises(ConfigError, match="HETERO needs its devices"):
        core.compile_model(_einsum_model(), "HETERO")


def test_parameters_constants_and_results_at_the_cut(core):
    """A model input returned as is, a constant output, an input read by both devices."""
    x = ops.parameter([2, 3], np.float32, name="x")
    y = ops.parameter([3, 3], np.float32, name="y")
    ein = _named(ops.einsum([x, y], "ij,jj->ij"), "ein")
    both = _named(ops.add(ops.relu(ein), ops.slice(x, np.array([0]), np.array([3]), np.array([1]),
                                                    np.array([1]))), "both")
    m = real_ov.Model([ops.result(both), ops.result(x), ops.result(ops.constant(np.arange(3, dtype=np.float32)))],
                      [x, y], "cut")
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    _check(cm, m, 0.0)
    with pytest.raises(UnsupportedFeatureError):
        cm.export_model()


def test_the_runtime_api_over_hetero(core):
    """Calls, named outputs, set_input_tensor and AsyncInferQueue work on a split model."""
    m = _einsum_model()
    m.outputs[0].get_tensor().set_names({"y"})
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    d = np.arange(16, dtype=np.float32).reshape(4, 4) - 8

    def ref(v):
        r = np.maximum(v, 0)
        return (r * np.diag(r) + 1) * r

    np.testing.assert_array_equal(cm(d)["y"], ref(d))
    req = cm.create_infer_request()
    req.set_input_tensor(real_ov.Tensor(d))
    req.infer()
    np.testing.assert_array_equal(req.get_output_tensor(0).data, ref(d))
    queue, out = ov.AsyncInferQueue(cm, 2), {}
    queue.set_callback(lambda r, i: out.__setitem__(i, r.get_output_tensor(0).data.copy()))
    for i in range(4):
        queue.start_async({0: d * (i + 1)}, i)
    queue.wait_all()
    for i in range(4):
        np.testing.assert_array_equal(out[i], ref(d * (i + 1)))


def test_a_stage_its_device_fails_to_compile_moves_to_the_next(monkeypatch):
    core = ov.Core()
    npu = core.registry.get("NPU")

    def refuse(model, config):
        raise UnsupportedOpError("no room", op_type="Relu", node_name="r1")

    monkeypatch.setattr(npu, "compile_model", refuse)
    m = make_group_conv_cnn()
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    assert cm.get_property("EXECUTION_DEVICES") == ["CPU"]
    _check(cm, m, 1e-5)
    with pytest.raises(UnsupportedOpError, match=r"HETERO could not compile the stage .* on any of \['NPU'\]"):
        core.compile_model(m, "HETERO:NPU", F32)


def test_a_detector_ending_in_nms_keeps_its_head_on_the_npu(core):
    """NonMaxSuppression's output shape depends on the data: the NPU's query leaves it (and only
    it) out, so the head runs on the NPU and the NMS on the CPU."""
    from openvino import opset9

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 32], np.float32, name="x")
    p = 20

    def head(n, shape):
        w = ops.constant(rng.standard_normal((n, 32)).astype(np.float32))
        return ops.reshape(ops.sigmoid(ops.matmul(x, w, False, True)), np.array(shape), False)

    nms = _named(opset9.non_max_suppression(head(p * 4, [1, p, 4]), head(p * 2, [1, 2, p]), np.array([5], np.int64),
                                            np.array([0.5], np.float32), np.array([0.1], np.float32),
                                            sort_result_descending=False, output_type="i32"), "nms")
    m = real_ov.Model([ops.result(nms.output(0)), ops.result(nms.output(1))], [x], "nms_head")
    claimed = core.query_model(m, "NPU")
    assert "nms" not in claimed and {op.get_type_name() for op in m.get_ops()
                                     if op.get_friendly_name() in claimed} >= {"MatMul", "Sigmoid", "Reshape"}
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    assert sorted(cm.get_property("EXECUTION_DEVICES")) == ["CPU", "NPU"]
    feed = _feed(m)
    res = cm.create_infer_request().infer(feed)
    ref = cpu_reference(m, feed)
    assert np.array(res[0]).shape == ref[0].shape and len(ref[0]) > 0
    np.testing.assert_array_equal(np.array(res[0]), ref[0])
    assert rel_err(np.array(res[1]), ref[1]) <= 1e-6


def _accumulator(with_einsum: bool) -> real_ov.Model:
    """state += x; returns relu(state) (or state through an Einsum with a diagonal, which the NPU refuses)."""
    x = ops.parameter([1, 4], np.float32, name="x")
    rv = ops.read_value(ops.constant(np.zeros((1, 4), np.float32)), "acc", real_ov.Type.f32, [1, 4])
    s = ops.add(rv, x)
    y = ops.einsum([s, ops.constant(np.eye(4, dtype=np.float32))], "ij,jj->ij") if with_einsum else ops.relu(s)
    return real_ov.Model([ops.result(y)], [ops.assign(s, "acc")], [x], "acc")


def test_a_stateful_model_one_device_takes_whole(core):
    cm = core.compile_model(_accumulator(False), "HETERO:NPU,CPU")
    assert cm.get_property("EXECUTION_DEVICES") == ["NPU"]
    req = cm.create_infer_request()
    for i in range(1, 4):
        np.testing.assert_array_equal(req.infer({"x": np.ones((1, 4), np.float32)})[0], np.full((1, 4), i))
    assert [s.name for s in req.query_state()] == ["acc"]
    with pytest.raises(UnsupportedFeatureError, match=r"does not split stateful models.*\['CPU', 'NPU'\]"):
        core.compile_model(_accumulator(True), "HETERO:NPU,CPU")


def test_rank_zero_outputs_keep_their_rank(core):
    """A scalar a stage returns is a scalar for the user, as on one device (np.ascontiguousarray
    made it [1])."""
    x = ops.parameter([4, 4], np.float32, name="x")
    on_npu = _named(ops.reduce_max(ops.relu(x), np.array([0, 1], np.int64), keep_dims=False), "npu_scalar")
    ein = _named(ops.einsum([x, x], "ij,jj->ij"), "ein")  # refused by the NPU: a CPU stage
    on_cpu = _named(ops.reduce_sum(ein, np.array([0, 1], np.int64), keep_dims=False), "cpu_scalar")
    m = real_ov.Model([ops.result(on_npu), ops.result(on_cpu)], [x], "scalars")
    cm = core.compile_model(m, "HETERO:NPU,CPU", F32)
    assert sorted(cm.get_property("EXECUTION_DEVICES")) == ["CPU", "NPU"]
    feed = _feed(m)
    res = cm.create_infer_request().infer(feed)
    for i, ref in enumerate(cpu_reference(m, feed)):
        assert np.asarray(res[i]).shape == ref.shape == ()
        assert rel_err(np.asarray(res[i]), ref) <= 1e-6
    # a scalar input converted to the port's type keeps its rank too
    p = ops.parameter([], np.float16, name="s")
    sm = real_ov.Model([ops.result(ops.multiply(p, ops.constant(np.float16(2))))], [p], "scalar_in")
    for dev in ("NPU", "CPU"):
        out = core.compile_model(sm, dev).create_infer_request().infer({0: np.array(1.5)})
        assert np.asarray(out[0]).shape == () and float(np.asarray(out[0])) == 3.0
