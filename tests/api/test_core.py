"""Core facade: devices, names, errors, and differential runs against openvino itself."""

from __future__ import annotations

import io

import numpy as np
import openvino as real_ov
import pytest
from openvino import opset13 as ops

import ov_npu_emu as ov
from ov_npu_emu.errors import ConfigError, DeviceNotFoundError, IRReadError, NpuEmuError, UserInputError
from ov_npu_emu.registry import canonical_device_name


def _two_input_model() -> real_ov.Model:
    a = ops.parameter([2, 3], np.float32, name="a")
    b = ops.parameter([2, 3], np.float32, name="b")
    out = ops.relu(ops.add(ops.multiply(a, b), ops.constant(np.float32(0.5))))
    out.output(0).get_tensor().set_names({"out"})
    return real_ov.Model([out], [a, b], "two_inputs")


def test_available_devices_lists_cpu(core):
    assert "CPU" in core.available_devices
    assert core.get_available_devices() == core.available_devices


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("cpu", "CPU"), ("CPU.0", "CPU"), (" npu ", "NPU"), ("NPU.1", "NPU.1"), ("GPU", "GPU")],
    ids=["lower", "dot-zero", "spaces", "second-device", "plain"],
)
def test_canonical_device_names(name, canonical):
    assert canonical_device_name(name) == canonical


def test_unknown_device_suggests_a_name(core):
    with pytest.raises(DeviceNotFoundError) as ei:
        core.compile_model(_two_input_model(), "CPX")
    assert "did you mean 'CPU'" in str(ei.value)
    assert isinstance(ei.value, NpuEmuError) and isinstance(ei.value, KeyError)


def test_stateless_model_matches_openvino(core):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    ours = core.compile_model(_two_input_model(), "CPU")
    ref = real_ov.Core().compile_model(_two_input_model(), "CPU")
    expected = ref({"a": a, "b": b})[0]
    # every way openvino accepts inputs: dict by name, by index, by port, list, request API
    np.testing.assert_array_equal(ours({"a": a, "b": b})["out"], expected)
    np.testing.assert_array_equal(ours({0: a, 1: b})[0], expected)
    np.testing.assert_array_equal(ours({ours.input("a"): a, ours.input(1): b})[ours.output()], expected)
    np.testing.assert_array_equal(ours([a, b])[0], expected)
    req = ours.create_infer_request()
    req.set_tensor("a", real_ov.Tensor(a))
    req.set_input_tensor(1, real_ov.Tensor(b))
    req.infer()
    np.testing.assert_array_equal(req.get_output_tensor().data, expected)
    np.testing.assert_array_equal(req.get_tensor("out").data, expected)
    np.testing.assert_array_equal(req.results["out"], expected)
    # float64 input is converted like openvino does
    np.testing.assert_allclose(ours({"a": a.astype(np.float64), "b": b})[0], expected)


def test_async_and_callback(core):
    cm = core.compile_model(_two_input_model(), "CPU")
    req = cm.create_infer_request()
    seen = []
    req.set_callback(lambda data: seen.append(data), "done")
    req.start_async({"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), np.float32)})
    req.wait()
    assert seen == ["done"]
    np.testing.assert_array_equal(req.get_output_tensor().data, np.full((2, 3), 1.5, np.float32))


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"a": np.ones((3, 3), np.float32), "b": np.ones((2, 3), np.float32)}, "expects shape"),
        ({"zz": np.ones((2, 3), np.float32)}, "was not found"),
        ({7: np.ones((2, 3), np.float32)}, "out of range"),
        (np.ones((2, 3), np.float32), "has 2 inputs"),
    ],
    ids=["wrong-shape", "unknown-name", "bad-index", "single-value-for-two-inputs"],
)
def test_bad_inputs_raise_typed_errors(core, inputs, match):
    cm = core.compile_model(_two_input_model(), "CPU")
    with pytest.raises(UserInputError, match=match):
        cm(inputs)


def test_set_tensor_type_mismatch(core):
    req = core.compile_model(_two_input_model(), "CPU").create_infer_request()
    with pytest.raises(UserInputError, match="element type"):
        req.set_tensor("a", real_ov.Tensor(np.ones((2, 3), np.int32)))


def test_export_import_roundtrip_and_foreign_blob(core):
    cm = core.compile_model(_two_input_model(), "CPU")
    stream = cm.export_model()
    assert isinstance(stream, io.BytesIO)
    again = core.import_model(stream, "CPU")
    a = np.full((2, 3), 2, np.float32)
    np.testing.assert_array_equal(again({"a": a, "b": a})[0], cm({"a": a, "b": a})[0])
    buf = io.BytesIO()
    cm.export_model(buf)
    assert buf.getvalue() == stream.getvalue()
    with pytest.raises(NpuEmuError, match="bad magic"):
        core.import_model(b"not a blob at all", "CPU")


def test_read_model_errors(core, tmp_path):
    with pytest.raises(IRReadError, match="does not exist"):
        core.read_model(tmp_path / "missing.xml")
    bad = tmp_path / "bad.xml"
    bad.write_text("<net><broken")
    with pytest.raises(IRReadError):
        core.read_model(bad)


def test_read_model_from_path_and_compile(core, tmp_path):
    real_ov.save_model(_two_input_model(), tmp_path / "m.xml", compress_to_fp16=False)
    cm = core.compile_model(str(tmp_path / "m.xml"), "CPU")
    assert [p.any_name for p in cm.inputs] == ["a", "b"]
    assert cm.outputs[0].get_shape() == real_ov.Shape([2, 3])
    assert cm.outputs[0].get_element_type() == ov.Type.f32


def test_properties_and_versions(core):
    # the passthrough is the real CPU plugin: its device name and its keys first, in its order
    real_core = real_ov.Core()
    assert core.get_property("CPU", "FULL_DEVICE_NAME") == real_core.get_property("CPU", "FULL_DEVICE_NAME")
    real_keys = list(real_core.get_property("CPU", "SUPPORTED_PROPERTIES"))
    assert list(core.get_property("CPU", "SUPPORTED_PROPERTIES"))[: len(real_keys)] == real_keys
    assert "CPU" in core.get_versions("CPU")
    core.set_property("CPU", {"PERFORMANCE_HINT": "LATENCY"})
    assert core.get_property("CPU", "PERFORMANCE_HINT") == "LATENCY"
    with pytest.raises(RuntimeError) as real_err:
        real_core.get_property("CPU", "NO_SUCH_PROPERTY_XYZ")
    want = str(real_err.value).strip().splitlines()[-1]
    assert want == "Cannot get unsupported property: NO_SUCH_PROPERTY_XYZ"
    with pytest.raises(ConfigError) as e:
        core.get_property("CPU", "NO_SUCH_PROPERTY_XYZ")
    assert str(e.value) == want and e.value.key == "NO_SUCH_PROPERTY_XYZ"


def test_dynamic_port_shape_access(core):
    p = ops.parameter([-1, 4], np.float32, name="x")
    cm = core.compile_model(real_ov.Model([ops.relu(p)], [p], "dyn"), "CPU")
    with pytest.raises(UserInputError, match="dynamic shape"):
        _ = cm.input(0).shape
    out = cm({"x": -np.ones((5, 4), np.float32)})[0]
    assert out.shape == (5, 4)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_openvino_property_objects_are_accepted_as_the_real_accepts_them(core, device):
    """``props.*`` names as keys, ``ov.Type`` and enum values: the real Core takes them; ours too,
    on every device, and what a device keeps (a compiled model's config) is plain strings."""
    import openvino.properties as props
    import openvino.properties.hint as hints

    config = {hints.inference_precision: real_ov.Type.f32, hints.performance_mode: hints.PerformanceMode.LATENCY}
    real = real_ov.Core().compile_model(_two_input_model(), "CPU", config)
    assert real.get_property("PERFORMANCE_HINT") == "LATENCY"
    ours = core.compile_model(_two_input_model(), device, config)
    a = np.full((2, 3), 3, np.float32)
    np.testing.assert_array_equal(ours({"a": a, "b": a})[0], real({"a": a, "b": a})[0])
    again = core.import_model(ours.export_model(), device, {props.cache_mode: props.CacheMode.OPTIMIZE_SPEED})
    np.testing.assert_array_equal(again({"a": a, "b": a})[0], real({"a": a, "b": a})[0])
    core.set_property(device, {hints.performance_mode: hints.PerformanceMode.THROUGHPUT})
    with pytest.raises(UserInputError, match="property names are strings"):
        core.compile_model(_two_input_model(), device, {3: "x"})


def test_plain_properties_turns_openvino_objects_into_their_names():
    import openvino.properties as props
    import openvino.properties.hint as hints

    from ov_npu_emu.api.properties import plain_properties

    plain = plain_properties({hints.inference_precision: real_ov.Type.f16,
                              props.cache_mode: props.CacheMode.OPTIMIZE_SIZE,
                              "NPUW_LLM_PREFILL_CONFIG": {"INFERENCE_PRECISION_HINT": real_ov.Type.f32},
                              "MODEL_PTR": _two_input_model()})
    assert plain["INFERENCE_PRECISION_HINT"] == "f16" and type(next(iter(plain))) is str
    assert plain["CACHE_MODE"] == "OPTIMIZE_SIZE"
    assert plain["NPUW_LLM_PREFILL_CONFIG"] == {"INFERENCE_PRECISION_HINT": "f32"}
    assert isinstance(plain["MODEL_PTR"], real_ov.Model)


@pytest.mark.oracle
@pytest.mark.parametrize("device", ["NPU", "CPU"])
def test_read_only_properties_are_refused_as_the_real_cpu_refuses_them(device: str) -> None:
    """openvino's CPU plugin refuses a key its SUPPORTED_PROPERTIES lists "RO" in set_property and
    in compile_model's config: "Unsupported property <key> by CPU plugin." (measured). Every device
    of ours does the same for its own "RO" keys, and still takes its "RW" ones."""
    import openvino as real

    from ov_npu_emu.errors import ConfigError
    from ov_npu_emu.testing import make_add_model

    rcore = real.Core()
    real_ro = {k for k, v in rcore.get_property("CPU", "SUPPORTED_PROPERTIES").items() if v == "RO"}
    for key in ("FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE", "OPTIMIZATION_CAPABILITIES", "SUPPORTED_PROPERTIES"):
        assert key in real_ro
        with pytest.raises(RuntimeError, match=f"Unsupported property {key} by CPU plugin"):
            rcore.set_property("CPU", {key: "x"})
    core = ov.Core()
    ours = core.get_property(device, "SUPPORTED_PROPERTIES")
    read_only = sorted(k for k, v in ours.items() if v == "RO")
    assert {"FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE", "OPTIMIZATION_CAPABILITIES"} <= set(read_only)
    readable = [k for k in read_only if k != "COMPATIBILITY_CHECK"]  # the real's binding cannot read it either
    before = {k: core.get_property(device, k) for k in readable}
    for key in read_only:
        with pytest.raises(ConfigError, match=f"^Unsupported property {key} by {device} plugin\\.") as e:
            core.set_property(device, {key: "x"})
        assert e.value.key == key
        with pytest.raises(ConfigError, match=f"^Unsupported property {key} by {device} plugin\\."):
            core.compile_model(make_add_model(), device, {key: "x"})
    assert {k: core.get_property(device, k) for k in readable} == before
    core.set_property(device, {"PERF_COUNT": True})
    assert core.get_property(device, "PERF_COUNT") in (True, "YES")
