"""TextParserStreamer (streamed text through IncrementalParsers into parsed messages) and
:func:`generate_with_parsers`, what LLMPipeline.generate wraps around a decoded generation:
reset the streamer, then fill ``DecodedResults.parsed`` and run ``GenerationConfig.parsers``."""

from __future__ import annotations

import copy
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from genai_shim.parsers import IncrementalParser, Message, as_json, concatenate
from genai_shim.results import DecodedResults
from genai_shim.streamers import StreamingStatus, TextStreamer
from ov_npu_emu.errors import UserInputError

__all__ = ["TextParserStreamer", "generate_with_parsers"]

_DELAY_N_TOKENS = 3  # TextStreamer's hold-back (the delta's tokens are found the same way)


def _upper_bound(values: list[int], value: int) -> int:
    """``std::upper_bound`` step for step: the lengths may hold -1/-2 markers, so the list is
    not always sorted and only the same bisection gives the same index."""
    first, count = 0, len(values)
    while count > 0:
        half = count >> 1
        if value < values[first + half]:
            count = half
        else:
            first += half + 1
            count -= half + 1
    return first


#: the ``write`` wrappers :func:`_split_write` made: a class whose own ``write`` is one is not wrapped again
_SPLIT_WRITES: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


def _split_write(message_write: Callable[[Any, Message], Any]) -> Callable[[Any, Any], Any]:
    """A subclass's ``write(message)`` next to the token ``write`` the pipeline calls.

    The real pipeline calls TextStreamer's C++ ``write(tokens)`` and only the parsed message
    reaches the Python override; genai_shim's pipeline calls ``write`` for both, so the override
    is split by argument: a dict goes to it, token ids to TextStreamer."""

    @functools.wraps(message_write)
    def write(self: TextParserStreamer, arg: Any) -> Any:
        if isinstance(arg, dict):
            return message_write(self, arg)
        return TextStreamer.write(self, arg)

    _SPLIT_WRITES.add(write)
    return write


class TextParserStreamer(TextStreamer):
    """Base class for text streamers which works with parsed messages. In order to use inherit
    from this class and implement write method which takes a dict as input parameter.

    tokenizer: Tokenizer object to decode tokens into text.
    parsers: vector of IncrementalParser to process the text stream incrementally.

    Each decoded delta goes through the parsers in order (each may add keys to the delta
    message and returns the text for ``content``); the delta is appended to the accumulated
    message (:meth:`get_parsed_message`) and passed to ``write(message)``.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("write")
        if own is not None and own not in _SPLIT_WRITES:
            cls.write = _split_write(own)  # type: ignore[method-assign]

    def __init__(self, tokenizer: Any, parsers: Sequence[IncrementalParser] = ()) -> None:
        if not isinstance(parsers, (list, tuple)) or not all(
            isinstance(p, IncrementalParser) for p in parsers
        ):
            raise UserInputError(
                "TextParserStreamer(tokenizer, parsers) takes a list of IncrementalParser "
                f"objects, got {parsers!r} (Parser objects go to GenerationConfig.parsers)"
            )
        super().__init__(tokenizer, self._on_text)
        self._parsers = list(parsers)
        self._parsed: Message = {"content": ""}

    def write(self, token: Any) -> Any:  # type: ignore[override]
        if isinstance(token, dict):
            raise UserInputError(
                f"{type(self).__name__} must implement write(self, message: dict) -> "
                "StreamingStatus (TextParserStreamer is a base class)"
            )
        return TextStreamer.write(self, token)

    def _write(self, chunk: list[int] | str) -> StreamingStatus:
        """This is a private method is used to call write with integer tokens or text chunks.
        Is used for text purposes only."""
        if isinstance(chunk, str):
            return self._on_text(chunk)
        if isinstance(chunk, (list, tuple)):
            return TextStreamer.write(self, [int(t) for t in chunk])
        raise UserInputError(
            f"_write takes a list of token ids or a str, got {type(chunk).__name__}"
        )

    def get_parsed_message(self) -> Message:
        """Returns the accumulated message."""
        return as_json(self._parsed)

    def reset(self) -> None:
        """Resets the internal state of the parser streamer."""
        self._parsed = {"content": ""}
        for parser in self._parsers:
            parser.reset()

    def _emit(self, raw: bytes) -> StreamingStatus:
        # no catch-and-report as for a callback: a failing parser or write() ends generate()
        if not raw:
            return StreamingStatus.RUNNING
        return self._on_text(raw.decode("utf-8", errors="replace"))

    def _delta_tokens(self, delta_text: str) -> list[int]:
        """The tokens behind ``delta_text``, found as the real does from the decoded lengths
        (called before TextStreamer moves its printed position)."""
        if delta_text.endswith("\n"):
            return list(self._cache)
        if len(self._lengths) < _DELAY_N_TOKENS:
            return []
        print_until = self._lengths[-_DELAY_N_TOKENS]
        first = _upper_bound(self._lengths, self._printed)
        last = _upper_bound(self._lengths, print_until)
        return self._cache[first:last] if last >= first else []

    def _on_text(self, delta_text: str) -> StreamingStatus:
        delta_tokens = self._delta_tokens(delta_text)
        delta: Message = {}
        parser_status = StreamingStatus.RUNNING
        for parser in self._parsers:
            delta, delta_text = parser.parse_delta(delta, delta_text, delta_tokens)
            parser_status = parser.get_status()
            if parser_status != StreamingStatus.RUNNING:
                break  # a parser's stop outranks the streamer's own status
        delta["content"] = delta_text
        concatenate(self._parsed, delta)
        status = self.write(as_json(delta))
        if not isinstance(status, StreamingStatus):
            raise UserInputError(
                f"{type(self).__name__}.write(message) must return a StreamingStatus, got "
                f"{type(status).__name__} {status!r}"
            )
        return parser_status if parser_status != StreamingStatus.RUNNING else status


def generate_with_parsers(config: Any, streamer: Any, generate: Callable[[Any], Any]) -> Any:
    """Run ``generate(config without parsers)`` (a str or DecodedResults) as the real
    LLMPipeline does for text inputs: reset a TextParserStreamer first; afterwards
    ``parsed[0]`` is its message, and each of ``config.parsers`` runs on every text's message
    (``{"content": text}`` unless the streamer made one). A str result is returned as is (its
    parsers still run)."""
    stream = streamer if isinstance(streamer, TextParserStreamer) else None
    if stream is not None:
        stream.reset()
    decoding = copy.copy(config)
    decoding.parsers = []  # applied here, so the decoding backends never see them
    result = generate(decoding)
    texts = [result] if isinstance(result, str) else result.texts
    parsed = [stream.get_parsed_message()] if stream is not None else []
    if config.parsers:
        parsed = (parsed + [{} for _ in texts])[: len(texts)]
        for i, text in enumerate(texts):
            message = parsed[i]
            if "content" not in message:
                message["content"] = text
            for parser in config.parsers:
                message = parser.parse_message(message)
            parsed[i] = message
    if isinstance(result, DecodedResults):
        result.set_parsed(parsed)
    return result
