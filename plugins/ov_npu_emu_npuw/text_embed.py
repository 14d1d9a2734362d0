"""NPUW's text-embedding mode (``NPUW_TEXT_EMBED=YES`` with ``NPUW_LLM=YES``): what openvino.genai's
TextEmbeddingPipeline compiles on "NPU" for a dynamic embedding model (``utils.cpp``
``update_npu_config_text_embedding``).

Encoder models (BERT-style: no ``position_ids``, no KV cache) run as the real
``EncoderEmbeddingInferRequest``: the model reshaped to ``[1, P]`` (P = NPUW_LLM_MAX_PROMPT_LEN
aligned as for an LLM), the call's tokens copied to the front (right padding: an encoder's
positions are where a token sits), ``token_type_ids`` passed through or zero, one forward, and the
padding rows of the ``[1, P, hidden]`` output zeroed.  Batch 1 only, with the real's error text.

Decoder models (Qwen3-Embedding-style, causal, RoPE: the real's chunked prefill without head)
are not built yet: a typed error at compile time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError, UserInputError
from ov_npu_emu.runtime.device import DeviceCompiledModel, DeviceInferRequest, PortInfo
from ov_npu_emu_npuw.config import LLMConfig, for_device, parse_config

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel
    from ov_npu_emu.api.core import Core

__all__ = ["TextEmbedCompiledModel", "compile_text_embed", "is_encoder_model", "position_table_rows"]

logger = logging.getLogger("ov_npu_emu_npuw")

#: inputs of an encoder embedding model that carry one value per token
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def is_encoder_model(model: ov.Model) -> bool:
    """No ``position_ids`` input, no KV cache (parameters or variables): a bidirectional encoder
    that builds its own mask and positions (the real's PrepareEncoderEmbeddingModel case)."""
    names = {n for p in model.inputs for n in p.get_names()}
    if "position_ids" in names or any("past_key_values" in n for n in names):
        return False
    return not any(op.get_type_name() == "ReadValue" for op in model.get_ops())


def position_table_rows(model: ov.Model) -> int | None:
    """Rows of the learned absolute position-embedding table (a Gather from a constant named
    ``position_embeddings``), or None."""
    for op in model.get_ops():
        if op.get_type_name() != "Gather" or "position_embeddings" not in op.get_friendly_name():
            continue
        data = op.input_value(0).get_node()
        while data.get_type_name() == "Convert":
            data = data.input_value(0).get_node()
        if data.get_type_name() == "Constant":
            return int(data.get_output_shape(0)[0])
    return None


def compile_text_embed(core: Core, model: ov.Model, config: Mapping[str, Any]) -> TextEmbedCompiledModel:
    """The static ``[1, P]`` sub-model of an encoder embedding model, on NPUW_DEVICES' first device."""
    from ov_npu_emu_npuw.compiled_model import configure_logging, pick_device

    configure_logging()
    cfg = parse_config(config)
    if not is_encoder_model(model):
        raise UnsupportedFeatureError(
            "NPUW_TEXT_EMBED: decoder (causal, position_ids) embedding models are not built yet in the emulated "
            "NPUW (the real runs them through chunked prefill without head); run this model on CPU, or on NPU "
            "with the static path (TextEmbeddingPipeline: batch_size, max_length and pad_to_max_length)",
            key="NPUW_TEXT_EMBED",
        )
    if len(model.outputs) < 1 or model.outputs[0].get_partial_shape().rank.get_length() != 3:
        raise ConfigError(
            "NPUW_TEXT_EMBED: the model's first output must be a [batch, seq, hidden] hidden state "
            f"(a feature-extraction export), got {model.outputs[0].get_partial_shape()}",
            key="NPUW_TEXT_EMBED",
        )
    device = pick_device(core, cfg.devices)
    limit = position_table_rows(model)
    if limit is not None and limit < cfg.max_prompt_len:
        # as the real (measured: MAX_PROMPT_LEN 1024 on a 128-position BERT reads back 128): the
        # static length never exceeds the learned position table
        logger.info("NPUW_TEXT_EMBED: MAX_PROMPT_LEN %d capped to the model's %d positions", cfg.max_prompt_len, limit)
        cfg = dataclasses.replace(cfg, max_prompt_len=limit)
    size = cfg.max_prompt_len
    static = model.clone()
    names = {n for p in static.inputs for n in p.get_names()}
    static.reshape({n: ov.PartialShape([1, size]) for n in TOKEN_INPUTS if n in names})
    name = model.get_friendly_name()
    static.set_friendly_name(f"{name}_prefill")
    t0 = time.perf_counter()
    prefill = core.compile_model(static, device, for_device(cfg.prefill_config, device))
    logger.info("compiled text-embedding encoder %s_prefill [1, %d] on %s in %.2f s",
                name, size, device, time.perf_counter() - t0)
    ins = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.inputs)]
    outs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.outputs)]
    return TextEmbedCompiledModel(name, cfg, device, prefill, ins, outs)


class TextEmbedCompiledModel(DeviceCompiledModel):
    """The encoder embedding model as NPUW compiles it: one static ``[1, P]`` sub-model behind the
    model's own (dynamic) ports."""

    def __init__(self, name: str, cfg: LLMConfig, device: str, prefill: CompiledModel,
                 inputs: list[PortInfo], outputs: list[PortInfo]) -> None:
        self.name = name
        self.cfg = cfg
        self.device = device
        self.prefill = prefill
        self.inputs = inputs
        self.outputs = outputs

    def create_infer_request(self) -> EncoderEmbeddingInferRequest:
        return EncoderEmbeddingInferRequest(self)

    def export_model(self) -> bytes:
        raise UnsupportedFeatureError(
            "export of an NPUW text-embedding model is not built yet; compile it again (the real "
            "TextEmbeddingPipeline has no blob export either)", key="NPUW_TEXT_EMBED")

    def get_property(self, name: str) -> Any:
        props = {**self.cfg.properties(), "NPUW_TEXT_EMBED": True}
        if name in props:
            return props[name]
        if name == "SUPPORTED_PROPERTIES":
            return sorted({*props, "SUPPORTED_PROPERTIES", "NETWORK_NAME", "MODEL_NAME", "EXECUTION_DEVICES"})
        if name in ("NETWORK_NAME", "MODEL_NAME"):
            return self.name
        if name == "EXECUTION_DEVICES":
            return [self.device]
        raise ConfigError(f"Unsupported property {name} by NPUW text-embedding compiled model", key=name)

    def set_property(self, properties: Mapping[str, Any]) -> None:
        raise ConfigError(
            f"NPUW compiled model properties are read-only; pass {sorted(properties)} to compile_model")


class EncoderEmbeddingInferRequest(DeviceInferRequest):
    """One text per call: its tokens at the front of the static ``[1, P]`` inputs, the padding
    rows of the ``[1, P, hidden]`` output zeroed (so a pooling that ignores the mask cannot read
    them)."""

    def __init__(self, cm: TextEmbedCompiledModel) -> None:
        self.cm = cm
        self._request = cm.prefill.create_infer_request()
        self._index = {n: p.index for p in cm.inputs for n in p.names}
        self._user: dict[int, ov.Tensor] = {}
        self._out: ov.Tensor | None = None
        size = cm.cfg.max_prompt_len
        self._static = {n: np.zeros((1, size), dtype=np.int64) for n in TOKEN_INPUTS if n in self._index}

    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        if is_input:
            if index not in self._user:
                self._user[index] = ov.Tensor(self.cm.inputs[index].element_type, [1, 0])
            return self._user[index]
        if self._out is None:
            raise UserInputError("The embedding output is not available: run inference first")
        return self._out

    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        if not is_input:
            raise UserInputError("NPUW text-embedding output is owned by the plugin; read it with get_tensor")
        self._user[index] = tensor

    def _input(self, name: str) -> np.ndarray | None:
        index = self._index.get(name)
        if index is None or index not in self._user:
            return None
        tensor = self._user[index]
        if tensor.get_element_type() != ov.Type.i64:
            raise UserInputError(f"{name} must be i64, got {tensor.get_element_type()}")
        return np.asarray(tensor.data)

    def infer(self) -> None:
        ids, mask = self._input("input_ids"), self._input("attention_mask")
        if ids is None or mask is None:
            raise UserInputError("set input_ids and attention_mask before infer()")
        shape = list(ids.shape)
        if ids.ndim != 2 or shape[0] != 1:
            # the real's text (encoder_embedding_infer_request.cpp), then what to do
            raise UserInputError(
                f"Encoder embedding model expects batch size 1, got shape {_dims(shape)}: NPUW's text-embedding "
                "mode takes one text per call (embed the texts one by one, or use the static path: batch_size, "
                "max_length and pad_to_max_length)")
        if list(mask.shape) != shape:
            raise UserInputError(f"attention_mask shape {_dims(list(mask.shape))} must match input_ids shape "
                                 f"{_dims(shape)}")
        size = self.cm.cfg.max_prompt_len
        n = shape[1]
        if n > size:
            raise UserInputError(
                f'Input prompt is longer than configured "NPUW_LLM_MAX_PROMPT_LEN": {size}.\nPlease either setup '
                'bigger "NPUW_LLM_MAX_PROMPT_LEN" or shorten the prompt. Note: it must not exceed the model\'s '
                "max_position_embeddings.")
        types = self._input("token_type_ids")
        if types is not None and list(types.shape) != shape:
            raise UserInputError(f"token_type_ids shape {_dims(list(types.shape))} must match input_ids shape "
                                 f"{_dims(shape)}")
        for name, buf in self._static.items():
            buf.fill(0)
            source = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}[name]
            if source is not None:
                buf[:, :n] = source
            self._request.set_tensor(name, ov.Tensor(buf, shared_memory=True))
        self._request.infer()
        out = np.array(self._request.get_output_tensor(0).data)
        out[:, n:] = 0  # the padding rows, as the real zeroes them
        self._out = ov.Tensor(out)


def _dims(shape: list[int]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"
