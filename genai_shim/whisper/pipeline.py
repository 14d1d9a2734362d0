"""WhisperPipeline: openvino.genai's WhisperPipeline (whisper/pipeline.cpp, whisper.cpp) over
ov_npu_emu.Core.

One generate() call: the log-mel features of the whole audio (features.py); then window by
window of ``nb_max_frames`` (30 s): the encoder, once the language (given, or detected from the
first window on a multilingual model), the prompt ``[<|startofprev|> initial_prompt / hotwords]
<|startoftranscript|> <|lang|> <|task|> [<|notimestamps|>]``, greedy or sampled decoding with
Whisper's logit rules (logits.py), and - with timestamps, which audio over 30 s always uses - the
segments of the window and where the next window starts (timestamps.py).

The decoder runs behind ``models.WhisperDecoder``: on "CPU" the exported stateful decoder as
is; on "NPU" with ``STATIC_PIPELINE=True`` the real's static decoder pair (static.py); on "NPU"
without it the stateful decoder through NPUW's Whisper mode (npuw.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.beam_search import GroupBeamSearcher, SequenceGroup
from genai_shim.decoding import RunningSequence, check_finish
from genai_shim.generation_config import WhisperGenerationConfig
from genai_shim.sampling import Sampler
from genai_shim.stop_strings import match_stop_string, stop_window
from genai_shim.streamers import StreamerBase, StreamingStatus, TextStreamer, make_streamer, status_from_callback
from genai_shim.tokenizer import Tokenizer
from genai_shim.whisper.features import WhisperFeatureExtractor
from genai_shim.whisper.logits import process_whisper_logits
from genai_shim.whisper.models import (
    DECODER_XML,
    ENCODER_XML,
    Encoder,
    StatefulDecoder,
    WhisperDecoder,
    detect_language,
)
from genai_shim.whisper.results import (
    WhisperDecodedResultChunk,
    WhisperDecodedResults,
    WhisperPerfMetrics,
    WhisperWordTiming,
)
from genai_shim.whisper.timestamps import Segment, extract_segments
from genai_shim.whisper.word_timestamps import add_word_timings
from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError, UserTypeError

__all__ = ["WhisperPipeline"]


def _now() -> float:
    return time.perf_counter()


def _make_core() -> Any:
    from ov_npu_emu import Core

    return Core()


def _f32(x: float) -> float:
    return float(np.float32(x))


def _speech(raw: Any) -> np.ndarray:
    """The real binding takes a sequence of floats (a list, or a 1-D array of numbers)."""
    if isinstance(raw, (str, bytes)) or raw is None:
        raise UserTypeError(
            f"raw_speech_input must be a sequence of floats (16 kHz audio in [-1, 1]), got {type(raw).__name__}"
        )
    try:
        arr = np.asarray(raw)
    except (ValueError, TypeError) as e:
        raise UserTypeError(f"raw_speech_input must be a sequence of floats: {e}") from e
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_) or np.iscomplexobj(arr):
        shape = "x".join(map(str, arr.shape)) or "a scalar"
        raise UserTypeError(
            "raw_speech_input must be a 1-D sequence of floats (16 kHz mono audio in [-1, 1]), got "
            f"{shape} of {arr.dtype}; pass one channel, e.g. audio[:, 0] or audio.mean(axis=1)"
        )
    return np.ascontiguousarray(arr, dtype=np.float32)


def _write(streamer: StreamerBase, tokens: list[int]) -> StreamingStatus:
    """One ``write`` of a list of tokens, its status as the real maps it."""
    if isinstance(streamer, TextStreamer):
        return streamer.write(list(tokens))
    return status_from_callback(streamer.write(list(tokens)))


class _Stream:
    """What the real's GenerationStream hands the streamer during greedy or sampled decoding:
    after each token, the tokens no stop string can remove any more (all but the last
    ``window``; all of them once the sequence finished) in one ``write``, the prompt before the
    first ones with ``echo``; nothing more once a write asked to stop."""

    def __init__(self, streamer: StreamerBase | None, window: int, echo: list[int] | None) -> None:
        self.streamer = streamer
        self.window = window
        self.echo = echo
        self.streamed = 0
        self.stopped: StreamingStatus | None = None

    def after_token(self, tokens: list[int], finished: bool) -> None:
        if self.streamer is None:
            return
        n = len(tokens) - self.streamed - (0 if finished else self.window)
        if n <= 0:
            return
        push = tokens[self.streamed:self.streamed + n]
        self.streamed += n
        if self.echo is not None:
            push, self.echo = self.echo + push, None
        if self.stopped is None:
            status = _write(self.streamer, push)
            if status != StreamingStatus.RUNNING:
                self.stopped = status


class WhisperPipeline:
    """``WhisperPipeline(models_path, device, **properties)`` for an optimum-intel Whisper export
    (``--task automatic-speech-recognition-with-past``)."""

    def __init__(self, models_path: str | os.PathLike[str] | bytes, device: str, **properties: Any) -> None:
        t0 = _now()
        if not isinstance(models_path, (str, bytes, os.PathLike)):
            raise UserTypeError(f"models_path must be a folder path, got {type(models_path).__name__}")
        folder = Path(os.fsdecode(models_path))
        for xml in (ENCODER_XML, DECODER_XML):
            if not (folder / xml).is_file():
                raise ConfigError(
                    f"{folder} has no {xml}; pass the folder of optimum-cli export openvino --task "
                    "automatic-speech-recognition-with-past",
                    key="models_path",
                )
        dev, props, static = _device_and_props(device, properties)
        word_timestamps = props.pop("word_timestamps", None)
        if word_timestamps is not None and not isinstance(word_timestamps, bool):
            raise ConfigError(f"word_timestamps must be a bool, got {type(word_timestamps).__name__}",
                              key="word_timestamps")
        for key in props:
            if key in WhisperGenerationConfig._FIELDS:
                # the real applies it, then hands it to the device too, which rejects it
                raise ConfigError(
                    f"{key} is a generation parameter, not a device property (the real WhisperPipeline "
                    "passes it to the device, which rejects it); pass it to generate() or "
                    "set_generation_config()",
                    key=key,
                )
        self._tokenizer = Tokenizer(folder)
        path = folder / "generation_config.json"
        config = WhisperGenerationConfig(path) if path.is_file() else WhisperGenerationConfig()
        if config.eos_token_id == -1:
            config.set_eos_token_id(self._tokenizer.get_eos_token_id())
        if word_timestamps is not None:
            # the real applies the constructor's word_timestamps to the pipeline's config too
            config.word_timestamps = word_timestamps
        self._config = config
        self._features = WhisperFeatureExtractor(folder / "preprocessor_config.json")
        self._max_source_positions = _max_source_positions(folder)
        core = _make_core()
        self._static = static
        if static:
            from genai_shim.whisper.static import StaticDecoder

            # the real reshapes the encoder to [1, feature_size, nb_max_frames]
            self._encoder = Encoder(core, folder, dev, props,
                                    static_frames=(self._features.feature_size, self._features.nb_max_frames))
            frames, hidden = self._encoder.hidden_shape
            self._decoder: WhisperDecoder = StaticDecoder(core, folder, dev, props, frames, hidden,
                                                         word_timestamps=bool(word_timestamps))
        elif dev.split(".")[0] == "NPU":
            from genai_shim.whisper.npuw import GENAI_KEYS, NpuwDecoder, npuw_whisper_properties

            # the real: the encoder [1, feature_size, frames] on "NPU" with the user's properties, the
            # stateful decoder through NPUW's Whisper mode (npuw.py)
            decoder_props = npuw_whisper_properties(props, config.eos_token_id, bool(word_timestamps))
            self._encoder = Encoder(core, folder, dev, {k: v for k, v in props.items() if k not in GENAI_KEYS},
                                    f16_output=False,
                                    static_frames=(self._features.feature_size, self._features.nb_max_frames))
            self._decoder = NpuwDecoder(core, folder, decoder_props, self._encoder.hidden_shape[0],
                                        word_timestamps=bool(word_timestamps))
        else:
            self._encoder = Encoder(core, folder, dev, props)
            self._decoder = StatefulDecoder(core, folder, dev, props, word_timestamps=bool(word_timestamps))
        self._sampler = Sampler(config.rng_seed)
        self._load_time = (_now() - t0) * 1000.0

    # -- public API ------------------------------------------------------------------------------
    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def get_generation_config(self) -> WhisperGenerationConfig:
        return self._config.copy()

    def set_generation_config(self, config: WhisperGenerationConfig) -> None:
        self._config = self._per_generate(config)

    def generate(
        self,
        raw_speech_input: Any,
        generation_config: WhisperGenerationConfig | None = None,
        streamer: Any = None,
        **kwargs: Any,
    ) -> WhisperDecodedResults:
        raw_speech_input = _speech(raw_speech_input)  # the binding converts the audio first
        # an ASRGenerationConfig (genai_shim.asr, a subclass here) is a TypeError, as in the real binding
        if generation_config is not None and (not isinstance(generation_config, WhisperGenerationConfig)
                                              or type(generation_config).__name__ == "ASRGenerationConfig"):
            raise UserTypeError(
                f"generation_config must be a WhisperGenerationConfig, got {type(generation_config).__name__}"
            )
        config = (generation_config if generation_config is not None else self._config).copy()
        if kwargs:
            config.update_generation_config(**kwargs)
        return self._generate_with(raw_speech_input, config, streamer)

    def _generate_with(self, raw_speech_input: Any, config: WhisperGenerationConfig,
                       streamer: Any) -> WhisperDecodedResults:
        """generate() once the config is known (ASRPipeline's Whisper adapter enters here)."""
        start = _now()
        speech = _speech(raw_speech_input)
        config = self._per_generate(config)
        if config.is_beam_search() and config.stop_strings:
            raise UnsupportedFeatureError(
                "stop_strings with beam search are not implemented in genai_shim's WhisperPipeline (the real feeds a "
                "beam that a stop string shortened past its last token there); use stop_token_ids, or greedy "
                "decoding with stop_strings",
                key="stop_strings",
            )
        if self._static:
            for key in ("initial_prompt", "hotwords"):
                if getattr(config, key) is not None:
                    # the real's pipeline_static.cpp checks
                    raise ConfigError(f"'{key}' parameter is not supported on NPU device with STATIC_PIPELINE=True "
                                      "(as in openvino_genai); drop it, or use device \"CPU\"", key=key)
        stream = make_streamer(streamer, self._tokenizer)
        t0 = _now()
        context = self._context_tokens(config)
        tokenization_us = (_now() - t0) * 1e6 if (config.initial_prompt or config.hotwords) else 0.0
        res = self._generate(speech, config, context, stream)
        perf = res.perf_metrics
        perf.raw_metrics.tokenization_durations.append(tokenization_us)
        perf.load_time = self._load_time
        perf.raw_metrics.generate_durations.append((_now() - start) * 1e6)
        perf.reevaluate(start)
        return res

    # -- steps -----------------------------------------------------------------------------------
    def _per_generate(self, config: WhisperGenerationConfig) -> WhisperGenerationConfig:
        """The real's prepare_per_generate_config: the pipeline's stop tokens, EOS and lang_to_id
        fill what the new config lacks; then validate()."""
        if not isinstance(config, WhisperGenerationConfig):
            raise UserTypeError(f"expected a WhisperGenerationConfig, got {type(config).__name__}")
        config = config.copy()
        base = self._config
        if not config.stop_token_ids:
            config.stop_token_ids = set(base.stop_token_ids)
        if config.eos_token_id == -1:
            config.set_eos_token_id(base.eos_token_id)
        if not config.lang_to_id:
            config.lang_to_id = dict(base.lang_to_id)
        config.validate()
        return config

    def _context_tokens(self, config: WhisperGenerationConfig) -> tuple[list[int], list[int]]:
        """(initial prompt ids, hotwords ids): " " + text, without special tokens."""
        special = {config.decoder_start_token_id, config.eos_token_id, config.no_timestamps_token_id}

        def ids(text: str | None) -> list[int]:
            if not text:
                return []
            enc = self._tokenizer.encode(" " + text, add_special_tokens=False)
            return [int(t) for t in np.asarray(enc.input_ids.data).reshape(-1) if int(t) not in special]

        return ids(config.initial_prompt), ids(config.hotwords)

    def _sot_tokens(self, hidden: np.ndarray, config: WhisperGenerationConfig,
                    perf: WhisperPerfMetrics) -> tuple[list[int], str]:
        if not config.is_multilingual:
            return [config.decoder_start_token_id], "en"
        if config.language is not None:
            language = config.language
            lang_id = config.language_token_id(language)
        else:
            lang_id, took = detect_language(self._decoder, hidden, config)
            perf.raw_metrics.m_inference_durations[0] += took
            language = next(k for k, v in sorted(config.lang_to_id.items()) if v == lang_id)
        task = config.translate_token_id if config.task == "translate" else config.transcribe_token_id
        return [config.decoder_start_token_id, lang_id, task], "".join(c for c in language if c not in "<|>")

    def _generate(self, speech: np.ndarray, config: WhisperGenerationConfig, context: tuple[list[int], list[int]],
                  stream: StreamerBase | None) -> WhisperDecodedResults:
        perf = WhisperPerfMetrics()
        raw, wraw = perf.raw_metrics, perf.whisper_raw_metrics
        raw.m_inference_durations = [0.0]
        wraw.word_level_timestamps_processing_durations = [0.0]
        fx = self._features
        t0 = _now()
        features = fx.extract(speech)
        wraw.features_extraction_durations.append((_now() - t0) * 1e6)
        short = features.n_frames <= fx.nb_max_frames
        timestamps = config.return_timestamps or not short
        time_precision = _f32(np.float32(fx.chunk_length) / np.float32(self._max_source_positions))
        frame_seconds = _f32(np.float32(fx.hop_length) / np.float32(fx.sampling_rate))
        initial_prompt, hotwords = context
        sot: list[int] = []
        language = ""
        output: list[int] = []
        segments: list[Segment] = []
        offset = 0
        words: list[WhisperWordTiming] = []
        while offset < features.n_frames:
            window_offset = offset
            time_offset = _f32(np.float32(offset) * np.float32(frame_seconds))
            window = features.window(offset, fx.nb_max_frames)
            t0 = _now()
            hidden = self._encoder.infer(window)
            took = (_now() - t0) * 1e6
            raw.m_inference_durations[0] += took
            wraw.encode_inference_durations.append(took)
            if not sot:
                sot, language = self._sot_tokens(hidden, config, perf)
            prompt: list[int] = []
            if (initial_prompt and offset == 0) or hotwords:
                prompt = [config.prev_sot_token_id] + (initial_prompt if offset == 0 else []) + hotwords
            prompt += sot
            if not timestamps:
                prompt.append(config.no_timestamps_token_id)
            tokens, cancelled = self._decode(hidden, prompt, config, timestamps, stream, perf)
            self._decoder.reset_state()
            if timestamps:
                ext = extract_segments(tokens, config.no_timestamps_token_id, fx.nb_max_frames, time_precision,
                                       time_offset)
                _keep_segment_metrics(perf, len(output), ext.ranges)
                segments.extend(ext.segments)
                output.extend(ext.non_timestamp_tokens)
                if stream is not None and _write(stream, ext.non_timestamp_tokens) != StreamingStatus.RUNNING:
                    break
                offset += ext.last_offset
            else:
                output.extend(tokens)
                offset += features.n_frames
            if cancelled:
                break
            if config.word_timestamps:
                t0 = _now()
                active = features.n_active_frames - window_offset
                n_active = fx.nb_max_frames if active < 0 else min(fx.nb_max_frames, active)
                words.extend(add_word_timings(self._decoder, hidden, sot, tokens, config, self._tokenizer, language,
                                              n_active, time_offset))
                wraw.word_level_timestamps_processing_durations[0] += (_now() - t0) * 1e6
        if stream is not None:
            stream.end()
        res = WhisperDecodedResults()
        t0 = _now()
        res.texts = [str(self._tokenizer.decode(output))]
        raw.detokenization_durations.append((_now() - t0) * 1e6)
        res.scores = [1.0]
        res.language = language
        if config.return_timestamps:
            res.chunks = []
            for seg in segments:
                t0 = _now()
                text = str(self._tokenizer.decode(seg.tokens))
                raw.detokenization_durations.append((_now() - t0) * 1e6)
                res.chunks.append(WhisperDecodedResultChunk(seg.start, seg.end, text))
        if config.word_timestamps:
            res.words = words
        res.perf_metrics = perf
        return res

    def _record_call(self, perf: WhisperPerfMetrics, t0: float, batch: int) -> None:
        t1 = _now()
        took = (t1 - t0) * 1e6
        raw = perf.raw_metrics
        raw.m_inference_durations[0] += took
        raw.m_token_infer_durations.append(took)
        raw.m_new_token_times.append(t1)
        raw.m_batch_sizes.append(batch)
        perf.whisper_raw_metrics.decode_inference_durations.append(took)

    def _decode(self, hidden: np.ndarray, prompt: list[int], config: WhisperGenerationConfig, timestamps: bool,
                stream: StreamerBase | None, perf: WhisperPerfMetrics) -> tuple[list[int], bool]:
        """One window: prefill the prompt, then a token per call (the real's decode())."""
        if config.is_beam_search():
            return self._decode_beams(hidden, prompt, config, timestamps, stream, perf)
        raw = perf.raw_metrics
        seq = RunningSequence(prompt, config, config.get_max_new_tokens(len(prompt)))
        window, stops = stop_window(self._tokenizer, config)
        out = _Stream(None if timestamps else stream, window, list(prompt) if config.echo else None)
        feed = prompt
        stop_after_this = False
        while True:
            t0 = _now()
            logits = self._decoder.infer(hidden, feed)
            self._record_call(perf, t0, 1)
            process_whisper_logits(logits, config, timestamps, seq.tokens)
            t2 = _now()
            token, logp = self._sampler.sample(seq.processor, logits)
            raw.sampling_durations.append((_now() - t2) * 1e6)
            seq.tokens.append(token)
            seq.processor.register(token)
            seq.logps.append(logp)
            check_finish(seq, config, self._tokenizer, window, stops)
            if stop_after_this:
                if seq.finish is not None:
                    # the real's handle status turns FINISHED again: this token is written and the
                    # stop forgotten (a longer audio goes on with its next window)
                    out.stopped = None
                    out.after_token(seq.tokens, True)
                break
            out.after_token(seq.tokens, seq.finish is not None)
            if seq.finish is not None:
                break
            if out.stopped is not None:
                if len(seq.tokens) == 1:
                    break
                # the real writes while the next token is computed (after the first): it is kept
                stop_after_this = True
            feed = [token]
        return seq.tokens, out.stopped is not None

    def _decode_beams(self, hidden: np.ndarray, prompt: list[int], config: WhisperGenerationConfig,
                      timestamps: bool, stream: StreamerBase | None,
                      perf: WhisperPerfMetrics) -> tuple[list[int], bool]:
        """Group beam search over the window (the real's Sampler with log-probability rows): the
        running beams batched in one decoder call, ``beam_idx`` picking each one's parent KV row;
        the best finished beam is the window's result, streamed in one write at the end."""
        window, stops = stop_window(self._tokenizer, config)
        matcher = None
        if stops:
            def matcher(tokens: list[int]) -> int | None:
                if len(tokens) < window:
                    return None
                return match_stop_string(self._tokenizer, tokens, window, stops, config.include_stop_str_in_output)

        group = SequenceGroup(0, prompt, config, config.get_max_new_tokens(len(prompt)))
        searcher = GroupBeamSearcher(group, matcher, log_probs=True)
        t0 = _now()
        logits = self._decoder.infer(hidden, prompt)[None]
        self._record_call(perf, t0, 1)
        first = True
        while True:
            for row, seq in zip(logits, group.running(), strict=True):
                process_whisper_logits(row, config, timestamps, seq.tokens, initial=first)
            first = False
            t2 = _now()
            searcher.step(logits)
            perf.raw_metrics.sampling_durations.append((_now() - t2) * 1e6)
            running = group.running()
            if not running:
                break
            rows = searcher.beam_rows()
            ids = [s.tokens[-1] for s in running]
            parents = [rows.get(s.id, 0) for s in running]
            t0 = _now()
            logits = self._decoder.infer_beams(hidden, ids, parents)
            self._record_call(perf, t0, len(ids))
        best = group.results()[0]
        tokens = list(best.tokens)
        stopped = False
        if stream is not None and not timestamps:
            # the real streams the first entry of an unordered_map of every sequence left, which is
            # the last one of the group (measured on openvino_genai 2026.4.1), not the best
            stopped = _write(stream, list(group.seqs[-1].tokens)) != StreamingStatus.RUNNING
        return tokens, stopped


def _device_and_props(device: Any, properties: dict[str, Any]) -> tuple[str, dict[str, Any], bool]:
    """(device, the device properties, STATIC_PIPELINE) after the real's checks."""
    if not isinstance(device, str):
        raise UserTypeError(f"device must be a str, got {type(device).__name__}")
    dev = device.upper()
    props = dict(properties)
    static = props.pop("STATIC_PIPELINE", False)
    if not isinstance(static, bool):
        raise ConfigError(f"STATIC_PIPELINE must be a bool, got {type(static).__name__}", key="STATIC_PIPELINE")
    if dev.split(".")[0] == "CPU" and static:
        raise ConfigError("STATIC_PIPELINE is an NPU property; drop it, or use device \"NPU\"",
                          key="STATIC_PIPELINE")
    if dev.split(".")[0] not in ("CPU", "NPU"):
        raise ConfigError(f"genai_shim's WhisperPipeline runs on \"CPU\" or \"NPU\", not {device!r}", key="device")
    return dev, props, static


def _keep_segment_metrics(perf: WhisperPerfMetrics, offset: int, ranges: Sequence[tuple[int, int]]) -> None:
    """The real's filter_non_segment_metrics: per-token series keep the first ``offset`` values
    and then only the tokens inside segments."""
    raw, wraw = perf.raw_metrics, perf.whisper_raw_metrics

    def cut(values: list[Any]) -> list[Any]:
        kept = values[:offset]
        for a, b in ranges:
            kept.extend(values[offset + a:offset + b])
        return kept

    raw.m_token_infer_durations = cut(raw.m_token_infer_durations)
    raw.m_new_token_times = cut(raw.m_new_token_times)
    raw.m_batch_sizes = cut(raw.m_batch_sizes)
    raw.sampling_durations = cut(raw.sampling_durations)
    wraw.decode_inference_durations = cut(wraw.decode_inference_durations)


def _max_source_positions(folder: Path) -> int:
    path = folder / "config.json"
    if not path.is_file():
        return 1500
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("max_source_positions", 1500)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {path}: {e}", key="config.json") from e
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{path}: max_source_positions must be a positive integer, got {value!r}",
                          key="max_source_positions")
    return value
