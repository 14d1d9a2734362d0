"""AUTO: OpenVINO's priority list with fallback, never a silent alias of one device."""

from __future__ import annotations

import numpy as np
import openvino as real_ov
import pytest
from openvino import opset13 as ops

import ov_npu_emu as ov
from ov_npu_emu.errors import CompileError, ConfigError, DeviceNotFoundError
from ov_npu_emu.testing import make_add_model


@pytest.fixture(scope="module")
def core() -> ov.Core:
    return ov.Core()


def _dynamic_model() -> real_ov.Model:
    """Dynamic shapes: the CPU plugin compiles it, the emulated NPU refuses (static only)."""
    x = ops.parameter(real_ov.PartialShape([1, -1]), real_ov.Type.f32, name="x")
    return real_ov.Model([ops.relu(x)], [x], "dyn")


def test_auto_without_a_list_uses_cpu_like_openvino(core: ov.Core) -> None:
    # OpenVINO keeps NPU out of AUTO's default candidates: it must be listed explicitly
    assert core.auto_candidates("AUTO") == ["CPU"]
    assert core.auto_candidates(None) == ["CPU"]
    cm = core.compile_model(make_add_model(), "AUTO")
    assert cm.get_property("EXECUTION_DEVICES") == ["CPU"]


def test_listed_devices_are_tried_in_order_with_fallback(core: ov.Core) -> None:
    cm = core.compile_model(make_add_model(), "AUTO:NPU,CPU")
    assert cm.get_property("EXECUTION_DEVICES") == ["NPU"]
    cm = core.compile_model(_dynamic_model(), "AUTO:NPU,CPU")  # NPU refuses: falls back
    assert cm.get_property("EXECUTION_DEVICES") == ["CPU"]
    out = cm.create_infer_request().infer({"x": np.array([[-1.0, 2.0, -3.0]], np.float32)})[0]
    np.testing.assert_array_equal(out, [[0.0, 2.0, 0.0]])
    cm = core.compile_model(make_add_model(), "AUTO", {"MULTI_DEVICE_PRIORITIES": "NPU"})
    assert cm.get_property("EXECUTION_DEVICES") == ["NPU"]


def test_every_candidate_failing_names_each_reason(core: ov.Core) -> None:
    with pytest.raises(CompileError, match=r"AUTO could not compile the model on any of \['NPU'\]:\n  NPU: "):
        core.compile_model(_dynamic_model(), "AUTO:NPU")


def test_auto_import_tries_the_listed_devices(core: ov.Core) -> None:
    blob = core.compile_model(make_add_model(), "NPU").export_model().getvalue()
    assert core.import_model(blob, "AUTO:CPU,NPU").get_property("EXECUTION_DEVICES") == ["NPU"]


def test_unknown_candidates_and_auto_properties_are_typed(core: ov.Core) -> None:
    with pytest.raises(DeviceNotFoundError):
        core.compile_model(make_add_model(), "AUTO:NPX")
    with pytest.raises(ConfigError, match="no properties of its own"):
        core.get_property("AUTO", "SUPPORTED_PROPERTIES")
