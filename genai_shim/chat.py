"""ChatHistory and HF-style chat-template rendering with jinja2."""

from __future__ import annotations

import copy
import datetime
import functools
import json
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["ChatHistory", "render_chat_template"]

logger = logging.getLogger(__name__)


class ChatHistory:
    """``{"role": ..., "content": ...}`` messages plus tools and extra template context."""

    def __init__(self, messages: Iterable[dict[str, Any]] | None = None) -> None:
        self._messages: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []
        self._extra: dict[str, Any] = {}
        for m in messages or []:
            self.append(m)

    def append(self, message: dict[str, Any]) -> None:
        if not isinstance(message, dict):
            raise UserInputError(
                f"ChatHistory messages are dicts like {{'role': 'user', 'content': '...'}}, got "
                f"{type(message).__name__}"
            )
        self._messages.append(copy.deepcopy(message))

    push_back = append

    def pop(self) -> dict[str, Any]:
        if not self._messages:
            raise UserInputError("pop() from an empty ChatHistory")
        return self._messages.pop()

    pop_back = pop

    def clear(self) -> None:
        self._messages.clear()

    def get_messages(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._messages)

    def set_messages(self, messages: Iterable[dict[str, Any]]) -> None:
        self._messages = []
        for m in messages:
            self.append(m)

    def get_tools(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._tools)

    def set_tools(self, tools: Iterable[dict[str, Any]]) -> None:
        self._tools = copy.deepcopy(list(tools))

    def get_extra_context(self) -> dict[str, Any]:
        return copy.deepcopy(self._extra)

    def set_extra_context(self, extra_context: dict[str, Any]) -> None:
        self._extra = copy.deepcopy(dict(extra_context))

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.get_messages())

    def __getitem__(self, i: int) -> dict[str, Any]:
        return copy.deepcopy(self._messages[i])

    def __bool__(self) -> bool:
        return bool(self._messages)

    def __repr__(self) -> str:
        return f"ChatHistory({self._messages!r})"


def _raise_exception(message: str) -> None:
    raise ConfigError(f"Chat template raised an exception: {message}")


def _tojson(
    value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False
) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _generation_extension() -> Any:
    """The ``{% generation %}...{% endgeneration %}`` block of HF training templates (it marks
    the assistant's tokens for a loss mask): rendered as its body, as the real renders it."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationBlock(Extension):
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return GenerationBlock


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # jinja2 is a declared dependency; say so if it is missing
        raise ConfigError("chat templates need jinja2: pip install jinja2") from e
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _generation_extension()]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except TemplateError as e:
        raise ConfigError(f"The chat template is not valid Jinja: {e}") from e


def render_chat_template(
    template: str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool,
    bos_token: str = "",
    eos_token: str = "",
    pad_token: str = "",
    tools: list[dict[str, Any]] | None = None,
    extra_context: dict[str, Any] | None = None,
    polyfills: bool = True,
    caps: Any = None,
) -> str:
    """Render ``template`` with the variables HF templates expect, after the real engine's
    rewrites for what the template cannot render (``genai_shim.chat_polyfills``; ``caps``: the
    template's probed capabilities, probed here when not given)."""
    from jinja2 import TemplateError

    if polyfills:
        from genai_shim.chat_polyfills import polyfilled_messages, probe

        try:
            messages = polyfilled_messages(messages, tools, caps or probe(template, bos_token, eos_token))
        except ValueError as e:
            raise ConfigError(f"Chat template rendering failed: {e}") from e
    ctx: dict[str, Any] = dict(extra_context or {})
    ctx.update(
        messages=messages,
        add_generation_prompt=add_generation_prompt,
        bos_token=bos_token,
        eos_token=eos_token,
        pad_token=pad_token,
    )
    if tools:
        ctx["tools"] = tools
    try:
        return _compile(template).render(**ctx)
    except ConfigError:
        raise
    except TemplateError as e:
        raise ConfigError(f"Chat template rendering failed: {e}") from e
