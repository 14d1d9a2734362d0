"""What every decoding path of LLMPipeline shares: the state of one running sequence, when it
finishes (EOS, stop strings, length, the NPU's KV capacity) and how its tokens are streamed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.generation_config import GenerationConfig
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.results import EncodedResults, GenerationFinishReason
from genai_shim.sampling import LogitProcessor
from genai_shim.stop_strings import match_stop_string
from genai_shim.streamers import StreamerBase, StreamingStatus, call_write, status_from_callback

__all__ = [
    "STREAMER_FINISH",
    "OneRow",
    "RunningSequence",
    "StatefulRequests",
    "check_finish",
    "continuation_feed",
    "encoded_results",
    "stream_chunk",
    "stream_tokens",
]

#: the finish reason of a sequence whose streamer stopped it
STREAMER_FINISH = {
    StreamingStatus.STOP: GenerationFinishReason.STOP,
    StreamingStatus.CANCEL: GenerationFinishReason.NONE,
    StreamingStatus.TOOL_CALL_STOP: GenerationFinishReason.TOOL_CALL,
}


def continuation_feed(
    ids: list[int], past: int, has_pos: bool, has_beam: bool
) -> dict[str, np.ndarray]:
    """Inputs of one batch-1 stateful call: ``ids`` after ``past`` tokens already in the KV."""
    n = len(ids)
    feed: dict[str, np.ndarray] = {
        "input_ids": np.asarray([ids], dtype=np.int64),
        "attention_mask": np.ones((1, past + n), dtype=np.int64),
    }
    if has_pos:
        feed["position_ids"] = np.arange(past, past + n, dtype=np.int64)[None, :]
    if has_beam:
        feed["beam_idx"] = np.zeros(1, dtype=np.int32)
    return feed


class RunningSequence:
    """One running sequence of a generate() call."""

    def __init__(self, prompt: list[int], config: GenerationConfig, max_new: int, constraint: Any = None) -> None:
        self.prompt = prompt
        self.tokens: list[int] = []
        self.logps: list[float] = []  # per generated token (scores sum the kept ones)
        self.finish: GenerationFinishReason | None = None
        self.processor = LogitProcessor(config, prompt, constraint)
        self.max_new = max_new
        self.streamed = 0
        self.out_of_memory = False
        #: the score when it is not the kept tokens' summed log-probabilities (speculative)
        self.score: float | None = None


class OneRow:
    """Per-step inputs of a single running row, in buffers reused across the decode steps."""

    def __init__(self, mask: np.ndarray) -> None:
        n = mask.shape[1]
        self._buf = np.ones((1, max(2 * n, 64)), dtype=np.int64)
        self._buf[:, :n] = mask
        self._len = n
        self._pos = int(mask.sum()) - 1  # position of the last fed token
        self.ids = np.zeros((1, 1), dtype=np.int64)
        self.beam = np.zeros(1, dtype=np.int32)
        self.pos = np.zeros((1, 1), dtype=np.int64)
        #: set by the pipeline once the request reads ids / pos / beam from these very arrays
        self.bound = False

    def read_by(self, request: Any, has_pos: bool, has_beam: bool) -> bool:
        """Whether ``request`` reads these very ids / position / beam arrays after a shared
        call (the bind falls back to a copy when a dtype differs, e.g. i32 input_ids)."""
        pairs = [("input_ids", self.ids)]
        if has_pos:
            pairs.append(("position_ids", self.pos))
        if has_beam:
            pairs.append(("beam_idx", self.beam))
        return all(np.shares_memory(request.get_tensor(n).data, a) for n, a in pairs)

    def step(self) -> tuple[np.ndarray, np.ndarray]:
        """(attention mask with one more 1, position of the new token)."""
        if self._len == self._buf.shape[1]:
            self._buf = np.concatenate([self._buf, np.ones_like(self._buf)], axis=1)
        self._len += 1
        self._pos += 1
        self.pos[0, 0] = self._pos
        return self._buf[:, : self._len], self.pos


class StatefulRequests:
    """Batch-1 infer requests of one stateful model, fed a continuation of their KV."""

    def __init__(
        self, has_pos: bool, has_beam: bool, seq_axis: int, keep_state: Callable[[str], bool] | None = None
    ) -> None:
        self.has_pos, self.has_beam, self.seq_axis = has_pos, has_beam, seq_axis
        self._keep_state = keep_state  # states that are not KV (LoRA variables) are never cut

    def run(self, request: Any, ids: list[int], past: int) -> np.ndarray:
        """One call: ``ids`` after ``past`` tokens already in the request's KV."""
        feed = continuation_feed(ids, past, self.has_pos, self.has_beam)
        return np.asarray(request.infer(feed, share_outputs=True)["logits"])

    def cut(self, request: Any, keep: int) -> None:
        """Keep the first ``keep`` positions of every KV state."""
        for state in request.query_state():
            if self._keep_state is not None and self._keep_state(state.get_name()):
                continue
            data = np.asarray(state.state.data)
            index = [slice(None)] * data.ndim
            index[self.seq_axis] = slice(0, keep)
            state.state = ov.Tensor(np.ascontiguousarray(data[tuple(index)]))


def check_finish(
    s: RunningSequence,
    config: GenerationConfig,
    tokenizer: Any,
    window: int,
    stops: list[str],
    kv_capacity: int | None = None,
) -> None:
    """Set ``s.finish`` after its newest token: a stop token, a stop string (its tokens are
    removed unless included), max_new, or - on NPU - the end of the KV buffer."""
    token = s.tokens[-1]
    if not config.ignore_eos and token in config.stop_token_ids:
        s.finish = GenerationFinishReason.STOP
        return
    if stops and len(s.tokens) >= window:
        removed = match_stop_string(tokenizer, s.tokens, window, stops, config.include_stop_str_in_output)
        if removed is not None:
            del s.tokens[len(s.tokens) - removed :]
            s.finish = GenerationFinishReason.STOP
            return
    if len(s.tokens) >= s.max_new:
        s.finish = GenerationFinishReason.LENGTH
        return
    if kv_capacity is not None and len(s.prompt) + len(s.tokens) - 1 >= kv_capacity:
        # The real pipeline marks the sequence OUT_OF_MEMORY and stops without an error; its
        # finish reason stays NONE (measured on openvino_genai 2026.4.1, NPU via NPUW on CPU).
        s.finish = GenerationFinishReason.NONE
        s.out_of_memory = True


def _stream_limit(s: RunningSequence, window: int) -> int:
    """Tokens a stop string can no longer remove (all of them once the sequence finished)."""
    return len(s.tokens) if s.finish is not None else max(len(s.tokens) - window, 0)


def stream_tokens(stream: StreamerBase, s: RunningSequence, window: int) -> StreamingStatus:
    """Stream the settled tokens one ``write(int)`` each."""
    limit = _stream_limit(s, window)
    status = StreamingStatus.RUNNING
    while s.streamed < limit:
        status = call_write(stream, s.tokens[s.streamed])
        s.streamed += 1
        if status != StreamingStatus.RUNNING:
            break
    return status


def stream_chunk(stream: StreamerBase, s: RunningSequence, window: int) -> StreamingStatus:
    """Stream the settled tokens as one ``write(list)`` (prompt lookup's multi-token steps)."""
    limit = _stream_limit(s, window)
    if s.streamed >= limit:
        return StreamingStatus.RUNNING
    chunk = s.tokens[s.streamed : limit]
    s.streamed = limit
    return status_from_callback(stream.write(chunk))


def sequence_score(s: RunningSequence) -> float:
    # Tokens a stop string removed take their log-probabilities with them (measured).
    return float(sum(s.logps[: len(s.tokens)])) if s.score is None else s.score


def encoded_results(seqs: list[RunningSequence], perf: PerfMetrics, per_prompt: int = 1) -> EncodedResults:
    """The results of ``seqs``, which hold ``per_prompt`` consecutive sequences per prompt
    (parallel sampling): each prompt's best cumulative log-probability first, as the real's
    finished sequences are ordered (measured on its stateful, paged and VLM pipelines)."""
    if per_prompt > 1:
        seqs = [s for i in range(0, len(seqs), per_prompt)
                for s in sorted(seqs[i : i + per_prompt], key=sequence_score, reverse=True)]
    res = EncodedResults()
    for s in seqs:
        res.tokens.append(s.tokens)
        res.scores.append(sequence_score(s))
        res.finish_reasons.append(s.finish if s.finish is not None else GenerationFinishReason.NONE)
    res.perf_metrics = perf
    return res
