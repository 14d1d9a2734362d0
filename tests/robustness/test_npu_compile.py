"""Emulated NPU compile: dynamic shapes, unsupported ops and types, degenerate and huge models."""

from __future__ import annotations

import numpy as np
import openvino as ov_real
import pytest
from openvino import opset13 as ops

import ov_npu_emu as ov
from ov_npu_emu.errors import DynamicShapeError, MemoryPlanError, UnsupportedOpError, UserInputError

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def core() -> ov.Core:
    return ov.Core()


def _relu(shape: list[int], et: object = np.float32) -> ov_real.Model:
    p = ops.parameter(shape, et, name="x")
    return ov_real.Model([ops.relu(p)], [p], "relu")


def test_dynamic_shape_names_the_input(core: ov.Core) -> None:
    with pytest.raises(DynamicShapeError, match="'x'.*reshape") as ei:
        core.compile_model(_relu([-1, 3]), "NPU")
    assert ei.value.input_name == "x"


def test_data_dependent_shape_op_is_typed(core: ov.Core) -> None:
    p = ops.parameter([4], np.float32, name="x")
    with pytest.raises(UnsupportedOpError, match="NonZero.*static shapes only") as ei:
        core.compile_model(ov_real.Model([ops.non_zero(p)], [p], "nz"), "NPU")
    assert ei.value.op_type == "NonZero"


def test_unsupported_op_names_type_and_node(core: ov.Core) -> None:
    p = ops.parameter([1, 8], np.float32, name="x")
    node = ops.dft(ops.reshape(p, [1, 4, 2], False), ops.constant(np.array([1], np.int64)))
    node.set_friendly_name("my_dft")
    with pytest.raises(UnsupportedOpError) as ei:
        core.compile_model(ov_real.Model([node], [p], "dft"), "NPU")
    assert ei.value.op_type == "DFT" and ei.value.node_name == "my_dft"


@pytest.mark.parametrize("et", [ov_real.Type.string, ov_real.Type.u4, ov_real.Type.f8e4m3],
                         ids=["string", "u4", "f8e4m3"])
def test_unsupported_input_element_type_is_rejected_at_compile(core: ov.Core, et: ov_real.Type) -> None:
    p = ops.parameter([2, 3], et, name="x")
    body = ops.result(p) if et == ov_real.Type.string else ops.convert(p, "f32")
    with pytest.raises(UnsupportedOpError, match="'x'.*element type"):
        core.compile_model(ov_real.Model([body], [p], "t"), "NPU")


@pytest.mark.parametrize("shape", [[1, 1 << 16, 1 << 16], [1 << 20, 1 << 20]], ids=["16GiB", "4TiB"])
def test_huge_static_shape_is_a_typed_error_not_an_allocation(core: ov.Core, shape: list[int]) -> None:
    with pytest.raises(MemoryPlanError, match="device memory"):
        core.compile_model(_relu(shape), "NPU")


def test_huge_intermediate_is_a_typed_error(core: ov.Core) -> None:
    p = ops.parameter([1, 1], np.float32, name="x")
    big = ops.broadcast(p, ops.constant(np.array([1 << 16, 1 << 16], np.int64)))
    m = ov_real.Model([ops.reduce_sum(big, ops.constant(np.array([0, 1], np.int64)), True)], [p], "b")
    with pytest.raises(MemoryPlanError, match="device memory"):
        core.compile_model(m, "NPU")


def test_empty_model_and_model_without_outputs_run_like_cpu(core: ov.Core) -> None:
    # the real CPU plugin compiles and runs both; so must the NPU (and not hang on zero tasks)
    p = ops.parameter([2], np.float32, name="x")
    for m in (ov_real.Model([], [], "empty"), ov_real.Model([], [p], "no_outputs")):
        req = core.compile_model(m, "NPU").create_infer_request()
        assert len(req.infer({"x": np.ones(2, np.float32)} if m.inputs else None)) == 0


def test_bad_config_values(core: ov.Core) -> None:
    with pytest.raises(UserInputError, match="INFERENCE_PRECISION_HINT"):
        core.compile_model(_relu([2]), "NPU", {"INFERENCE_PRECISION_HINT": "int3"})
    with pytest.raises(UserInputError, match="NPU_EMU_CMX_SIZE"):
        core.compile_model(_relu([2]), "NPU", {"NPU_EMU_CMX_SIZE": "lots"})
    with pytest.raises(UserInputError):
        core.compile_model(_relu([2]), "NPU", ["not", "a", "dict"])
