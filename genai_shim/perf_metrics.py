"""PerfMetrics / RawPerfMetrics / MeanStdPair with openvino.genai's formulas (all values in ms)."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ov_npu_emu.errors import UserInputError

__all__ = [
    "MeanStdPair",
    "PerfMetrics",
    "RawPerfMetrics",
    "SDPerModelsPerfMetrics",
    "SDPerfMetrics",
    "SummaryStats",
]

logger = logging.getLogger(__name__)


@dataclass
class MeanStdPair:
    """Mean and standard deviation of a series (ms); ``-1, -1`` when the series is empty."""

    mean: float = -1.0
    std: float = -1.0

    def __iter__(self):  # allows ``mean, std = pair`` like the real tuple-like binding
        return iter((self.mean, self.std))


@dataclass
class SummaryStats:
    """Mean, std, min and max of a series (ms)."""

    mean: float = -1.0
    std: float = -1.0
    min: float = -1.0
    max: float = -1.0


def _mean_std(us: Sequence[float]) -> MeanStdPair:
    """Microseconds in, milliseconds out; population std (as the real calc_mean_and_std)."""
    if not us:
        return MeanStdPair(-1.0, -1.0)
    ms = [d / 1000.0 for d in us]
    mean = sum(ms) / len(ms)
    var = sum(d * d for d in ms) / len(ms) - mean * mean
    return MeanStdPair(float(mean), float(math.sqrt(max(var, 0.0))))


def record_infer_call(raw: RawPerfMetrics, t0: float, t1: float, batch: int) -> None:
    """One language-model call from ``t0`` to ``t1`` (``time.perf_counter`` seconds) that gave
    ``batch`` tokens: its duration, the generate's inference total, the token time and the batch."""
    raw.m_token_infer_durations.append((t1 - t0) * 1e6)
    raw.m_inference_durations[0] += (t1 - t0) * 1e6
    raw.m_new_token_times.append(t1)
    raw.m_batch_sizes.append(batch)


@dataclass
class RawPerfMetrics:
    """Raw series behind PerfMetrics; durations in microseconds, timestamps in seconds
    (``time.perf_counter``)."""

    generate_durations: list[float] = field(default_factory=list)  # whole generate() calls
    tokenization_durations: list[float] = field(default_factory=list)
    detokenization_durations: list[float] = field(default_factory=list)
    chat_template_durations: list[float] = field(default_factory=list)
    sampling_durations: list[float] = field(default_factory=list)
    grammar_compile_times: list[float] = field(default_factory=list)
    m_times_to_first_token: list[float] = field(default_factory=list)
    m_new_token_times: list[float] = field(default_factory=list)  # when each token was produced
    m_token_infer_durations: list[float] = field(default_factory=list)  # one model call each
    m_batch_sizes: list[int] = field(default_factory=list)
    m_durations: list[float] = field(default_factory=list)  # inter-token intervals (TPOT)
    m_inference_durations: list[float] = field(default_factory=list)  # per generate() total

    @property
    def inference_durations(self) -> list[float]:
        return self.m_inference_durations

    @property
    def token_infer_durations(self) -> list[float]:
        return self.m_token_infer_durations


class PerfMetrics:
    """Performance of one or more ``generate()`` calls; ``get_*`` evaluate lazily.

    TTFT is measured from the start of ``generate()`` (so it includes tokenization) to the first
    token; TPOT is the mean interval between later tokens; throughput = 1000 / TPOT.mean;
    IPOT is the mean duration of one model call.  ``a + b`` concatenates the raw series.
    """

    def __init__(self) -> None:
        self.load_time: float = 0.0
        self.num_generated_tokens: int = 0
        self.num_input_tokens: int = 0
        self.raw_metrics = RawPerfMetrics()
        self._evaluated = False
        self.ttft = MeanStdPair()
        self.tpot = MeanStdPair()
        self.ipot = MeanStdPair()
        self.throughput = MeanStdPair()
        self.generate_duration = MeanStdPair()
        self.inference_duration = MeanStdPair()
        self.tokenization_duration = MeanStdPair()
        self.detokenization_duration = MeanStdPair()
        self.chat_template_duration = MeanStdPair()
        self.sampling_duration = MeanStdPair()
        self.grammar_compile_time = SummaryStats()
        #: backend -> its grammar compiler's set-up time (µs, as the real measures it)
        self.grammar_compiler_init_times: dict[str, float] = {}

    # -- evaluation ------------------------------------------------------------------------
    def reevaluate(self, start_time: float | None = None) -> None:
        """Evaluate again after more raw values were added (a pipeline completing its call)."""
        self._evaluated = False
        self.evaluate_statistics(start_time)

    def evaluate_statistics(self, start_time: float | None = None) -> None:
        """Compute the statistics; with ``start_time`` (seconds) rebuild TTFT and the
        inter-token durations from the token timestamps first."""
        if self._evaluated:
            return
        raw = self.raw_metrics
        if start_time is not None and raw.m_new_token_times and raw.m_batch_sizes:
            times, sizes = raw.m_new_token_times, raw.m_batch_sizes
            raw.m_times_to_first_token = [(times[0] - start_time) * 1e6]
            raw.m_durations = []
            self.num_generated_tokens = sizes[0]
            # The prefill step is excluded from TPOT: intervals start at the first token.
            for i in range(1, len(times)):
                per_token = (times[i] - times[i - 1]) * 1e6 / sizes[i]
                raw.m_durations.extend([per_token] * sizes[i])
                self.num_generated_tokens += sizes[i]
        self.tpot = _mean_std(raw.m_durations)
        self.ipot = _mean_std(raw.m_token_infer_durations)
        self.ttft = _mean_std(raw.m_times_to_first_token)
        self.generate_duration = _mean_std(raw.generate_durations)
        g = raw.grammar_compile_times
        if g:
            ms = _mean_std(g)
            self.grammar_compile_time = SummaryStats(
                ms.mean, ms.std, min(g) / 1000.0, max(g) / 1000.0
            )
        else:
            self.grammar_compile_time = SummaryStats()
        self._finish_statistics()

    def _finish_statistics(self) -> None:
        """The stage durations and the throughput (from TPOT), common to every evaluation."""
        raw = self.raw_metrics
        self.tokenization_duration = _mean_std(raw.tokenization_durations)
        self.detokenization_duration = _mean_std(raw.detokenization_durations)
        self.chat_template_duration = _mean_std(raw.chat_template_durations)
        self.sampling_duration = _mean_std(raw.sampling_durations)
        self.inference_duration = _mean_std(raw.m_inference_durations)
        tp = self.tpot
        # Same expression as the real one, including its behaviour for an empty TPOT (-1).
        self.throughput = (
            MeanStdPair(1000.0 / tp.mean, tp.std * 1000.0 / (tp.mean * tp.mean))
            if tp.mean != 0
            else MeanStdPair(float("inf"), float("nan"))
        )
        self._evaluated = True

    # -- getters ---------------------------------------------------------------------------
    def get_load_time(self) -> float:
        return self.load_time

    def get_num_generated_tokens(self) -> int:
        self.evaluate_statistics()
        return self.num_generated_tokens

    def get_num_input_tokens(self) -> int:
        self.evaluate_statistics()
        return self.num_input_tokens

    def get_ttft(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.ttft

    def get_tpot(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.tpot

    def get_ipot(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.ipot

    def get_throughput(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.throughput

    def get_generate_duration(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.generate_duration

    def get_inference_duration(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.inference_duration

    def get_tokenization_duration(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.tokenization_duration

    def get_detokenization_duration(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.detokenization_duration

    def get_chat_template_duration(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.chat_template_duration

    def get_sampling_duration(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.sampling_duration

    def get_grammar_compile_time(self) -> SummaryStats:
        self.evaluate_statistics()
        return self.grammar_compile_time

    def get_grammar_compiler_init_times(self) -> dict[str, float]:
        """Per structured-output backend, the set-up time of its grammar compiler (µs; the
        real's header says ms, its code measures microseconds)."""
        return dict(self.grammar_compiler_init_times)

    # -- accumulation ----------------------------------------------------------------------
    def __add__(self, other: PerfMetrics) -> PerfMetrics:
        if not isinstance(other, PerfMetrics):
            return NotImplemented
        if other.load_time != self.load_time:
            raise UserInputError("generation metrics can be accumulated only for the same pipeline")
        res = copy.deepcopy(self)
        a, b = res.raw_metrics, other.raw_metrics
        for name in (
            "m_durations",
            "m_inference_durations",
            "m_token_infer_durations",
            "m_times_to_first_token",
            "m_batch_sizes",
            "tokenization_durations",
            "detokenization_durations",
            "generate_durations",
            "chat_template_durations",
            "sampling_durations",
            "grammar_compile_times",
        ):
            getattr(a, name).extend(getattr(b, name))
        for backend, t in other.grammar_compiler_init_times.items():
            if res.grammar_compiler_init_times.get(backend, t) != t:
                raise UserInputError(
                    "Grammar compiler init time for the same backend should be the same. You are trying "
                    "to accumulate metrics for different pipelines which is not allowed."
                )
            res.grammar_compiler_init_times[backend] = t
        res.num_generated_tokens += other.num_generated_tokens
        res.num_input_tokens += other.num_input_tokens
        res.reevaluate()
        return res

    def __iadd__(self, other: PerfMetrics) -> PerfMetrics:
        return self.__add__(other)

    def __repr__(self) -> str:
        return (
            f"<PerfMetrics load_time={self.load_time:.2f} ms, "
            f"generated={self.num_generated_tokens}, "
            f"input={self.num_input_tokens}>"
        )


class SDPerfMetrics(PerfMetrics):
    """One model's metrics inside speculative decoding (the real ``SDPerfMetrics``).

    Evaluated from the per-call series: ``m_durations[i]`` is the duration of the i-th model
    call (µs) and ``m_batch_sizes[i]`` the tokens it produced.  TTFT is the first call, TTST the
    second, latency the later calls, TPOT each later call divided by its tokens.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ttst = MeanStdPair()
        self.avg_latency = MeanStdPair()
        self.raw_metrics.m_inference_durations = [0.0]

    def evaluate_statistics(self, start_time: float | None = None) -> None:
        if self._evaluated:
            return
        raw = self.raw_metrics
        second: list[float] = []
        latency: list[float] = []
        tpot: list[float] = []
        if raw.m_durations and raw.m_batch_sizes:
            durations, sizes = raw.m_durations, raw.m_batch_sizes
            raw.m_times_to_first_token = [durations[0]]
            self.num_generated_tokens = int(sizes[0])
            raw.generate_durations = [durations[0]]
            for i in range(1, len(durations)):
                if i == 1:
                    second.append(durations[i])
                else:
                    latency.append(durations[i])
                    tpot.append(durations[i] / sizes[i] if sizes[i] else float("inf"))
                raw.generate_durations[0] += durations[i]
                self.num_generated_tokens += int(sizes[i])
        self.generate_duration = _mean_std(raw.generate_durations)
        self.ttft = _mean_std(raw.m_times_to_first_token)
        self.ttst = _mean_std(second)
        self.tpot = _mean_std(tpot)
        self.avg_latency = _mean_std(latency)
        self.ipot = _mean_std(raw.m_token_infer_durations)
        self._finish_statistics()

    def get_ttst(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.ttst

    def get_latency(self) -> MeanStdPair:
        self.evaluate_statistics()
        return self.avg_latency


class SDPerModelsPerfMetrics(SDPerfMetrics):
    """``extended_perf_metrics`` of speculative decoding: the pipeline's own metrics (evaluated
    like PerfMetrics, from token timestamps) plus ``main_model_metrics`` /
    ``draft_model_metrics`` and the candidate counters."""

    def __init__(self) -> None:
        super().__init__()
        self.main_model_metrics = SDPerfMetrics()
        self.draft_model_metrics = SDPerfMetrics()
        self.num_accepted_tokens = 0
        self.num_draft_tokens = 0
        # Evaluated as PerfMetrics: TTST and latency stay unset (0, as the real reports them).
        self.ttst = MeanStdPair(0.0, 0.0)
        self.avg_latency = MeanStdPair(0.0, 0.0)

    def evaluate_statistics(self, start_time: float | None = None) -> None:
        if self._evaluated:
            return
        PerfMetrics.evaluate_statistics(self, start_time)
        self.main_model_metrics.evaluate_statistics(start_time)
        self.draft_model_metrics.evaluate_statistics(start_time)
        self._evaluated = True

    def get_num_accepted_tokens(self) -> int:
        self.evaluate_statistics()
        return self.num_accepted_tokens

    def get_num_draft_tokens(self) -> int:
        self.evaluate_statistics()
        return self.num_draft_tokens

    def get_num_draft_processed_tokens(self) -> int:
        self.evaluate_statistics()
        return self.draft_model_metrics.get_num_generated_tokens()

    def get_num_rejected_tokens(self) -> int:
        self.evaluate_statistics()
        return self.num_draft_tokens - self.num_accepted_tokens if self.num_draft_tokens else 0

    def get_draft_acceptance_rate(self) -> float:
        self.evaluate_statistics()
        if not self.num_draft_tokens:
            return float("nan")
        return self.num_accepted_tokens / self.num_draft_tokens

    def get_draft_processed_to_candidate_ratio(self) -> float:
        self.evaluate_statistics()
        if not self.num_draft_tokens:
            return float("nan")
        return self.get_num_draft_processed_tokens() / self.num_draft_tokens

    def get_draft_to_main_inference_duration_ratio(self) -> float:
        self.evaluate_statistics()
        draft = self.draft_model_metrics.get_inference_duration().mean
        main = self.main_model_metrics.get_inference_duration().mean
        if main <= 0.0 or draft < 0.0:
            return float("nan")
        return draft / main
