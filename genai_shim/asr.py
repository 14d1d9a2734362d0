"""ASRPipeline: openvino.genai's model-neutral speech recognition facade
(automatic_speech_recognition/pipeline.cpp), which picks an implementation by config.json's
``model_type``; genai_shim has the Whisper one (models/whisper/pipeline.hpp's adapter over
WhisperPipeline). Qwen3-ASR and Fun-ASR are a ConfigError naming the model type."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from genai_shim.generation_config import GenerationConfig, WhisperGenerationConfig
from genai_shim.perf_metrics import MeanStdPair, PerfMetrics, _mean_std
from genai_shim.tokenizer import Tokenizer
from genai_shim.whisper.pipeline import WhisperPipeline
from genai_shim.whisper.results import WhisperDecodedResults
from ov_npu_emu.errors import ConfigError, UserTypeError

__all__ = [
    "ASRDecodedResultChunk",
    "ASRDecodedResults",
    "ASRGenerationConfig",
    "ASRPerfMetrics",
    "ASRPipeline",
    "ASRRawPerfMetrics",
]


class ASRGenerationConfig(WhisperGenerationConfig):
    """``openvino_genai.ASRGenerationConfig``: WhisperGenerationConfig's fields plus ``context``;
    its own ``validate()`` checks the generic rules only (the Whisper ones run in the Whisper
    pipeline)."""

    _FIELDS = {**WhisperGenerationConfig.field_defaults(), "context": None}

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "context":
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"ASRGenerationConfig.context must be a str or None, got {type(value).__name__}")
            object.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)

    def validate(self) -> None:
        GenerationConfig.validate(self)
        if self.num_return_sequences != 1:
            raise ConfigError(f"'num_return_sequences' must be 1. Provided: {self.num_return_sequences}.")
        if self.is_assisting_generation():
            raise ConfigError("Assisted generation is not supported.")

    def to_whisper(self) -> WhisperGenerationConfig:
        """The Whisper adapter's copy: every field but ``context``."""
        out = WhisperGenerationConfig()
        for name in WhisperGenerationConfig.field_defaults():
            object.__setattr__(out, name, getattr(self, name))
        return out


class ASRRawPerfMetrics:
    """Feature extraction, word timestamps, encoder and decoder series, in microseconds."""

    def __init__(self) -> None:
        self.features_extraction_durations: list[float] = []
        self.word_level_timestamps_processing_durations: list[float] = []
        self.encode_inference_durations: list[float] = []
        self.decode_inference_durations: list[float] = []


class ASRPerfMetrics(PerfMetrics):
    """PerfMetrics plus the speech series (means in ms)."""

    def __init__(self) -> None:
        super().__init__()
        self.asr_raw_metrics = ASRRawPerfMetrics()

    def get_features_extraction_duration(self) -> MeanStdPair:
        return _mean_std(self.asr_raw_metrics.features_extraction_durations)

    def get_word_level_timestamps_processing_duration(self) -> MeanStdPair:
        return _mean_std(self.asr_raw_metrics.word_level_timestamps_processing_durations)

    def get_encode_inference_duration(self) -> MeanStdPair:
        return _mean_std(self.asr_raw_metrics.encode_inference_durations)

    def get_decode_inference_duration(self) -> MeanStdPair:
        return _mean_std(self.asr_raw_metrics.decode_inference_durations)


class ASRDecodedResultChunk:
    """A segment or a word: ``start_ts`` / ``end_ts`` (s), ``text`` and ``token_ids`` (words only)."""

    def __init__(self, start_ts: float = 0.0, end_ts: float = -1.0, text: str = "",
                 token_ids: list[int] | None = None) -> None:
        self.start_ts = start_ts
        self.end_ts = end_ts
        self.text = text
        self.token_ids = list(token_ids or [])

    def __repr__(self) -> str:
        return f"ASRDecodedResultChunk(start_ts={self.start_ts}, end_ts={self.end_ts}, text={self.text!r})"


class ASRDecodedResults:
    """``texts``, ``scores``, ``languages``, ``chunks`` / ``words`` (one list per text, or None)
    and ``perf_metrics``."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.scores: list[float] = []
        self.languages: list[str] = []
        self.chunks: list[list[ASRDecodedResultChunk]] | None = None
        self.words: list[list[ASRDecodedResultChunk]] | None = None
        self.perf_metrics = ASRPerfMetrics()

    def __str__(self) -> str:
        if len(self.texts) == 1:
            return self.texts[0]
        return "\n".join(f"{s:.6f}: {t}" for s, t in zip(self.scores, self.texts, strict=True))


def _model_type(folder: Path) -> str:
    path = folder / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"Failed to open '{path}' ({e}); pass an exported speech model's folder",
                          key="models_path") from e
    if "model_type" not in data:
        raise ConfigError("config.json must contain 'model_type' field for ASRPipeline model dispatch",
                          key="model_type")
    return str(data["model_type"])


def _asr_results(res: WhisperDecodedResults) -> ASRDecodedResults:
    out = ASRDecodedResults()
    out.texts, out.scores, out.languages = list(res.texts), list(res.scores), [res.language]
    wp = res.perf_metrics
    perf = ASRPerfMetrics()
    for name, value in vars(wp).items():
        if name != "whisper_raw_metrics":
            setattr(perf, name, value)
    wr, ar = wp.whisper_raw_metrics, perf.asr_raw_metrics
    ar.features_extraction_durations = list(wr.features_extraction_durations)
    ar.word_level_timestamps_processing_durations = list(wr.word_level_timestamps_processing_durations)
    ar.encode_inference_durations = list(wr.encode_inference_durations)
    ar.decode_inference_durations = list(wr.decode_inference_durations)
    out.perf_metrics = perf
    if res.chunks is not None:
        out.chunks = [[ASRDecodedResultChunk(c.start_ts, c.end_ts, c.text) for c in res.chunks]]
    if res.words is not None:
        out.words = [[ASRDecodedResultChunk(w.start_ts, w.end_ts, w.word, w.token_ids) for w in res.words]]
    return out


class ASRPipeline:
    """``ASRPipeline(models_path, device, **properties)``: Whisper exports (model_type "whisper")."""

    def __init__(self, models_path: str | os.PathLike[str] | bytes, device: str, **properties: Any) -> None:
        if not isinstance(models_path, (str, bytes, os.PathLike)):
            raise UserTypeError(f"models_path must be a folder path, got {type(models_path).__name__}")
        folder = Path(os.fsdecode(models_path))
        model_type = _model_type(folder)
        if model_type != "whisper":
            known = model_type in ("qwen3_asr", "fun_asr")
            raise ConfigError(
                f"genai_shim's ASRPipeline runs Whisper models only; {folder} is {model_type!r}"
                + (" (not implemented yet)" if known else f" (the real: Unsupported '{model_type}' ASR model type)"),
                key="model_type",
            )
        self._whisper = WhisperPipeline(folder, device, **properties)
        path = folder / "generation_config.json"
        config = ASRGenerationConfig(path) if path.is_file() else ASRGenerationConfig()
        self._config = config

    def get_tokenizer(self) -> Tokenizer:
        return self._whisper.get_tokenizer()

    def get_generation_config(self) -> ASRGenerationConfig:
        return self._config.copy()

    def set_generation_config(self, config: ASRGenerationConfig) -> None:
        if not isinstance(config, ASRGenerationConfig):
            raise UserTypeError(f"expected an ASRGenerationConfig, got {type(config).__name__}")
        self._whisper.set_generation_config(config.to_whisper())
        self._config = config.copy()

    def generate(self, audio_inputs: Any, generation_config: ASRGenerationConfig | None = None, streamer: Any = None,
                 **kwargs: Any) -> ASRDecodedResults:
        if generation_config is not None and not isinstance(generation_config, ASRGenerationConfig):
            raise UserTypeError(
                f"generation_config must be an ASRGenerationConfig, got {type(generation_config).__name__}"
            )
        config = (generation_config if generation_config is not None else self._config).copy()
        if kwargs:
            config.update_generation_config(**kwargs)
        return _asr_results(self._whisper._generate_with(audio_inputs, config.to_whisper(), streamer))
