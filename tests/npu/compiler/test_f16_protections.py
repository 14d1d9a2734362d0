"""The f16 protections of the emulated NPU's compiler: NPU_EMU_F16_CLAMP (residual Adds saturated
to +-65504) and NPU_COMPILATION_MODE_PARAMS compute-layers-with-higher-precision (op outputs kept f32)."""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu import Core
from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npu.compiler.act_scale import scale_activations
from tests.npu.conftest import llm_feed

HP = "compute-layers-with-higher-precision=Sqrt,Power,ReduceMean,Add_RMSNorm"


def _residual_model() -> ov.Model:
    """y = (a * 2 + b * 2) ** 2 / 1e6: the residual Add passes 65504 for inputs near 20000."""
    a = ov.opset13.parameter([1, 4], ov.Type.f32, name="a")
    b = ov.opset13.parameter([1, 4], ov.Type.f32, name="b")
    two = ov.opset13.constant(np.float32(2.0))
    h = ov.opset13.add(ov.opset13.multiply(a, two), ov.opset13.multiply(b, two))
    h.set_friendly_name("residual")
    sq = ov.opset13.power(h, ov.opset13.constant(np.float32(2.0)))
    y = ov.opset13.divide(sq, ov.opset13.constant(np.float32(1e6)))
    return ov.Model([y], [a, b])


def _run(config: dict[str, Any]) -> np.ndarray:
    cm = Core().compile_model(_residual_model(), "NPU", config)
    feed = {"a": np.array([[20000, 1, -20000, 3]], np.float32), "b": np.array([[20000, 2, -20000, 4]], np.float32)}
    with np.errstate(all="ignore"):
        return np.array(cm.create_infer_request().infer(feed)[0])


def test_f16_overflows_without_protection() -> None:
    out = _run({"INFERENCE_PRECISION_HINT": "f16"})
    assert np.isinf(out[0, 0]) and np.isinf(out[0, 2])
    np.testing.assert_allclose(out[0, [1, 3]], [36e-6, 196e-6], rtol=2e-2)


def test_clamp_saturates_the_residual_and_higher_precision_keeps_its_square() -> None:
    clamped = _run({"INFERENCE_PRECISION_HINT": "f16", "NPU_EMU_F16_CLAMP": "YES"})
    assert np.isinf(clamped[0, 0])  # 65504 ** 2 still overflows the f16 Power output
    both = _run({"INFERENCE_PRECISION_HINT": "f16", "NPU_EMU_F16_CLAMP": "YES", "NPU_COMPILATION_MODE_PARAMS": HP})
    # the residual saturated at 65504 (not 80000), its square kept in f32, then / 1e6 back in range
    np.testing.assert_allclose(both[0, [0, 2]], [65504.0**2 / 1e6] * 2, rtol=1e-3)
    np.testing.assert_allclose(both[0, [1, 3]], [36e-6, 196e-6], rtol=2e-2)


def test_protections_change_nothing_in_f32() -> None:
    ref = _run({"INFERENCE_PRECISION_HINT": "f32"})
    got = _run({"INFERENCE_PRECISION_HINT": "f32", "NPU_EMU_F16_CLAMP": "YES", "NPU_COMPILATION_MODE_PARAMS": HP})
    np.testing.assert_array_equal(ref, got)
    assert ref[0, 0] == pytest.approx(6400.0)


def test_unmodelled_compiler_params_are_refused() -> None:
    with pytest.raises(ConfigError, match="compute-layers-with-higher-precision"):
        Core().compile_model(_residual_model(), "NPU", {"NPU_COMPILATION_MODE_PARAMS": "optimization-level=3"})


# -- ACTIVATIONS_SCALE_FACTOR: the residual stream carried divided by the factor ------------------

def _stream_model() -> ov.Model:
    """h = x + 0.5 * reshape(x @ W + b) (a residual Add written by a MatMul with a bias, peak 9.0e4
    past the f16 range), then an RMSNorm of h with eps 1e-2 (row 1 is small, mean(h^2) 1e-3: its eps matters),
    and h itself as a second output."""
    x = ov.opset13.parameter([1, 2, 8], ov.Type.f32, name="x")
    w = ov.opset13.constant(np.full((8, 8), 4096.0, np.float32))
    bias = ov.opset13.constant(np.linspace(-0.02, 0.02, 8, dtype=np.float32))
    proj = ov.opset13.add(ov.opset13.matmul(x, w, False, False), bias)
    # as GPT-2's addmm + view and Granite's residual multiplier: the writer reaches the Add through them
    proj = ov.opset13.reshape(proj, ov.opset13.constant(np.array([1, 2, 8], np.int64)), False)
    h = ov.opset13.add(x, ov.opset13.multiply(proj, ov.opset13.constant(np.float32(0.5))))
    h.set_friendly_name("residual")
    mean = ov.opset13.reduce_mean(ov.opset13.power(h, ov.opset13.constant(np.float32(2.0))),
                                  ov.opset13.constant(np.array([-1], np.int64)), True)
    rsqrt = ov.opset13.divide(ov.opset13.constant(np.float32(1.0)),
                              ov.opset13.sqrt(ov.opset13.add(mean, ov.opset13.constant(np.float32(1e-2)))))
    gamma = ov.opset13.constant(np.linspace(0.5, 2, 8, dtype=np.float32))
    y = ov.opset13.multiply(ov.opset13.multiply(h, rsqrt), gamma)
    y.output(0).get_tensor().set_names({"y"})
    h.output(0).get_tensor().set_names({"h"})
    return ov.Model([y, h], [x])


_STREAM_FEED = {"x": np.concatenate([np.linspace(1, 10, 8, dtype=np.float32)[None],
                                     np.linspace(-0.05, 0.05, 8, dtype=np.float32)[None]])[None]}


@pytest.fixture(scope="module")
def stream_reference() -> dict[str, np.ndarray]:
    """The real OpenVINO CPU plugin at f32."""
    cm = ov.Core().compile_model(_stream_model(), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    out = cm.create_infer_request().infer(_STREAM_FEED)
    return {"y": np.array(out["y"]), "h": np.array(out["h"])}


def _run_stream(config: dict[str, Any]) -> dict[str, np.ndarray]:
    cm = Core().compile_model(_stream_model(), "NPU", config)
    with np.errstate(all="ignore"):
        out = cm.create_infer_request().infer(_STREAM_FEED)
    return {"y": np.array(out["y"]), "h": np.array(out["h"])}


def test_activation_scaling_keeps_the_stream_in_f16_range(stream_reference: dict[str, np.ndarray]) -> None:
    assert np.abs(stream_reference["h"]).max() > 65504  # the residual overflows f16
    plain = _run_stream({"INFERENCE_PRECISION_HINT": "f16"})
    assert not np.isfinite(plain["y"][0, 0]).all() and np.isinf(plain["h"][0, 0]).any()
    # s = 8: the residual (9.0e4 / 8) fits, its square in the norm does not (1.3e8): higher precision keeps it
    alone = _run_stream({"INFERENCE_PRECISION_HINT": "f16", "ACTIVATIONS_SCALE_FACTOR": 8})
    assert not np.allclose(alone["y"][0, 0], stream_reference["y"][0, 0], rtol=0.1)  # 1 / sqrt(inf) = 0
    both = _run_stream({"INFERENCE_PRECISION_HINT": "f16", "ACTIVATIONS_SCALE_FACTOR": "8",
                        "NPU_COMPILATION_MODE_PARAMS": HP})
    # exact up to f16 rounding on both rows: the eps of the small row is scaled by 1/s^2 with the stream
    np.testing.assert_allclose(both["y"], stream_reference["y"], rtol=2e-3, atol=1e-4)
    # a model output reading the scaled stream gets it scaled back up in f32, not stored f16 (inf)
    np.testing.assert_allclose(both["h"], stream_reference["h"], rtol=2e-3, atol=1e-5)


def test_activation_scaling_changes_nothing_in_f32(stream_reference: dict[str, np.ndarray]) -> None:
    ref = _run_stream({"INFERENCE_PRECISION_HINT": "f32"})
    got = _run_stream({"INFERENCE_PRECISION_HINT": "f32", "ACTIVATIONS_SCALE_FACTOR": 8})
    for k in ("y", "h"):
        np.testing.assert_array_equal(ref[k], got[k])
        np.testing.assert_allclose(ref[k], stream_reference[k], rtol=1e-5, atol=1e-6)


def test_activation_scale_factor_values() -> None:
    """A number, as ov::hint::activations_scale_factor; <= 0 (-1 is the default) turns it off."""
    assert Core().get_property("NPU", "ACTIVATIONS_SCALE_FACTOR") == -1.0
    plain = _run_stream({"INFERENCE_PRECISION_HINT": "f16"})
    for off in (-1, "0"):
        got = _run_stream({"INFERENCE_PRECISION_HINT": "f16", "ACTIVATIONS_SCALE_FACTOR": off})
        np.testing.assert_array_equal(got["y"], plain["y"])
    for bad in ("eight", "inf", True):
        with pytest.raises(ConfigError, match="ACTIVATIONS_SCALE_FACTOR"):
            Core().compile_model(_residual_model(), "NPU", {"ACTIVATIONS_SCALE_FACTOR": bad})


def test_power_of_two_scaling_is_exact_on_stories260k(stories_prefill: ov.Model) -> None:
    """On a model that does not overflow, s = 8 changes no bit of the f16 run: every residual Add
    and writer is scaled by a power of two (exact in f16 away from subnormals), the RMSNorms absorb it
    exactly (eps / 64); a non-power of two (3) drifts from f32 no more than the unscaled run."""
    assert scale_activations(stories_prefill.clone(), 8) == 10  # 5 layers x (attention, MLP) residual Adds
    feed = llm_feed(stories_prefill)
    ref = ov.Core().compile_model(stories_prefill, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    f32 = np.array(ref.create_infer_request().infer(feed)["logits"])
    out = {}
    for s in (-1, 8, 3):
        config = {"INFERENCE_PRECISION_HINT": "f16", "ACTIVATIONS_SCALE_FACTOR": s}
        cm = Core().compile_model(stories_prefill, "NPU", config)
        out[s] = np.array(cm.create_infer_request().infer(feed)["logits"])
    np.testing.assert_array_equal(out[8], out[-1])
    drift = {s: float(np.abs(out[s] - f32).max() / np.abs(f32).max()) for s in (-1, 3)}
    assert 0 < drift[-1] < 2e-2 and 0 < drift[3] < 1.5 * drift[-1], drift
    assert (out[3].argmax(-1) == f32.argmax(-1)).all()


def test_post_norm_blocks_are_scaled_too() -> None:
    """Gemma-2 / OLMo-2 style: the residual Add's writer is a norm, not a MatMul; the Add is still
    scaled because the next RMSNorm reads it, and the result stays the real CPU plugin's."""
    def rms(v: Any) -> Any:
        mean = ov.opset13.reduce_mean(ov.opset13.multiply(v, v), ov.opset13.constant(np.array([-1], np.int64)), True)
        return ov.opset13.multiply(v, ov.opset13.power(ov.opset13.add(mean, ov.opset13.constant(np.float32(1e-6))),
                                                       ov.opset13.constant(np.float32(-0.5))))

    x = ov.opset13.parameter([1, 3, 8], ov.Type.f32, name="x")
    w = ov.opset13.constant(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    h = ov.opset13.add(x, rms(ov.opset13.matmul(x, w, False, False)))
    model = ov.Model([rms(h)], [x])
    assert scale_activations(model.clone(), 8) == 1
    feed = {"x": np.linspace(-3, 5, 24, dtype=np.float32).reshape(1, 3, 8)}
    ref = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request().infer(feed)
    out = {}
    for s in (-1, 8):
        cm = Core().compile_model(model, "NPU", {"INFERENCE_PRECISION_HINT": "f16", "ACTIVATIONS_SCALE_FACTOR": s})
        out[s] = np.array(cm.create_infer_request().infer(feed)[0])
    # within f16 rounding of the real (not bit-equal to s = -1: the f32 input x is rounded to f16
    # once more by its scale-down Multiply before the Add)
    for s in (-1, 8):
        np.testing.assert_allclose(out[s], np.array(ref[0]), rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("eps_mode", ["inside_sqrt", "outside_sqrt"])
def test_layer_norms_absorb_the_factor(eps_mode: str) -> None:
    """A GPT-2-style stream: LayerNorm (MVN) reads the residual past 65504; with the factor its eps
    is rescaled (s^2 inside the root, s outside) and the f16 run is the real CPU plugin's."""
    x = ov.opset13.parameter([1, 2, 8], ov.Type.f32, name="x")
    # columns 256 ... 2048 times sum(x): row 0 spreads over 1.1e4 ... 9.0e4 (the mean is not the peak)
    w = ov.opset13.constant(np.tile(np.linspace(256, 2048, 8, dtype=np.float32), (8, 1)))
    h = ov.opset13.add(x, ov.opset13.matmul(x, w, False, False))
    y = ov.opset13.mvn(h, ov.opset13.constant(np.array([-1], np.int64)), True, 1e-2, eps_mode)
    model = ov.Model([y], [x])
    ref = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    want = np.array(ref.infer(_STREAM_FEED)[0])
    cm = Core().compile_model(model, "NPU", {"INFERENCE_PRECISION_HINT": "f16", "ACTIVATIONS_SCALE_FACTOR": 8})
    with np.errstate(all="ignore"):
        got = np.array(cm.create_infer_request().infer(_STREAM_FEED)[0])
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
