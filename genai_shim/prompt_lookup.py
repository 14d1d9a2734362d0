"""Prompt-lookup decoding (``prompt_lookup=True``), as the real runs it on CPU: candidates copied
from the prompt / answer so far, checked in one model call, the rejected tail cut from the KV."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from genai_shim.decoding import STREAMER_FINISH, RunningSequence, StatefulRequests, stream_chunk
from genai_shim.generation_config import GenerationConfig
from genai_shim.perf_metrics import PerfMetrics, record_infer_call
from genai_shim.sampling import Sampler
from genai_shim.streamers import StreamerBase, StreamingStatus

__all__ = ["lookup_candidates", "run_prompt_lookup"]


def lookup_candidates(ids: list[int], num_pred: int, max_ngram_size: int) -> list[int]:
    """openvino.genai's prompt-lookup candidates: the longest suffix n-gram (max_ngram_size
    down to 1, at most half the sequence) found earliest in prompt + generated ids; the
    tokens following that occurrence, at most ``num_pred`` of them."""
    if num_pred <= 0:
        return []
    length = len(ids)
    if max_ngram_size >= length:
        max_ngram_size = length // 2
    for size in range(max_ngram_size, 0, -1):
        ngram = ids[length - size :]
        for i in range(length - size):
            if ids[i : i + size] == ngram:
                start = i + size
                return ids[start : start + min(length - start, num_pred)]
    return []


def run_prompt_lookup(
    seqs: list[RunningSequence],
    requests: list[Any],
    model: StatefulRequests,
    sampler: Sampler,
    finish: Callable[[RunningSequence], None],
    config: GenerationConfig,
    perf: PerfMetrics,
    stream: StreamerBase | None,
    window: int,
) -> tuple[bool, bool]:
    """Prompt-lookup decoding of every prompt in lockstep, each on its own infer request
    (the real's continuous batching keeps one KV sequence per request).

    Each step feeds a sequence's last token plus the candidates copied from its prompt /
    answer in one model call, samples every position as plain decoding would, keeps the
    candidates up to the first mismatch plus the token sampled there, and cuts the rejected
    ones from that request's KV cache.  The tokens equal plain decoding's.  Per lockstep
    step one metrics entry: ``m_batch_sizes`` = tokens sampled over all prompts (counted
    before a stop string removes any), the real's series.  An accepted candidate scores 0
    (the real appends candidates with log-probability 0 and keeps it, measured with
    logprobs).  Returns (whether a streamer stopped the generation, whether it cancelled)."""
    raw = perf.raw_metrics
    past = [0] * len(seqs)

    def record(t0: float, sampled: int) -> None:
        record_infer_call(raw, t0, time.perf_counter(), sampled)

    def append(s: RunningSequence, token: int, logp: float) -> None:
        s.tokens.append(token)
        s.processor.register(token)
        s.logps.append(logp)
        finish(s)

    def streamed(s: RunningSequence) -> StreamingStatus:
        """Stream one step's tokens as one ``write(list)``."""
        if stream is None:
            return StreamingStatus.RUNNING
        status = stream_chunk(stream, s, window)
        if status != StreamingStatus.RUNNING and s.finish is None:
            s.finish = STREAMER_FINISH[status]
        return status

    t0 = time.perf_counter()
    for i, (s, req) in enumerate(zip(seqs, requests, strict=False)):  # prefill
        req.reset_state()
        logits = model.run(req, s.prompt, 0)
        token, logp = sampler.sample(s.processor, logits[0, -1])
        append(s, token, logp)
        past[i] = len(s.prompt)
    record(t0, len(seqs))
    status = streamed(seqs[0])
    while status == StreamingStatus.RUNNING:
        live = [i for i, s in enumerate(seqs) if s.finish is None]
        if not live:
            break
        t0 = time.perf_counter()
        sampled = 0
        for i in live:
            s, req = seqs[i], requests[i]
            left = s.max_new - len(s.tokens) - 1
            cands = lookup_candidates(
                s.prompt + s.tokens, min(int(config.num_assistant_tokens), left), int(config.max_ngram_size)
            )
            feed = [s.tokens[-1], *cands]
            logits = model.run(req, feed, past[i])
            for k in range(len(feed)):
                token, logp = sampler.sample(s.processor, logits[0, k])
                accepted = k < len(cands) and token == cands[k]
                append(s, token, 0.0 if accepted else logp)
                sampled += 1
                if s.finish is not None or not accepted:
                    break
            if s.finish is None:
                # the KV keeps everything but the newest token, which the next call feeds
                past[i] = len(s.prompt) + len(s.tokens) - 1
                model.cut(req, past[i])
        record(t0, sampled)
        status = streamed(seqs[0])
    return status != StreamingStatus.RUNNING, status == StreamingStatus.CANCEL
