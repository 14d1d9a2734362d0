"""The I/O of NPUW's models: the KV cache layout, and lookups of inputs and outputs by tensor
name, shared by the graph passes."""

from __future__ import annotations

import dataclasses

import openvino as ov

from ov_npu_emu.errors import CompileError

__all__ = ["EMBEDS", "REQUIRED_INPUTS", "TOKEN_TYPES", "KVLayout", "find_param", "find_result", "token_input"]

#: inputs every stateful LLM export has (position_ids may be missing: NPUW adds it)
REQUIRED_INPUTS = ("input_ids", "attention_mask", "position_ids")
#: the language model of a VLM export takes embeddings instead of input_ids
EMBEDS = "inputs_embeds"
#: a per-token input beside the tokens (Gemma 3's language model: 1 on image tokens), laid out
#: like them in every prefill / generate call, 0 on padding
TOKEN_TYPES = "token_type_ids"


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
