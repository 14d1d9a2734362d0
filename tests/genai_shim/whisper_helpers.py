"""Helpers shared by the Whisper pipeline tests (CPU and NPU)."""

from __future__ import annotations

from typing import Any

import pytest

import genai_shim

__all__ = ["IdRecorder", "assert_chunks_match", "chunks"]


class IdRecorder(genai_shim.StreamerBase):
    """A streamer that keeps every id it is given and never stops the generation."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[int] = []

    def write(self, token: Any) -> genai_shim.StreamingStatus:
        self.ids.extend([token] if isinstance(token, int) else list(token))
        return genai_shim.StreamingStatus.RUNNING

    def end(self) -> None:
        pass


def chunks(res: Any) -> list[tuple[float, float, str]] | None:
    """A WhisperDecodedResults' chunks as (start, end, text), or None."""
    if res.chunks is None:
        return None
    return [(c.start_ts, c.end_ts, c.text) for c in res.chunks]


def assert_chunks_match(res: Any, want: list[Any] | None) -> None:
    """``res``'s chunks equal ``want`` ([start, end, text] each, or None): texts exactly,
    timestamps to 1e-4 s."""
    got = chunks(res)
    if want is None:
        assert got is None
        return
    assert got is not None and len(got) == len(want)
    for (s, e, t), (ws, we, wt) in zip(got, want, strict=True):
        assert t == wt and s == pytest.approx(ws, abs=1e-4) and e == pytest.approx(we, abs=1e-4)
