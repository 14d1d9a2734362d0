"""Whisper's logit processing (openvino.genai whisper/logit_processor.cpp, whisper.cpp
process_whisper_logits): suppressed tokens and the timestamp rules, applied to the last row
before the sampler's own transforms."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from genai_shim.generation_config import WhisperGenerationConfig

__all__ = ["process_whisper_logits", "timestamp_rules", "to_log_probs"]

_NEG_INF = np.float32(-np.inf)


def _suppress(row: np.ndarray, tokens: Sequence[int]) -> None:
    if tokens:
        row[np.asarray(tokens, dtype=np.int64)] = _NEG_INF


def timestamp_rules(row: np.ndarray, config: WhisperGenerationConfig, generated: Sequence[int],
                    initial_step: bool) -> None:
    """The real's process_whisper_timestamp_logits, in place on one float32 row."""
    vocab = row.size
    row[config.no_timestamps_token_id] = _NEG_INF
    begin = config.no_timestamps_token_id + 1
    n = len(generated)
    last_was_ts = n >= 1 and generated[-1] >= begin
    penultimate_was_ts = n < 2 or generated[-2] >= begin
    if last_was_ts:
        if penultimate_was_ts:
            row[begin:] = _NEG_INF  # has to be a non-timestamp
        else:
            row[: max(config.eos_token_id, 0)] = _NEG_INF  # cannot be normal text
    stamps = [t for t in generated if t >= begin]
    if stamps:
        # timestamps never decrease (and <|0.00|>-style repeats are avoided)
        last = stamps[-1] if last_was_ts and not penultimate_was_ts else stamps[-1] + 1
        row[begin:last] = _NEG_INF
    if initial_step:
        row[:begin] = _NEG_INF
        row[begin + config.max_initial_timestamp_index + 1:vocab] = _NEG_INF
    # log-softmax in float as the real's; force a timestamp when their total probability wins
    top = np.float32(row.max())
    if not np.isfinite(top):
        return
    with np.errstate(under="ignore"):
        shifted = row - top
        logsum = np.float32(np.log(np.exp(shifted.astype(np.float64)).sum()))
        logp = shifted - logsum
        ts_sum = np.float32(np.exp(logp[begin:].astype(np.float64)).sum())
    ts_logprob = np.float32(np.log(ts_sum)) if ts_sum > 0 else _NEG_INF
    if ts_logprob > logp[:begin].max():
        row[:begin] = _NEG_INF


def to_log_probs(row: np.ndarray) -> None:
    """The real's logits_row_to_logprobs for beam search, in place: float max, a double exp-sum,
    ``row -= float(log(sum)) + max``."""
    top = np.float32(row.max())
    with np.errstate(under="ignore"):
        total = float(np.exp(row.astype(np.float64) - float(top)).sum())
    row -= np.float32(np.float32(np.log(total)) + top)


def process_whisper_logits(row: np.ndarray, config: WhisperGenerationConfig, return_timestamps: bool,
                           generated: Sequence[int], initial: bool | None = None) -> None:
    """Suppress ``begin_suppress_tokens`` on the first step, ``suppress_tokens`` always, then the
    timestamp rules when timestamps are produced (in place on one float32 row).  Beam search
    turns the row into log-probabilities first (the real's, so that beams compare)."""
    if initial is None:
        initial = not generated
    if config.is_beam_search():
        to_log_probs(row)
    if initial:
        _suppress(row, config.begin_suppress_tokens)
    _suppress(row, config.suppress_tokens)
    if return_timestamps:
        timestamp_rules(row, config, generated, initial)
