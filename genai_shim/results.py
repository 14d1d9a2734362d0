"""Result types: DecodedResults, EncodedResults, GenerationFinishReason."""

from __future__ import annotations

import copy
from typing import Any

from genai_shim.enums import BindingEnum
from genai_shim.perf_metrics import PerfMetrics

__all__ = ["DecodedResults", "EncodedResults", "GenerationFinishReason", "echo_prompts"]


class GenerationFinishReason(BindingEnum):
    """Why a sequence ended."""

    NONE = 0  # still running, or cancelled by the streamer
    STOP = 1  # EOS / stop token / stop string / streamer STOP
    LENGTH = 2  # max_new_tokens or max_length (a full NPU KV cache leaves NONE, as the real)
    TOOL_CALL = 3  # streamer returned TOOL_CALL_STOP


class EncodedResults:
    """Token ids per sequence, with scores, finish reasons and perf metrics."""

    def __init__(self) -> None:
        self.tokens: list[list[int]] = []
        self.scores: list[float] = []
        self.finish_reasons: list[GenerationFinishReason] = []
        self.perf_metrics = PerfMetrics()
        self.extended_perf_metrics: Any = None

    def __repr__(self) -> str:
        reasons = self.finish_reasons
        return (
            f"EncodedResults(tokens={self.tokens}, scores={self.scores}, finish_reasons={reasons})"
        )


def echo_prompts(res: EncodedResults, prompts: list[list[int]]) -> EncodedResults:
    """``echo``: each prompt's ids before its sequences' tokens (the sequences come prompt after
    prompt, as many each: beams or ``num_return_sequences``); scores are unchanged."""
    per = len(res.tokens) // max(len(prompts), 1)
    res.tokens = [list(prompts[i // per]) + list(t) for i, t in enumerate(res.tokens)]
    return res


class DecodedResults:
    """Texts per sequence; ``str(results)`` joins them like the real binding."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.scores: list[float] = []
        self.finish_reasons: list[GenerationFinishReason] = []
        self.perf_metrics = PerfMetrics()
        self.extended_perf_metrics: Any = None
        self._parsed: list[dict[str, Any]] = []

    @property
    def parsed(self) -> list[dict[str, Any]]:
        """Messages of the output parsers (GenerationConfig.parsers, a TextParserStreamer);
        read-only and a copy on every access, as the real binding's."""
        return copy.deepcopy(self._parsed)

    def set_parsed(self, parsed: list[dict[str, Any]]) -> None:
        """The pipeline stores the parsers' messages (``parsed`` itself is read-only)."""
        self._parsed = parsed

    def __str__(self) -> str:
        if len(self.texts) == 1:
            return self.texts[0]
        return "\n".join(f"{s:.6f}: {t}" for s, t in zip(self.scores, self.texts, strict=False))

    def __repr__(self) -> str:
        reasons = self.finish_reasons
        return (
            f"DecodedResults(texts={self.texts!r}, scores={self.scores}, finish_reasons={reasons})"
        )


class GenerationStatus(BindingEnum):
    RUNNING = 0
    FINISHED = 1
    IGNORED = 2
    CANCEL = 3
    STOP = 4


class GenerationOutput:
    def __init__(self) -> None:
        self.generated_ids: list[int] = []
        self.generated_log_probs: list[float] = []
        self.score = 0.0
        self.finish_reason = GenerationFinishReason.NONE


class GenerationResult:
    """Result of one prompt: ``m_generation_ids`` are texts (str prompts)."""

    def __init__(self) -> None:
        self.m_request_id = 0
        self.m_generation_ids: list[Any] = []
        self.m_scores: list[float] = []
        self.m_finish_reasons: list[GenerationFinishReason] = []
        self.m_status = GenerationStatus.RUNNING
        self.perf_metrics = PerfMetrics()
        self.extended_perf_metrics = None

    def get_generation_ids(self) -> list[Any]:
        return self.m_generation_ids

    def __repr__(self) -> str:
        return f"GenerationResult(id={self.m_request_id}, {self.m_generation_ids!r}, status={self.m_status.name})"


class EncodedGenerationResult(GenerationResult):
    """Result of one tokenized prompt: ``m_generation_ids`` are lists of token ids."""


class PipelineMetrics:
    def __init__(self) -> None:
        self.requests = 0
        self.scheduled_requests = 0
        self.cache_usage = 0.0
        self.max_cache_usage = 0.0
        self.avg_cache_usage = 0.0
        self.cache_size_in_bytes = 0
        self.kv_cache_size_in_bytes = 0
        self.la_peak_pool_blocks = 0
        self.inference_duration = 0.0  # µs of the last step's model call
        self.preemptions = 0  # ours: requests preempted (recompute) so far
        self.prefix_cache_hits = 0  # ours: KV blocks taken from the prefix cache so far
