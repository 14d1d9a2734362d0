"""Word-level timestamps as openvino.genai computes them (whisper/word_level_timestamps.cpp,
alignment_heads.cpp, transformations/scaled_dot_product_attention_decomposition.cpp).

With ``word_timestamps=True`` given to the pipeline's constructor, the decoder's cross-attention
``ScaledDotProductAttention`` nodes are decomposed (``MatMul(q * scale, kᵀ) + mask``, softmax,
``MatMul(·, v)``) and the masked scores become outputs ``cross_attention_qk_scaled_scores_<layer>``.
After a window is decoded, the decoder runs once more on ``sot + <|notimestamps|> + text + eot``;
the alignment heads' scores over the audio's frames are softmaxed, standardised over the tokens,
median-filtered (width 7), averaged over the heads and aligned to the tokens by DTW; words (split
on spaces, or on characters for zh/ja/th/lo/my/yue) take the times where their tokens start.
The decomposition itself is ``ov_npu_emu_npuw.whisper.expose_cross_attention_scores``, shared
with NPUW's Whisper mode and STATIC_PIPELINE (the real has the same pass in both projects).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ov_npu_emu_npuw.whisper import SCORES_OUTPUT, expose_cross_attention_scores

__all__ = ["SCORES_OUTPUT", "add_word_timings", "expose_cross_attention_scores", "word_timings"]

_NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}
_REPLACEMENT = "\ufffd"
_SENTENCE_END = ".。!！?？".encode()
_PREPEND = "\"'“¿([{-".encode()
_APPEND = "\"'.。,，!！?？:：”)]}、".encode()
_PUNCT = {ord(c) for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"}
_SPACE = {ord(c) for c in " \t\n\v\f\r"}


# -- alignment ------------------------------------------------------------------------------------

def _median_filter(x: np.ndarray, width: int = 7) -> np.ndarray:
    """Median over a window of ``width`` frames, shrunk at the edges (an even count averages the
    two middle values), along the last axis."""
    pad = width // 2
    n = x.shape[-1]
    out = np.empty_like(x)
    for f in range(n):
        lo, hi = max(0, f - pad), min(n, f + pad + 1)
        win = np.sort(x[..., lo:hi], axis=-1)
        k = win.shape[-1]
        if k % 2:
            out[..., f] = win[..., k // 2]
        else:
            out[..., f] = (win[..., k // 2 - 1] + win[..., k // 2]) / np.float32(2.0)
    return out


def _dtw(cost_matrix: np.ndarray) -> list[tuple[int, int]]:
    """DTW path (token index, frame index) through ``cost_matrix`` [tokens, frames] (float32, ties
    to the left move, as the real's strict comparisons).  The cells of one anti-diagonal depend
    only on the two before it, so each diagonal is one vector step: the same comparisons and f32
    sums as the real's cell-by-cell loops, in ~(tokens + frames) numpy steps instead of
    tokens × frames Python ones (an NPU prefill's 443 rows × 1500 frames: 2.3 s → a few ms)."""
    n, m = cost_matrix.shape
    if n == 0 or m == 0:
        return []
    matrix = np.asarray(cost_matrix, dtype=np.float32)
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    cost[0, 0] = 0.0
    trace[0, :] = 2
    trace[:, 0] = 1
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        diag = (c0 < c1) & (c0 < c2)
        up = ~diag & (c1 < c0) & (c1 < c2)
        c = np.where(diag, c0, np.where(up, c1, c2))
        cost[i, j] = (matrix[i - 1, j - 1] + c).astype(np.float32)
        trace[i, j] = np.where(diag, 0, np.where(up, 1, 2))
    path = []
    ii, jj = n, m
    while ii > 0 or jj > 0:
        path.append((max(ii - 1, 0), max(jj - 1, 0)))
        t = trace[ii, jj]
        if t == 0:
            ii, jj = ii - 1, jj - 1
        elif t == 1:
            ii -= 1
        else:
            jj -= 1
    path.reverse()
    return path


def _seq_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The f32 sum along ``axis`` in index order (the real's plain loops; numpy's ``sum`` is pairwise
    and rounds differently over the 447 rows of an NPU prefill)."""
    return np.cumsum(x, axis=axis, dtype=np.float32).take(-1, axis=axis)


def _alignment_path(qks: list[np.ndarray], n_active_frames: int, n_sot: int) -> list[tuple[int, int]]:
    """``qks``: per alignment head [rows, frames] scores of the whole prompt + text + eot (on the
    NPU paths the prefill's rows, padding included: the real reads them all)."""
    frames = n_active_frames // 2
    rows = qks[0].shape[0]
    matrix = np.zeros((rows, frames), dtype=np.float32)
    for qk in qks:
        w = qk[:, :frames].astype(np.float32)
        # softmax over the frames; exp in f64 rounded to f32 (correctly rounded, as glibc's expf
        # nearly always is)
        w = np.exp((w - w.max(axis=-1, keepdims=True)).astype(np.float64)).astype(np.float32)
        w = (w / _seq_sum(w, -1)[:, None]).astype(np.float32)
        mean = (_seq_sum(w, 0) / np.float32(rows)).astype(np.float32)
        diff = (w - mean).astype(np.float32)
        std = np.sqrt((_seq_sum(diff * diff, 0) / np.float32(rows)).astype(np.float32))
        std = np.where(std < np.float32(1e-6), np.float32(1e-6), std).astype(np.float32)
        w = (diff / std).astype(np.float32)
        matrix += _median_filter(w, 7)
    matrix = (-matrix / np.float32(len(qks))).astype(np.float32)
    return _dtw(matrix[n_sot:-1])


# -- words ----------------------------------------------------------------------------------------

def _split_on_unicode(tokens: list[int], tokenizer: Any) -> tuple[list[str], list[list[int]]]:
    words: list[str] = []
    word_tokens: list[list[int]] = []
    current: list[int] = []
    for token in tokens:
        current.append(token)
        decoded = str(tokenizer.decode(current, skip_special_tokens=False))
        if _REPLACEMENT not in decoded:
            words.append(decoded)
            word_tokens.append(current)
            current = []
    return words, word_tokens


def _split_on_spaces(tokens: list[int], tokenizer: Any) -> tuple[list[str], list[list[int]]]:
    subwords, subword_tokens = _split_on_unicode(tokens, tokenizer)
    eot = tokenizer.get_eos_token_id()
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for sub, toks in zip(subwords, subword_tokens, strict=True):
        raw = sub.encode("utf-8")
        special = bool(toks) and toks[0] >= eot
        with_space = bool(raw) and raw[0] in _SPACE
        trimmed = raw.strip(b" \t\n\v\f\r")
        punctuation = len(trimmed) == 1 and trimmed[0] in _PUNCT
        if not words or special or with_space or punctuation:
            words.append(sub)
            word_tokens.append(list(toks))
        else:
            words[-1] += sub
            word_tokens[-1].extend(toks)
    return words, word_tokens


def _truncate_long_words(words: list[Any]) -> None:
    durations = [w.end_ts - w.start_ts for w in words if w.end_ts - w.start_ts > 0.0]
    if not durations:
        return
    durations.sort()
    mid = len(durations) // 2
    median = durations[mid] if len(durations) % 2 else (durations[mid - 1] + durations[mid]) / 2.0
    max_duration = float(np.float32(min(0.7, median) * 2.0))
    for i in range(1, len(words)):
        if words[i].end_ts - words[i].start_ts > max_duration:
            if words[i].word.encode("utf-8") in _SENTENCE_END:
                words[i].end_ts = float(np.float32(words[i].start_ts + max_duration))
            elif words[i - 1].word.encode("utf-8") in _SENTENCE_END:
                words[i].start_ts = float(np.float32(words[i].end_ts - max_duration))


def _merge_punctuations(words: list[Any]) -> list[Any]:
    if len(words) < 2:
        return words
    i, j = len(words) - 2, len(words) - 1
    while True:
        prev, nxt = words[i], words[j]
        raw = prev.word.encode("utf-8")
        if len(raw) > 1 and raw[:1] == b" " and raw[1:] in _PREPEND:
            nxt.word = prev.word + nxt.word
            nxt.token_ids = prev.token_ids + nxt.token_ids
            prev.word, prev.token_ids = "", []
        else:
            j = i
        if i == 0:
            break
        i -= 1
    i, j = 0, 1
    while j < len(words):
        prev, nxt = words[i], words[j]
        raw_p, raw_n = prev.word.encode("utf-8"), nxt.word.encode("utf-8")
        if raw_p and raw_p[-1:] != b" " and len(raw_n) == 1 and raw_n in _APPEND:
            prev.word += nxt.word
            prev.token_ids = prev.token_ids + nxt.token_ids
            nxt.word, nxt.token_ids = "", []
        else:
            i = j
        j += 1
    return [w for w in words if w.word]


def word_timings(qks: list[np.ndarray], sot: list[int], text_tokens: list[int], tokenizer: Any, language: str,
                 n_active_frames: int, time_offset: float) -> list[Any]:
    """The window's WhisperWordTiming list; ``text_tokens`` ends with EOT."""
    from genai_shim.whisper.results import WhisperWordTiming

    path = _alignment_path(qks, n_active_frames, len(sot))
    if language in _NO_SPACE_LANGUAGES:
        words, word_tokens = _split_on_unicode(text_tokens, tokenizer)
    else:
        words, word_tokens = _split_on_spaces(text_tokens, tokenizer)
    jumps = [0] + [k for k in range(1, len(path)) if path[k][0] != path[k - 1][0]]
    jump_times = [float(np.float32(path[k][1] * np.float32(0.02))) for k in jumps]
    bounds = [0]
    for toks in word_tokens[:-1]:
        bounds.append(bounds[-1] + len(toks))
    out = []
    for i in range(len(words) - 1):
        if bounds[i + 1] >= len(jump_times):
            break  # the real reads past its jump times here; stop at the last one known
        start = float(np.float32(jump_times[bounds[i]] + time_offset))
        end = float(np.float32(jump_times[bounds[i + 1]] + time_offset))
        out.append(WhisperWordTiming(words[i], word_tokens[i], start, end))
    _truncate_long_words(out)
    return _merge_punctuations(out)


def add_word_timings(decoder: Any, hidden: np.ndarray, sot: list[int], tokens: Sequence[int], config: Any,
                     tokenizer: Any, language: str, n_active_frames: int, time_offset: float) -> list[Any]:
    """Run the decoder on the window's prompt and text once more and time its words."""
    text = [int(t) for t in tokens if t < config.eos_token_id] + [int(config.eos_token_id)]
    prompt = list(sot) + [config.no_timestamps_token_id] + text
    qks = decoder.alignment_scores(hidden, prompt, list(config.alignment_heads))
    decoder.reset_state()
    return word_timings(qks, sot, text, tokenizer, language, n_active_frames, time_offset)
