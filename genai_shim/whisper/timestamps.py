"""Segments from a window's tokens (openvino.genai whisper/timestamps.cpp extract_segments)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ExtractedSegments", "Segment", "extract_segments"]


@dataclass
class Segment:
    start: float
    end: float  # -1.0: a segment with no closing timestamp
    tokens: list[int]


@dataclass
class ExtractedSegments:
    segments: list[Segment] = field(default_factory=list)
    non_timestamp_tokens: list[int] = field(default_factory=list)
    #: [start, end) positions of each segment's tokens among the window's tokens
    ranges: list[tuple[int, int]] = field(default_factory=list)
    #: frames to advance to the next window (seek)
    last_offset: int = 0


def extract_segments(tokens: list[int], no_timestamps_token_id: int, nb_max_frames: int, time_precision: float,
                     time_offset: float) -> ExtractedSegments:
    """Pair the timestamp tokens into segments; where the next window starts."""
    out = ExtractedSegments()
    begin = no_timestamps_token_id + 1
    start: int | None = None
    idx_start = 0
    f32 = _f32
    for i, token in enumerate(tokens):
        if token < begin:
            continue
        if start is None:
            start, idx_start = token, i
            continue
        if start == token:
            continue  # a repeated timestamp is taken as a start again (HF's workaround, as the real)
        seg = tokens[idx_start + 1:i]
        out.segments.append(Segment(f32(f32((start - begin) * time_precision) + time_offset),
                                    f32(f32((token - begin) * time_precision) + time_offset), seg))
        out.last_offset = (token - begin) * 2  # each timestamp step is 0.02 s, 2 frames
        out.non_timestamp_tokens.extend(seg)
        out.ranges.append((idx_start + 1, i))
        start = None
    # an open segment counts only if it has tokens and no segment closed before it
    if start is not None and idx_start < len(tokens) - 1 and not out.segments:
        seg = tokens[idx_start + 1:]
        out.segments.append(Segment(f32(f32((start - begin) * time_precision) + time_offset), -1.0, seg))
        out.last_offset = nb_max_frames
        out.non_timestamp_tokens.extend(seg)
        out.ranges.append((idx_start + 1, len(tokens)))
    if start is None:
        # <ts><ts><eos>: no more speech in this window, continue after it
        out.last_offset = nb_max_frames
    return out


def _f32(x: float) -> float:
    """Round to float32 as the real's float arithmetic does."""
    return float(np.float32(x))
