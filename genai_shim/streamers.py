"""Streamers: StreamingStatus, StreamerBase, TextStreamer and the callable-to-streamer adapter."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from genai_shim.enums import BindingEnum

if TYPE_CHECKING:
    from genai_shim.tokenizer import Tokenizer

__all__ = [
    "EchoStreamer",
    "StreamerBase",
    "StreamingStatus",
    "TextStreamer",
    "call_write",
    "make_streamer",
    "status_from_callback",
]

logger = logging.getLogger(__name__)


class StreamingStatus(BindingEnum):
    """What a streamer asks the pipeline to do after a token."""

    RUNNING = 0  # continue
    STOP = 1  # stop; keep the turn in chat history (finish reason STOP)
    CANCEL = 2  # stop and drop this turn from chat history (finish reason NONE)
    TOOL_CALL_STOP = 3  # stop because of a tool call (finish reason TOOL_CALL)


def status_from_callback(value: Any) -> StreamingStatus:
    """Map a Python callback's return value as openvino.genai does.

    None, False and 0 mean RUNNING; 2 means CANCEL; 3 means TOOL_CALL_STOP; anything else
    (True, 1, other numbers, other objects) means STOP.
    """
    if value is None:
        return StreamingStatus.RUNNING
    if isinstance(value, StreamingStatus):
        return value
    if isinstance(value, bool):
        return StreamingStatus.STOP if value else StreamingStatus.RUNNING
    if isinstance(value, int) or (hasattr(value, "value") and isinstance(value.value, int)):
        v = int(value if isinstance(value, int) else value.value)
        if v == 0:
            return StreamingStatus.RUNNING
        if v == 2:
            return StreamingStatus.CANCEL
        if v == 3:
            return StreamingStatus.TOOL_CALL_STOP
    return StreamingStatus.STOP


class StreamerBase:
    """Base class for token streamers: ``write(token or list of tokens)`` → status, ``end()``.

    The pipeline calls ``write`` with a one-element list per generated token (what the real
    Python binding passes) and ``end()`` once when generation finishes.
    """

    def __init__(self) -> None:
        pass

    def write(self, token: int | list[int]) -> StreamingStatus | bool | None:
        raise NotImplementedError("StreamerBase.write must be implemented by the subclass")

    def end(self) -> None:
        raise NotImplementedError("StreamerBase.end must be implemented by the subclass")


def _report_callback_error(exc: BaseException) -> None:
    """Print a callback's exception to stderr and carry on, like the real Python binding
    (pybind's format: innermost frame first, ``file(line): function``, our own frames hidden)."""
    frames = [
        (f.f_code.co_filename, lineno, f.f_code.co_name)
        for f, lineno in traceback.walk_tb(exc.__traceback__)
    ]
    frames.reverse()
    outer = sys._getframe(1)
    while outer is not None:
        frames.append((outer.f_code.co_filename, outer.f_lineno, outer.f_code.co_name))
        outer = outer.f_back
    own = os.path.dirname(os.path.abspath(__file__))
    lines = "".join(f"  {fn}({ln}): {name}\n" for fn, ln, name in frames if not fn.startswith(own))
    sys.stderr.write(
        f"[GenAI] Text streamer callback raised exception: {type(exc).__name__}: "
        f"{exc}\n\nAt:\n{lines}\n"
    )
    sys.stderr.flush()


def _is_incomplete(raw: bytes) -> bool:
    return raw.endswith("\ufffd".encode())


class TextStreamer(StreamerBase):
    """Decodes tokens incrementally and calls ``callback(text)`` with complete UTF-8 text only.

    The last three tokens are held back (adding a token can shorten the decoded text), text is
    flushed at a newline, and an incomplete multi-byte character is never emitted.

    :param tokenizer: the pipeline's tokenizer.
    :param callback: ``callback(str)`` returning None/bool/StreamingStatus (mapped as in
        :func:`status_from_callback`).
    :param detokenization_params: e.g. ``skip_special_tokens=False``.
    """

    _DELAY_N_TOKENS = 3

    def __init__(
        self,
        tokenizer: Tokenizer,
        callback: Callable[[str], Any],
        detokenization_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self._tokenizer = tokenizer
        self._callback = callback
        self._params = dict(detokenization_params or {}, **kwargs)
        self._cache: list[int] = []
        self._lengths: list[
            int
        ] = []  # decoded byte length per cache position; -1 incomplete, -2 unknown
        self._printed = 0

    def _decode(self, tokens: list[int]) -> bytes:
        return self._tokenizer.decode(tokens, **self._params).encode("utf-8")

    def _emit(self, raw: bytes) -> StreamingStatus:
        if not raw:
            return StreamingStatus.RUNNING
        try:
            return status_from_callback(self._callback(raw.decode("utf-8", errors="replace")))
        except Exception as e:  # noqa: BLE001 - a broken callback must not kill generation
            _report_callback_error(e)
            return StreamingStatus.RUNNING

    def _length_at(self, pos: int) -> int:
        if self._lengths[pos] == -2:
            raw = self._decode(self._cache[: pos + 1])
            self._lengths[pos] = -1 if _is_incomplete(raw) else len(raw)
        return self._lengths[pos]

    def write(self, token: int | list[int]) -> StreamingStatus:
        if isinstance(token, (list, tuple)):
            if not token:
                return StreamingStatus.RUNNING
            self._cache.extend(int(t) for t in token[:-1])
            self._lengths.extend([-2] * (len(token) - 1))
            token = token[-1]
        self._cache.append(int(token))
        raw = self._decode(self._cache)
        self._lengths.append(len(raw))
        # The callback runs before the cache is flushed or the printed position moves, as in
        # the real (TextParserStreamer reads the delta's tokens from that state).
        if raw.endswith(b"\n") and len(raw) > self._printed:
            status = self._emit(raw[self._printed :])
            self._cache, self._lengths, self._printed = [], [], 0
            return status
        if _is_incomplete(raw):
            self._lengths[-1] = -1
            return StreamingStatus.RUNNING
        if len(self._lengths) < self._DELAY_N_TOKENS:
            return StreamingStatus.RUNNING
        until = self._length_at(len(self._lengths) - self._DELAY_N_TOKENS)
        if until > -1 and until > self._printed:
            status = self._emit(raw[self._printed : until])
            self._printed = until
            return status
        return self._emit(b"")

    def end(self) -> None:
        raw = self._decode(self._cache)
        if len(raw) <= self._printed:
            return
        out = raw[self._printed :]
        self._cache, self._lengths, self._printed = [], [], 0
        self._emit(out)


class _CallbackStreamer(TextStreamer):
    """What a plain callable becomes: a TextStreamer around it."""


def make_streamer(streamer: Any, tokenizer: Tokenizer) -> StreamerBase | None:
    """Normalise the ``streamer`` argument of generate(): None, a StreamerBase, or a callable."""
    if streamer is None:
        return None
    if isinstance(streamer, StreamerBase):
        return streamer
    if callable(streamer):
        return _CallbackStreamer(tokenizer, streamer)
    from ov_npu_emu.errors import UserInputError

    raise UserInputError(
        "streamer must be a callable(str) or a StreamerBase instance, got "
        f"{type(streamer).__name__}"
    )


def call_write(streamer: StreamerBase, token: int) -> StreamingStatus:
    """Call a streamer's ``write`` with the real binding's argument shape (a one-element list for
    user StreamerBase subclasses) and map the result; their exceptions propagate."""
    if isinstance(streamer, TextStreamer):
        return streamer.write(int(token))
    return status_from_callback(streamer.write([int(token)]))


class EchoStreamer(StreamerBase):
    """``echo`` on the continuous-batching path: the first write carries the prompt's tokens
    before the first generated one, as one list (the real sampler puts the prompt into the
    output), then writes pass through; with nothing generated (``max_new_tokens=0``) ``end()``
    writes the prompt first."""

    def __init__(self, inner: StreamerBase, prompt: list[int]) -> None:
        super().__init__()
        self.inner = inner
        self._prompt: list[int] | None = [int(t) for t in prompt]

    def write(self, token: int | list[int]) -> StreamingStatus:
        tokens = [int(t) for t in token] if isinstance(token, (list, tuple)) else [int(token)]
        if self._prompt is not None:
            tokens, self._prompt = self._prompt + tokens, None
        return status_from_callback(self.inner.write(tokens))

    def end(self) -> None:
        if self._prompt is not None:
            self.write([])
        self.inner.end()
