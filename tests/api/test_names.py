"""``import ov_npu_emu as ov`` has every public name of the installed openvino: device-bound names
ours, the rest openvino's own objects, and their submodules import through ov_npu_emu too."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import openvino
import pytest

import ov_npu_emu
from ov_npu_emu.errors import DeviceNotFoundError, UnsupportedFeatureError
from tools.ov_api_coverage import DOC, MARK_BEGIN, MARK_END, coverage_rows

OURS = {"AsyncInferQueue", "CompiledModel", "ConstOutput", "Core", "InferRequest", "ProfilingInfo", "Version",
        "compile_model"}


def test_every_public_name_of_openvino_is_present():
    rows = coverage_rows(openvino, ov_npu_emu)
    assert rows and not [name for name, status in rows if status == "MISSING"]
    assert {name for name, status in rows if status == "ours"} == OURS


def test_the_doc_table_is_up_to_date():
    """In a fresh process: importing a submodule (openvino.passes, say) adds it to openvino's names."""
    doc = Path(DOC).read_text(encoding="utf-8")
    table = doc.split(MARK_BEGIN, 1)[1].split(MARK_END, 1)[0].strip()
    fresh = subprocess.run([sys.executable, str(Path(DOC).parents[1] / "tools" / "ov_api_coverage.py")],
                           capture_output=True, text=True, check=True).stdout
    assert table == fresh.strip(), "run: python tools/ov_api_coverage.py --write"


@pytest.mark.parametrize("name", ["preprocess", "properties.hint", "utils.types", "opset8", "layout_helpers",
                                  "op", "frontend", "passes"])
def test_submodules_import_through_ov_npu_emu_as_openvino_s_own(name):
    ours = importlib.import_module(f"ov_npu_emu.{name}")
    real = openvino
    for part in name.split("."):
        real = getattr(real, part)
    assert ours is real


def test_a_name_openvino_lacks_is_still_an_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ov_npu_emu.properties.no_such_module")
    with pytest.raises(AttributeError):
        ov_npu_emu.no_such_name  # noqa: B018


def test_core_methods_beyond_compiling(tmp_path):
    core = ov_npu_emu.Core()
    ops = openvino.opset13
    x = ops.parameter([1, 4], openvino.Type.f32, name="x")
    model = openvino.Model([ops.relu(ops.multiply(x, ops.constant(2.0, openvino.Type.f32)))], [x], "m")
    assert core.query_model(model, "CPU") == openvino.Core().query_model(model, "CPU")
    assert set(core.query_model(model, "NPU").values()) == {"NPU"}
    assert set(core.query_model(model, "NPU")) == {op.get_friendly_name() for op in model.get_ops()}
    core.set_property("CPU", {"PERFORMANCE_HINT": "THROUGHPUT"})
    assert core.get_property("CPU", "PERFORMANCE_HINT") == "THROUGHPUT"
    core.unload_plugin("CPU")  # a fresh device: the default again
    assert core.get_property("CPU", "PERFORMANCE_HINT") == openvino.Core().get_property("CPU", "PERFORMANCE_HINT")
    assert core.get_property("CPU", "PERFORMANCE_HINT") != "THROUGHPUT"
    with pytest.raises(DeviceNotFoundError):
        core.unload_plugin("GPU")
    with pytest.raises(UnsupportedFeatureError, match="entry-point"):
        core.register_plugin("libfoo.so", "FOO")
    with pytest.raises(UnsupportedFeatureError, match="remote contexts"):
        core.get_default_context("NPU")


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_every_supported_property_answers_as_hello_query_device_reads_it(device):
    """OpenVINO's hello_query_device reads every SUPPORTED_PROPERTIES key (a TypeError is its
    'UNSUPPORTED TYPE'); the CPU passthrough lists the real CPU plugin's keys too."""
    core = ov_npu_emu.Core()
    keys = list(core.get_property(device, "SUPPORTED_PROPERTIES"))
    unreadable = []
    for key in keys:
        try:
            core.get_property(device, key)
        except TypeError:
            pass  # the real's COMPATIBILITY_CHECK on CPU: the sample prints UNSUPPORTED TYPE
        except Exception:  # noqa: BLE001 - the test lists them
            unreadable.append(key)
    assert not unreadable
    if device == "CPU":
        assert set(openvino.Core().get_property("CPU", "SUPPORTED_PROPERTIES")) <= set(keys)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_supported_properties_are_a_dict_of_mutability_as_openvino_answers(device):
    """openvino's Python API answers SUPPORTED_PROPERTIES with {name: "RO"/"RW"} for a device and
    a compiled model (where all are "RO"); the CPU passthrough agrees with the real CPU plugin."""
    core = ov_npu_emu.Core()
    listed = core.get_property(device, "SUPPORTED_PROPERTIES")
    assert isinstance(listed, dict) and {"RO", "RW"} <= set(listed.values()) <= {"RO", "RW", "WO"}
    assert listed["SUPPORTED_PROPERTIES"] == listed["FULL_DEVICE_NAME"] == "RO"
    assert listed["PERFORMANCE_HINT"] == "RW"
    if device == "CPU":
        real = openvino.Core().get_property("CPU", "SUPPORTED_PROPERTIES")
        assert {k: listed[k] for k in real} == dict(real)
    ops = openvino.opset13
    x = ops.parameter([1, 8], openvino.Type.f32, name="x")
    model = openvino.Model([ops.relu(x)], [x], "relu")
    compiled = core.compile_model(model, device).get_property("SUPPORTED_PROPERTIES")
    assert isinstance(compiled, dict) and set(compiled.values()) == {"RO"} and "SUPPORTED_PROPERTIES" in compiled


@pytest.mark.parametrize(("config", "optimal"), [
    ({}, 1),
    ({"PERFORMANCE_HINT": "THROUGHPUT"}, 8),
    ({"PERFORMANCE_HINT": "THROUGHPUT", "NPU_EMU_PLATFORM": "NPU3720"}, 4),
])
def test_the_npu_s_optimal_number_of_requests_follows_the_hint_as_the_real(config, optimal):
    """The real NPU plugin: 1, or under THROUGHPUT 4 on NPU3720 and 8 on later generations."""
    ops = openvino.opset13
    x = ops.parameter([1, 4], openvino.Type.f32, name="x")
    compiled = ov_npu_emu.Core().compile_model(openvino.Model([ops.relu(x)], [x], "m"), "NPU", config)
    assert compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS") == optimal
    assert len(ov_npu_emu.AsyncInferQueue(compiled)) == optimal
    assert compiled.get_property("PERFORMANCE_HINT") == config.get("PERFORMANCE_HINT", "LATENCY")
    assert compiled.get_property("EXECUTION_DEVICES") == ["NPU"]
