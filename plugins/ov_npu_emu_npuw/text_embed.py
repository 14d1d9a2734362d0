"""NPUW's text-embedding mode (``NPUW_TEXT_EMBED=YES`` with ``NPUW_LLM=YES``): what openvino.genai's
TextEmbeddingPipeline compiles on "NPU" for a dynamic embedding model (``utils.cpp``
``update_npu_config_text_embedding``).

Encoder models (BERT-style: no ``position_ids``, no KV cache) run as the real
``EncoderEmbeddingInferRequest``: the model reshaped to ``[1, P]`` (P = NPUW_LLM_MAX_PROMPT_LEN
aligned as for an LLM), the call's tokens copied to the front (right padding: an encoder's
positions are where a token sits), ``token_type_ids`` passed through or zero, one forward, and the
padding rows of the ``[1, P, hidden]`` output zeroed.  Batch 1 only, with the real's error text.

Decoder models (Qwen3-Embedding-style feature-extraction exports: causal, RoPE, no KV) run as the
real ``EmbeddingInferRequest`` over the model ``PrepareTextEmbeddingModel`` makes: past K/V inputs
and present K/V outputs added at every attention, ``position_ids`` replacing the model's own
``Range``, the causal-and-padding mask rebuilt over past + present.  Without chunking one static
``[1, P]`` prefill (the call's tokens right-aligned, positions ``0..n-1``); with
``NPUW_LLM_PREFILL_CHUNK_SIZE`` C (< P) a ``[1, C]`` prefill over a past of ``P - C`` run chunk by
chunk, each chunk's present K/V stored into the past in the KV precision (f16 by default, as the
real: the source of its chunked results' 1e-5..1e-4 differences from CPU).  The output is
``[1, P, hidden]`` with the call's hidden states at the front and zeros after them (P is
MAX_PROMPT_LEN aligned to 64 and to the chunk).  Batch 1 only, as the real (whose errors for more
are internal checks; ours says what to do).  Ours builds the mask on the host and feeds it as an
f32 ``[1, 1, q, past + q]`` input (0 attended, the f32 minimum masked: the real's
``create_new_mask`` values), and expands grouped K/V heads with our own Broadcast/Reshape.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError, UserInputError
from ov_npu_emu.runtime.device import DeviceInferRequest, PortInfo
from ov_npu_emu_npuw.config import LLMConfig, for_device, parse_config
from ov_npu_emu_npuw.mode_model import ModeCompiledModel

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel
    from ov_npu_emu.api.core import Core

__all__ = ["TextEmbedCompiledModel", "compile_text_embed", "is_encoder_model", "position_table_rows"]

logger = logging.getLogger("ov_npu_emu_npuw")

#: inputs of an encoder embedding model that carry one value per token
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _grouped_kv_key(sdpa: ov.Node) -> bool:
    """The key of ``sdpa`` comes through ``Reshape <- Broadcast`` whose target shape is a
    ``Concat``: the grouped-query KV expansion the real's decoder reconstruction hooks into
    (``check_kv_concat_nodes``)."""
    reshape = sdpa.input_value(1).get_node()
    if reshape.get_type_name() != "Reshape":
        return False
    broadcast = reshape.input_value(0).get_node()
    if broadcast.get_type_name() != "Broadcast" or broadcast.get_input_size() < 2:
        return False
    return bool(broadcast.input_value(1).get_node().get_type_name() == "Concat")


def is_encoder_model(model: ov.Model) -> bool:
    """No ``position_ids`` input, no KV cache (parameters or variables), and not every attention's
    key through the grouped-KV ``Reshape <- Broadcast(…, Concat)`` pattern: a bidirectional encoder
    that builds its own mask and positions (the real's ``is_encoder_embedding_model``, which routes
    on that same pattern; a causal model without it runs the encoder way too, as the real)."""
    names = {n for p in model.inputs for n in p.get_names()}
    if "position_ids" in names or any("past_key_values" in n for n in names):
        return False
    if any(op.get_type_name() == "ReadValue" for op in model.get_ops()):
        return False
    sdpas = [op for op in model.get_ops() if op.get_type_name() == "ScaledDotProductAttention"]
    return not (sdpas and all(_grouped_kv_key(op) for op in sdpas))


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
    if len(model.outputs) < 1 or model.outputs[0].get_partial_shape().rank.get_length() != 3:
        raise ConfigError(
            "NPUW_TEXT_EMBED: the model's first output must be a [batch, seq, hidden] hidden state "
            f"(a feature-extraction export), got {model.outputs[0].get_partial_shape()}",
            key="NPUW_TEXT_EMBED",
        )
    device = pick_device(core, cfg.devices)
    if not is_encoder_model(model):
        return compile_decoder_embed(core, model, cfg, device)
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


class TextEmbedCompiledModel(ModeCompiledModel):
    """The embedding model as NPUW compiles it: one static sub-model (encoder ``[1, P]``; decoder
    ``[1, P]`` or the ``[1, C]`` chunk over a past of ``P - C``) behind the model's own (dynamic)
    ports."""

    mode = "text-embedding"

    def __init__(self, name: str, cfg: LLMConfig, device: str, prefill: CompiledModel,
                 inputs: list[PortInfo], outputs: list[PortInfo], decoder: DecoderLayout | None = None) -> None:
        self.name = name
        self.cfg = cfg
        self.device = device
        self.prefill = prefill
        self.inputs = inputs
        self.outputs = outputs
        self.decoder = decoder

    def create_infer_request(self) -> DeviceInferRequest:
        if self.decoder is not None:
            return DecoderEmbeddingInferRequest(self, self.decoder)
        return EncoderEmbeddingInferRequest(self)

    def export_model(self) -> bytes:
        raise UnsupportedFeatureError(
            "export of an NPUW text-embedding model is not built yet; compile it again (the real "
            "TextEmbeddingPipeline has no blob export either)", key="NPUW_TEXT_EMBED")

    def mode_properties(self) -> dict[str, Any]:
        return {"NPUW_TEXT_EMBED": True}


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


# ---------------------------------------------------------------------------------------------
# decoder embedding models (the real's PrepareTextEmbeddingModel + EmbeddingInferRequest)
# ---------------------------------------------------------------------------------------------

#: the sub-model's own inputs: positions (the real's AddPositionIdsParam) and the additive mask
POSITIONS = "position_ids"
MASK = "npuw_attention_mask"


@dataclasses.dataclass(frozen=True)
class DecoderLayout:
    """The static decoder sub-model: ``q_len`` tokens per call over ``past_len`` stored ones; the
    K/V pairs (``past_key_values.N.key`` … / ``present.N.key`` …) in ``kv_type``."""

    q_len: int
    past_len: int
    layers: tuple[str, ...]  # "N.key", "N.value", in input order
    kv_type: ov.Type


def _gqa_source(out: ov.Output) -> tuple[ov.Output, int] | None:
    """The per-KV-head tensor ``[1, kv_heads, seq, head_dim]`` behind an SDPA key/value input
    (``Reshape(Broadcast(Unsqueeze(x)))`` for grouped heads, else ``x``) and the group size."""
    node = out.get_node()
    if node.get_type_name() == "Reshape":
        bc = node.input_value(0).get_node()
        if bc.get_type_name() == "Broadcast":
            unsq = bc.input_value(0).get_node()
            if unsq.get_type_name() == "Unsqueeze":
                src = unsq.input_value(0)
                heads = out.get_partial_shape()[1]
                kv_heads = src.get_partial_shape()[1]
                if heads.is_static and kv_heads.is_static:
                    return src, heads.get_length() // kv_heads.get_length()
        return None
    if out.get_partial_shape().rank.get_length() == 4:
        return out, 1
    return None


def _rotary_range(model: ov.Model) -> ov.Node | None:
    """The ``Range`` whose values reach the rotary ``Sin`` / ``Cos``: the model's own positions."""
    for op in model.get_ops():
        if op.get_type_name() != "Range":
            continue
        front, seen = [op], set()
        for _ in range(16):
            nxt = []
            for n in front:
                for t in n.output(0).get_target_inputs():
                    user = t.get_node()
                    if user.get_type_name() in ("Sin", "Cos"):
                        return op
                    if id(user) not in seen:
                        seen.add(id(user))
                        nxt.append(user)
            front = nxt
    return None


def make_decoder_embed_model(model: ov.Model, q_len: int, past_len: int,
                             kv_type: ov.Type) -> tuple[ov.Model, tuple[str, ...]]:
    """The decoder embedding model as NPUW prepares it, static: ``input_ids`` ``[1, q_len]``,
    ``position_ids`` ``[q_len]``, the additive mask ``[1, 1, q_len, past_len + q_len]``, past K/V
    ``[1, kv_heads, past_len, head_dim]`` (when ``past_len``) in ``kv_type``; outputs the hidden
    states ``[1, q_len, hidden]`` and the present K/V (this call's, in ``kv_type``)."""
    import openvino.opset13 as ops

    m = model.clone()
    names = {n for p in m.inputs for n in p.get_names()}
    m.reshape({n: ov.PartialShape([1, q_len]) for n in ("input_ids", "attention_mask") if n in names})
    sdpas = [op for op in m.get_ops() if op.get_type_name() == "ScaledDotProductAttention"]
    if not sdpas:
        raise UnsupportedFeatureError(
            "NPUW_TEXT_EMBED: the decoder embedding model has no ScaledDotProductAttention (the real's "
            '"No ScaledDotProductAttention operation observed in the graph"); export it with optimum-cli '
            "(--task feature-extraction) so the attention is one SDPA per layer", key="NPUW_TEXT_EMBED")
    rng = _rotary_range(m)
    if rng is None:
        raise UnsupportedFeatureError(
            "NPUW_TEXT_EMBED: no rotary positions (a Range feeding Sin/Cos) in this decoder embedding model; "
            "only RoPE decoders (Qwen3-Embedding-style) are built in the emulated NPUW text-embedding mode",
            key="NPUW_TEXT_EMBED")
    total = past_len + q_len
    mask = ops.parameter([1, 1, q_len, total], ov.Type.f32, name=MASK)
    mask.output(0).set_names({MASK})
    positions = ops.parameter([q_len], ov.Type.i64, name=POSITIONS)
    positions.output(0).set_names({POSITIONS})
    new_params = [positions, mask]
    new_results = []
    layers: list[str] = []
    for layer, sdpa in enumerate(sorted(sdpas, key=lambda n: n.get_friendly_name())):
        if sdpa.get_input_size() < 4:
            raise UnsupportedFeatureError(
                f"NPUW_TEXT_EMBED: attention {sdpa.get_friendly_name()} has no mask input; export the model with "
                "optimum-cli (--task feature-extraction)", key="NPUW_TEXT_EMBED")
        found = re.search(r"layers\.(\d+)\.", sdpa.get_friendly_name())
        lid = found.group(1) if found else str(layer)
        for port, kind in ((1, "key"), (2, "value")):
            traced = _gqa_source(sdpa.input_value(port))
            if traced is None:
                raise UnsupportedFeatureError(
                    f"NPUW_TEXT_EMBED: cannot trace the {kind} of {sdpa.get_friendly_name()} to its KV heads",
                    key="NPUW_TEXT_EMBED")
            src, group = traced
            shape = [d.get_length() for d in src.get_partial_shape()]
            present = ops.convert(src, kv_type) if kv_type != src.get_element_type() else src
            res = ops.result(present)
            res.set_friendly_name(f"present.{lid}.{kind}")
            res.output(0).set_names({f"present.{lid}.{kind}"})
            new_results.append(res)
            full = src
            if past_len:
                past = ops.parameter([shape[0], shape[1], past_len, shape[3]], kv_type,
                                     name=f"past_key_values.{lid}.{kind}")
                past.output(0).set_names({f"past_key_values.{lid}.{kind}"})
                new_params.append(past)
                stored = ops.convert(past, src.get_element_type()) if kv_type != src.get_element_type() else past
                full = ops.concat([stored, src], 2).output(0)
            layers.append(f"{lid}.{kind}")
            if group > 1:
                unsq = ops.unsqueeze(full, ops.constant(np.array([2], dtype=np.int64)))
                target = np.array([shape[0], shape[1], group, total, shape[3]], dtype=np.int64)
                bc = ops.broadcast(unsq, ops.constant(target))
                full = ops.reshape(bc, ops.constant(np.array([shape[0], shape[1] * group, total, shape[3]],
                                                             dtype=np.int64)), False).output(0)
            sdpa.input(port).replace_source_output(full)
        sdpa.input(3).replace_source_output(mask.output(0))
    rng_pos = ops.convert(positions, rng.get_output_element_type(0)) if (
        rng.get_output_element_type(0) != ov.Type.i64) else positions
    rng.output(0).replace(rng_pos.output(0))
    m.add_parameters(new_params)
    m.add_results(new_results)
    m.validate_nodes_and_infer_types()
    return m, tuple(layers)


def compile_decoder_embed(core: Core, model: ov.Model, cfg: LLMConfig, device: str) -> TextEmbedCompiledModel:
    """The prepared decoder model, static (``[1, P]``, or the ``[1, C]`` chunk over ``P - C``)."""
    if cfg.kv_precision not in ("f16", "f32"):
        raise UnsupportedFeatureError(
            f"NPUW_TEXT_EMBED: a {cfg.kv_precision} KV cache is not built yet for decoder embedding models; "
            "use the default (f16) KV precision", key="NPUW_LLM_OPTIMIZE_V_TENSORS")
    size = cfg.max_prompt_len
    q_len = cfg.chunk_size if cfg.use_chunking else size
    kv_type = ov.Type.f16 if cfg.kv_precision == "f16" else ov.Type.f32
    prepared, layers = make_decoder_embed_model(model, q_len, size - q_len, kv_type)
    name = model.get_friendly_name()
    prepared.set_friendly_name(f"{name}_prefill")
    t0 = time.perf_counter()
    prefill = core.compile_model(prepared, device, dict(cfg.prefill_config))
    logger.info("compiled text-embedding decoder %s_prefill [1, %d] (past %d) on %s in %.2f s",
                name, q_len, size - q_len, device, time.perf_counter() - t0)
    ins = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.inputs)]
    outs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.outputs)]
    layout = DecoderLayout(q_len, size - q_len, layers, kv_type)
    return TextEmbedCompiledModel(name, cfg, device, prefill, ins, outs, layout)


class DecoderEmbeddingInferRequest(EncoderEmbeddingInferRequest):
    """One text per call through the prepared decoder: whole (tokens right-aligned in ``[1, P]``)
    or chunk by chunk (each chunk right-aligned in ``[1, C]``, its present K/V stored after the
    earlier ones); the hidden states of the call's tokens at the front of ``[1, P, hidden]``."""

    def __init__(self, cm: TextEmbedCompiledModel, layout: DecoderLayout) -> None:  # noqa: D107
        self.cm = cm
        self.layout = layout
        self._request = cm.prefill.create_infer_request()
        self._index = {n: p.index for p in cm.inputs for n in p.names}
        self._user: dict[int, ov.Tensor] = {}
        self._out: ov.Tensor | None = None
        self._static = {}
        kv_np = np.float16 if layout.kv_type == ov.Type.f16 else np.float32
        self._has_mask_input = any("attention_mask" in p.get_names() for p in cm.prefill.inputs)
        self._past: dict[str, np.ndarray] = {}
        if layout.past_len:
            for key in layout.layers:
                port = cm.prefill.input(f"past_key_values.{key}")
                self._past[key] = np.zeros(list(port.get_shape()), dtype=kv_np)

    def infer(self) -> None:
        ids, mask = self._input("input_ids"), self._input("attention_mask")
        if ids is None or mask is None:
            raise UserInputError("set input_ids and attention_mask before infer()")
        shape = list(ids.shape)
        size = self.cm.cfg.max_prompt_len
        if ids.ndim != 2 or list(mask.shape) != shape:
            raise UserInputError(f"input_ids {_dims(shape)} and attention_mask {_dims(list(mask.shape))} must be "
                                 "[1, n] each")
        if shape[0] != 1:
            # the real fails inside NPUW here ("padded_shape[i] == position_shape[i]" without chunking,
            # "Cannot set new shape ... for ROI tensor" with it): its request is batch 1
            raise UserInputError(
                f"Decoder embedding model expects batch size 1, got shape {_dims(shape)} (the real NPUW fails on "
                "it: 'padded_shape[i] == position_shape[i]', or with chunking 'Cannot set new shape ... for ROI "
                "tensor'): embed the texts one by one, or use the static path (batch_size, max_length and "
                "pad_to_max_length)")
        n = shape[1]
        if n > size:
            raise UserInputError(
                f'Input prompt is longer than configured "NPUW_LLM_MAX_PROMPT_LEN": {size}.\nPlease either setup '
                'bigger "NPUW_LLM_MAX_PROMPT_LEN" or shorten the prompt.')
        ids = ids.astype(np.int64).reshape(-1)
        user_mask = mask.astype(np.int64).reshape(-1)
        out: np.ndarray | None = None
        q, past_len = self.layout.q_len, self.layout.past_len
        for past in self._past.values():
            past.fill(0)
        stored = 0
        masked = np.float32(np.finfo(np.float32).min)
        while stored < n:
            cur = min(n - stored, q)
            pad = q - cur
            chunk_ids = np.zeros((1, q), dtype=np.int64)
            chunk_ids[0, pad:] = ids[stored:stored + cur]
            pos = np.zeros(q, dtype=np.int64)
            pos[pad:] = np.arange(stored, stored + cur)
            keys = np.zeros(past_len + q, dtype=bool)  # the real's attention-mask input
            keys[:stored] = user_mask[:stored] != 0
            keys[past_len + pad:] = user_mask[stored:stored + cur] != 0
            causal = np.arange(past_len + q)[None, :] <= past_len + np.arange(q)[:, None]
            add = np.where(causal & keys[None, :], np.float32(0), masked).astype(np.float32)
            req = self._request
            req.set_tensor("input_ids", ov.Tensor(chunk_ids))
            if self._has_mask_input:  # the model's own mask input, no longer read after the rewrite
                req.set_tensor("attention_mask", ov.Tensor(np.ones((1, q), dtype=np.int64)))
            req.set_tensor(POSITIONS, ov.Tensor(pos))
            req.set_tensor(MASK, ov.Tensor(add.reshape(1, 1, q, past_len + q)))
            for key, past in self._past.items():
                req.set_tensor(f"past_key_values.{key}", ov.Tensor(past, shared_memory=True))
            req.infer()
            hidden = np.asarray(req.get_tensor("last_hidden_state").data)
            if out is None:
                out = np.zeros((1, size, hidden.shape[2]), dtype=hidden.dtype)
            out[0, stored:stored + cur] = hidden[0, pad:]
            if stored + cur < n:
                for key, past in self._past.items():
                    present = np.asarray(req.get_tensor(f"present.{key}").data)
                    past[:, :, stored:stored + cur] = present[:, :, pad:]
            stored += cur
        if out is None:  # no tokens: nothing computed, all rows zero
            hidden_size = self.cm.outputs[0].partial_shape[2].get_length()
            out = np.zeros((1, size, hidden_size), dtype=np.float32)
        self._out = ov.Tensor(out)
