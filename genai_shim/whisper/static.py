"""WhisperPipeline's STATIC_PIPELINE=True decoder on "NPU" (openvino.genai whisper/pipeline_static.cpp).

Two static graphs, as the real builds them:

- the *decoder* at ``input_ids`` [1, 4] (the prompt ``<|startoftranscript|> <|lang|> <|task|>
  [<|notimestamps|>]`` right-padded with 0) → ``logits`` [1, 4, vocab], the prompt's self K/V
  (``present.N.decoder.*``) and the cross-attention K/V (``present.N.encoder.*``);
- the *decoder with past* at ``input_ids`` [1, 1] over a static KV cache of 448 positions (447
  past slots and the current token), the cross-attention K/V as inputs, with two inputs added:
  ``cache_position`` [1] (the token's position, which the export computes from the past's length:
  on a static cache that is always 447) and ``attention_mask`` (which past slots hold tokens).

From the stateless export (``--disable-stateful``) the two IRs are read as exported; from the
stateful export OpenVINO's own ``stateful_to_stateless_transformation`` runs first, then the
real's edits in Python: the self-attention past inputs removed for the decoder (its SDPAs read the
current K/V), the cross-attention ``ReadValue`` states exposed as outputs (decoder) or as inputs
(decoder with past).  Our mask is an additive f32 ``[1, 1, 1, 448]`` on every self-attention SDPA
(0 attended, the float minimum masked; the real builds the same from an i64/f32 mask through
Equal/Select).  The encoder output, ``encoder_hidden_states`` and the KV cache move through f16 as
in the real (its ``preprocess_encoder`` / ``preprocess_decoder``); here by rounding in numpy.

Batch 1 and greedy or sampled decoding only; ``initial_prompt`` / ``hotwords`` are refused as the
real refuses them; word timestamps (the real decomposes the SDPAs of both graphs) are not built.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError

__all__ = ["StaticDecoder", "PROMPT_LEN", "KV_LEN"]

#: the decoder's input_ids length (the real's init ids: sot, language, task, notimestamps)
PROMPT_LEN = 4
#: the real's static KV cache (max_target_positions)
KV_LEN = 448
NEG = float(np.finfo(np.float32).min)
_SDPA = "ScaledDotProductAttention"


def _f16(x: np.ndarray) -> np.ndarray:
    """An f16 round trip: what the real's f16 tensors between the graphs do to the values."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


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


# -- the stateful export made stateless (the real's prepare_decoder_model / _with_past_model) ------------


def _read_values(model: Any) -> list[Any]:
    return [n for n in model.get_ordered_ops() if n.get_type_name() == "ReadValue"]


def _cross_states(model: Any) -> list[tuple[Any, Any, str]]:
    """(ReadValue, its SDPA input, "key"/"value") of every cross-attention state left after
    stateful_to_stateless (a state whose initial value the graph computes)."""
    out = []
    for rv in _read_values(model):
        for target in rv.output(0).get_target_inputs():
            node = target.get_node()
            if node.get_type_name() == _SDPA:
                out.append((rv, target, "key" if target.get_index() == 1 else "value"))
    return out


def _remove_assigns(model: Any) -> None:
    for sink in list(model.get_sinks()):
        model.remove_sink(sink)


def _normalize_kv_names(model: Any) -> None:
    """``input_restored.past_key_values.0.decoder.keypresent.0.decoder.key`` →
    ``past_key_values.0.decoder.key`` (inputs) / ``present.0.decoder.key`` (outputs), as the
    real's normalize_*_key_value_names."""
    for ports, prefix in ((model.inputs, "past_key_values"), (model.outputs, "present")):
        for port in ports:
            name = port.get_any_name()
            if ".decoder." not in name:
                continue
            kind = "key" if ".key" in name else "value"
            _set_name(port, f"{prefix}.{_layer(name)}.decoder.{kind}")


def _decoder_from_stateless(model: Any) -> Any:
    """The real's prepare_decoder_model on a stateful_to_stateless model: no past inputs, the
    cross-attention K/V as outputs."""
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


def _with_past_from_stateless(model: Any) -> Any:
    """The real's prepare_decoder_with_past_model: the cross-attention states as inputs."""
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


# -- inputs the static with-past graph needs ------------------------------------------------------


def _add_cache_position(model: Any) -> None:
    """The positions Range(past, past + n) → Unsqueeze → Tile of the export reads ``cache_position``
    instead (the real's add_cache_position_input)."""
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
    raise ConfigError("the decoder with past has no position Range → Unsqueeze → Tile (optimum's Whisper "
                      "decoder); STATIC_PIPELINE cannot add cache_position; export with optimum-cli",
                      key="models_path")


def _add_attention_mask(model: Any) -> None:
    """Every self-attention SDPA reads ``attention_mask`` [1, 1, 1, KV_LEN] (additive)."""
    from openvino import opset13 as ops

    mask = ops.parameter([1, 1, 1, KV_LEN], np.float32, name="attention_mask")
    _set_name(mask.output(0), "attention_mask")
    selfs = [s for s in _sdpas(model) if _is_self_attention(s) and s.get_input_size() > 3]
    if not selfs:
        raise ConfigError("the decoder with past has no masked self-attention SDPA; export with optimum-cli",
                          key="models_path")
    for s in selfs:
        s.input(3).replace_source_output(mask.output(0))
    model.add_parameters([mask])


def _reshape(model: Any, ids: int, past: int, frames: int, hidden: int) -> None:
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
        elif n in ("cache_position", "attention_mask"):
            continue
        else:
            raise ConfigError(f"unexpected decoder input {n!r} for STATIC_PIPELINE", key="models_path")
    model.reshape(shapes)


def static_models(core: Any, folder: Path, frames: int, hidden: int) -> tuple[Any, Any]:
    """(decoder [1, 4], decoder with past [1, 1] over KV_LEN) of ``folder``."""
    from genai_shim.whisper.models import DECODER_XML

    decoder = core.read_model(folder / DECODER_XML)
    with_past_xml = folder / "openvino_decoder_with_past_model.xml"
    if "beam_idx" in _names(decoder.inputs):
        from openvino._offline_transformations import stateful_to_stateless_transformation

        stateful_to_stateless_transformation(decoder)
        _normalize_kv_names(decoder)
        with_past = decoder.clone()
        decoder = _decoder_from_stateless(decoder)
        with_past = _with_past_from_stateless(with_past)
    elif with_past_xml.is_file():
        with_past = core.read_model(with_past_xml)
    else:
        raise ConfigError(f"{folder} has a stateless decoder but no openvino_decoder_with_past_model.xml; "
                          "export with optimum-cli export openvino --task automatic-speech-recognition-with-past",
                          key="models_path")
    _add_cache_position(with_past)
    _add_attention_mask(with_past)
    _reshape(decoder, PROMPT_LEN, 0, frames, hidden)
    _reshape(with_past, 1, KV_LEN - 1, frames, hidden)
    return decoder, with_past


class StaticDecoder:
    """The ``WhisperDecoder`` of STATIC_PIPELINE=True."""

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any], frames: int,
                 hidden: int) -> None:
        decoder, with_past = static_models(core, folder, frames, hidden)
        self._present = [o.get_any_name() for o in decoder.outputs if o.get_any_name().startswith("present.")]
        self._past_inputs = {o.get_any_name(): tuple(o.get_shape()) for o in with_past.inputs
                             if o.get_any_name().startswith("past_key_values")}
        missing = {n.replace("present", "past_key_values") for n in self._present} ^ set(self._past_inputs)
        if missing:
            raise ConfigError(f"the decoder and the decoder with past do not pair their K/V ({sorted(missing)}); "
                              "export both with optimum-cli", key="models_path")
        self._prefill = core.compile_model(decoder, device, props).create_infer_request()
        self._step = core.compile_model(with_past, device, props).create_infer_request()
        self._step_reads_hidden = "encoder_hidden_states" in _names(with_past.inputs)
        self._hidden: np.ndarray | None = None
        self.reset_state()

    def reset_state(self) -> None:
        self._n = 0
        self._kv = {n: np.zeros(s, np.float32) for n, s in self._past_inputs.items()}
        self._mask = np.full((1, 1, 1, KV_LEN), NEG, np.float32)
        self._mask[..., -1] = 0.0  # the current token

    def infer(self, encoder_hidden_states: np.ndarray, input_ids: list[int]) -> np.ndarray:
        if self._n == 0:
            return self._run_prefill(encoder_hidden_states, input_ids)
        if len(input_ids) != 1:
            raise ConfigError("STATIC_PIPELINE feeds one token per step after the prompt", key="input_ids")
        return self._run_step(input_ids[0])

    def _run_prefill(self, hidden: np.ndarray, ids: list[int]) -> np.ndarray:
        if not 1 <= len(ids) <= PROMPT_LEN:
            raise ConfigError(
                f"STATIC_PIPELINE's decoder takes at most {PROMPT_LEN} prompt tokens, got {len(ids)}; "
                "initial_prompt and hotwords are not supported with STATIC_PIPELINE (as in the real)",
                key="initial_prompt")
        padded = np.zeros((1, PROMPT_LEN), np.int64)
        padded[0, :len(ids)] = ids
        self._hidden = _f16(hidden)
        out = self._prefill.infer({"input_ids": padded, "encoder_hidden_states": self._hidden})
        for name in self._present:
            value = _f16(np.asarray(out[name]))
            target = name.replace("present", "past_key_values")
            if ".encoder." in name:
                self._kv[target] = value
            else:
                self._kv[target][:, :, :PROMPT_LEN] = value
        self._mask[..., :len(ids)] = 0.0
        self._n = len(ids)
        return np.array(np.asarray(out["logits"])[0, len(ids) - 1], np.float32, copy=True)

    def _run_step(self, token: int) -> np.ndarray:
        pos = self._n
        if pos >= KV_LEN - 1:
            raise ConfigError(f"STATIC_PIPELINE's KV cache holds {KV_LEN} tokens; lower max_new_tokens",
                              key="max_new_tokens")
        feed: dict[str, Any] = {"input_ids": np.array([[token]], np.int64),
                                "cache_position": np.array([pos], np.int64),
                                "attention_mask": self._mask, **self._kv}
        if self._step_reads_hidden:
            feed["encoder_hidden_states"] = self._hidden
        out = self._step.infer(feed)
        for name in self._present:
            if ".decoder." in name:
                self._kv[name.replace("present", "past_key_values")][:, :, pos] = _f16(np.asarray(out[name])[:, :, -1])
        self._mask[..., pos] = 0.0
        self._n += 1
        return np.array(np.asarray(out["logits"])[0, -1], np.float32, copy=True)

    def infer_beams(self, encoder_hidden_states: np.ndarray, input_ids: list[int], beam_idx: list[int]) -> np.ndarray:
        raise UnsupportedFeatureError(
            "beam search is not implemented on STATIC_PIPELINE (batch 1); use greedy or sampled decoding, "
            "or the device \"CPU\"", key="num_beams")

    def alignment_scores(self, encoder_hidden_states: np.ndarray, input_ids: list[int],
                         heads: list[tuple[int, int]]) -> list[np.ndarray]:
        raise UnsupportedFeatureError(
            "word timestamps are not implemented on genai_shim's STATIC_PIPELINE yet; use the device \"CPU\"",
            key="word_timestamps")
