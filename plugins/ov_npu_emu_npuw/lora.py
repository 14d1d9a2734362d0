"""LoRA on NPUW, as the real NPUW does it.

openvino.genai's AdapterController (MODE_DYNAMIC, the default on NPU) puts each adapted MatMul's
factors into variables ``lora_state_<n><node>MatMul.A|.alpha|.B`` of dynamic rank.  An NPU needs
static shapes, so NPUW:

* compile time (:func:`lift_lora_states`): turns those variables into model inputs (the real's
  LoraStatefulToStateless) and gives them the static rank ``NPUW_LLM_MAX_LORA_RANK`` (default 32):
  A ``[R, in]``, alpha ``[1, R]``, B ``[out, R]``.  Every prefill / generate sub-model has them.
* run time (:class:`LoraStates`): they are the request's variable states again (genai writes them
  with ``set_state``).  At the start of each conversation the updated ones are copied into one
  zero-padded tensor per input, bound to every sub-model: the zero rows/columns past the adapter's
  rank add nothing, so any rank ≤ R runs on the same compiled models — adapters and alphas change
  per generate() without recompiling.  A rank-0 state (no adapter for that layer) zeroes alpha.

The real's texts are kept for an adapter too large for the rank or of the wrong width.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from ov_npu_emu.errors import CompileError, ConfigError, UserInputError
from ov_npu_emu.runtime.device import VariableState

__all__ = ["LoraStates", "is_lora_name", "lift_lora_states", "lora_inputs"]

#: the real's matchLoRAMatMul{A,B,Alpha}String: "^lora_state.*MatMul\.(A|B|alpha)$"
_LORA_NAME = re.compile(r"^lora_state.*MatMul\.(A|B|alpha)$")

#: per factor: (dimension of the rank, dimension of the layer width) — the real's get_lora_dims_by_name
_DIMS = {"A": (0, 1), "B": (1, 0), "alpha": (1, 0)}


def is_lora_name(name: str) -> bool:
    return _LORA_NAME.match(name) is not None


def _factor(name: str) -> str:
    m = _LORA_NAME.match(name)
    assert m is not None
    return m.group(1)


def lift_lora_states(model: ov.Model, max_rank: int) -> int:
    """Replace the LoRA variables of ``model`` by inputs of static rank ``max_rank``; returns
    how many.  Any other variable left after the KV lifting is an error (NPUW runs stateless
    sub-models)."""
    lifted = 0
    params = []
    for sink in list(model.get_sinks()):
        if sink.get_type_name() != "Assign":
            continue
        read = sink.input_value(0).get_node()
        var_id = read.get_variable_id() if read.get_type_name() == "ReadValue" else ""
        if not is_lora_name(var_id):
            raise CompileError(
                f"NPUW lifts KV-cache and LoRA variables only; {var_id or sink.get_friendly_name()!r} is "
                "neither (LoRA variables are named lora_state_…MatMul.A|.B|.alpha by openvino.genai)",
                stage="transform",
            )
        ps = read.get_output_partial_shape(0)
        rank_dim, width_dim = _DIMS[_factor(var_id)]
        shape = [0, 0]
        shape[rank_dim] = max_rank
        shape[width_dim] = ps[width_dim].get_length()
        param = ops.parameter(shape, read.get_output_element_type(0), name=var_id)
        param.output(0).get_tensor().set_names({var_id})
        for inp in list(read.output(0).get_target_inputs()):
            if inp.get_node() is not sink:
                inp.replace_source_output(param.output(0))
        model.remove_sink(sink)
        model.remove_variable(model.get_variable_by_id(var_id))
        params.append(param)
        lifted += 1
    if params:
        model.add_parameters(params)
        model.validate_nodes_and_infer_types()
    return lifted


def lora_inputs(ports: Iterable[Any]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """name -> (static shape, dtype) of the LoRA inputs among a compiled sub-model's inputs."""
    out = {}
    for p in ports:
        for n in p.names:
            if is_lora_name(n):
                out[n] = (tuple(p.partial_shape.to_shape()), p.element_type.to_dtype())
    return out


class _LoraState(VariableState):
    """One LoRA input as genai sees it: set_state stores; the copy happens at the next prefill."""

    def __init__(self, owner: LoraStates, name: str) -> None:
        self._owner = owner
        self._name = name
        self.value: np.ndarray = owner.bound[name]  # the real starts from the input tensor
        self.updated = False

    @property
    def name(self) -> str:
        return self._name

    def get_state(self) -> ov.Tensor:
        return ov.Tensor(self.value)

    def set_state(self, value: ov.Tensor) -> None:
        if not isinstance(value, ov.Tensor):
            raise UserInputError(f"VariableState.state expects an openvino.Tensor, got {type(value).__name__}")
        data = np.asarray(value.data)
        if data.ndim != 2:
            raise UserInputError(f"LoRA state {self._name!r} takes a 2-D tensor, got shape {list(data.shape)}")
        self.value = np.array(data, copy=True)
        self.updated = True

    def reset(self) -> None:
        self.value = np.zeros_like(self.value)  # the real memsets its state tensor


class LoraStates:
    """The LoRA inputs of one NPUW request: one padded array per input, bound (zero-copy) to every
    sub-request, and the variable states genai writes."""

    def __init__(self, inputs: dict[str, tuple[tuple[int, ...], np.dtype]], max_rank: int) -> None:
        # the compiled inputs are the truth (an imported model keeps the rank it was built with)
        ranks = {shape[_DIMS[_factor(n)][0]] for n, (shape, _) in inputs.items()}
        self.max_rank = ranks.pop() if len(ranks) == 1 else max_rank
        # zeros: alpha 0, so no adapter acts until genai writes one
        self.bound = {n: np.zeros(shape, dtype) for n, (shape, dtype) in inputs.items()}
        self.states = [_LoraState(self, n) for n in sorted(self.bound)]

    def bind(self, request: Any) -> None:
        for name, arr in self.bound.items():
            request.set_tensor(name, ov.Tensor(arr, shared_memory=True))

    def apply(self) -> None:
        """The real's apply_lora (prepare_for_new_conversation): copy the updated states in."""
        for st in self.states:
            if not st.updated:
                continue
            dst = self.bound[st.name]
            kind = _factor(st.name)
            if st.value.size == 0:
                if kind == "alpha":  # generate without LoRA: alpha 0 switches the layer off
                    dst.fill(0)
                st.updated = False
                continue
            rank_dim, width_dim = _DIMS[kind]
            if st.value.shape[width_dim] != dst.shape[width_dim]:
                raise UserInputError(
                    f"LoRA adapter tensor shape: {list(st.value.shape)} is not compatible with inference "
                    f"tensor shape: {list(dst.shape)}. Please check if adapter is compatible with the base model."
                )
            rank = st.value.shape[rank_dim]
            if rank > self.max_rank:
                raise ConfigError(
                    f"LoRA tensor low-rank size: {rank} is larger than the maximum LoRA low-rank size "
                    f"{self.max_rank}. Please adjust NPUW_LLM_MAX_LORA_RANK configuration.",
                    key="NPUW_LLM_MAX_LORA_RANK",
                )
            dst.fill(0)  # the padding past the adapter's rank contributes nothing
            index: list[slice] = [slice(None), slice(None)]
            index[rank_dim] = slice(0, rank)
            dst[tuple(index)] = st.value
            st.updated = False
