"""Group beam search on the stateful model: the running beams of every prompt batched in one
model call, ``beam_idx`` picking each beam's parent row of the KV cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from genai_shim.beam_search import GroupBeamSearcher, SequenceGroup
from genai_shim.generation_config import GenerationConfig
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.results import EncodedResults
from genai_shim.stop_strings import match_stop_string

__all__ = ["run_beam_search"]


def run_beam_search(
    ids: np.ndarray,
    mask: np.ndarray,
    logits: np.ndarray,
    config: GenerationConfig,
    perf: PerfMetrics,
    *,
    infer: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, PerfMetrics], np.ndarray],
    paged: bool,
    max_new_tokens: Callable[[int, int], int],
    tokenizer: Any,
    stop_window: int,
    stop_strings: list[str],
) -> EncodedResults:
    """Group beam search after the prefill: one SequenceGroup per prompt row, the running
    beams of all prompts batched in one model call, ``beam_idx`` picking each beam's parent
    row of the KV cache (the stateful model gathers the state itself)."""
    matcher = None
    if stop_strings:
        include = config.include_stop_str_in_output

        def matcher(tokens: list[int]) -> int | None:
            if len(tokens) < stop_window:
                return None
            return match_stop_string(tokenizer, tokens, stop_window, stop_strings, include)

    # A row's prompt: its unpadded tokens in the paged pipeline (one request per prompt), the
    # padded row in the stateful one; no_repeat_ngram_size looks at it.
    width = ids.shape[1]
    rows = [ids[b][mask[b].astype(bool)] if paged else ids[b] for b in range(len(ids))]
    groups = [
        SequenceGroup(b, row.tolist(), config, max_new_tokens(len(row), width))
        for b, row in enumerate(rows)
    ]
    searchers = [GroupBeamSearcher(g, matcher) for g in groups]
    # Row of each prompt's first beam in the previous model call.
    offsets = {g.request_id: g.request_id for g in groups}
    active = list(groups)
    last = logits[:, -1, :]
    while True:
        # Sample: each prompt reads its own consecutive rows of the logits.
        row, sampled = 0, 0
        for g in active:
            n_rows = g.num_running()
            if n_rows:
                sampled += 1  # the real counts one generated token per prompt and step
            searchers[g.request_id].step(last[row : row + n_rows])
            row += n_rows
        perf.raw_metrics.m_batch_sizes[-1] = sampled
        active = [g for g in active if g.num_running()]
        if not active:
            break
        step_ids: list[int] = []
        parents: list[int] = []
        for g in active:
            rows = searchers[g.request_id].beam_rows()
            for s in g.running():
                step_ids.append(s.tokens[-1])
                parents.append(rows.get(s.id, 0) + offsets[g.request_id])
        # This call's rows: each prompt's running beams, prompt after prompt.
        first = 0
        for i, g in enumerate(active):
            if paged or i == 0:
                offsets[g.request_id] = first
            else:
                # The stateful pipeline adds the offset stored under the previous
                # *position* used as a request id (beam_offets[i - 1] in lm_encoding.cpp);
                # kept, as it picks the KV rows once an earlier prompt of 3+ has finished.
                offsets[g.request_id] = active[i - 1].num_running() + offsets.get(i - 1, 0)
            first += g.num_running()
        beam = np.asarray(parents, dtype=np.int32)
        mask = np.concatenate([mask[beam], np.ones((len(parents), 1), dtype=np.int64)], axis=1)
        pos = mask[:, :-1].sum(axis=1, keepdims=True).astype(np.int64)
        out = infer(
            np.asarray(step_ids, dtype=np.int64).reshape(-1, 1), mask, pos, beam, perf
        )
        last = out[:, -1, :]
    res = EncodedResults()
    lp = float(config.length_penalty)
    for g in groups:
        for s in g.results():
            res.tokens.append(list(s.tokens))
            res.scores.append(float(s.beam_score(lp)))
            res.finish_reasons.append(s.finish)
    res.perf_metrics = perf
    return res
