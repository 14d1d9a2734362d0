"""Fixtures for the emulated-NPU tests: small static models, feeds, and the CPU-plugin oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops


def cpu_reference(model: ov.Model, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of the real OpenVINO CPU plugin in f32 (the oracle).

    Dynamic quantization is off: for compressed weights the CPU plugin would otherwise quantize
    activations to int8 (a CPU-only approximation, ~1e-2 relative).
    """
    cfg = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    req = ov.Core().compile_model(model, "CPU", cfg).create_infer_request()
    res = req.infer(feed)
    return [np.array(res[i]) for i in range(len(model.outputs))]


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """max |a-b| relative to the output scale (max |b|)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)) if b.size else 0.0


def static_llm(xml: Path, seq: int, past: int) -> ov.Model:
    """The stateful LLM at ``xml`` as one static step: [1, seq] tokens over ``past`` KV."""
    from ov_npu_emu.cli.model_args import static_llm as make_static

    return make_static(ov.Core().read_model(xml), seq, past)


def llm_feed(model: ov.Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    ids = [p for p in model.inputs if p.get_any_name() == "input_ids"][0]
    seq = ids.get_shape()[1]
    for p in model.inputs:
        n, sh = p.get_any_name(), list(p.get_shape())
        if n == "input_ids":
            feed[n] = rng.integers(0, 500, sh).astype(np.int64)
        elif n == "attention_mask":
            feed[n] = np.ones(sh, np.int64)
        elif n == "position_ids":
            feed[n] = np.arange(seq).reshape(1, seq).astype(np.int64)
        elif n == "beam_idx":
            feed[n] = np.zeros(sh, np.int32)
        else:
            feed[n] = rng.standard_normal(sh).astype(np.float32)
    # positions continue after the past KV
    past = [p for p in model.inputs if p.get_any_name().startswith("past")]
    if past and "position_ids" in feed:
        feed["position_ids"] = (np.arange(seq) + past[0].get_shape()[2]).reshape(1, seq).astype(np.int64)
    return feed


@pytest.fixture(scope="session")
def stories_decode(stories260k_dir: Path) -> ov.Model:
    return static_llm(stories260k_dir / "openvino_model.xml", 1, 15)


@pytest.fixture(scope="session")
def stories_prefill(stories260k_dir: Path) -> ov.Model:
    return static_llm(stories260k_dir / "openvino_model.xml", 8, 0)


def make_add_relu_model(shape: tuple[int, ...] = (2, 3)) -> ov.Model:
    """relu(x + a constant ramp): one input ``x``, output ``y`` (unlike testing.make_add_model's a + b)."""
    x = ops.parameter(list(shape), np.float32, name="x")
    y = ops.relu(ops.add(x, ops.constant(np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape))))
    r = ops.result(y)
    r.output(0).get_tensor().set_names({"y"})
    return ov.Model([r], [x], "add_relu")


def make_mlp(rows: int = 4, k: int = 16, n: int = 32) -> ov.Model:
    rng = np.random.default_rng(1)
    x = ops.parameter([1, rows, k], np.float32, name="x")
    h = ops.matmul(x, ops.constant(rng.standard_normal((n, k)).astype(np.float32)), False, True)
    h = ops.swish(h)
    y = ops.matmul(h, ops.constant(rng.standard_normal((n, k)).astype(np.float32)), False, False)
    y = ops.softmax(y, -1)
    return ov.Model([ops.result(y)], [x], "mlp")


def make_group_conv_cnn() -> ov.Model:
    """conv, max-pool, group conv, clamp, avg-pool, FC, softmax on [1,3,16,16] (testing.make_small_cnn differs)."""
    rng = np.random.default_rng(2)
    x = ops.parameter([1, 3, 16, 16], np.float32, name="image")
    w1 = ops.constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3)
    c1 = ops.convolution(x, w1, [1, 1], [1, 1], [1, 1], [1, 1])
    c1 = ops.add(c1, ops.constant(rng.standard_normal((1, 8, 1, 1)).astype(np.float32)))
    c1 = ops.relu(c1)
    p1 = ops.max_pool(c1, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2]).output(0)
    wg = ops.constant(rng.standard_normal((8, 1, 1, 3, 3)).astype(np.float32) * 0.3)
    g = ops.group_convolution(p1, wg, [1, 1], [1, 1], [1, 1], [1, 1])
    g = ops.clamp(g, 0.0, 6.0)
    a = ops.avg_pool(g, [2, 2], [0, 0], [0, 0], [2, 2], True)
    f = ops.reshape(a, ops.constant(np.array([1, -1], np.int64)), False)
    fc = ops.matmul(f, ops.constant(rng.standard_normal((10, 128)).astype(np.float32) * 0.1), False, True)
    sm = ops.softmax(fc, 1)
    return ov.Model([ops.result(sm)], [x], "small_cnn")


@pytest.fixture
def npu_core():
    """A Core whose emulated NPU compiles in the exact mode, ``INFERENCE_PRECISION_HINT=f32``.

    The device's default is f16, as the real NPU's (docs/npu_device.md "Precision"); the tests
    here compare it with the OpenVINO CPU plugin in f32, to 1e-4 or bit for bit, so they ask for
    f32 explicitly.  Tests of the f16 mode pass ``INFERENCE_PRECISION_HINT=f16`` per compile;
    tests of the default use :func:`npu_core_default`.
    """
    import ov_npu_emu

    core = ov_npu_emu.Core()
    core.set_property("NPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return core


@pytest.fixture
def npu_core_default():
    """A Core with the emulated NPU at its defaults (f16)."""
    import ov_npu_emu

    return ov_npu_emu.Core()


def section_span(blob: bytes, name: str) -> tuple[int, int]:
    """(file offset, size) of the blob's ELF section ``name``."""
    import io

    from elftools.elf.elffile import ELFFile

    sec = ELFFile(io.BytesIO(blob)).get_section_by_name(name)
    return sec["sh_offset"], sec["sh_size"]


#: relative error allowed against the CPU plugin for f32 outputs of compressed-weight models
F32_TOL = 1e-4


def compressed_weight(rng, kind: str, n: int, k: int) -> tuple[ov.Output, np.ndarray]:
    """Decompression subgraphs in the layouts optimum/NNCF export, and their f32 values (numpy)."""
    if kind == "f16":
        w = rng.standard_normal((n, k)).astype(np.float16)
        return ops.convert(ops.constant(w), "f32").output(0), w.astype(np.float32)
    if kind == "u8-asym":  # per channel, u8 zero point, f32 math
        q = rng.integers(0, 256, (n, k)).astype(np.uint8)
        zp = rng.integers(100, 156, (n, 1)).astype(np.uint8)
        sc = (rng.random((n, 1)) * 0.01).astype(np.float16)
        out = ops.multiply(ops.subtract(ops.convert(ops.constant(q), "f32"), ops.convert(ops.constant(zp), "f32")),
                           ops.convert(ops.constant(sc), "f32"))
        return out.output(0), (q.astype(np.float32) - zp) * sc.astype(np.float32)
    if kind == "i8-sym":  # scale as a plain f32 constant
        q = rng.integers(-128, 128, (n, k)).astype(np.int8)
        sc = (rng.random((n, 1)) * 0.01).astype(np.float32)
        return ops.multiply(ops.convert(ops.constant(q), "f32"), ops.constant(sc)).output(0), q * sc
    if kind == "u4-asym-g8":  # grouped, u4 zero point per group, f16 math, Reshape, Convert
        q = rng.integers(0, 16, (n, k // 8, 8)).astype(np.uint8)
        zp = rng.integers(6, 10, (n, k // 8, 1)).astype(np.uint8)
        sc = (rng.random((n, k // 8, 1)) * 0.05).astype(np.float16)
        y = ops.multiply(ops.subtract(ops.convert(ops.constant(q, dtype=ov.Type.u4), "f16"),
                                      ops.convert(ops.constant(zp, dtype=ov.Type.u4), "f16")), ops.constant(sc))
        out = ops.convert(ops.reshape(y, ops.constant(np.array([n, k], np.int64)), False), "f32")
        # f32 math, as the CPU plugin's fused decompression (constant folding would round to f16)
        ref = ((q.astype(np.float32) - zp) * sc.astype(np.float32)).reshape(n, k)
        return out.output(0), ref
    if kind == "i4-cw":  # channel-wise, f16 math then Convert
        q = rng.integers(-8, 8, (n, k)).astype(np.int8)
        sc = (rng.random((n, 1)) * 0.05).astype(np.float16)
        out = ops.convert(ops.multiply(ops.convert(ops.constant(q, dtype=ov.Type.i4), "f16"), ops.constant(sc)), "f32")
        return out.output(0), q.astype(np.float32) * sc.astype(np.float32)
    raise ValueError(kind)


def padded_attention_model(P: int, shut: bool) -> ov.Model:
    """input_ids → embedding → q/k/v → SDPA under a float mask; padding rows attend themselves.
    ``shut``: the mask also closes the padding columns (as a padded prefill's does)."""
    H, D, V = 2, 16, 32
    rng = np.random.default_rng(3)
    ids = ops.parameter([1, P], ov.Type.i64, name="input_ids")
    am = ops.parameter([1, P], ov.Type.i64, name="attention_mask")
    ids.output(0).set_names({"input_ids"})
    am.output(0).set_names({"attention_mask"})
    x = ops.gather(ops.constant(rng.standard_normal((V, H * D)).astype(np.float32)), ids, 0)

    def heads(seed: int):
        w = np.random.default_rng(seed).standard_normal((H * D, H * D)).astype(np.float32) * 0.3
        y = ops.reshape(ops.matmul(x, ops.constant(w), False, False), [1, P, H, D], False)
        return ops.transpose(y, ops.constant([0, 2, 1, 3]))

    causal = np.where(np.tril(np.ones((P, P), bool)), 0.0, -65504.0).astype(np.float32)[None, None]
    is_pad = ops.equal(ops.reshape(am, [1, 1, 1, P], False), ops.constant(np.array(0, np.int64)))
    mask = ops.constant(causal)
    if shut:
        mask = ops.add(mask, ops.select(is_pad, ops.constant(np.float32(-65504.0)),
                                        ops.constant(np.float32(0.0))))
    fix = ops.logical_and(ops.constant(np.eye(P, dtype=bool)[None, None]), is_pad)
    mask = ops.select(fix, ops.constant(np.float32(0.0)), mask)
    o = ops.scaled_dot_product_attention(heads(1), heads(2), heads(3), mask, causal=False)
    o.output(0).set_names({"out"})
    return ov.Model([o], [ids, am], "att")
