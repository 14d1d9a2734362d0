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
real's edits in Python (the graph edits live in ov_npu_emu_npuw.whisper, which NPUW's Whisper mode
builds its models with too): the self-attention past inputs removed for the decoder (its SDPAs read the
current K/V), the cross-attention ``ReadValue`` states exposed as outputs (decoder) or as inputs
(decoder with past).  Our mask is an additive f32 ``[1, 1, 1, 448]`` on every self-attention SDPA
(0 attended, the float minimum masked; the real builds the same from an i64/f32 mask through
Equal/Select).  The encoder output, ``encoder_hidden_states`` and the KV cache move through f16 as
in the real (its ``preprocess_encoder`` / ``preprocess_decoder``); here by rounding in numpy.

Batch 1 and greedy or sampled decoding only; ``initial_prompt`` / ``hotwords`` are refused as the
real refuses them.

Word timestamps (``word_timestamps=True`` at construction), as the real's: the decoder spans
``KV_LEN - 1`` (447) tokens instead of 4 (the whole window's text is run through it once more),
its padding rows get the f32 minimum in every cross-attention (the real's cross-attention mask),
and its cross-attention SDPAs are decomposed with the scores as outputs; the alignment heads read
all 447 rows, padding included (the real's ``infer_alignments_heads_qks`` on the static decoder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.whisper.models import DECODER_XML, alignment_heads
from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError
from ov_npu_emu_npuw.whisper import (
    CROSS_MASK,
    add_attention_mask,
    add_cache_position,
    add_cross_attention_mask,
    cross_mask_padding,
    cross_mask_rows,
    expose_cross_attention_scores,
    reshape_static,
    split_stateful_decoder,
)

__all__ = ["StaticDecoder", "PROMPT_LEN", "KV_LEN"]

#: the decoder's input_ids length (the real's init ids: sot, language, task, notimestamps)
PROMPT_LEN = 4
#: the real's static KV cache (max_target_positions)
KV_LEN = 448
NEG = float(np.finfo(np.float32).min)


def _f16(x: np.ndarray) -> np.ndarray:
    """An f16 round trip: what the real's f16 tensors between the graphs do to the values."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def _names(ports: Any) -> set[str]:
    return {n for p in ports for n in p.get_names()}


def static_models(core: Any, folder: Path, frames: int, hidden: int,
                  prompt_len: int = PROMPT_LEN) -> tuple[Any, Any, int]:
    """(decoder [1, prompt_len], decoder with past [1, 1] over KV_LEN, the decoder's score outputs)
    of ``folder``; a ``prompt_len`` over 4 decomposes the decoder's cross-attention (word timestamps)."""
    decoder = core.read_model(folder / DECODER_XML)
    with_past_xml = folder / "openvino_decoder_with_past_model.xml"
    if "beam_idx" in _names(decoder.inputs):
        decoder, with_past = split_stateful_decoder(decoder)
    elif with_past_xml.is_file():
        with_past = core.read_model(with_past_xml)
    else:
        raise ConfigError(f"{folder} has a stateless decoder but no openvino_decoder_with_past_model.xml; "
                          "export with optimum-cli export openvino --task automatic-speech-recognition-with-past",
                          key="models_path")
    add_cache_position(with_past)
    add_attention_mask(with_past, KV_LEN)
    reshape_static(decoder, prompt_len, 0, frames, hidden)
    reshape_static(with_past, 1, KV_LEN - 1, frames, hidden)
    scores = 0
    if prompt_len > PROMPT_LEN:
        mask = add_cross_attention_mask(decoder, prompt_len)
        scores = expose_cross_attention_scores(decoder, "word_timestamps", mask)
    return decoder, with_past, scores


class StaticDecoder:
    """The ``WhisperDecoder`` of STATIC_PIPELINE=True."""

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any], frames: int,
                 hidden: int, word_timestamps: bool = False) -> None:
        #: the decoder's input_ids length: 4, or KV_LEN - 1 with word timestamps (as the real)
        self.prompt_len = KV_LEN - 1 if word_timestamps else PROMPT_LEN
        decoder, with_past, self.scores_outputs = static_models(core, folder, frames, hidden, self.prompt_len)
        self._present = [o.get_any_name() for o in decoder.outputs if o.get_any_name().startswith("present.")]
        self._past_inputs = {o.get_any_name(): tuple(o.get_shape()) for o in with_past.inputs
                             if o.get_any_name().startswith("past_key_values")}
        missing = {n.replace("present", "past_key_values") for n in self._present} ^ set(self._past_inputs)
        if missing:
            raise ConfigError(f"the decoder and the decoder with past do not pair their K/V ({sorted(missing)}); "
                              "export both with optimum-cli", key="models_path")
        compiled = core.compile_model(decoder, device, props)
        self._padding = cross_mask_padding(compiled)
        self._prefill = compiled.create_infer_request()
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

    def _run_decoder(self, hidden: np.ndarray, ids: list[int]) -> Any:
        """The decoder on ``ids`` right-padded to its length; its outputs."""
        if not 1 <= len(ids) <= self.prompt_len:
            raise ConfigError(
                f"STATIC_PIPELINE's decoder takes at most {self.prompt_len} prompt tokens, got {len(ids)}; "
                "initial_prompt and hotwords are not supported with STATIC_PIPELINE (as in the real)",
                key="initial_prompt")
        padded = np.zeros((1, self.prompt_len), np.int64)
        padded[0, :len(ids)] = ids
        feed = {"input_ids": padded, "encoder_hidden_states": _f16(hidden)}
        if self.scores_outputs:
            feed[CROSS_MASK] = cross_mask_rows(self.prompt_len, len(ids), self._padding)
        return self._prefill.infer(feed)

    def _run_prefill(self, hidden: np.ndarray, ids: list[int]) -> np.ndarray:
        out = self._run_decoder(hidden, ids)
        self._hidden = _f16(hidden)
        for name in self._present:
            value = _f16(np.asarray(out[name]))
            target = name.replace("present", "past_key_values")
            if ".encoder." in name:
                self._kv[target] = value
            else:
                self._kv[target][:, :, :self.prompt_len] = value
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
        """The decoder alone on ``input_ids`` (the decoding state is left alone, as the real's
        ``infer_alignments_heads_qks`` on the static decoder); per (layer, head) its scores over
        all the decoder's rows [447, frames]."""
        if not self.scores_outputs:
            raise ConfigError(
                "Encoder attention heads are not decomposed. Cannot get encoder attention QKs.; create the "
                "pipeline with word_timestamps=True to get word-level timestamps", key="word_timestamps")
        out = self._run_decoder(encoder_hidden_states, input_ids)
        return alignment_heads(lambda name: out[name], self.scores_outputs, heads)
