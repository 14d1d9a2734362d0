"""The encoder and decoder runners of WhisperPipeline.

A decoder runner is what a device path provides (``WhisperDecoder``): feed the encoder's hidden
states and some token ids, get the last position's logits; reset between windows.  The CPU path
is ``StatefulDecoder`` (openvino.genai's WhisperStatefullDecoder): the exported stateful
decoder (``input_ids``, ``encoder_hidden_states``, ``beam_idx``; ``cache_position`` when the
export has it) compiled as is through ``ov_npu_emu.Core``.  STATIC_PIPELINE's is
``static.StaticDecoder``; the default NPU path's (NPUW's Whisper mode) is ``npuw.NpuwDecoder``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from genai_shim.generation_config import WhisperGenerationConfig
from ov_npu_emu.errors import ConfigError

__all__ = ["ENCODER_XML", "DECODER_XML", "Encoder", "StatefulDecoder", "WhisperDecoder", "alignment_heads",
           "detect_language"]

ENCODER_XML = "openvino_encoder_model.xml"
DECODER_XML = "openvino_decoder_model.xml"


class WhisperDecoder(Protocol):
    """What the pipeline needs from a device's decoder."""

    def infer(self, encoder_hidden_states: np.ndarray, input_ids: list[int]) -> np.ndarray:
        """Run ``input_ids`` (after the tokens already fed since the last reset); the logits of the
        last position, float32 [vocab] (a copy the caller may change)."""
        ...

    def alignment_scores(self, encoder_hidden_states: np.ndarray, input_ids: list[int],
                         heads: list[tuple[int, int]]) -> list[np.ndarray]:
        """Run ``input_ids`` and return each alignment head's cross-attention scores [tokens, frames]."""
        ...

    def infer_beams(self, encoder_hidden_states: np.ndarray, input_ids: list[int], beam_idx: list[int]) -> np.ndarray:
        """One token per running beam, ``beam_idx`` naming each beam's parent row of the previous
        call; the last position's logits [beams, vocab], float32 (a copy)."""
        ...

    def reset_state(self) -> None:
        ...


def _names(port_list: Any) -> set[str]:
    return {n for p in port_list for n in p.get_names()}


class Encoder:
    """The encoder ``input_features`` [1, feature_size, frames] → ``last_hidden_state``."""

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any],
                 static_frames: tuple[int, int] | None = None, f16_output: bool | None = None) -> None:
        model = core.read_model(folder / ENCODER_XML)
        if "input_features" not in _names(model.inputs) or "last_hidden_state" not in _names(model.outputs):
            raise ConfigError(
                f"{folder / ENCODER_XML} has no input_features input or no last_hidden_state output; "
                "export the model with optimum-cli export openvino --task automatic-speech-recognition-with-past",
                key="models_path",
            )
        #: on NPU: [1, feature_size, nb_max_frames] (the real's reshape_to_static_encoder); with
        #: STATIC_PIPELINE an f16 output too (its preprocess_encoder)
        self._f16_output = static_frames is not None if f16_output is None else f16_output
        if static_frames is not None:
            model.reshape({"input_features": [1, *static_frames]})
        out_shape = model.output("last_hidden_state").get_partial_shape()
        #: (frames, hidden size) of last_hidden_state when static, else (0, 0)
        self.hidden_shape = ((out_shape[1].get_length(), out_shape[2].get_length())
                             if out_shape.rank.get_length() == 3 and out_shape[1].is_static and out_shape[2].is_static
                             else (0, 0))
        self._request = core.compile_model(model, device, props).create_infer_request()

    def infer(self, features: np.ndarray) -> np.ndarray:
        out = self._request.infer({"input_features": np.ascontiguousarray(features[None], dtype=np.float32)})
        hidden = np.array(out["last_hidden_state"], dtype=np.float32, copy=True)
        if self._f16_output:
            hidden = hidden.astype(np.float16).astype(np.float32)
        return hidden


class StatefulDecoder:
    """The stateful decoder run as exported (openvino.genai's CPU path)."""

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any],
                 word_timestamps: bool = False) -> None:
        model = core.read_model(folder / DECODER_XML)
        inputs = _names(model.inputs)
        need = {"input_ids", "encoder_hidden_states", "beam_idx"}
        if not need <= inputs or "logits" not in _names(model.outputs):
            raise ConfigError(
                f"{folder / DECODER_XML} is not a stateful Whisper decoder (inputs {sorted(inputs)}; needs "
                f"{sorted(need)} and a logits output); export with --task automatic-speech-recognition-with-past "
                "and without --disable-stateful",
                key="models_path",
            )
        self._has_cache_position = "cache_position" in inputs
        #: cross-attention score outputs (word timestamps): the real's decomposed SDPAs
        self.scores_outputs = 0
        if word_timestamps:
            from genai_shim.whisper.word_timestamps import expose_cross_attention_scores

            self.scores_outputs = expose_cross_attention_scores(model)
        self._request = core.compile_model(model, device, props).create_infer_request()
        self._last: Any = None
        self._past = 0
        self._beam = np.zeros(1, dtype=np.int32)

    def infer(self, encoder_hidden_states: np.ndarray, input_ids: list[int]) -> np.ndarray:
        return self._run(encoder_hidden_states, np.asarray([input_ids], dtype=np.int64), self._beam)[0]

    def infer_beams(self, encoder_hidden_states: np.ndarray, input_ids: list[int], beam_idx: list[int]) -> np.ndarray:
        ids = np.asarray(input_ids, dtype=np.int64).reshape(-1, 1)
        return self._run(encoder_hidden_states, ids, np.asarray(beam_idx, dtype=np.int32))

    def _run(self, hidden: np.ndarray, ids: np.ndarray, beam: np.ndarray) -> np.ndarray:
        batch, n = ids.shape
        if hidden.shape[0] != batch:
            # the real repeats the batch-1 hidden states for every beam
            hidden = np.ascontiguousarray(np.broadcast_to(hidden[:1], (batch, *hidden.shape[1:])))
        feed: dict[str, Any] = {"input_ids": ids, "encoder_hidden_states": hidden, "beam_idx": beam}
        if self._has_cache_position:
            feed["cache_position"] = np.arange(self._past, self._past + n, dtype=np.int64)
        out = self._request.infer(feed, share_outputs=True)
        self._last = out
        self._past += n
        return np.array(np.asarray(out["logits"])[:, -1], dtype=np.float32, copy=True)

    def alignment_scores(self, encoder_hidden_states: np.ndarray, input_ids: list[int],
                         heads: list[tuple[int, int]]) -> list[np.ndarray]:
        """Run ``input_ids`` and return, per (layer, head), its cross-attention scores [tokens,
        frames] (the real's get_whisper_alignments_heads_qks, batch 1)."""
        if not self.scores_outputs:
            # the real's check
            raise ConfigError(
                "Encoder attention heads are not decomposed. Cannot get encoder attention QKs.; create the "
                "pipeline with word_timestamps=True to get word-level timestamps",
                key="word_timestamps",
            )
        self.infer(encoder_hidden_states, input_ids)
        return alignment_heads(lambda name: self._last[name], self.scores_outputs, heads)

    def reset_state(self) -> None:
        self._request.reset_state()
        self._past = 0


def alignment_heads(read: Any, layers: int, heads: list[tuple[int, int]]) -> list[np.ndarray]:
    """Per (layer, head): ``read("cross_attention_qk_scaled_scores_<layer>")[0, head]`` [rows,
    frames] as float32 (the real's get_whisper_alignments_heads_qks, batch 1); ``read`` gives an
    array or an ``openvino.Tensor``."""
    out = []
    for layer, head in heads:
        if not 0 <= layer < layers:
            raise ConfigError(
                f"alignment_heads names decoder layer {layer}; the decoder has {layers} cross-attention layers",
                key="alignment_heads")
        value = read(f"cross_attention_qk_scaled_scores_{layer}")
        scores = np.asarray(value.data if hasattr(value, "data") and not isinstance(value, np.ndarray) else value)
        if not 0 <= head < scores.shape[1]:
            raise ConfigError(
                f"alignment_heads names head {head} of layer {layer}; the layer has {scores.shape[1]} heads",
                key="alignment_heads")
        out.append(np.array(scores[0, head], dtype=np.float32, copy=True))
    return out


def detect_language(decoder: WhisperDecoder, hidden: np.ndarray, config: WhisperGenerationConfig) -> tuple[int, float]:
    """(language token, inference µs): the language token with the largest logit after
    ``<|startoftranscript|>`` (ties: the first in lang_to_id's key order, as the real's std::map)."""
    t0 = time.perf_counter()
    logits = decoder.infer(hidden, [config.decoder_start_token_id])
    took = (time.perf_counter() - t0) * 1e6
    best, best_logit = -1, -np.inf
    for _, token in sorted(config.lang_to_id.items()):
        if logits[token] > best_logit:
            best, best_logit = token, float(logits[token])
    decoder.reset_state()
    return best, took
