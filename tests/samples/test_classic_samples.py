"""OpenVINO's classic runtime samples run on the emulated NPU with only the import changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as real_ov
import pytest

import ov_npu_emu as ours_ov
from ov_npu_emu.testing import make_mobilenet_like, make_resnet_like, make_small_cnn, make_ssd_like, keep_alive, run_isolated

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "sync_benchmark.py"


def _run(script: Path, *args: str) -> str:
    path = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def cnn_xml(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cnn") / "cnn.xml"
    real_ov.save_model(make_small_cnn(), path, compress_to_fp16=False)
    return path


@pytest.mark.parametrize("device", ["NPU", "CPU"])
def test_sync_benchmark_runs_on_our_devices(cnn_xml, device):
    out = _run(SAMPLE, str(cnn_xml), device, "0.2")
    count = int(re.search(r"Count: +(\d+) iterations", out).group(1))
    assert count >= 10
    assert re.search(r"Throughput: [\d.]+ FPS", out)


def test_sync_benchmark_is_the_openvino_sample_but_for_the_import(cnn_xml, tmp_path):
    text = SAMPLE.read_text()
    assert text.count("import ov_npu_emu as ov") == 1
    real = tmp_path / "sync_benchmark_real.py"
    real.write_text(text.replace("import ov_npu_emu as ov", "import openvino as ov"))
    out = _run(real, str(cnn_xml), "CPU", "0.2")
    assert "Count:" in out and "Throughput:" in out



# -- the flows of OpenVINO's samples/python, images as numpy arrays (no cv2) ---------------------
# tools/run_ov_samples.py runs the samples themselves (with cv2) against the real; these are the
# same calls, on ours ("CPU": the real's results exactly; "NPU": the real CPU plugin's at f32).

NPU_TOL = 1e-4


def _sides(device: str):
    """(ours module, ours Core, device) and (real module, real Core, "CPU") for one flow."""
    real_core, ours_core = real_ov.Core(), ours_ov.Core()
    if device == "NPU":  # the emulated NPU in its exact mode (its default is f16) against the CPU plugin at f32
        real_core.set_property("CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        ours_core.set_property("NPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return (ours_ov, ours_core, device), (real_ov, real_core, "CPU")


def _real_flow(flow: str, models: dict[str, Path], device: str, *args):
    """The real's side of a flow that uses openvino's AsyncInferQueue, run in its own process
    (run_isolated): releasing such a queue's compiled model can deadlock openvino 2026.4.1."""
    _MODELS.update(models)
    _, (r_ov, r_core, r_dev) = _sides(device)
    return globals()[flow](r_ov, r_core, r_dev, *args)


def _close(ours, real, device):
    ours, real = np.asarray(ours), np.asarray(real)
    assert ours.shape == real.shape and ours.dtype == real.dtype
    if device == "CPU":
        np.testing.assert_array_equal(ours, real)
    else:
        np.testing.assert_allclose(ours, real, rtol=NPU_TOL, atol=1e-6)


def _image(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3)).astype(np.uint8)


def _ppp_u8_nhwc(ov, model, shape=None, resize=False):
    ppp = ov.preprocess.PrePostProcessor(model)
    tensor = ppp.input().tensor()
    if shape is not None:
        tensor.set_shape(shape)
    tensor.set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC"))
    if resize:
        ppp.input().preprocess().resize(ov.preprocess.ResizeAlgorithm.RESIZE_LINEAR)
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    ppp.output().tensor().set_element_type(ov.Type.f32)
    return ppp.build()


def _hello_classification(ov, core, device, image):
    """ov.compile_model of a u8 NHWC image of its own size, linearly resized; infer_new_request."""
    input_tensor = np.expand_dims(image, 0)
    model = _ppp_u8_nhwc(ov, core.read_model(str(_MODELS["resnet"])), input_tensor.shape, resize=True)
    # the sample's ov.compile_model on ours; the real's Core (at f32 for the NPU's oracle) otherwise
    # (the module-level call makes its own Core: the NPU's exact mode goes in its config)
    exact = {"INFERENCE_PRECISION_HINT": "f32"} if device == "NPU" else None
    compiled = ov.compile_model(model, device, exact) if ov is ours_ov else core.compile_model(model, device)
    results = compiled.infer_new_request({0: input_tensor})
    return next(iter(results.values())).reshape(-1)


_MODELS: dict[str, Path] = {}


@pytest.fixture(scope="module", autouse=True)
def _sample_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("sample_models")
    for name, model in (("resnet", make_resnet_like(classes=50, size=32)),
                        ("mobilenet", make_mobilenet_like(classes=40, size=32)), ("ssd", make_ssd_like())):
        real_ov.save_model(model, d / f"{name}.xml", compress_to_fp16=False)
        _MODELS[name] = d / f"{name}.xml"


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_hello_classification_flow(device):
    (o_ov, o_core, o_dev), (r_ov, r_core, r_dev) = _sides(device)
    image = _image(45, 70)
    ours = _hello_classification(o_ov, o_core, o_dev, image)
    real = _hello_classification(r_ov, r_core, r_dev, image)
    _close(ours, real, device)
    assert list(np.argsort(ours)[-10:]) == list(np.argsort(real)[-10:])


def _classification_async(ov, core, device, images):
    """AsyncInferQueue at the optimal number of requests, a callback reading request.results."""
    model = _ppp_u8_nhwc(ov, core.read_model(str(_MODELS["mobilenet"])))
    _, h, w, _ = model.input().shape
    compiled = core.compile_model(model, device)
    got = {}

    def completion_callback(infer_request, image_id):
        got[image_id] = next(iter(infer_request.results.values())).reshape(-1).copy()

    queue = ov.AsyncInferQueue(compiled)
    queue.set_callback(completion_callback)
    for i, image in enumerate(images):
        assert image.shape == (h, w, 3)
        queue.start_async({0: np.expand_dims(image, 0)}, f"image{i}")
    queue.wait_all()
    keep_alive(compiled, queue)  # never released in the real's process: see run_isolated
    return got


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_classification_sample_async_flow(device):
    (o_ov, o_core, o_dev), (r_ov, r_core, r_dev) = _sides(device)
    images = [_image(32, 32, seed) for seed in range(3)]
    ours = _classification_async(o_ov, o_core, o_dev, images)
    real = run_isolated(_real_flow, "_classification_async", dict(_MODELS), device, images)
    assert sorted(ours) == sorted(real) == ["image0", "image1", "image2"]
    for k in real:
        _close(ours[k], real[k], device)


def _hello_reshape_ssd(ov, core, device, image):
    """model.reshape to the image's size by the input's name, u8 NHWC, detections [N, 7]."""
    model = core.read_model(str(_MODELS["ssd"]))
    input_tensor = np.expand_dims(image, 0)
    n, h, w, c = input_tensor.shape
    model.reshape({model.input().get_any_name(): ov.PartialShape((n, c, h, w))})
    model = _ppp_u8_nhwc(ov, model)
    results = core.compile_model(model, device).infer_new_request({0: input_tensor})
    return next(iter(results.values())).reshape(-1, 7)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_hello_reshape_ssd_flow(device):
    (o_ov, o_core, o_dev), (r_ov, r_core, r_dev) = _sides(device)
    yy, xx = np.mgrid[0:96, 0:128]
    image = (np.stack([xx * 2, yy * 2, xx ^ yy], -1) % 256).astype(np.uint8)
    ours, real = _hello_reshape_ssd(o_ov, o_core, o_dev, image), _hello_reshape_ssd(r_ov, r_core, r_dev, image)
    assert (real[:, 2] > 0.5).sum() >= 3  # detections the sample prints
    _close(ours, real, device)


def _model_creation(ov, core, device, weights, digits):
    """A LeNet built node by node (op.Parameter/op.Constant, opset1/opset8 functions), u8 NHWC
    preprocessing, ov.set_batch, a float64 array fed to the u8 input."""
    from functools import reduce

    op, opset1, opset8 = ov.op, ov.opset1, ov.opset8
    off = 0

    def const(shape):
        nonlocal off
        n = reduce(lambda a, b: a * b, shape)
        c = op.Constant(ov.Type.f32, ov.Shape(shape), weights[off:off + n])
        off += n
        return c

    param = op.Parameter(ov.Type.f32, ov.Shape([64, 1, 28, 28]))
    x = opset8.convolution(param, const([20, 1, 5, 5]), [1, 1], [0, 0], [0, 0], [1, 1])
    x = opset8.add(x, const([1, 20, 1, 1]))
    x = opset1.max_pool(x, [2, 2], [0, 0], [0, 0], [2, 2], "ceil")
    x = opset8.add(opset8.convolution(x, const([50, 20, 5, 5]), [1, 1], [0, 0], [0, 0], [1, 1]), const([1, 50, 1, 1]))
    x = opset1.max_pool(x, [2, 2], [0, 0], [0, 0], [2, 2], "ceil")
    shape = op.Constant(ov.Type.i64, ov.Shape([2]), np.array([0, -1], np.int64))
    x = opset8.reshape(x, shape, True)
    x = opset8.relu(opset8.add(opset8.matmul(x, const([500, 800]), False, True), const([1, 500])))
    x = opset8.add(opset8.matmul(opset8.reshape(x, shape, True), const([10, 500]), False, True), const([1, 10]))
    model = _ppp_u8_nhwc(ov, ov.Model(opset8.softmax(x, 1), [param], "lenet"))
    ov.set_batch(model, digits.shape[0])
    compiled = core.compile_model(model, device)
    n, c, h, w = model.input().shape
    input_data = np.ndarray(shape=(n, c, h, w))
    for i in range(n):
        input_data[i] = digits[i].reshape(28, 28)[:, :, np.newaxis]
    return next(iter(compiled.infer_new_request({0: input_data}).values()))


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_model_creation_sample_flow(device):
    (o_ov, o_core, o_dev), (r_ov, r_core, r_dev) = _sides(device)
    rng = np.random.default_rng(7)
    n_weights = 20 * 25 + 20 + 50 * 500 + 50 + 500 * 800 + 500 + 5000 + 10
    weights = (rng.standard_normal(n_weights) * 0.04).astype(np.float32)
    digits = (rng.uniform(0, 1, (6, 784)) ** 4 * 255).astype(np.uint8)
    ours = _model_creation(o_ov, o_core, o_dev, weights, digits)
    real = _model_creation(r_ov, r_core, r_dev, weights, digits)
    assert ours.shape == (6, 10)
    _close(ours, real, device)


def _fill_tensor_random(ov, tensor):
    from ov_npu_emu.utils.types import get_dtype

    dtype = get_dtype(tensor.element_type)
    rs = np.random.RandomState(np.random.MT19937(np.random.SeedSequence(0)))
    tensor.data[:] = rs.uniform(0, 255, list(tensor.shape)).astype(dtype)


def _benchmark_flows(ov, core, dev):
    """throughput_benchmark's AsyncInferQueue loop, then sync_benchmark's one request."""
    compiled = core.compile_model(str(_MODELS["mobilenet"]), dev, {"PERFORMANCE_HINT": "THROUGHPUT"})
    ireqs = ov.AsyncInferQueue(compiled)
    for ireq in ireqs:
        for model_input in compiled.inputs:
            _fill_tensor_random(ov, ireq.get_tensor(model_input))
    for _ in range(len(ireqs)):
        ireqs.start_async()
    ireqs.wait_all()
    in_fly, latencies = set(), []
    for _ in range(2 * len(ireqs) + 1):
        idle_id = ireqs.get_idle_request_id()
        if idle_id in in_fly:
            latencies.append(ireqs[idle_id].latency)
        else:
            in_fly.add(idle_id)
        ireqs.start_async()
    ireqs.wait_all()
    assert all(lat > 0 for lat in latencies)
    outs = [ireqs[0].get_output_tensor(0).data.copy()]
    keep_alive(compiled, ireqs)
    sync = core.compile_model(str(_MODELS["resnet"]), dev, {"PERFORMANCE_HINT": "LATENCY"})
    ireq = sync.create_infer_request()
    for model_input in sync.inputs:
        _fill_tensor_random(ov, ireq.get_tensor(model_input))
    ireq.infer()
    outs.append(ireq.get_output_tensor(0).data.copy())
    return outs


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_benchmark_samples_flow(device):
    """sync_benchmark / throughput_benchmark: properties as a plain dict, inputs filled through
    get_tensor(port).data, AsyncInferQueue iterated and indexed, start_async() without inputs,
    get_idle_request_id, request.latency; the same outputs as the real's."""
    (o_ov, o_core, o_dev), _ = _sides(device)
    ours = _benchmark_flows(o_ov, o_core, o_dev)
    real = run_isolated(_real_flow, "_benchmark_flows", dict(_MODELS), device)
    _close(ours[0], real[0], device)
    _close(ours[1], real[1], device)
