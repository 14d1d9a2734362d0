"""NPUW's Whisper-decoder mode (``NPUW_WHISPER=YES`` with ``NPUW_LLM=YES``): what openvino.genai's
WhisperPipeline compiles on "NPU" without ``STATIC_PIPELINE`` (``utils.cpp``
``update_npu_config_whisper``: MAX_PROMPT_LEN 4, MIN_RESPONSE_LEN 444, a static prefill).

The stateful Whisper decoder (``input_ids``, ``encoder_hidden_states`` with a static frame count,
``beam_idx`` → ``logits``; self- and cross-attention K/V held as states) becomes two static models,
as the real's ``prepare_whisper_model`` / ``WhisperInferRequest`` build and run them:

- the *prefill* ``input_ids`` [1, P] (P = NPUW_LLM_MAX_PROMPT_LEN, not aligned): the prompt at the
  front, zeros after it; outputs ``logits`` [1, P, V], the prompt's self K/V
  (``present.N.decoder.*``) and the cross-attention K/V computed from ``encoder_hidden_states``
  (``present.N.encoder.*``);
- the *generate* model ``input_ids`` [1, 1] over ``total - 1`` past slots (total = P +
  MIN_RESPONSE_LEN = 448), the cross-attention K/V as inputs, ``cache_position`` [1] (the token's
  position) and an additive ``attention_mask`` [1, 1, 1, total] (the stored slots and the token).

The request routes a call by its ``input_ids`` length, as the real: more than one token, or nothing
stored yet, is a prefill (which starts over: the stored count is the prompt's length); one token
is a generate step at position ``stored``, against the KV of the last prefill and the steps after
it.  So a one-token call after the first one does not read its ``encoder_hidden_states``: it
continues the previous sequence (openvino.genai's language detection on every call but a
pipeline's first, docs/npuw.md).  ``reset_state`` does not change that (the real's does not either).
The KV moves between the models in ``KV_CACHE_PRECISION`` (f16 by default, as the real's
f16 KV tensors; here by rounding in numpy); the prefill's logits are the device's.  When a step
fills the KV cache its ``NPUW_WHISPER_EOS_TOKEN`` logit is set to +inf (the real's workaround);
a step on a full cache is the real's "KV-Cache is full." (``KVCacheFullError``).  A prompt longer
than P is a ``PromptTooLongError`` (the real copies it into its P-slot buffer regardless).

``NPUW_WHISPER_DECOMPOSE_SDPA=YES`` (what openvino.genai sets for ``word_timestamps``), as the
real's ``llm_compiled_model.cpp`` / ``prepare_whisper_model.cpp`` / ``whisper_infer_request.cpp``:
the prefill spans ``total - 1`` tokens (447) instead of P, its padding rows get the f32 minimum in
every cross-attention (the real's ``AttentionMaskInput``), the cross-attention SDPAs are decomposed
and their masked scores ``[1, heads, total - 1, frames]`` become the compiled model's outputs
``cross_attention_qk_scaled_scores_<n>`` (f32, rank 0 in the port: the tensor is the last
prefill's, padding rows included, as the real's; before any prefill it is an error).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import ConfigError, KVCacheFullError, PromptTooLongError, UserInputError
from ov_npu_emu.runtime.device import DeviceInferRequest, PortInfo
from ov_npu_emu_npuw.config import NPUW_OPTIONS, LLMConfig, parse_config
from ov_npu_emu_npuw.mode_model import ModeCompiledModel

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel
    from ov_npu_emu.api.core import Core

__all__ = [
    "CROSS_MASK",
    "SCORES_OUTPUT",
    "WhisperCompiledModel",
    "WhisperInferRequest",
    "add_attention_mask",
    "add_cache_position",
    "add_cross_attention_mask",
    "compile_whisper",
    "import_whisper",
    "cross_mask_padding",
    "cross_mask_rows",
    "decoder_from_stateless",
    "expose_cross_attention_scores",
    "normalize_kv_names",
    "reshape_static",
    "split_stateful_decoder",
    "with_past_from_stateless",
]

logger = logging.getLogger("ov_npu_emu_npuw")

NEG = float(np.finfo(np.float32).min)
_SDPA = "ScaledDotProductAttention"


# -- graph edits shared with genai_shim's STATIC_PIPELINE (the same steps as the real's two passes) -----


def _names(ports: Any) -> set[str]:
    return {n for p in ports for n in p.get_names()}


def _layer(name: str) -> str:
    m = re.search(r"layers\.(\d+)\.", name) or re.search(r"(\d+)", name)
    if m is None:
        raise ConfigError(f"cannot tell the decoder layer of {name!r}; export the model with optimum-cli",
                          key="models_path")
    return m.group(1)


def _sdpas(model: Any) -> list[Any]:
    return [n for n in model.get_ordered_ops() if n.get_type_name() == _SDPA]


def _is_self_attention(sdpa: Any) -> bool:
    return "self_attn" in sdpa.get_friendly_name() or (
        sdpa.get_input_size() > 3 and sdpa.input_value(3).get_node().get_type_name() not in ("Constant",))


def _set_name(output: Any, name: str) -> None:
    output.get_tensor().set_names({name})


def _cross_states(model: Any) -> list[tuple[Any, Any, str]]:
    """(ReadValue, its SDPA input, "key"/"value") of every cross-attention state left after
    stateful_to_stateless (a state whose initial value the graph computes)."""
    out = []
    for rv in (n for n in model.get_ordered_ops() if n.get_type_name() == "ReadValue"):
        for target in rv.output(0).get_target_inputs():
            node = target.get_node()
            if node.get_type_name() == _SDPA:
                out.append((rv, target, "key" if target.get_index() == 1 else "value"))
    return out


def _remove_assigns(model: Any) -> None:
    for sink in list(model.get_sinks()):
        model.remove_sink(sink)


def normalize_kv_names(model: Any) -> None:
    """``input_restored.past_key_values.0.decoder.keypresent.0.decoder.key`` →
    ``past_key_values.0.decoder.key`` (inputs) / ``present.0.decoder.key`` (outputs)."""
    for ports, prefix in ((model.inputs, "past_key_values"), (model.outputs, "present")):
        for port in ports:
            name = port.get_any_name()
            if ".decoder." not in name:
                continue
            kind = "key" if ".key" in name else "value"
            _set_name(port, f"{prefix}.{_layer(name)}.decoder.{kind}")


def decoder_from_stateless(model: Any) -> Any:
    """A stateful_to_stateless decoder without past inputs (its SDPAs read the current K/V), the
    cross-attention K/V as ``present.N.encoder.*`` outputs: the prompt model."""
    from openvino import opset13 as ops

    params = [p for p in model.get_parameters() if p.output(0).get_any_name().startswith("past_key_values")]
    new_results = []
    for p in params:
        shape_ofs, concat = [], None
        for t in p.output(0).get_target_inputs():
            kind = t.get_node().get_type_name()
            if kind == "Concat":
                concat = t.get_node()
            elif kind == "ShapeOf":
                shape_ofs.append(t.get_node())
        if concat is None:
            raise ConfigError(f"{p.get_friendly_name()}: no KV Concat; export with optimum-cli", key="models_path")
        current = concat.input_value(1)
        for t in list(concat.output(0).get_target_inputs()):
            node = t.get_node()
            if node.get_type_name() == "Result":
                name = node.output(0).get_any_name()
                model.remove_result(node)
                r = ops.result(current)
                _set_name(r.output(0), name)
                new_results.append(r)
            else:
                t.replace_source_output(current)
        for s in shape_ofs:
            shape = [1, p.get_partial_shape()[1].get_length(), 0, p.get_partial_shape()[3].get_length()]
            const = ops.constant(np.array(shape, dtype=np.int64 if s.get_output_element_type(0).get_type_name()
                                          == "i64" else np.int32))
            for t in list(s.output(0).get_target_inputs()):
                t.replace_source_output(const.output(0))
    for p in params:
        model.remove_parameter(p)
    model.add_results(new_results)
    cross = []
    for rv, target, kind in _cross_states(model):
        value = rv.input_value(0)
        target.replace_source_output(value)
        r = ops.result(value)
        _set_name(r.output(0), f"present.{_layer(target.get_node().get_friendly_name())}.encoder.{kind}")
        cross.append(r)
    _remove_assigns(model)
    model.add_results(cross)
    model.validate_nodes_and_infer_types()
    return model


def with_past_from_stateless(model: Any) -> Any:
    """A stateful_to_stateless decoder with the cross-attention states as
    ``past_key_values.N.encoder.*`` inputs: the one-token model."""
    from openvino import opset13 as ops

    params = []
    for rv, target, kind in _cross_states(model):
        p = ops.parameter(rv.get_output_partial_shape(0), rv.get_output_element_type(0))
        _set_name(p.output(0), f"past_key_values.{_layer(target.get_node().get_friendly_name())}.encoder.{kind}")
        target.replace_source_output(p.output(0))
        params.append(p)
    _remove_assigns(model)
    model.add_parameters(params)
    model.validate_nodes_and_infer_types()
    return model


def split_stateful_decoder(model: Any) -> tuple[Any, Any]:
    """(prompt model, one-token model) of a stateful Whisper decoder (``beam_idx`` input): OpenVINO's
    stateful_to_stateless_transformation, the K/V names normalised, then the two edits above."""
    from openvino._offline_transformations import stateful_to_stateless_transformation

    stateful_to_stateless_transformation(model)
    normalize_kv_names(model)
    with_past = model.clone()
    return decoder_from_stateless(model), with_past_from_stateless(with_past)


def add_cache_position(model: Any) -> None:
    """The positions Range(past, past + n) → Unsqueeze → Tile of the export read ``cache_position``
    [1] instead (on a static cache the past length is always the slot count)."""
    from openvino import opset13 as ops

    for node in model.get_ordered_ops():
        if node.get_type_name() != "Range":
            continue
        users = [t for t in node.output(0).get_target_inputs() if t.get_node().get_type_name() == "Unsqueeze"]
        tiles = [u for t in users for u in t.get_node().output(0).get_target_inputs()
                 if u.get_node().get_type_name() == "Tile"]
        if not tiles:
            continue
        pos = ops.parameter([1], np.int64, name="cache_position")
        _set_name(pos.output(0), "cache_position")
        src = pos.output(0)
        if node.get_output_element_type(0).get_type_name() != "i64":
            src = ops.convert(pos, node.get_output_element_type(0)).output(0)
        for t in users:
            t.replace_source_output(src)
        model.add_parameters([pos])
        return
    raise ConfigError("the Whisper decoder has no position Range → Unsqueeze → Tile (optimum's Whisper "
                      "decoder), so its static one-token model cannot take cache_position; export with optimum-cli",
                      key="models_path")


def add_attention_mask(model: Any, kv_len: int) -> None:
    """Every self-attention SDPA reads ``attention_mask`` [1, 1, 1, kv_len] (additive f32)."""
    from openvino import opset13 as ops

    mask = ops.parameter([1, 1, 1, kv_len], np.float32, name="attention_mask")
    _set_name(mask.output(0), "attention_mask")
    selfs = [s for s in _sdpas(model) if _is_self_attention(s) and s.get_input_size() > 3]
    if not selfs:
        raise ConfigError("the Whisper decoder has no masked self-attention SDPA; export with optimum-cli",
                          key="models_path")
    for s in selfs:
        s.input(3).replace_source_output(mask.output(0))
    model.add_parameters([mask])


def reshape_static(model: Any, ids: int, past: int, frames: int, hidden: int) -> None:
    """``input_ids`` [1, ids], ``encoder_hidden_states`` [1, frames, hidden], self past [1, H, past,
    D], cross past [1, H, frames, D]."""
    shapes: dict[str, list[int]] = {}
    for p in model.inputs:
        n = p.get_any_name()
        ps = p.get_partial_shape()
        if n == "input_ids":
            shapes[n] = [1, ids]
        elif n == "encoder_hidden_states":
            shapes[n] = [1, frames, hidden]
        elif n.startswith("past_key_values") and ".encoder." in n:
            shapes[n] = [1, ps[1].get_length(), frames, ps[3].get_length()]
        elif n.startswith("past_key_values"):
            shapes[n] = [1, ps[1].get_length(), past, ps[3].get_length()]
        elif n in ("cache_position", "attention_mask", CROSS_MASK):
            continue
        else:
            raise ConfigError(f"unexpected Whisper decoder input {n!r}", key="models_path")
    model.reshape(shapes)


# -- word timestamps: the cross-attention SDPAs decomposed, their scores exposed ----------------

#: the decomposed cross-attention's masked scores (``<name>_<layer>`` as outputs)
SCORES_OUTPUT = "cross_attention_qk_scaled_scores"
#: the prefill's additive cross-attention row mask [1, 1, P, 1] (ours; the real builds a [P, frames]
#: mask from its i64 ``attention_mask`` input through Reshape/Equal/Select/Broadcast): 0 for the
#: prompt's rows, the f32 minimum for the padding rows
CROSS_MASK = "npuw_cross_attention_mask"


def expose_cross_attention_scores(model: Any, key: str = "word_timestamps", cross_mask: Any = None) -> int:
    """Decompose the cross-attention SDPAs (friendly name with ``encoder_attn``) of a Whisper
    decoder as openvino.genai's and NPUW's ``WhisperScaledDotProductAttentionDecomposition``
    (``MatMul(q * scale, kᵀ) + mask``, softmax, ``MatMul(·, v)``) and add the masked scores as
    outputs ``cross_attention_qk_scaled_scores_<n>``; returns how many were added.  ``cross_mask``
    (an output) replaces the SDPAs' own masks, as the real's static prefills do (their
    ``AttentionMaskInput`` pass gives each cross-attention the padding rows' mask)."""
    from openvino import opset13 as ops

    for node in model.get_ordered_ops():
        if node.get_type_name() != _SDPA or "encoder_attn" not in node.get_friendly_name():
            continue
        n_in = node.get_input_size()
        causal = bool(node.get_attributes().get("causal", False))
        if n_in > 5 or causal:
            raise ConfigError(
                f"{node.get_friendly_name()}: word timestamps need a cross-attention without sink or causal "
                "mask (an optimum-intel Whisper export); this one is not decomposed", key=key)
        query, key_in, value = node.input_value(0), node.input_value(1), node.input_value(2)
        if n_in == 5:
            scale = node.input_value(4)
        else:
            last = ops.gather(ops.shape_of(query, "i32"), ops.constant(np.int32(-1)), ops.constant(np.int32(0)))
            scale = ops.divide(ops.convert_like(ops.constant(np.int32(1)), query),
                               ops.sqrt(ops.convert_like(last, query)))
        rank = key_in.get_partial_shape().rank
        if rank.is_dynamic:
            raise ConfigError("word timestamps: the cross-attention key has a dynamic rank", key=key)
        r = rank.get_length()
        key_t = ops.transpose(key_in, ops.constant(np.array([*range(r - 2), r - 1, r - 2], dtype=np.int32)))
        scores = ops.matmul(ops.multiply(query, scale), key_t, False, False)
        mask = cross_mask if cross_mask is not None else (node.input_value(3) if n_in > 3 else None)
        if mask is not None:
            if mask.get_element_type() == ov.Type.boolean:
                zero = ops.convert_like(ops.constant(np.int32(0)), query)
                minus_inf = ops.convert_like(ops.constant(np.float32(-np.inf)), scores)
                mask = ops.select(mask, zero, minus_inf).output(0)
            scores = ops.add(scores, mask)
        scores.output(0).get_tensor().add_names({SCORES_OUTPUT})
        out = ops.matmul(ops.softmax(scores, -1), value, False, False)
        out.set_friendly_name(node.get_friendly_name())
        node.output(0).replace(out.output(0))
    added = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Add":
            continue
        if not any(SCORES_OUTPUT in name for name in op.output(0).get_names()):
            continue
        model.add_outputs([op.output(0)])[0].get_tensor().add_names({f"{SCORES_OUTPUT}_{added}"})
        added += 1
    model.validate_nodes_and_infer_types()
    return added


def add_cross_attention_mask(model: Any, prompt_len: int) -> Any:
    """A ``CROSS_MASK`` input [1, 1, prompt_len, 1] (f32, added to every row's scores); its output."""
    from openvino import opset13 as ops

    mask = ops.parameter([1, 1, prompt_len, 1], np.float32, name=CROSS_MASK)
    _set_name(mask.output(0), CROSS_MASK)
    model.add_parameters([mask])
    return mask.output(0)


#: the padding rows' value on a device computing in f16: the f32 minimum overflows to -inf there,
#: a row of -inf scores softmaxes to NaN, and the self-attention's 0 x NaN carries it into the
#: prompt's rows; half of f16's range leaves room for the scores added to it (f16's lowest plus a
#: negative score overflows too).  The real NPU's handling is not known here; f32 is the exact mode
F16_PADDING = -32768.0


def cross_mask_padding(compiled: Any) -> float:
    """The padding rows' mask value for ``compiled``: the f32 minimum (the real's) unless it
    computes in f16."""
    try:
        precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    except Exception:  # noqa: BLE001 - a device without the key computes as given
        return NEG
    return F16_PADDING if "16" in precision else NEG


def cross_mask_rows(prompt_len: int, n: int, padding: float = NEG) -> np.ndarray:
    """The ``CROSS_MASK`` value of a prompt of ``n`` tokens: 0 for its rows, ``padding`` (the f32
    minimum, as the real's) after."""
    mask = np.zeros((1, 1, prompt_len, 1), np.float32)
    mask[:, :, n:] = padding
    return mask


# -- the compiled model and its request ------------------------------------------------------------


def _f16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def compile_whisper(core: Core, model: ov.Model, config: Mapping[str, Any]) -> WhisperCompiledModel:
    """The prefill and generate models of a stateful Whisper decoder, on NPUW_DEVICES' first device;
    with CACHE_DIR, an earlier compilation of the same model and keys is imported instead (entries
    ``npuw_whisper_<key>.blob``, holding their weights; the key as an LLM's)."""
    from ov_npu_emu_npuw.compiled_model import configure_logging
    from ov_npu_emu_npuw.serialize import cache_key, load_cached_whisper, store_cached_whisper

    configure_logging()
    cfg = parse_config(config)
    if not cfg.cache_dir:
        return _compile_whisper(core, model, config, cfg)
    key = cache_key(model, cfg)
    parts = load_cached_whisper(core, cfg.cache_dir, key, config)
    if parts is not None:
        cached = WhisperCompiledModel(**parts)
        cached.loaded_from_cache = True
        return cached
    cm = _compile_whisper(core, model, config, cfg)
    store_cached_whisper(cfg.cache_dir, key, cm)
    return cm


def _compile_whisper(core: Core, model: ov.Model, config: Mapping[str, Any], cfg: LLMConfig) -> WhisperCompiledModel:
    from ov_npu_emu_npuw.compiled_model import pick_device

    decompose = bool(NPUW_OPTIONS["NPUW_WHISPER_DECOMPOSE_SDPA"].read(config))
    # the real's Whisper mode takes the lengths as given (4 + 444 = 448, Whisper's max_target_positions)
    prompt = int(NPUW_OPTIONS["NPUW_LLM_MAX_PROMPT_LEN"].read(config))
    total = prompt + int(NPUW_OPTIONS["NPUW_LLM_MIN_RESPONSE_LEN"].read(config))
    if decompose:
        # the real (llm_compiled_model.cpp): word timestamps run the decoder once more on the whole
        # window's text, so the prefill takes all but one of the KV slots
        prompt = total - 1
    eos = int(NPUW_OPTIONS["NPUW_WHISPER_EOS_TOKEN"].read(config))
    names = _names(model.inputs)
    need = {"input_ids", "encoder_hidden_states", "beam_idx"}
    if not need <= names or "logits" not in _names(model.outputs):
        raise ConfigError(
            f"NPUW_WHISPER needs a stateful Whisper decoder (inputs {sorted(need)}, output logits); got inputs "
            f"{sorted(names)}. Export with optimum-cli --task automatic-speech-recognition-with-past (stateful)",
            key="NPUW_WHISPER")
    hs = model.input("encoder_hidden_states").get_partial_shape()
    if hs.rank.is_dynamic or hs.rank.get_length() != 3 or not (hs[1].is_static and hs[2].is_static):
        raise ConfigError(
            f"NPUW_WHISPER: encoder_hidden_states must have a static frame count and hidden size, got {hs}; "
            "reshape it to the encoder's output first (openvino.genai does: [?, 1500, d_model])",
            key="NPUW_WHISPER")
    frames, hidden = hs[1].get_length(), hs[2].get_length()
    device = pick_device(core, cfg.devices)
    name = model.get_friendly_name()
    prefill, generate = split_stateful_decoder(model.clone())
    add_cache_position(generate)
    add_attention_mask(generate, total)
    reshape_static(prefill, prompt, 0, frames, hidden)
    reshape_static(generate, 1, total - 1, frames, hidden)
    n_scores = 0
    if decompose:
        n_scores = expose_cross_attention_scores(prefill, "NPUW_WHISPER_DECOMPOSE_SDPA",
                                                 add_cross_attention_mask(prefill, prompt))
    prefill.set_friendly_name(f"{name}_prefill")
    generate.set_friendly_name(f"{name}_kv{total}")
    t0 = time.perf_counter()
    cp = core.compile_model(prefill, device, dict(cfg.prefill_config))
    cg = core.compile_model(generate, device, dict(cfg.generate_config))
    logger.info("compiled Whisper decoder %s: prefill [1, %d] and generate kv%d on %s in %.2f s",
                name, prompt, total, device, time.perf_counter() - t0)
    ins = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.inputs)]
    outs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.outputs)]
    # the real adds one output per decomposed layer, f32 of rank 0 (the tensor comes from the last prefill)
    first = len(outs)
    outs += [PortInfo(first + i, (f"{SCORES_OUTPUT}_{i}", SCORES_OUTPUT), ov.Type.f32, ov.PartialShape([]))
             for i in range(n_scores)]
    return WhisperCompiledModel(name, cfg, device, cp, cg, prompt, total, eos, ins, outs, decompose)


def import_whisper(core: Core, blob: bytes, config: Mapping[str, Any] | None = None) -> WhisperCompiledModel:
    """An exported Whisper decoder back as a compiled model (serialize.py reads and checks it)."""
    from ov_npu_emu_npuw.compiled_model import configure_logging
    from ov_npu_emu_npuw.serialize import read_whisper

    configure_logging()
    return WhisperCompiledModel(**read_whisper(core, blob, config))


class WhisperCompiledModel(ModeCompiledModel):
    """The stateful decoder's ports over the static prefill and generate models."""

    mode = "Whisper"

    def __init__(self, name: str, cfg: LLMConfig, device: str, prefill: CompiledModel, generate: CompiledModel,
                 prompt_len: int, total: int, eos: int, inputs: list[PortInfo], outputs: list[PortInfo],
                 decompose: bool = False) -> None:
        self.name = name
        self.cfg = cfg
        self.device = device
        self.prefill = prefill
        self.generate = generate
        self.prompt_len = prompt_len
        self.total = total
        self.eos = eos
        self.inputs = inputs
        self.outputs = outputs
        #: NPUW_WHISPER_DECOMPOSE_SDPA: the prefill spans total - 1 tokens and exposes the scores
        self.decompose = decompose

    def create_infer_request(self) -> WhisperInferRequest:
        return WhisperInferRequest(self)

    def export_model(self) -> bytes:
        from ov_npu_emu_npuw.serialize import export_whisper

        return export_whisper(self)

    def mode_properties(self) -> dict[str, Any]:
        return {"NPUW_WHISPER": True, "NPUW_WHISPER_EOS_TOKEN": self.eos, "NPUW_WHISPER_DECOMPOSE_SDPA": self.decompose,
                "NPUW_LLM_MAX_PROMPT_LEN": self.prompt_len, "NPUW_LLM_MIN_RESPONSE_LEN": self.total - self.prompt_len}


class WhisperInferRequest(DeviceInferRequest):
    """Prefill or one generate step per call, chosen by the length of ``input_ids`` (the real's
    WhisperInferRequest::infer)."""

    def __init__(self, cm: WhisperCompiledModel) -> None:
        self.cm = cm
        self._prefill = cm.prefill.create_infer_request()
        self._generate = cm.generate.create_infer_request()
        self._index = {n: p.index for p in cm.inputs for n in p.names}
        self._user: dict[int, ov.Tensor] = {}
        self._logits: ov.Tensor | None = None
        #: the last prefill's cross-attention scores per output name (NPUW_WHISPER_DECOMPOSE_SDPA)
        self._scores: dict[str, ov.Tensor] = {}
        self._scores_names = [o.any_name for o in cm.outputs if o.any_name.startswith(f"{SCORES_OUTPUT}_")]
        self._padding = cross_mask_padding(cm.prefill) if cm.decompose else NEG
        self._present = [o.get_any_name() for o in cm.prefill.outputs if o.get_any_name().startswith("present.")]
        self._past = {p.get_any_name(): tuple(p.get_shape()) for p in cm.generate.inputs
                      if p.get_any_name().startswith("past_key_values")}
        missing = {n.replace("present", "past_key_values") for n in self._present} ^ set(self._past)
        if missing:
            raise ConfigError(f"NPUW_WHISPER: the prefill and generate models do not pair their K/V "
                              f"({sorted(missing)}); export the decoder with optimum-cli", key="NPUW_WHISPER")
        self._round = _f16 if cm.cfg.kv_precision == "f16" else (lambda x: np.array(x, np.float32))
        self._kv = {n: np.zeros(s, np.float32) for n, s in self._past.items()}
        self._mask = np.full((1, 1, 1, cm.total), NEG, np.float32)
        self._mask[..., -1] = 0.0  # the current token
        #: tokens in the KV (the real's num_stored_tokens)
        self.num_stored_tokens = 0

    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        if is_input:
            if index not in self._user:
                port = self.cm.inputs[index]
                shape = [d.get_length() if d.is_static else (1 if i == 0 else 0)
                         for i, d in enumerate(port.partial_shape)]
                self._user[index] = ov.Tensor(port.element_type, shape)
            return self._user[index]
        name = self.cm.outputs[index].any_name
        if name.startswith(f"{SCORES_OUTPUT}_"):
            if name not in self._scores:
                # the real: "map::at" before the first prefill
                raise UserInputError("Cross-attention qk scaled scores tensor is not available. Please run "
                                     "inference first (a prompt of more than one token)")
            return self._scores[name]
        if self._logits is None:
            raise UserInputError("Logits tensor is not available. Please run inference first.")
        return self._logits

    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        if not is_input:
            raise UserInputError("NPUW Whisper output 'logits' is owned by the plugin; read it with get_tensor")
        self._user[index] = tensor

    def reset_state(self) -> None:
        """As the real's: the stored count stays (the next prompt of more than one token starts over)."""

    def _input(self, name: str) -> np.ndarray:
        index = self._index.get(name)
        if index is None or index not in self._user:
            raise UserInputError(f"set {name} before infer()")
        return np.asarray(self._user[index].data)

    def infer(self) -> None:
        ids = self._input("input_ids")
        if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
            raise UserInputError(
                f"NPUW_WHISPER takes input_ids [1, n>0] (batch 1, as the real's Whisper mode), got {list(ids.shape)}; "
                "decode greedily or by sampling (no beam search) on NPU")
        if ids.shape[1] != 1 or self.num_stored_tokens == 0:
            self._run_prefill(ids, self._input("encoder_hidden_states"))
        else:
            self._run_generate(int(ids[0, 0]))

    def _run_prefill(self, ids: np.ndarray, hidden: np.ndarray) -> None:
        n, size = ids.shape[1], self.cm.prompt_len
        if n > size:
            # the real copies all n ids into its P-slot input (heap corruption); ours refuses
            raise PromptTooLongError(
                f"NPUW_WHISPER: a prompt of {n} tokens does not fit the {size}-token Whisper prefill "
                f"(NPUW_LLM_MAX_PROMPT_LEN={size}); openvino.genai puts initial_prompt / hotwords there: drop them "
                "on NPU (the real corrupts its heap on such a prompt), or run them on \"CPU\"")
        if hidden.ndim != 3 or hidden.shape[0] != 1:
            raise UserInputError(f"NPUW_WHISPER: encoder_hidden_states must be [1, frames, hidden], got "
                                 f"{list(hidden.shape)}")
        padded = np.zeros((1, size), np.int64)
        padded[0, :n] = ids[0]
        feed = {"input_ids": padded, "encoder_hidden_states": np.asarray(hidden, np.float32)}
        if self.cm.decompose:
            feed[CROSS_MASK] = cross_mask_rows(size, n, self._padding)
        out = self._prefill.infer(feed)
        # the whole prefill's scores, padding rows included (the real's tensors are not sliced)
        self._scores = {name: ov.Tensor(np.array(np.asarray(out[name]), np.float32)) for name in self._scores_names}
        for name in self._present:
            value = self._round(np.asarray(out[name]))
            target = name.replace("present", "past_key_values")
            if ".encoder." in name:
                self._kv[target] = value
            else:
                self._kv[target].fill(0.0)
                self._kv[target][:, :, :n] = value[:, :, :n]
        self._mask[..., :-1] = NEG
        self._mask[..., :n] = 0.0
        self.num_stored_tokens = n
        self._logits = ov.Tensor(np.array(np.asarray(out["logits"])[:, :n], np.float32))

    def _run_generate(self, token: int) -> None:
        pos, total = self.num_stored_tokens, self.cm.total
        if pos >= total:
            # the real's text (its step that filled the cache forced EOS already)
            raise KVCacheFullError(
                f"KV-Cache is full. The Whisper decoder holds {total} tokens (NPUW_LLM_MAX_PROMPT_LEN + "
                "NPUW_LLM_MIN_RESPONSE_LEN); start a new prompt (a call of more than one token)")
        feed: dict[str, Any] = {"input_ids": np.array([[token]], np.int64),
                                "cache_position": np.array([pos], np.int64),
                                "attention_mask": self._mask, **self._kv}
        out = self._generate.infer(feed)
        logits = np.array(np.asarray(out["logits"])[:, -1:], np.float32)
        self.num_stored_tokens = pos + 1
        if self.num_stored_tokens == total:
            # the real's workaround: the cache is full, so force EOS to stop the pipeline
            logger.warning("Whisper model stuck (KV cache is full): forcing EOS %d", self.cm.eos)
            if 0 <= self.cm.eos < logits.shape[-1]:
                logits[0, 0, self.cm.eos] = np.inf
        else:
            for name in self._present:
                if ".decoder." in name:
                    row = np.asarray(out[name])[:, :, -1]
                    self._kv[name.replace("present", "past_key_values")][:, :, pos] = self._round(row)
            self._mask[..., pos] = 0.0
        self._logits = ov.Tensor(logits)
