"""What OpenVINO's own Python API tests (tools/ov_api_tests.py) check of a compiled model and an
infer request, on ours ("CPU": the passthrough, "NPU": the emulator) next to the real openvino."""

from __future__ import annotations

import io

import numpy as np
import openvino as real_ov
import openvino.opset13 as ops
import pytest

import ov_npu_emu as ov
from ov_npu_emu.errors import UserInputError, UserTypeError

DEVICES = ["CPU", "NPU"]


def _relu_model():
    param = ops.parameter([1, 3, 4, 4], np.float32, name="data")
    return real_ov.Model([ops.relu(param, name="relu")], [param], "test_model")


@pytest.fixture(params=DEVICES)
def compiled(request):
    return ov.Core().compile_model(_relu_model(), request.param)


def test_ports_are_const_outputs(compiled):
    real = real_ov.Core().compile_model(_relu_model(), "CPU")
    for port, real_port in ((compiled.input(0), real.input(0)), (compiled.output(), real.output())):
        assert isinstance(port, ov.ConstOutput)
        assert isinstance(real_port, ov.ConstOutput)  # openvino's own ports pass the check too
        assert port.__doc__ == real_port.__doc__ == "openvino.ConstOutput represents port/node output."
    assert all(isinstance(p, ov.ConstOutput) for p in compiled.inputs + compiled.outputs)


def test_port_get_node(compiled):
    node = compiled.input("data").get_node()
    assert node is compiled.input("data").get_node() or node.friendly_name == "data"
    assert node.get_type_name() == "Parameter" and node.friendly_name == "data"
    assert node.get_output_partial_shape(0) == real_ov.PartialShape([1, 3, 4, 4])
    node.set_friendly_name("input_1")
    assert node.friendly_name == "input_1"
    out = compiled.output(0).get_node()
    assert out.get_type_name() == "Result"
    assert compiled.output(0).node.get_type_name() == "Result"


def test_unknown_port_name_message(compiled):
    real = real_ov.Core().compile_model(_relu_model(), "CPU")
    with pytest.raises(RuntimeError) as r:
        real.infer_new_request({"_data_": np.zeros((1, 3, 4, 4), np.float32)})
    with pytest.raises(UserInputError) as e:
        compiled.infer_new_request({"_data_": np.zeros((1, 3, 4, 4), np.float32)})
    # the real's words ("Port for tensor name _data_ was not found", a "Check") and the names to use
    assert "Port for tensor name _data_ was not found" in str(r.value) and "Check" in str(r.value)
    assert "Port for tensor name _data_ was not found" in str(e.value) and "Check" in str(e.value)
    assert "['data']" in str(e.value)


def test_float_key_is_a_type_error(compiled):
    real = real_ov.Core().compile_model(_relu_model(), "CPU")
    x = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(TypeError, match="Incompatible key type for input: 0.0"):
        real.infer_new_request({0.0: x})
    with pytest.raises(UserTypeError, match="Incompatible key type for input: 0.0"):
        compiled.infer_new_request({0.0: x})


@pytest.mark.parametrize("device", DEVICES)
def test_compile_model_from_xml_text_and_weights(tmp_path, device):
    real_ov.serialize(_relu_model(), str(tmp_path / "m.xml"), str(tmp_path / "m.bin"))
    xml, weights = (tmp_path / "m.xml").read_text(), (tmp_path / "m.bin").read_bytes()
    # exact: the emulated NPU in its f32 mode (its default, f16, rounds the activations)
    config = {"INFERENCE_PRECISION_HINT": "f32"} if device == "NPU" else None
    compiled = ov.Core().compile_model(model=xml, weights=weights, device_name=device, config=config)
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(compiled({"data": x})[0], np.maximum(x, 0))


@pytest.mark.parametrize("share_inputs", [True, False])
def test_bf16_input_from_a_float16_array(share_inputs):
    """A numpy array whose dtype is the port type's container (f16 for bf16) is converted, not
    shared as a tensor of another type, as by the real (bf16 inputs: the CPU passthrough's)."""
    device = "CPU"
    params = [ops.parameter([5], real_ov.Type.bf16), ops.parameter([5], real_ov.Type.bf16)]
    model = real_ov.Model(ops.concat(params, 0), params)
    outs = []
    for core in (real_ov.Core(), ov.Core()):
        req = core.compile_model(model, device).create_infer_request()
        t = real_ov.Tensor(real_ov.Type.bf16, [5])
        t.data[:] = np.array([6, 7, 8, 9, 0])
        req.start_async([t, np.array([1, 2, 3, 4, 5], np.float16)], share_inputs=share_inputs)
        req.wait()
        outs.append(np.array(req.output_tensors[0].data))
    np.testing.assert_array_equal(outs[1], outs[0])


def test_npu_runtime_model():
    compiled = ov.Core().compile_model(_relu_model(), "NPU")
    rt = compiled.get_runtime_model()
    assert isinstance(rt, real_ov.Model)
    assert rt.get_friendly_name() == "test_model"
    assert [p.get_any_name() for p in rt.inputs] == ["data"]
    assert rt.outputs[0].get_partial_shape() == real_ov.PartialShape([1, 3, 4, 4])
    assert any(":Relu" in t for t in rt.get_rt_info("npu_tasks").value)


def test_pybind_module_is_lent():
    """openvino._pyopenvino (named in annotations of code written for openvino) is openvino's."""
    assert ov._pyopenvino is real_ov._pyopenvino


def test_export_to_a_stream(compiled):
    stream = io.BytesIO()
    compiled.export_model(stream)
    assert stream.getbuffer().nbytes > 0


# -- Core.read_model / compile_model as openvino's test_core.py calls them ----------------------


@pytest.fixture
def relu_ir(tmp_path):
    xml, bin_ = tmp_path / "relu.xml", tmp_path / "relu.bin"
    real_ov.serialize(_relu_model(), str(xml), str(bin_))
    return xml, bin_


def test_read_model_xml_in_memory(relu_ir):
    xml, bin_ = relu_ir
    core = ov.Core()
    for model, weights in ((io.BytesIO(xml.read_bytes()), io.BytesIO(bin_.read_bytes())),
                           (xml.read_text(), real_ov.tensor_from_file(str(bin_))),
                           (xml.read_bytes(), bin_.read_bytes())):
        m = core.read_model(model=model, weights=weights)
        assert isinstance(m, real_ov.Model) and m.get_friendly_name() == "test_model"


def test_read_model_wrong_type_is_a_type_error():
    with pytest.raises(TypeError) as r:
        real_ov.Core().read_model(model=3, weights=3)
    with pytest.raises(UserTypeError) as e:
        ov.Core().read_model(model=3, weights=3)
    msg = "Provided python object type <class 'int'> isn't supported as 'model' argument."
    assert msg in str(r.value) and msg in str(e.value)


def test_compile_model_of_an_object_names_its_str_as_a_path():
    class NotAPath:
        def __str__(self):
            return "test class"

    msg = ("Path: 'test class' does not exist. Please provide valid model's path either as a string, bytes or "
           "pathlib.Path")
    with pytest.raises(RuntimeError, match=msg):
        real_ov.compile_model(NotAPath())
    with pytest.raises(UserInputError, match=msg):
        ov.compile_model(NotAPath())


def test_read_model_config_and_core_defaults(relu_ir, tmp_path):
    core, real = ov.Core(), real_ov.Core()
    for key in ("CACHE_DIR", "ENABLE_MMAP", "FORCE_TBB_TERMINATE"):
        assert core.get_property(key) == real.get_property(key)
    cache = tmp_path / "cache"
    m = core.read_model(str(relu_ir[0]), str(relu_ir[1]), config={"CACHE_DIR": str(cache)})
    assert isinstance(m, real_ov.Model)
    assert cache.is_dir()  # created, as the real's read_model does
    assert core.get_property("CACHE_DIR") == ""  # the call's config, not the core's


# -- InferRequest as openvino's test_sync_infer_request.py drives it ----------------------------


def _abs_model():
    param = ops.parameter([1, 4], np.float32, name="x")
    return real_ov.Model([ops.abs(param)], [param], "abs")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("share_outputs", [True, False])
@pytest.mark.parametrize("share_inputs", [True, False])
def test_compiled_model_call_shares_as_the_real(device, share_inputs, share_outputs):
    x = np.array([[-1, 2, 5, -3]], np.float32)
    got = []
    for compiled in (real_ov.Core().compile_model(_abs_model(), "CPU"), ov.Core().compile_model(_abs_model(), device)):
        res = compiled(x, share_inputs=share_inputs, share_outputs=share_outputs)
        req = compiled._infer_request
        got.append((np.shares_memory(req.get_input_tensor(0).data, x),
                    np.shares_memory(req.get_output_tensor(0).data, res[0]), bool(res[0].flags["OWNDATA"])))
        np.testing.assert_array_equal(res[0], np.abs(x))
    assert got[1] == got[0] == (share_inputs, share_outputs, not share_outputs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", [np.float32(1.0), np.frombuffer(b"\x01\x02\x03\x04", np.uint8)],
                         ids=["numpy_scalar", "read_only"])
def test_what_is_copied_even_with_share_inputs(device, value):
    """A numpy scalar and a read-only array are copied into the request, as by the real."""
    shape, dtype = (list(np.shape(value)), np.asarray(value).dtype)
    param = ops.parameter(shape, dtype, name="x")
    model = real_ov.Model([ops.convert(param, "f32")], [param], "m")
    for core, dev in ((real_ov.Core(), "CPU"), (ov.Core(), device)):
        req = core.compile_model(model, dev).create_infer_request()
        res = req.infer({0: value}, share_inputs=True)
        np.testing.assert_array_equal(res[0], np.asarray(value, np.float32))
        assert not np.shares_memory(np.asarray(value), req.get_input_tensor(0).data)


@pytest.mark.parametrize("device", DEVICES)
def test_incompatible_inputs_type(device):
    class NotAnInput:
        pass

    params = [ops.parameter([2], np.float32), ops.parameter([2], np.float32)]
    model = real_ov.Model([ops.add(*params)], params)
    with pytest.raises(TypeError, match="Incompatible inputs of type:"):
        real_ov.Core().compile_model(model, "CPU").create_infer_request().infer(NotAnInput())
    with pytest.raises(UserTypeError, match="Incompatible inputs of type:"):
        ov.Core().compile_model(model, device).create_infer_request().infer(NotAnInput())


@pytest.mark.parametrize("device", DEVICES)
def test_profiling_status(device):
    param = ops.parameter([1, 3, 4, 4], np.float32, name="data")
    model = real_ov.Model([ops.softmax(param, 1, name="fc_out")], [param], "m")
    core = ov.Core()
    core.set_property(device, {"PERF_COUNT": True})
    req = core.compile_model(model, device).create_infer_request()
    req.infer({"data": np.ones((1, 3, 4, 4), np.float32)})
    info = next(p for p in req.get_profiling_info() if p.node_type == "Softmax")
    assert info.status == ov.ProfilingInfo.Status.EXECUTED == "EXECUTED"
    assert str(info.status) == str(real_ov.ProfilingInfo.Status.EXECUTED) == "Status.EXECUTED"


# -- properties as openvino's test_properties.py sets them ---------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_set_property_with_one_property_pair(device):
    """``core.set_property(device, streams.num(AUTO))``: one (name, OVAny) pair, as the real takes."""
    import openvino.properties as props
    import openvino.properties.streams as streams

    core = ov.Core()
    core.set_property(device, streams.num(streams.Num.AUTO))
    assert isinstance(core.get_property(device, streams.num()), int)
    core.set_property(device, {"NUM_STREAMS": streams.Num(2)})
    assert core.get_property(device, "NUM_STREAMS") == 2
    core.set_property(props.enable_profiling(True))  # core-wide, one pair
    assert core.get_property(device, props.enable_profiling) is True


@pytest.mark.parametrize("device", DEVICES)
def test_batched_set_input_tensors(device):
    """set_input_tensors(list): the batch of the only input from one tensor per item, read at
    each inference (views of a larger buffer too), get_tensor on it refused, as by the real."""
    param = ops.parameter([4, 2, 2], np.float32, name="x")
    param.set_layout(real_ov.Layout("N..."))  # the real needs the batch axis named
    model = real_ov.Model([ops.add(param, ops.constant(np.float32(1)))], [param], "batched")
    outs = []
    for core, dev in ((real_ov.Core(), "CPU"), (ov.Core(), device)):
        req = core.compile_model(model, dev).create_infer_request()
        buffer = np.zeros((8, 2, 2), np.float32)
        tensors = [real_ov.Tensor(np.expand_dims(buffer[i * 2], 0), shared_memory=True) for i in range(4)]
        req.set_input_tensors(tensors)
        with pytest.raises(RuntimeError, match="get_tensor shall not be used together with batched"):
            req.get_tensor("x")
        got = []
        for step in range(2):
            for i, t in enumerate(tensors):
                t.data[:] = 10 * step + i
            req.infer()
            got.append(req.get_output_tensor(0).data.copy())
        outs.append(np.stack(got))
        req.set_input_tensor(real_ov.Tensor(np.ones((4, 2, 2), np.float32)))  # a whole tensor again
        assert req.get_tensor("x").shape == real_ov.Shape([4, 2, 2])
    np.testing.assert_array_equal(outs[1], outs[0])
    assert outs[0][1, 3, 0, 0] == 14.0


def test_a_real_const_output_selects_our_port(compiled):
    """A port of the real's compiled model (an openvino.ConstOutput) names our port by its
    tensor names, in a request and in the results."""
    real = real_ov.Core().compile_model(_relu_model(), "CPU")
    req = compiled.create_infer_request()
    x = np.ones((1, 3, 4, 4), np.float32)
    res = req.infer({real.input(0): x})
    np.testing.assert_array_equal(req.get_tensor(real.input(0)).data, x)
    np.testing.assert_array_equal(res[compiled.output(0)], x)
    assert compiled.input(0) != real.input(0)
    with pytest.raises(UserInputError, match="port of a compiled model"):
        ov.ConstOutput()


def test_cpu_properties_read_as_the_real_plugin():
    """What hello_query_device prints for CPU: every key of the real CPU plugin, in its order,
    with the real's values; then our own CPU_EMU_* keys."""
    real, ours = real_ov.Core(), ov.Core()
    real_keys = list(real.get_property("CPU", "SUPPORTED_PROPERTIES"))
    our_keys = list(ours.get_property("CPU", "SUPPORTED_PROPERTIES"))
    assert our_keys[: len(real_keys)] == real_keys
    assert all(k.startswith("CPU_EMU_") for k in our_keys[len(real_keys):])
    def read(core, key):
        try:
            return str(core.get_property("CPU", key))
        except TypeError:  # a value pybind cannot convert: the sample prints "UNSUPPORTED TYPE"
            return "UNSUPPORTED TYPE"

    for key in real_keys:
        if key != "SUPPORTED_PROPERTIES":
            assert read(ours, key) == read(real, key), key
