"""Whisper's log-mel spectrogram as openvino.genai computes it (whisper/feature_extractor.cpp),
in numpy.

What the real does, step by step: the audio is zero-padded to ``n_samples`` (30 s) and reflect-
padded by ``n_fft / 2`` on both sides; frame ``i`` starts at ``i * hop_length`` and is windowed by
a periodic Hann window, but samples past the end of the audio (the right reflect pad included)
count as zeros, and frames that start past it are skipped (their value is ``log10(1e-10)``); the
power spectrum goes through a Slaney-style mel filter bank (0..8000 Hz, "slaney" area
normalisation), ``log10(max(x, 1e-10))``, a clamp to ``max - 8`` and ``(x + 4) / 4``.  The last
frame of the STFT is dropped: ``n_frames = (padded - n_fft) // hop_length`` (3000 for 30 s).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["WhisperFeatureExtractor", "WhisperFeatures", "mel_filter_bank"]

#: preprocessor_config.json keys the real reads, with its defaults
_DEFAULTS = {
    "feature_size": 80,
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 400,
    "chunk_length": 30,
    "n_samples": 480000,
    "nb_max_frames": 3000,
}


def _hertz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (float32 as the real)."""
    freq = np.asarray(freq, dtype=np.float64)
    logstep = np.float32(27.0 / np.log(6.4))
    mel = 3.0 * freq / 200.0
    above = freq >= 1000.0
    mel = np.where(above, 15.0 + np.log(np.maximum(freq, 1e-30) / 1000.0) * logstep, mel)
    return mel.astype(np.float32)


def _mel_to_hertz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    logstep = np.float32(np.log(6.4) / 27.0)
    freq = 200.0 * mel / 3.0
    freq = np.where(mel >= 15.0, 1000.0 * np.exp(logstep * (mel - 15.0)), freq)
    return freq.astype(np.float32)


def mel_filter_bank(num_frequency_bins: int, num_mel_filters: int, sampling_rate: int,
                    min_frequency: float = 0.0, max_frequency: float = 8000.0) -> np.ndarray:
    """[num_frequency_bins, num_mel_filters] triangular filters, Slaney-normalised (float32)."""
    if max_frequency > sampling_rate // 2:
        raise ConfigError(
            f"sampling_rate {sampling_rate} is below twice Whisper's 8000 Hz mel range; the model's "
            "preprocessor_config.json must give a sampling_rate of at least 16000",
            key="sampling_rate",
        )
    mel_min = _hertz_to_mel(np.float32(min_frequency))
    mel_max = _hertz_to_mel(np.float32(max_frequency))
    step = np.float32((mel_max - mel_min) / np.float32(num_mel_filters + 1))
    filter_freqs = _mel_to_hertz(mel_min + np.arange(num_mel_filters + 2, dtype=np.float32) * step)
    fft_step = np.float32(float(sampling_rate // 2) / float(num_frequency_bins - 1))
    fft_freqs = (np.arange(num_frequency_bins, dtype=np.float32) * fft_step).astype(np.float32)
    diff = np.diff(filter_freqs).astype(np.float32)
    slopes = (filter_freqs[None, :] - fft_freqs[:, None]).astype(np.float32)
    down = (-slopes[:, :-2] / diff[:-1]).astype(np.float32)
    up = (slopes[:, 2:] / diff[1:]).astype(np.float32)
    bank = np.maximum(np.float32(0.0), np.minimum(down, up)).astype(np.float32)
    enorm = (np.float32(2.0) / (filter_freqs[2:] - filter_freqs[:-2])).astype(np.float32)
    return (bank * enorm[None, :]).astype(np.float32)


@dataclass
class WhisperFeatures:
    """A log-mel spectrogram [feature_size, n_frames] and how many frames hold the audio."""

    data: np.ndarray
    n_active_frames: int

    @property
    def feature_size(self) -> int:
        return int(self.data.shape[0])

    @property
    def n_frames(self) -> int:
        return int(self.data.shape[1])

    def window(self, frame_offset: int, min_frames: int) -> np.ndarray:
        """[feature_size, min_frames] from ``frame_offset``, zero-filled past the end (the real's
        get_data_with_offset)."""
        if frame_offset >= self.n_frames:
            raise UserInputError(f"frame offset {frame_offset} is past the {self.n_frames} frames")
        out = np.zeros((self.feature_size, min_frames), dtype=np.float32)
        part = self.data[:, frame_offset:frame_offset + min_frames]
        out[:, : part.shape[1]] = part
        return out


class WhisperFeatureExtractor:
    """The real's WhisperFeatureExtractor: parameters from ``preprocessor_config.json`` (defaults
    when the file is missing)."""

    def __init__(self, preprocessor_json_path: str | os.PathLike[str] | None = None, **params: Any) -> None:
        values = dict(_DEFAULTS)
        path = Path(preprocessor_json_path) if preprocessor_json_path is not None else None
        if path is not None and path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise ConfigError(f"cannot read {path}: {e}; re-export the model or fix the file") from e
            for key in _DEFAULTS:
                if key in data and data[key] is not None:
                    values[key] = data[key]
        values.update(params)
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
                raise ConfigError(f"preprocessor_config.json: {key} must be a non-negative integer, got {value!r}",
                                  key=key)
        self.feature_size = int(values["feature_size"])
        self.sampling_rate = int(values["sampling_rate"])
        self.hop_length = int(values["hop_length"])
        self.n_fft = int(values["n_fft"])
        self.chunk_length = int(values["chunk_length"])
        self.n_samples = int(values["n_samples"])
        self.nb_max_frames = int(values["nb_max_frames"])
        if self.hop_length <= 0 or self.n_fft <= 1 or self.feature_size <= 0:
            raise ConfigError("preprocessor_config.json: hop_length, n_fft and feature_size must be positive",
                              key="hop_length")
        n = self.n_fft
        # periodic Hann window (cosf of a double argument, stored as float)
        self.hann = (0.5 * (1.0 - np.cos(2.0 * np.pi * np.arange(n) / n).astype(np.float32))).astype(np.float32)
        # [feature_size, n_fft / 2 + 1]
        self.mel_filter = np.ascontiguousarray(mel_filter_bank(1 + n // 2, self.feature_size, self.sampling_rate).T)

    def extract(self, raw_speech: np.ndarray, pad_to_max_duration: bool = True) -> WhisperFeatures:
        """The log-mel spectrogram of 1-D float audio (16 kHz, near [-1, 1])."""
        speech = np.ascontiguousarray(raw_speech, dtype=np.float32).reshape(-1)
        n_fft, hop = self.n_fft, self.hop_length
        reflect = n_fft // 2
        if speech.size <= reflect:
            # the real's check (a RuntimeError there)
            raise UserInputError(
                f"raw_speech too short for reflect padding: size={speech.size}, required > {reflect}; "
                f"pass at least {reflect + 1} samples of 16 kHz audio"
            )
        minimum = self.n_samples if pad_to_max_duration else speech.size
        padded = np.zeros(max(speech.size, minimum) + 2 * reflect, dtype=np.float32)
        padded[reflect:reflect + speech.size] = speech
        padded[:reflect] = padded[reflect + 1:2 * reflect + 1][::-1]
        end = padded.size
        padded[end - reflect:] = padded[end - 2 * reflect - 1:end - reflect - 1][::-1]

        n_frames = (padded.size - n_fft) // hop
        n_active_samples = speech.size + reflect
        computed = min(n_active_samples // hop + 1, n_frames)
        # samples past the audio (its right reflect pad too) count as zeros in the real
        signal = padded.copy()
        signal[n_active_samples:] = 0.0
        data = np.full((self.feature_size, n_frames), -10.0, dtype=np.float64)
        if computed > 0:
            need = (computed - 1) * hop + n_fft
            if signal.size < need:
                signal = np.concatenate([signal, np.zeros(need - signal.size, np.float32)])
            frames = np.lib.stride_tricks.as_strided(
                signal, shape=(computed, n_fft), strides=(signal.strides[0] * hop, signal.strides[0]),
                writeable=False)
            spec = np.fft.rfft(frames.astype(np.float64) * self.hann.astype(np.float64), axis=1)
            power = (spec.real * spec.real + spec.imag * spec.imag).astype(np.float32)
            mel = power.astype(np.float64) @ self.mel_filter.T.astype(np.float64)  # [computed, feature_size]
            data[:, :computed] = np.log10(np.maximum(mel, 1e-10)).T
        data = data.astype(np.float32)
        floor = float(data.max()) - 8.0
        out = ((np.maximum(data.astype(np.float64), floor) + 4.0) / 4.0).astype(np.float32)
        return WhisperFeatures(out, speech.size // hop)
