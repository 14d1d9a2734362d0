"""Facade misuse: bad tensors, unknown names, async errors; requests stay usable after errors."""

from __future__ import annotations

import numpy as np
import openvino as ov_real
import pytest

import ov_npu_emu as ov
from ov_npu_emu.errors import ConfigError, ExecutionError, UserInputError
from ov_npu_emu.testing import make_add_model

pytestmark = pytest.mark.filterwarnings("ignore")

GOOD = {"a": np.ones((2, 3), np.float32), "b": np.full((2, 3), 2.0, np.float32)}


@pytest.fixture(scope="module", params=["NPU", "CPU"])
def compiled(request: pytest.FixtureRequest) -> ov.CompiledModel:
    return ov.Core().compile_model(make_add_model(), request.param)


def _works(req: ov.InferRequest) -> None:
    """The request still computes the right answer after an error."""
    out = req.infer(GOOD)
    np.testing.assert_array_equal(out[0], np.full((2, 3), 3.0, np.float32))


@pytest.mark.parametrize("bad", [
    {"a": np.array([["x", "y", "z"]] * 2), "b": GOOD["b"]},
    {"a": [[1.0, 2.0], [3.0]], "b": GOOD["b"]},
    {"a": np.array([[object()] * 3] * 2), "b": GOOD["b"]},
    {"a": np.zeros((3, 3), np.float32), "b": GOOD["b"]},
    {"a": None, "b": GOOD["b"]},
    {"zz": GOOD["a"]},
    [GOOD["a"]] * 3,
], ids=["strings", "ragged", "objects", "shape", "none", "unknown-name", "too-many"])
def test_bad_infer_inputs_are_typed_and_request_recovers(compiled: ov.CompiledModel, bad: object) -> None:
    req = compiled.create_infer_request()
    with pytest.raises(UserInputError):
        req.infer(bad)
    _works(req)


def test_set_tensor_misuse(compiled: ov.CompiledModel) -> None:
    req = compiled.create_infer_request()
    with pytest.raises(UserInputError, match="openvino.Tensor"):
        req.set_tensor("a", np.zeros((2, 3), np.float32))
    with pytest.raises(UserInputError, match="element type"):
        req.set_tensor("a", ov_real.Tensor(np.zeros((2, 3), np.int32)))
    with pytest.raises(UserInputError, match="expects shape"):
        req.set_tensor("a", ov_real.Tensor(np.zeros((3, 3), np.float32)))
    with pytest.raises(UserInputError, match="^Output 'res' expects shape"):
        req.set_output_tensor(0, ov_real.Tensor(np.zeros((5,), np.float32)))
    with pytest.raises(UserInputError):
        req.get_tensor(1.5)
    _works(req)


def test_dynamic_port_checks_rank_and_type() -> None:
    from openvino import opset13 as ops

    p = ops.parameter([-1, 3], np.float32, name="x")
    cm = ov.Core().compile_model(ov_real.Model([ops.relu(p)], [p], "dyn"), "CPU")
    req = cm.create_infer_request()
    with pytest.raises(UserInputError, match="expects shape"):
        req.set_tensor("x", ov_real.Tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(UserInputError, match="expects shape"):
        req.infer({"x": np.zeros((2, 3, 1), np.float32)})
    with pytest.raises(UserInputError, match="element type"):
        req.set_tensor("x", ov_real.Tensor(np.zeros((2, 3), np.float16)))
    np.testing.assert_array_equal(req.infer({"x": -np.ones((5, 3), np.float32)})[0], np.zeros((5, 3)))


def test_async_error_surfaces_in_wait_and_request_recovers(compiled: ov.CompiledModel) -> None:
    req = compiled.create_infer_request()
    # a device failure during the job (not at feed time) must come out of wait() typed
    orig = req.impl.infer
    req.impl.infer = lambda: (_ for _ in ()).throw(IndexError("device bug"))  # type: ignore[method-assign]
    req.start_async(GOOD)
    with pytest.raises(ExecutionError, match="^inference failed: device bug$") as e:
        req.wait()
    assert isinstance(e.value.__cause__, IndexError)
    req.impl.infer = orig  # type: ignore[method-assign]
    _works(req)
    req.start_async(GOOD)
    req.wait()
    np.testing.assert_array_equal(req.get_output_tensor(0).data, np.full((2, 3), 3.0))


def test_core_read_model_misuse() -> None:
    from ov_npu_emu.errors import IRReadError

    core = ov.Core()
    with pytest.raises(IRReadError):
        core.read_model(b"\xff\xfe<net>")
    with pytest.raises(IRReadError):
        core.read_model(b"<net>")
    for bad in (5, None):  # the real's words: its str() is no path
        with pytest.raises(UserInputError, match=f"Path: '{bad}' does not exist. Please provide valid model's path"):
            core.compile_model(bad, "NPU")


def test_bad_device_property_is_rejected_at_set_property_and_leaves_device_usable() -> None:
    core = ov.Core()
    for props in ({"NPU_EMU_CMX_SIZE": "x"}, {"INFERENCE_PRECISION_HINT": "int3"},
                  {"NPU_EMU_QUEUE_MODE": "sideways"}, {"NPU_EMU_FENCE_MODE": "psychic"}):
        with pytest.raises(ConfigError) as e:
            core.set_property("NPU", props)
        assert e.value.key == next(iter(props)) and next(iter(props)) in str(e.value)
    out = core.compile_model(make_add_model(), "NPU").create_infer_request().infer(GOOD)
    np.testing.assert_array_equal(out[0], np.full((2, 3), 3.0, np.float32))


def test_import_model_from_text_stream_is_user_input_error(tmp_path) -> None:  # noqa: ANN001
    import io

    core = ov.Core()
    for dev in ("NPU", "CPU"):
        with pytest.raises(UserInputError, match="binary stream"):
            core.import_model(io.StringIO("abc"), dev)
        with pytest.raises(UserInputError):
            core.import_model([1, 2], dev)


@pytest.mark.parametrize("device", ["NPU", "CPU"])
def test_variable_state_rejects_bad_values_and_keeps_the_old_one(device: str) -> None:
    from ov_npu_emu.testing import make_model_with_memory

    req = ov.Core().compile_model(make_model_with_memory((1, 4), np.float32, "v"), device).create_infer_request()
    (state,) = req.query_state()
    state.state = ov_real.Tensor(np.full((1, 4), 5.0, np.float32))
    for bad in (ov_real.Tensor(np.array([["a", "b", "c", "d"]])), ov_real.Tensor(np.ones((2, 4), np.float32)),
                np.ones((1, 4), np.float32), None):
        with pytest.raises(UserInputError):
            state.state = bad
    np.testing.assert_array_equal(req.infer({"input_data": np.ones((1, 4), np.float32)})[0], np.full((1, 4), 6.0))
