"""WhisperPipeline's results and metrics, named and shaped as openvino_genai's bindings."""

from __future__ import annotations

import copy
from typing import Any

from genai_shim.perf_metrics import MeanStdPair, PerfMetrics, _mean_std

__all__ = [
    "WhisperDecodedResultChunk",
    "WhisperDecodedResults",
    "WhisperPerfMetrics",
    "WhisperRawPerfMetrics",
    "WhisperWordTiming",
]


class WhisperRawPerfMetrics:
    """Whisper's raw series, in microseconds (as the real binding reads them)."""

    _SERIES = ("features_extraction", "word_level_timestamps_processing", "encode_inference", "decode_inference")

    def __init__(self) -> None:
        self.features_extraction_durations: list[float] = []
        self.word_level_timestamps_processing_durations: list[float] = []
        self.encode_inference_durations: list[float] = []
        self.decode_inference_durations: list[float] = []


class WhisperPerfMetrics(PerfMetrics):
    """PerfMetrics plus feature extraction, encoder and decoder durations (ms)."""

    def __init__(self) -> None:
        super().__init__()
        self.whisper_raw_metrics = WhisperRawPerfMetrics()

    def _series(self, name: str) -> MeanStdPair:
        return _mean_std(getattr(self.whisper_raw_metrics, f"{name}_durations"))

    def get_features_extraction_duration(self) -> MeanStdPair:
        return self._series("features_extraction")

    def get_word_level_timestamps_processing_duration(self) -> MeanStdPair:
        return self._series("word_level_timestamps_processing")

    def get_encode_inference_duration(self) -> MeanStdPair:
        return self._series("encode_inference")

    def get_decode_inference_duration(self) -> MeanStdPair:
        return self._series("decode_inference")

    def __add__(self, other: PerfMetrics) -> WhisperPerfMetrics:
        if not isinstance(other, WhisperPerfMetrics):
            return NotImplemented
        res = PerfMetrics.__add__(self, other)
        assert isinstance(res, WhisperPerfMetrics)  # deepcopy of self
        for name in WhisperRawPerfMetrics._SERIES:
            series = f"{name}_durations"
            getattr(res.whisper_raw_metrics, series).extend(getattr(other.whisper_raw_metrics, series))
        return res

    def __iadd__(self, other: PerfMetrics) -> WhisperPerfMetrics:
        return self.__add__(other)


class WhisperDecodedResultChunk:
    """A segment of the transcription: ``start_ts`` / ``end_ts`` in seconds (``end_ts`` -1 when the
    window ended inside it) and its ``text``."""

    def __init__(self, start_ts: float = 0.0, end_ts: float = -1.0, text: str = "") -> None:
        self.start_ts = start_ts
        self.end_ts = end_ts
        self.text = text

    def __repr__(self) -> str:
        return f"WhisperDecodedResultChunk(start_ts={self.start_ts}, end_ts={self.end_ts}, text={self.text!r})"


class WhisperWordTiming:
    """A word with its token ids and timestamps (word-level timestamps)."""

    def __init__(self, word: str = "", token_ids: list[int] | None = None, start_ts: float = 0.0,
                 end_ts: float = 0.0) -> None:
        self.word = word
        self.token_ids = list(token_ids or [])
        self.start_ts = start_ts
        self.end_ts = end_ts


class WhisperDecodedResults:
    """``texts``, ``scores`` (1.0, as the real), the detected or given ``language``, ``chunks``
    (with ``return_timestamps``, else None), ``words`` (None) and ``perf_metrics``."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.scores: list[float] = []
        self.language: str = ""
        self.chunks: list[WhisperDecodedResultChunk] | None = None
        self.words: list[WhisperWordTiming] | None = None
        self.perf_metrics: WhisperPerfMetrics = WhisperPerfMetrics()

    def __str__(self) -> str:
        # the real binding's: the text alone for one result, else "score: text" lines
        if len(self.texts) == 1:
            return self.texts[0]
        return "\n".join(f"{s:.6f}: {t}" for s, t in zip(self.scores, self.texts, strict=True))

    def __repr__(self) -> str:
        return f"WhisperDecodedResults(texts={self.texts!r}, language={self.language!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> WhisperDecodedResults:
        res = WhisperDecodedResults()
        res.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return res
