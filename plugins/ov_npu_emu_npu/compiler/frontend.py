"""Compiler front end: static-shape check, lambda lifting of ReadValue/Assign, OpenVINO passes."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino import passes

from ov_npu_emu.errors import CompileError, DynamicShapeError, MemoryPlanError, UnsupportedOpError
from ov_npu_emu_npu.blob.validate import DEVICE_MEMORY_LIMIT, ELEMENT_TYPES, tensor_bytes
from ov_npu_emu_npu.compiler.act_scale import scale_activations
from ov_npu_emu_npu.compiler.compress import CompressedWeight, detach_compressed_weights
from ov_npu_emu_npu.compiler.graph import dims

__all__ = ["LiftedVariable", "Prepared", "prepare"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class LiftedVariable:
    """A ReadValue/Assign pair turned into one extra input and one extra output."""

    variable_id: str  # the openvino variable id (the VariableState name)
    shape: tuple[int, ...]  # static shape
    element_type: ov.Type  # element type
    init: np.ndarray | None  # constant initial value (None: zeros)


@dataclasses.dataclass
class Prepared:
    """The simplified static model plus what lifting recorded."""

    model: ov.Model  # parameters: user inputs then lifted inputs; results: user then lifted
    n_user_inputs: int
    n_user_outputs: int
    variables: list[LiftedVariable]  # in the order of the lifted inputs/outputs
    #: weights kept compressed, keyed by the name of the (removed) placeholder Parameter that
    #: stands for them in the graph
    compressed: dict[str, CompressedWeight] = dataclasses.field(default_factory=dict)


def _fold(model: ov.Model) -> None:
    # ShapeOf/Range/Broadcast-of-constant subgraphs disappear at static shapes
    pm = passes.Manager()
    pm.register_pass(passes.ConstantFolding())
    try:
        pm.run_passes(model)
    except RuntimeError as e:  # std::bad_alloc folding a huge constant, and the like
        raise CompileError(f"constant folding failed: {e}", stage="frontend") from e


def _check_io(model: ov.Model) -> None:
    """User tensors must have an element type the runtime binds and fit the device memory."""
    for kind, nodes in (("input", model.get_parameters()), ("output", model.get_results())):
        for n in nodes:
            out = n.output(0)
            name = out.get_any_name() if out.get_names() else n.get_friendly_name()
            et = out.get_element_type().get_type_name()
            if et not in ELEMENT_TYPES:
                raise UnsupportedOpError(
                    f"NPU cannot bind {kind} {name!r} of element type {et}; supported: "
                    f"{', '.join(ELEMENT_TYPES)}. Convert it in the model (or keep it on CPU).",
                    op_type=n.get_type_name(), node_name=n.get_friendly_name())
            ps = out.get_partial_shape()
            if ps.is_static and tensor_bytes(ps.to_shape(), et) > DEVICE_MEMORY_LIMIT:
                raise MemoryPlanError(
                    f"{kind} {name!r} of shape {ps} ({tensor_bytes(ps.to_shape(), et)} bytes) exceeds the "
                    f"emulated device memory ({DEVICE_MEMORY_LIMIT} bytes); reshape the model smaller",
                    stage="frontend")


def _check_static(model: ov.Model) -> None:
    for p in model.get_parameters():
        ps = p.get_output_partial_shape(0)
        if ps.is_dynamic:
            name = p.output(0).get_any_name() if p.output(0).get_names() else p.get_friendly_name()
            raise DynamicShapeError(
                f"NPU compiles static shapes only: input {name!r} has shape {ps}. "
                f"Reshape the model first, e.g. model.reshape({{{name!r}: [1, 128]}}).",
                input_name=name,
            )
    for n in model.get_ordered_ops():
        if n.get_type_name() == "ReadValue" and n.get_output_partial_shape(0).is_dynamic:
            var = n.get_variable_id()
            raise DynamicShapeError(
                f"NPU compiles static shapes only: variable {var!r} has shape "
                f"{n.get_output_partial_shape(0)}. Reshape the model so the state shape is static "
                f"(or convert it with stateful_to_stateless_transformation and reshape the past inputs).",
                input_name=var,
            )


def prepare(model: ov.Model, *, compress: bool = True, dynamic_ops: bool = False,
            activations_scale: float = 0.0) -> Prepared:
    """Clone ``model``, reject dynamic shapes, lift variables, fold constants.

    With ``compress`` the weight-decompression subgraphs feeding MatMul/Gather are detached
    first (see compress.py), so folding leaves them compressed instead of making f32 constants.
    ``dynamic_ops`` (query_model) lets ops with a dynamic output shape through (NonMaxSuppression
    on static inputs), for lowering to refuse one by one.  ``activations_scale`` > 0
    (ACTIVATIONS_SCALE_FACTOR in f16 mode) carries the residual streams divided by it
    (act_scale.py), before anything else touches the graph.
    """
    _check_static(model)
    _check_io(model)  # before clone and folding, which would allocate a huge tensor
    m = model.clone()
    if activations_scale > 0:
        n_scaled = scale_activations(m, activations_scale)
        logger.debug("ACTIVATIONS_SCALE_FACTOR=%g: %d residual Adds carried scaled", activations_scale, n_scaled)
    n_in, n_out = len(m.get_parameters()), len(m.get_results())
    compressed, placeholders = detach_compressed_weights(m) if compress else ({}, [])
    _fold(m)  # folds ReadValue initialiser subgraphs into constants
    read_values = [n for n in m.get_ordered_ops() if n.get_type_name() == "ReadValue"]
    assigns = {s.get_variable_id(): s for s in m.get_sinks() if s.get_type_name() == "Assign"}
    variables: list[LiftedVariable] = []
    new_params, new_results = [], []
    for rv in read_values:
        var_id = rv.get_variable_id()
        if var_id not in assigns:
            raise CompileError(
                f"ReadValue {rv.get_friendly_name()!r} (variable {var_id!r}) has no Assign", stage="lift"
            )
        shape = dims(rv.get_output_shape(0))
        et = rv.get_output_element_type(0)
        init = None
        if rv.get_input_size() == 1:
            src = rv.input_value(0).get_node()
            if src.get_type_name() != "Constant":
                raise CompileError(f"initial value of variable {var_id!r} is not constant after folding", stage="lift")
            data = np.array(src.get_data()).reshape(shape)
            init = None if not data.any() else data
        # the ReadValue becomes a Parameter: the runtime binds the state buffer to it
        param = ops.parameter(list(shape), et, name=var_id)
        param.output(0).get_tensor().set_names({var_id})
        for target in list(rv.output(0).get_target_inputs()):
            target.replace_source_output(param.output(0))
        asg = assigns.pop(var_id)
        res = ops.result(asg.input_value(0))
        m.remove_sink(asg)
        new_params.append(param)
        new_results.append(res)
        variables.append(LiftedVariable(var_id, shape, et, init))
    if assigns:
        raise CompileError(f"Assign without ReadValue for variables {sorted(assigns)}", stage="lift")
    if new_params:
        m.add_parameters(new_params)
        m.add_results(new_results)
        m.validate_nodes_and_infer_types()
    _fold(m)
    # the lowering binds the placeholders to the compressed weights, not to inputs; the graph
    # still references them, so prep.model must not be validated or cloned after this
    for p in placeholders:
        m.remove_parameter(p)
    for n in [] if dynamic_ops else m.get_ordered_ops():
        for i in range(n.get_output_size()):
            if n.get_output_partial_shape(i).is_dynamic:
                # the real NPU compiler takes static shapes only: an op whose output size
                # depends on the data (NonMaxSuppression in a detector's post-processing) is refused
                raise UnsupportedOpError(
                    f"{n.get_type_name()} {n.get_friendly_name()!r} has a dynamic output shape "
                    f"({n.get_output_partial_shape(i)}) although all inputs are static: NPU compiles "
                    "static shapes only. Cut the model before it (run the post-processing on CPU) or "
                    "compile it on \"HETERO:NPU,CPU\".",
                    op_type=n.get_type_name(), node_name=n.get_friendly_name())
    logger.debug("front end: %d user inputs, %d lifted variables", n_in, len(variables))
    return Prepared(m, n_in, n_out, variables, compressed)
