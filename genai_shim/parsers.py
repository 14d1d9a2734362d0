"""Output parsers: ``Parser`` (the whole text after generate) and ``IncrementalParser`` (text
deltas while streaming), the built-in reasoning and Llama 3 tool-call parsers and
``VLLMParserWrapper`` - openvino.genai's names, defaults, dict keys and error texts.

A message is a dict of JSON values (the real keeps it in a ``JsonContainer``). The real binding
converts it with ``json.dumps`` / ``json.loads`` at every crossing between C++ and Python, so
tuples become lists, integer keys strings, and a value JSON cannot hold is a ``TypeError``;
:func:`as_json` makes the same crossing here. Each class has a private ``_run`` (the real's
C++ virtual, which the pipeline reaches through ``Parser.parse_message`` /
``IncrementalParser.parse_delta``) and the public ``parse`` the real's binding exposes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from genai_shim.streamers import StreamingStatus
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = [
    "DeepSeekR1ReasoningIncrementalParser",
    "DeepSeekR1ReasoningParser",
    "IncrementalParser",
    "Llama3JsonToolParser",
    "Llama3PythonicToolParser",
    "Parser",
    "Phi4ReasoningIncrementalParser",
    "Phi4ReasoningParser",
    "ReasoningIncrementalParser",
    "ReasoningParser",
    "VLLMParserWrapper",
    "as_json",
    "checked_parsers",
    "concatenate",
]

Message = dict[str, Any]


def as_json(message: Any) -> Any:
    """``message`` after a trip through JSON, as every C++/Python crossing of the real makes."""
    return json.loads(json.dumps(message))


def _json_type(value: Any) -> str:
    """nlohmann::json's type_name() of a JSON value (they appear in the real's error texts)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def concatenate(dst: Message, src: Message) -> None:
    """Merge a streamed delta into the accumulated message, as ``JsonContainer::concatenate``:
    new keys are added, strings appended, objects merged; any other pair of values is an error."""
    for key, value in src.items():
        if key not in dst:
            dst[key] = value
        elif isinstance(value, dict) and isinstance(dst[key], dict):
            concatenate(dst[key], value)
        elif isinstance(value, str) and isinstance(dst[key], str):
            dst[key] = dst[key] + value
        else:
            raise UserInputError(
                f"JsonContainer concatenate type mismatch for key '{key}'. Source type: "
                f"'{_json_type(value)}', destination type: '{_json_type(dst[key])}'. An "
                "IncrementalParser may only add keys or set strings (which are appended)"
            )


def _content(message: Message) -> str:
    """``message["content"]`` as a string, with the real's errors when it is missing or not one."""
    if "content" not in message:
        raise UserInputError(
            "Path '/content' does not exist in the JsonContainer. The message needs a "
            "'content' string"
        )
    value = message["content"]
    if not isinstance(value, str):
        raise UserInputError(
            f"JsonContainer expected string at path '/content' but found {_json_type(value)} "
            f"with value: {json.dumps(value, separators=(',', ':'))}"
        )
    return value


def _check_dict(method: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise UserInputError(f"{method} takes a dict message, got {type(value).__name__}")


# -- Parser: the whole text, after generate() ------------------------------------------------
class Parser:
    """Base class of parsers that run on the complete text when generation ends
    (``GenerationConfig.parsers``). Subclass it and implement ``parse(self, message: dict)``,
    changing ``message`` in place; ``message["content"]`` holds the generated text."""

    def parse(self, message: Message) -> None:
        """Parse is called with the full text. Returns a dict with parsed content."""
        raise UserInputError(
            "parse method not implemented in Python subclass: define parse(self, message) in "
            f"{type(self).__name__}"
        )

    def parse_message(self, message: Message) -> Message:
        """What the pipeline calls (the real's C++ ``parse``): the parsed message."""
        return self._run(message)

    def _run(self, message: Message) -> Message:
        """A Python subclass gets a fresh dict (JSON round trip) and what it leaves in that
        dict becomes the message."""
        fresh = as_json(message)
        self.parse(fresh)
        return as_json(fresh)

    def __deepcopy__(self, memo: dict[int, Any]) -> Parser:
        # GenerationConfig.copy() deep-copies; the real shares parsers (shared_ptr), so do we
        return self


class _BuiltinParser(Parser):
    """A parser implemented here: ``parse`` has the binding's semantics (the message crosses to
    JSON and back, and the result is merged into the caller's dict with ``dict.update``)."""

    def parse(self, message: Message) -> None:
        _check_dict("parse()", message)
        message.update(as_json(self._run(as_json(message))))

    def _run(self, message: Message) -> Message:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


class ReasoningParser(_BuiltinParser):
    """Puts the text between ``open_tag`` and ``close_tag`` into ``reasoning_content``.

    :param expect_open_tag: the model writes ``open_tag`` itself; if False, the reasoning starts
        at the first character (the tag was part of the prompt) and ends at ``close_tag``.
    :param keep_original_content: keep the reasoning (and the tags) in ``content``.
    """

    def __init__(
        self,
        expect_open_tag: bool = True,
        keep_original_content: bool = True,
        open_tag: str = "<think>",
        close_tag: str = "</think>",
    ) -> None:
        super().__init__()
        self._expect_open_tag = bool(expect_open_tag)
        self._keep = bool(keep_original_content)
        self._open, self._close = str(open_tag), str(close_tag)

    def _run(self, message: Message) -> Message:
        content = _content(message)
        reasoning = ""
        close = content.find(self._close)
        if self._expect_open_tag:
            start = content.find(self._open)
            # both tags, the first close after the first open; otherwise nothing is reasoning
            if start != -1 and close != -1 and close > start:
                reasoning = content[start + len(self._open) : close]
                if not self._keep:
                    message["content"] = content[:start] + content[close + len(self._close) :]
        elif close != -1:
            reasoning = content[:close]
            if not self._keep:
                message["content"] = content[close + len(self._close) :]
        else:  # no close tag: everything is reasoning
            reasoning = content
            if not self._keep:
                message["content"] = ""
        message["reasoning_content"] = reasoning
        return message


class DeepSeekR1ReasoningParser(ReasoningParser):
    """DeepSeek-R1: the prompt already opened ``<think>`` (``expect_open_tag=False``)."""

    def __init__(self) -> None:
        super().__init__(expect_open_tag=False)


class Phi4ReasoningParser(ReasoningParser):
    """Phi-4 reasoning: the model writes ``<think>`` itself (``expect_open_tag=True``)."""

    def __init__(self) -> None:
        super().__init__(expect_open_tag=True)


class Llama3JsonToolParser(_BuiltinParser):
    """Adds ``tool_calls``: a list with the JSON object spanning the first ``{`` to the last
    ``}`` of ``content`` (content unchanged; nothing added when there is no such span)."""

    def _run(self, message: Message) -> Message:
        content = _content(message)
        start, end = content.find("{"), content.rfind("}")
        if start == -1 or end == -1 or end <= start:
            return message
        message["tool_calls"] = [_from_json_string(content[start : end + 1])]
        return message


def _from_json_string(text: str) -> Any:
    def reject(name: str) -> Any:  # NaN / Infinity are not JSON (the real's parser refuses them)
        raise ValueError(f"invalid literal {name}")

    try:
        return json.loads(text, parse_constant=reject)
    except ValueError as e:
        raise UserInputError(f"Failed to construct JsonContainer from JSON string: {e}") from None


class Llama3PythonicToolParser(_BuiltinParser):
    """Adds ``tool_calls`` from Llama 3's pythonic form ``[name(key="value", ...)]``: the first
    bracketed span on one line, the name before ``(``, the ``key="value"`` arguments (values
    in double quotes only, as strings); content unchanged."""

    # std::regex ECMAScript: '.' stops at \n and \r, \w and \s are ASCII classes
    _CALL = re.compile(r"\[([^\n\r]*?)\]")
    _ARG = re.compile(r'(\w+)\s*=\s*"([^"]*)"', re.ASCII)

    def _run(self, message: Message) -> Message:
        match = self._CALL.search(_content(message))
        if match is None:
            return message
        call = match.group(1)
        paren = call.find("(")
        if paren == -1:  # the real's size arithmetic: the name is everything, args all but the last
            name, args = call, call[: max(len(call) - 1, 0)]
        else:
            name = call[:paren]
            length = len(call) - paren - 2  # drop the closing ')'
            args = call[paren + 1 :] if length < 0 else call[paren + 1 : paren + 1 + length]
        arguments = {key: value for key, value in self._ARG.findall(args)}
        # keys sorted as the real builds this object from a std::map
        message["tool_calls"] = [{"arguments": arguments, "name": name}]
        return message


class VLLMParserWrapper(Parser):
    """Runs a vLLM tool or reasoning parser object: its ``extract_tool_calls(content, None)``
    (a result with ``model_dump_json()`` or ``json()``) and/or ``extract_reasoning(content,
    None)`` (a ``(reasoning, content)`` tuple, stored as ``reasoning`` / ``content``). The
    results are concatenated into a new message that replaces the old one."""

    def __init__(self, py_parser: Any) -> None:
        super().__init__()
        self._steps: list[Callable[[str], Message]] = []
        if hasattr(py_parser, "extract_tool_calls"):
            self._steps.append(lambda text: _vllm_tool_calls(py_parser, text))
        if hasattr(py_parser, "extract_reasoning"):
            self._steps.append(lambda text: _vllm_reasoning(py_parser, text))
        if not self._steps:
            raise UserInputError(
                "Provided vLLM parser does not have supported parsing methods: "
                "'extract_tool_calls' or 'extract_reasoning'"
            )

    def parse(self, message: Message) -> None:
        """Parse is called with the full text. Returns a dict with parsed content."""
        _check_dict("parse()", message)
        message.update(as_json(self._run(as_json(message))))

    def _run(self, message: Message) -> Message:
        if "content" not in message:
            _content(message)  # the real's missing-path error
        content = message["content"]
        if not isinstance(content, str):
            raise UserInputError("Message does not contain 'content' string field")
        result: Message = {}
        for step in self._steps:
            concatenate(result, step(content))
        return result


def _vllm_tool_calls(py_parser: Any, content: str) -> Message:
    parsed = py_parser.extract_tool_calls(content, None)
    if hasattr(parsed, "model_dump_json"):
        return _from_json_string(str(parsed.model_dump_json()))
    if hasattr(parsed, "json"):  # pydantic v1
        return _from_json_string(str(parsed.json()))
    raise UserInputError("Parsed object does not have model_dump_json() or json() method")


def _vllm_reasoning(py_parser: Any, content: str) -> Message:
    parsed = py_parser.extract_reasoning(content, None)
    if not (isinstance(parsed, tuple) and len(parsed) == 2):
        raise UserInputError("Parsed object is not a tuple of length 2")
    reasoning, rest = parsed
    if not isinstance(reasoning, str) or not isinstance(rest, str):
        raise UserInputError("extract_reasoning must return a tuple of two str")
    return {"reasoning": reasoning, "content": rest}


# -- IncrementalParser: text deltas while streaming ------------------------------------------
class IncrementalParser:
    """Base class of parsers that see the text while it streams (``TextParserStreamer``).
    Subclass it and implement ``parse(self, delta_message, delta_text, delta_tokens=None) ->
    str`` (add keys to ``delta_message``; return the text to append to ``content``) and
    ``reset(self)``. ``set_status(StreamingStatus.STOP / CANCEL / TOOL_CALL_STOP)`` stops
    generation after the current delta."""

    def __init__(self) -> None:
        self._status = StreamingStatus.RUNNING

    def parse(
        self, delta_message: Message, delta_text: str, delta_tokens: list[int] | None = None
    ) -> str:
        """Parse is called every time new text delta is decoded. Returns a string with any
        additional text to append to the current output."""
        raise UserInputError(
            "parse method not implemented in Python subclass: define parse(self, delta_message, "
            f"delta_text, delta_tokens=None) in {type(self).__name__}"
        )

    def reset(self) -> None:
        """Reset the internal state of the parser."""
        raise UserInputError(
            'Tried to call pure virtual function "IncrementalParser::reset": define reset(self) '
            f"in {type(self).__name__} (TextParserStreamer resets its parsers before each generate)"
        )

    def get_status(self) -> StreamingStatus:
        """Get the current streaming status of the parser."""
        return getattr(self, "_status", StreamingStatus.RUNNING)

    def set_status(self, status: StreamingStatus) -> None:
        """Set the current streaming status of the parser."""
        if not isinstance(status, StreamingStatus):
            raise UserInputError(f"set_status takes a StreamingStatus, got {type(status).__name__}")
        self._status = status

    def parse_delta(
        self, delta_message: Message, delta_text: str, delta_tokens: list[int] | None
    ) -> tuple[Message, str]:
        """What TextParserStreamer calls (the real's C++ ``parse``): the delta message and the
        text for its ``content``."""
        return self._run(delta_message, delta_text, delta_tokens)

    def _run(
        self, delta_message: Message, delta_text: str, delta_tokens: list[int] | None
    ) -> tuple[Message, str]:
        """A Python subclass gets a fresh dict (JSON round trip) and must return a str."""
        fresh = as_json(delta_message)
        text = self.parse(fresh, delta_text, delta_tokens)
        if not isinstance(text, str):
            raise UserInputError(
                f"{type(self).__name__}.parse must return the delta text as a str, got "
                f"{type(text).__name__}"
            )
        return as_json(fresh), text


class ReasoningIncrementalParser(IncrementalParser):
    """Streams the text between ``open_tag`` and ``close_tag`` into ``reasoning_content``; the
    same parameters as :class:`ReasoningParser`. A tag split over several deltas is recognised
    (the pieces that may start one are held back); after the close tag it passes text through."""

    def __init__(
        self,
        expect_open_tag: bool = True,
        keep_original_content: bool = True,
        open_tag: str = "<think>",
        close_tag: str = "</think>",
    ) -> None:
        super().__init__()
        self._expect_open_tag = bool(expect_open_tag)
        self._keep = bool(keep_original_content)
        self._open, self._close = str(open_tag), str(close_tag)
        self._clear()

    def _clear(self) -> None:
        self._first_run = True
        self._opened = False
        self._held = ""  # text not yet passed on: a possible start of a tag
        self._done = False

    def reset(self) -> None:
        """Reset the internal state of the parser (the status is left as it is, as the real)."""
        self._clear()

    def parse(
        self, delta_message: Message, delta_text: str, delta_tokens: list[int] | None = None
    ) -> str:
        """Parse is called every time new text delta is decoded. Returns a string with any
        additional text to append to the current output."""
        _check_dict("parse()", delta_message)
        message, text = self._run(as_json(delta_message), str(delta_text), delta_tokens)
        delta_message.update(as_json(message))
        return text

    def _run(
        self, delta_message: Message, delta_text: str, delta_tokens: list[int] | None
    ) -> tuple[Message, str]:
        if self._done:
            return delta_message, delta_text
        if not self._expect_open_tag and self._first_run:
            self._opened = True
        self._first_run = False
        chunk = self._held + delta_text
        open_at, close_at = chunk.find(self._open), chunk.find(self._close)
        if not self._opened and open_at != -1 and self._expect_open_tag:
            if close_at != -1 and close_at > open_at:  # the whole reasoning in one chunk
                delta_message["reasoning_content"] = chunk[open_at + len(self._open) : close_at]
                delta_message["content"] = chunk[close_at + len(self._close) :]
                if not self._keep:
                    delta_text = chunk[close_at + len(self._close) :]
                self._finish()
            else:
                delta_message["reasoning_content"] = chunk[open_at + len(self._open) :]
                delta_text = chunk if self._keep else ""
                self._opened = True
                self._held = ""
        elif self._opened and close_at != -1:
            delta_message["reasoning_content"] = chunk[:close_at]
            after = chunk[close_at + len(self._close) :]
            delta_message["content"] = after
            # the held text was reasoning too, so without keep only what follows the tag is kept
            delta_text = chunk if self._keep else after
            self._finish()
        elif self._opened:
            hold = self._close_tag_prefix(chunk)
            passed = chunk[: len(chunk) - hold]
            self._held = chunk[len(chunk) - hold :] if hold else ""
            delta_message["reasoning_content"] = passed
            delta_text = passed if self._keep else ""
        else:  # no open tag yet: hold everything until one is complete
            self._held += delta_text
            delta_text = ""
        return delta_message, delta_text

    def _finish(self) -> None:
        self._opened = False
        self._done = True
        self._held = ""

    def _close_tag_prefix(self, text: str) -> int:
        """Length of the longest end of ``text`` that starts the close tag."""
        longest = 0
        for n in range(1, min(len(text), len(self._close)) + 1):
            if text.endswith(self._close[:n]):
                longest = n
        return longest


class DeepSeekR1ReasoningIncrementalParser(ReasoningIncrementalParser):
    """DeepSeek-R1 streaming: ``<think>`` was in the prompt (``expect_open_tag=False``)."""

    def __init__(self) -> None:
        super().__init__(expect_open_tag=False)


class Phi4ReasoningIncrementalParser(ReasoningIncrementalParser):
    """Phi-4 reasoning streaming: the model writes ``<think>`` (``expect_open_tag=True``)."""

    def __init__(self) -> None:
        super().__init__(expect_open_tag=True)


def checked_parsers(value: Any) -> list[Parser]:
    """``GenerationConfig.parsers``: a list (or tuple) of :class:`Parser` objects."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"{type(value)} isn't supported for argument parsers: GenerationConfig.parsers takes "
            "a list of Parser objects",
            key="parsers",
        )
    for item in value:
        if not isinstance(item, Parser):
            raise ConfigError(
                'Incorrect value in "parsers". Expected Parser. GenerationConfig.parsers='
                f"{list(value)!r} holds a {type(item).__name__}; IncrementalParser objects go "
                "to a TextParserStreamer",
                key="parsers",
            )
    return list(value)
