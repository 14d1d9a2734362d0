"""Shared pytest fixtures and tiny model factories for ov_npu_emu and plugin authors.

Opt in from a conftest with ``pytest_plugins = ["ov_npu_emu.testing"]`` (the project's root
``tests/conftest.py`` does).  Fixtures (session-scoped, built once per test run):

``tiny_model_dir``        builder ``tiny`` preset folder, f32 weights (2 layers, GQA 4/2, vocab 512)
``tiny_model_dir_f16``    the same model with f16-compressed weights
``tiny_model_dir_int8``   the same model with int8 (u8 + zero point + f16 scale) weights
``tiny_model_dir_int4``   the same model with sym int4 weights, group size 16 (int8 embeddings)
``small_model_dir``       builder ``small`` preset folder, f32 (4 layers, hidden 256, vocab 2048)
``tiny_reference``        :class:`~ov_npu_emu.modelbuilder.LlamaReference` of ``tiny_model_dir``
``stories260k_dir``       the trained stories260K folder bundled in ov_npu_emu/models (see
                          :func:`ov_npu_emu.models.find_model`); an error, not a skip, if missing

Model factories (plain functions returning an ``openvino.Model``; static shapes):

``make_add_model(shape)``                          a + b
``make_model_with_memory(shape, dtype, var_id)``   ReadValue(var) + input_data -> Assign(var)
``make_small_cnn(seed)``                           conv/pool/softmax network on [1,3,16,16]
``make_resnet_like(classes, size)``                ResNet-shaped classifier (residual blocks)
``make_mobilenet_like(classes, size)``             MobileNet-shaped classifier (depthwise blocks)
``make_ssd_like(classes, size)``                   SSD-shaped detector (PriorBox, DetectionOutput)

Oracle helpers:

``CPU_EXACT_CONFIG``                               compile config for exact f32 on the CPU plugin
``run_stateful_greedy(compiled, prompt, steps)``   drive a stateful LLM like openvino_genai
``whisper_test_audio(kind)``                       deterministic 16 kHz speech-like audio for the
                                                   Whisper fixtures (tests/fixtures/whisper)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:  # openvino and the builder load lazily: importing this plugin stays cheap
    import openvino as ov

    from ov_npu_emu.modelbuilder import LlamaReference

__all__ = [
    "CPU_EXACT_CONFIG",
    "chromium_screenshot",
    "keep_alive",
    "make_add_model",
    "make_model_with_memory",
    "make_mobilenet_like",
    "make_resnet_like",
    "make_small_cnn",
    "make_ssd_like",
    "png_pixels",
    "run_isolated",
    "run_stateful_greedy",
    "small_model_dir",
    "stories260k_dir",
    "tiny_model_dir",
    "tiny_model_dir_f16",
    "tiny_model_dir_int8",
    "tiny_model_dir_int4",
    "tiny_reference",
    "whisper_case_kwargs",
    "whisper_test_audio",
]

#: CPU plugin config for exact f32 comparisons: this CPU otherwise computes in bf16, stores KV
#: as u8, and quantizes activations dynamically for int8-weight models.
CPU_EXACT_CONFIG: dict[str, str] = {
    "INFERENCE_PRECISION_HINT": "f32",
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}


def png_pixels(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) to [H, W, C]."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    w = h = ch = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
            ch = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + w * ch
    rows: list[bytearray] = []
    prev = bytearray(w * ch)
    for y in range(h):  # PNG filters: None, Sub, Up, Average, Paeth (plain ints: fast enough)
        f, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        if f == 2:
            line = bytearray(((np.frombuffer(line, np.uint8).astype(np.int32) + np.frombuffer(prev, np.uint8))
                              & 0xFF).astype(np.uint8).tobytes())
        elif f in (1, 3, 4):
            for x in range(len(line)):
                a = line[x - ch] if x >= ch else 0
                b = prev[x]
                if f == 1:
                    line[x] = (line[x] + a) & 0xFF
                elif f == 3:
                    line[x] = (line[x] + (a + b) // 2) & 0xFF
                else:
                    c = prev[x - ch] if x >= ch else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(line)
        prev = line
    out = np.frombuffer(b"".join(rows), np.uint8)
    return out.reshape(h, w, ch)


def chromium_screenshot(page: Path, png: Path, window: str = "1200,900") -> np.ndarray:
    """Render ``page`` in headless Chromium and return the screenshot's pixels [H, W, C] (uint8).
    Skips without Chromium, except under CI (.ci/run installs Debian's package), where it fails."""
    import os
    import shutil
    import subprocess

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", f"--window-size={window}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    return png_pixels(png.read_bytes())


def _isolated_child(conn: Any, fn: Any, args: tuple[Any, ...], timeout: float) -> None:
    import faulthandler
    import os

    # if this child hangs, its threads' Python stacks reach the parent's stderr (the test report)
    # before the parent gives up on it
    faulthandler.dump_traceback_later(max(timeout - 5.0, 1.0), exit=False)
    try:
        conn.send((True, fn(*args)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which re-raises
        conn.send((False, f"{type(e).__name__}: {e}"))
    conn.close()
    # no interpreter shutdown: openvino 2026.4.1 can deadlock destroying a compiled model whose
    # AsyncInferQueue callbacks still hold Python objects (a CPUStreamsExecutor thread waits for
    # the GIL the destroying thread holds); the results are already sent.  ``fn`` should keep
    # such objects alive (keep_alive) so that nothing of theirs is destroyed before this point.
    os._exit(0)


#: objects a flow run by run_isolated must not destroy (see _isolated_child); never emptied.
_KEPT: list[Any] = []


def keep_alive(*objects: Any) -> None:
    """Hold ``objects`` for the life of the process (the real openvino's AsyncInferQueue and its
    compiled model in a run_isolated child, whose teardown can deadlock)."""
    _KEPT.append(objects)


def run_isolated(fn: Any, *args: Any, timeout: float = 300.0) -> Any:
    """``fn(*args)`` in a fresh (spawned) process; its result (picklable) returned here.

    For oracle runs of the real openvino's AsyncInferQueue, whose teardown can hang the process
    (see _isolated_child): the child never tears down. ``fn`` must be a module-level function.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_isolated_child, args=(child, fn, args, timeout), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} did not finish in {timeout} s")
        ok, value = parent.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    if not ok:
        raise AssertionError(f"{getattr(fn, '__name__', fn)} failed in its process: {value}")
    return value


def run_stateful_greedy(
    compiled: ov.CompiledModel,
    prompt: Sequence[int],
    steps: int,
) -> tuple[list[int], list[np.ndarray]]:
    """Drive a stateful LLM (optimum interface) as openvino_genai does: one prefill call, then
    one token per call with a growing attention mask and ``beam_idx = [0]``.

    Works with ``openvino.CompiledModel`` and with ov_npu_emu's.  Returns the ``steps`` greedy
    tokens and the logits of all ``steps + 1`` calls (prefill first).
    """
    req = compiled.create_infer_request()
    req.reset_state()
    length = len(prompt)
    out = req.infer(
        {
            "input_ids": np.array([list(prompt)], dtype=np.int64),
            "attention_mask": np.ones((1, length), dtype=np.int64),
            "position_ids": np.arange(length, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, dtype=np.int32),
        }
    )
    logits = [np.array(out["logits"])]
    tokens: list[int] = []
    for _ in range(steps):
        token = int(np.argmax(logits[-1][0, -1]))
        tokens.append(token)
        out = req.infer(
            {
                "input_ids": np.array([[token]], dtype=np.int64),
                "attention_mask": np.ones((1, length + 1), dtype=np.int64),
                "position_ids": np.array([[length]], dtype=np.int64),
                "beam_idx": np.zeros(1, dtype=np.int32),
            }
        )
        logits.append(np.array(out["logits"]))
        length += 1
    return tokens, logits


# ---------------------------------------------------------------------------------------- models


def make_add_model(shape: Sequence[int] = (2, 3), dtype: type = np.float32) -> ov.Model:
    """Two inputs ``a`` and ``b`` of ``shape``; output ``res`` = a + b."""
    import openvino as ov
    import openvino.opset13 as ops

    a = ops.parameter(list(shape), dtype, name="a")
    b = ops.parameter(list(shape), dtype, name="b")
    a.output(0).get_tensor().set_names({"a"})
    b.output(0).get_tensor().set_names({"b"})
    res = ops.result(ops.add(a, b))
    res.output(0).get_tensor().set_names({"res"})
    return ov.Model([res], [a, b], name="add_model")


def make_model_with_memory(
    shape: Sequence[int] = (1, 4), dtype: type = np.float32, var_id: str = "var_id_667"
) -> ov.Model:
    """openvino's ``generate_model_with_memory``: input ``input_data`` → ReadValue(var, zeros) +
    input → Assign(var); output ``res`` is the new state: each infer adds the input to it."""
    import openvino as ov
    import openvino.opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    x = ops.parameter(list(shape), dtype, name="input_data")
    x.output(0).get_tensor().set_names({"input_data"})
    info = VariableInfo()
    info.data_shape = ov.PartialShape(list(shape))
    info.data_type = ov.Type(np.dtype(dtype))
    info.variable_id = var_id
    var = Variable(info)
    rv = ops.read_value(ops.constant(np.zeros(shape, dtype)), var)
    add = ops.add(rv, x)
    assign = ops.assign(add, var)
    res = ops.result(add)
    res.output(0).get_tensor().set_names({"res"})
    return ov.Model([res], [assign], [x], name="memory_model")


def make_small_cnn(seed: int = 0) -> ov.Model:
    """A static CNN: input ``data`` f32 [1,3,16,16] → output ``prob`` f32 [1,10] (softmax).

    Ops: Convolution(+bias Add), Relu, GroupConvolution (depthwise), Clamp, MaxPool, Add
    (residual), Multiply, AvgPool, Transpose, Reshape, MatMul, Softmax.
    """
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    data = ops.parameter([1, 3, 16, 16], np.float32, name="data")
    data.output(0).get_tensor().set_names({"data"})
    x = ops.convolution(data, w(8, 3, 3, 3), [1, 1], [1, 1], [1, 1], [1, 1])  # [1,8,16,16]
    x = ops.relu(ops.add(x, w(1, 8, 1, 1)))
    # Depthwise: groups=8, weights [G, out/G, in/G, kh, kw].
    y = ops.group_convolution(x, w(8, 1, 1, 3, 3), [1, 1], [1, 1], [1, 1], [1, 1])
    y = ops.clamp(y, 0.0, 6.0)
    x = ops.add(x, y)  # residual
    x = ops.max_pool(x, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2]).output(0)  # [1,8,8,8]
    x = ops.convolution(x, w(16, 8, 1, 1), [1, 1], [0, 0], [0, 0], [1, 1])  # [1,16,8,8]
    x = ops.multiply(x, np.float32(0.5))
    x = ops.avg_pool(x, [2, 2], [0, 0], [0, 0], [2, 2], exclude_pad=True)  # [1,16,4,4]
    x = ops.transpose(x, np.array([0, 2, 3, 1], dtype=np.int64))  # [1,4,4,16]
    x = ops.reshape(x, np.array([1, 256], dtype=np.int64), special_zero=False)
    logits = ops.matmul(x, w(256, 10), False, False)
    prob = ops.softmax(logits, -1)
    res = ops.result(prob)
    res.output(0).get_tensor().set_names({"prob"})
    return ov.Model([res], [data], name="small_cnn")


def _he(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _named_result(ops: Any, node: Any, name: str) -> Any:
    res = ops.result(node)
    res.output(0).get_tensor().set_names({name})
    return res


def _image_input(ops: Any, shape: Sequence[int]) -> Any:
    data = ops.parameter(list(shape), np.float32, name="data")
    data.output(0).get_tensor().set_names({"data"})
    return data


def make_resnet_like(classes: int = 100, size: int = 64, seed: int = 0) -> ov.Model:
    """A ResNet-shaped classifier: input ``data`` f32 [1,3,size,size] (NCHW, pixel values 0..255)
    → output ``prob`` f32 [1,classes] (softmax).

    Stem convolution (stride 2) with a folded batch norm (Multiply, Add), ReLU, MaxPool; two
    basic residual blocks (the second with a strided 1x1 projection shortcut); global average
    pooling (ReduceMean), a fully connected MatMul with bias, Softmax.
    """
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(seed)

    def conv_bn(x: Any, cin: int, cout: int, k: int, stride: int, relu: bool = True) -> Any:
        p = k // 2
        y = ops.convolution(x, _he(rng, cout, cin, k, k), [stride, stride], [p, p], [p, p], [1, 1])
        scale = (1.0 + 0.1 * rng.standard_normal((1, cout, 1, 1))).astype(np.float32)
        shift = (0.1 * rng.standard_normal((1, cout, 1, 1))).astype(np.float32)
        y = ops.add(ops.multiply(y, scale), shift)
        return ops.relu(y) if relu else y

    data = _image_input(ops, [1, 3, size, size])
    x = ops.multiply(data, np.float32(1.0 / 255.0))
    x = conv_bn(x, 3, 16, 3, 2)
    x = ops.max_pool(x, [2, 2], [1, 1], [1, 1], [1, 1], [3, 3]).output(0)
    y = conv_bn(conv_bn(x, 16, 16, 3, 1), 16, 16, 3, 1, relu=False)
    x = ops.relu(ops.add(x, y))
    y = conv_bn(conv_bn(x, 16, 32, 3, 2), 32, 32, 3, 1, relu=False)
    x = ops.relu(ops.add(conv_bn(x, 16, 32, 1, 2, relu=False), y))
    x = ops.reduce_mean(x, np.array([2, 3], dtype=np.int64), keep_dims=False)  # [1,32]
    logits = ops.add(ops.matmul(x, _he(rng, classes, 32), False, True), _he(rng, 1, classes) * 0.1)
    prob = ops.softmax(ops.multiply(logits, np.float32(2.0)), 1)
    return ov.Model([_named_result(ops, prob, "prob")], [data], name="resnet_like")


def make_mobilenet_like(classes: int = 100, size: int = 64, seed: int = 1) -> ov.Model:
    """A MobileNet-shaped classifier: input ``data`` f32 [1,3,size,size] → ``prob`` f32 [1,classes].

    Normalization (Subtract, Multiply), a strided stem, depthwise-separable blocks (GroupConvolution
    with ReLU6 as Clamp, pointwise 1x1 Convolution, an inverted residual), AvgPool to 1x1,
    Reshape, a 1x1 classifier as MatMul, Softmax.
    """
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(seed)

    def pw(x: Any, cin: int, cout: int, relu6: bool = True) -> Any:
        y = ops.add(ops.convolution(x, _he(rng, cout, cin, 1, 1), [1, 1], [0, 0], [0, 0], [1, 1]),
                    (0.1 * rng.standard_normal((1, cout, 1, 1))).astype(np.float32))
        return ops.clamp(y, 0.0, 6.0) if relu6 else y

    def dw(x: Any, c: int, stride: int) -> Any:
        y = ops.group_convolution(x, _he(rng, c, 1, 1, 3, 3), [stride, stride], [1, 1], [1, 1], [1, 1])
        return ops.clamp(y, 0.0, 6.0)

    data = _image_input(ops, [1, 3, size, size])
    mean = np.array([123.7, 116.3, 103.5], np.float32).reshape(1, 3, 1, 1)
    x = ops.multiply(ops.subtract(data, mean), np.float32(1.0 / 58.0))
    x = ops.clamp(ops.convolution(x, _he(rng, 16, 3, 3, 3), [2, 2], [1, 1], [1, 1], [1, 1]), 0.0, 6.0)
    x = pw(dw(x, 16, 1), 16, 24)
    y = pw(dw(pw(x, 24, 48), 48, 1), 48, 24, relu6=False)
    x = ops.add(x, y)  # inverted residual
    x = pw(dw(x, 24, 2), 24, 48)
    s = size // 4
    x = ops.avg_pool(x, [1, 1], [0, 0], [0, 0], [s, s], exclude_pad=True)  # [1,48,1,1]
    x = ops.reshape(x, np.array([0, -1], dtype=np.int64), special_zero=True)
    logits = ops.matmul(x, _he(rng, 48, classes), False, False)
    prob = ops.softmax(ops.multiply(logits, np.float32(2.0)), -1)
    return ov.Model([_named_result(ops, prob, "prob")], [data], name="mobilenet_like")


def make_ssd_like(classes: int = 3, size: tuple[int, int] = (48, 64), seed: int = 2) -> ov.Model:
    """An SSD-shaped detector: input ``data`` f32 [1,3,H,W] → ``detection_out`` f32 [1,1,N,7].

    A strided convolution backbone, 3x3 convolution heads for box offsets and class scores
    (Transpose to NHWC, Reshape, Softmax over classes), PriorBox from the ShapeOf of the feature
    map and of the image, DetectionOutput.  Every shape is computed from the input's, so the
    model can be reshaped to another image size (hello_reshape_ssd).
    """
    import openvino as ov
    import openvino.opset1 as opset1
    import openvino.opset13 as ops

    rng = np.random.default_rng(seed)
    h, w = size
    data = _image_input(ops, [1, 3, h, w])
    x = ops.multiply(data, np.float32(1.0 / 255.0))
    for cin, cout in ((3, 16), (16, 32), (32, 32)):
        x = ops.relu(ops.convolution(x, _he(rng, cout, cin, 3, 3), [2, 2], [1, 1], [1, 1], [1, 1]))
    attrs = {"min_size": [12.0], "max_size": [24.0], "aspect_ratio": [2.0], "flip": True, "clip": False,
             "variance": [0.1, 0.1, 0.2, 0.2], "offset": 0.5}
    anchors = 4  # min, max, 2, 1/2
    idx = np.array([2, 3], dtype=np.int64)
    priors = ops.prior_box(ops.gather(ops.shape_of(x), idx, np.int64(0)),
                           ops.gather(ops.shape_of(data), idx, np.int64(0)), attrs)
    priors = ops.unsqueeze(priors, np.array([0], dtype=np.int64))
    nhwc = np.array([0, 2, 3, 1], dtype=np.int64)
    loc = ops.convolution(x, _he(rng, anchors * 4, 32, 3, 3) * 0.2, [1, 1], [1, 1], [1, 1], [1, 1])
    loc = ops.reshape(ops.transpose(loc, nhwc), np.array([0, -1], dtype=np.int64), special_zero=True)
    conf = ops.convolution(x, _he(rng, anchors * classes, 32, 3, 3) * 3.0, [1, 1], [1, 1], [1, 1], [1, 1])
    conf = ops.reshape(ops.transpose(conf, nhwc), np.array([0, -1, classes], dtype=np.int64), special_zero=True)
    conf = ops.reshape(ops.softmax(conf, 2), np.array([0, -1], dtype=np.int64), special_zero=True)
    det = opset1.detection_output(loc, conf, priors, {
        "num_classes": classes, "background_label_id": 0, "top_k": 100, "keep_top_k": [20],
        "nms_threshold": 0.45, "confidence_threshold": 0.3, "code_type": "caffe.PriorBoxParameter.CENTER_SIZE",
        "share_location": True, "normalized": True})
    return ov.Model([_named_result(ops, det, "detection_out")], [data], name="ssd_like")


# -------------------------------------------------------------------------------------- fixtures


def _builder_dir(
    tmp_path_factory: pytest.TempPathFactory, preset: str, dtype: str, **kw: Any
) -> Path:
    from ov_npu_emu.modelbuilder import make_model_folder

    return make_model_folder(
        tmp_path_factory.mktemp(f"{preset}_{dtype}_model"), preset, dtype, seed=0, **kw
    )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the builder ``tiny`` preset (f32, seed 0); loads in openvino_genai."""
    return _builder_dir(tmp_path_factory, "tiny", "f32")


@pytest.fixture(scope="session")
def tiny_model_dir_f16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` preset with f16 weight constants (+ Convert to f32)."""
    return _builder_dir(tmp_path_factory, "tiny", "f16")


@pytest.fixture(scope="session")
def tiny_model_dir_int8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` preset with int8 weight compression (u8 weight, u8 zero point, f16 scale)."""
    return _builder_dir(tmp_path_factory, "tiny", "int8")


@pytest.fixture(scope="session")
def tiny_model_dir_int4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` preset, sym int4 group size 16 (i4 + f16 scale); embeddings stay int8."""
    return _builder_dir(tmp_path_factory, "tiny", "int4", group_size=16)


@pytest.fixture(scope="session")
def small_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the builder ``small`` preset (f32, seed 0, ~4M parameters)."""
    return _builder_dir(tmp_path_factory, "small", "f32")


@pytest.fixture(scope="session")
def tiny_reference(tiny_model_dir: Path) -> LlamaReference:
    """Numpy reference (float64) of ``tiny_model_dir``: ``forward`` / ``greedy_generate``."""
    from ov_npu_emu.modelbuilder import load_reference

    return load_reference(tiny_model_dir)


@pytest.fixture(scope="session")
def stories260k_dir() -> Path:
    """The trained TinyStories 260K model folder (optimum export + tokenizer IR) bundled in
    ``ov_npu_emu/models``, or ``$OV_NPU_EMU_MODELS_DIR/stories260K``; errors if missing."""
    from ov_npu_emu.models import find_model

    return find_model("stories260K")


#: seconds of each :func:`whisper_test_audio` kind ("long" is over Whisper's 30 s window)
WHISPER_AUDIO_SECONDS: dict[str, float] = {"short": 3.0, "medium": 10.0, "long": 45.0}


def whisper_case_kwargs(case: dict[str, Any], pipe: Any) -> dict[str, Any]:
    """A Whisper golden case's generate() keywords (tools/whisper_goldens.py ``CASES``): its fields
    but ``audio``; ``"suppress": "incomplete"`` becomes ``suppress_tokens`` = every timestamp token
    and every token below EOS that decodes to U+FFFD alone (``pipe``'s config and tokenizer).  The
    real 2026.4.1 segfaults on a window whose text never decodes to whole characters, which the
    random fixtures' texts are; so suppressed, they split into words."""
    kwargs = {k: v for k, v in case.items() if k not in ("audio", "suppress")}
    if case.get("suppress") == "incomplete":
        cfg = pipe.get_generation_config()
        tok = pipe.get_tokenizer()
        first = cfg.no_timestamps_token_id + 1
        kwargs["suppress_tokens"] = list(range(first, first + 1501)) + [
            i for i in range(cfg.eos_token_id) if "\ufffd" in tok.decode([i])]
    elif "suppress" in case:
        raise ValueError(f"unknown suppress {case['suppress']!r}; the goldens know 'incomplete'")
    return kwargs


def whisper_test_audio(kind: str) -> np.ndarray:
    """Deterministic speech-like audio, float32 mono 16 kHz in [-1, 1], made by code (no wav files).

    ``kind`` is "short" (3 s), "medium" (10 s) or "long" (45 s, over Whisper's 30 s window).
    "Syllables" of 80-300 ms - a fundamental of 90-260 Hz with 4 harmonics shaped by two formant
    peaks, a raised-cosine envelope, some with a pitch glide - separated by pauses of 30-400 ms
    (and a longer pause every few syllables), over faint noise; the seed is fixed per kind.  The
    same kind always gives the same samples (numpy's PCG64 and float64 arithmetic, then float32).
    """
    if kind not in WHISPER_AUDIO_SECONDS:
        raise ValueError(f"unknown audio kind {kind!r}; use one of {sorted(WHISPER_AUDIO_SECONDS)}")
    sr = 16000
    n = int(WHISPER_AUDIO_SECONDS[kind] * sr)
    rng = np.random.default_rng({"short": 1601, "medium": 1602, "long": 1603}[kind])
    out = rng.normal(0.0, 0.003, n)
    t = int(0.25 * sr)
    count = 0
    while t < n - int(0.1 * sr):
        length = int(rng.uniform(0.08, 0.30) * sr)
        length = min(length, n - t)
        time = np.arange(length) / sr
        f0 = rng.uniform(90.0, 260.0) * (1.0 + rng.uniform(-0.25, 0.25) * time / max(time[-1], 1e-3))
        phase = 2.0 * np.pi * np.cumsum(f0) / sr
        formants = (rng.uniform(300.0, 900.0), rng.uniform(900.0, 2600.0))
        voice = np.zeros(length)
        for h in range(1, 5):
            freq = f0 * h
            gain = sum(np.exp(-(((freq - f) / 250.0) ** 2)) for f in formants) + 0.1
            voice += gain * np.sin(h * phase) / h
        env = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / max(length - 1, 1))
        out[t:t + length] += rng.uniform(0.15, 0.45) * env * voice
        count += 1
        pause = rng.uniform(0.03, 0.4) + (rng.uniform(0.5, 1.2) if count % 7 == 0 else 0.0)
        t += length + int(pause * sr)
    return np.clip(out, -1.0, 1.0).astype(np.float32)
