"""The I/O of NPUW's models: the KV cache layout, and lookups of inputs and outputs by tensor
name, shared by the graph passes."""

from __future__ import annotations

import dataclasses

import openvino as ov

from ov_npu_emu.errors import CompileError

__all__ = ["DEEPSTACK", "EMBEDS", "REQUIRED_INPUTS", "TOKEN_TYPES", "VISUAL_MASK", "KVLayout", "deepstack_layers",
           "find_param", "find_result", "token_input"]

#: inputs every stateful LLM export has (position_ids may be missing: NPUW adds it)
REQUIRED_INPUTS = ("input_ids", "attention_mask", "position_ids")
#: the language model of a VLM export takes embeddings instead of input_ids
EMBEDS = "inputs_embeds"
#: a per-token input beside the tokens (Gemma 3's language model: 1 on image tokens), laid out
#: like them in every prefill / generate call, 0 on padding
TOKEN_TYPES = "token_type_ids"
#: Qwen3-VL's DeepStack inputs: ``visual_pos_masks`` [1, L] (bool, true at the vision tokens),
#: laid out like the tokens (false on padding), and ``deepstack_visual_embeds`` [layers, N, hidden]:
#: one row per vision token of the call, in order (the graph picks row cumsum(mask) - 1 for a
#: token), so a static call takes them in its first rows and zeros after
VISUAL_MASK = "visual_pos_masks"
DEEPSTACK = "deepstack_visual_embeds"


def deepstack_layers(model: ov.Model) -> int:
    """How many layers' features ``deepstack_visual_embeds`` carries (its first axis, dynamic in
    the export): one past the largest constant index the graph selects on that axis."""
    param = find_param(model, DEEPSTACK)
    dim = param.get_partial_shape()[0]
    if dim.is_static:
        return int(dim.get_length())
    top = -1
    for target in param.output(0).get_target_inputs():
        node = target.get_node()
        if node.get_type_name() != "Gather" or target.get_index() != 0:
            continue
        index, axis = (node.input_value(i).get_node() for i in (1, 2))
        if index.get_type_name() == "Constant" and axis.get_type_name() == "Constant":
            if int(axis.get_data().reshape(-1)[0]) == 0:
                top = max(top, int(index.get_data().max()))
    if top < 0:
        raise CompileError(f"cannot tell how many layers {DEEPSTACK} carries: give its first axis a static "
                           "size", stage="reshape")
    return top + 1


def token_input(model: ov.Model) -> str:
    """The input carrying the tokens: ``input_ids`` [B, L], or ``inputs_embeds`` [B, L, E] (a VLM's
    language model, whose embeddings the pipeline computes)."""
    names = {n for p in model.inputs for n in p.get_names()}
    return EMBEDS if EMBEDS in names and "input_ids" not in names else "input_ids"


@dataclasses.dataclass(frozen=True)
class KVLayout:
    """Names and per-tensor shape facts of the KV cache, in ``past_key_values`` order."""

    past_names: tuple[str, ...]  # past_key_values.N.key|value
    present_names: tuple[str, ...]  # present.N.key|value (same order)
    num_heads: tuple[int, ...]  # Hkv per tensor
    head_dims: tuple[int, ...]  # D per tensor
    v_transposed: bool = False  # value tensors stored [1, Hkv, D, S] (NPUW_LLM_OPTIMIZE_V_TENSORS)

    def transposed(self, i: int) -> bool:
        """Whether KV tensor ``i`` is stored with the sequence as the last axis."""
        return self.v_transposed and self.past_names[i].endswith(".value")

    def with_v_transposed(self, flag: bool) -> KVLayout:
        return dataclasses.replace(self, v_transposed=flag)



def find_result(model: ov.Model, name: str) -> ov.Node:
    for r in model.get_results():
        if name in r.output(0).get_names():
            return r
    raise CompileError(f"output {name} not found", stage="transform")


def find_param(model: ov.Model, name: str) -> ov.Node:
    for p in model.get_parameters():
        if name in p.output(0).get_names():
            return p
    raise CompileError(f"input {name} not found", stage="transform")
