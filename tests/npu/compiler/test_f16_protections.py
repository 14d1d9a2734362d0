"""The f16 protections of the emulated NPU's compiler: NPU_EMU_F16_CLAMP (residual Adds saturated
to +-65504) and NPU_COMPILATION_MODE_PARAMS compute-layers-with-higher-precision (op outputs kept f32)."""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu import Core
from ov_npu_emu.errors import ConfigError

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
