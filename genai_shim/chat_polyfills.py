"""What the real tokenizer's chat-template engine (minja's ``chat_template``) does around a
template: it first probes what the template can render (a system role, tools, tool calls, tool
responses, string or typed content) and then rewrites the messages for what it cannot - tools
go into the system message with an example tool call, tool calls and tool responses become JSON
text, system text moves into the next user turn, string content becomes typed content.

Written from the documented behaviour of minja (google/minja, ``chat-template.hpp``) that
openvino.genai 2026.4 renders chat templates with; checked against the real on the fixtures.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from typing import Any

from genai_shim.template_sandbox import ChatTemplateLimitError

__all__ = ["TemplateCaps", "polyfilled_messages", "probe"]

_USER_NEEDLE = "<User Needle>"
_SYS_NEEDLE = "<System Needle>"


def _dump(value: Any, indent: int | None = None) -> str:
    """JSON text as the real writes it (UTF-8 kept, ``", "`` / ``": "`` when indented)."""
    if indent is None:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _raw(template: str, messages: list[dict[str, Any]], tools: Any, bos: str, eos: str) -> str:
    """A render without polyfills; any failure is an empty string (what the probes test)."""
    from genai_shim.chat import render_chat_template

    try:
        return render_chat_template(
            template, messages, add_generation_prompt=False, bos_token=bos, eos_token=eos,
            tools=tools, polyfills=False,
        )
    except ChatTemplateLimitError:  # a template past the sandbox's budgets fails, not a probe
        raise
    except Exception:  # noqa: BLE001 - a template that cannot render a probe lacks that feature
        return ""


def _tool_call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": "call_1___", "type": "function", "function": {"arguments": arguments, "name": name}}


@dataclass(frozen=True)
class TemplateCaps:
    """What a template renders by itself, and its example tool call (used with tools)."""

    supports_tools: bool = False
    supports_tool_calls: bool = False
    supports_tool_responses: bool = False
    supports_system_role: bool = False
    requires_object_arguments: bool = False
    requires_non_null_content: bool = False
    requires_typed_content: bool = False
    tool_call_example: str = ""


@functools.lru_cache(maxsize=8)
def probe(template: str, bos: str, eos: str) -> TemplateCaps:
    """Render probe conversations and see which needles come out (minja's capability test)."""

    def has(messages: list[dict[str, Any]], needle: str, tools: Any = None) -> bool:
        return needle in _raw(template, messages, tools, bos, eos)

    str_user = {"role": "user", "content": _USER_NEEDLE}
    typed_user = {"role": "user", "content": [{"type": "text", "text": _USER_NEEDLE}]}
    typed = not has([str_user], _USER_NEEDLE) and has([typed_user], _USER_NEEDLE)
    user = typed_user if typed else str_user
    sys_content: Any = [{"type": "text", "text": _SYS_NEEDLE}] if typed else _SYS_NEEDLE
    system_role = has([{"role": "system", "content": sys_content}, user], _SYS_NEEDLE)
    some_tool = {
        "name": "some_tool",
        "type": "function",
        "function": {
            "name": "some_tool",
            "description": "Some tool.",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Some argument."}},
                "required": ["arg"],
            },
        },
    }
    tools_ok = has([user], "some_tool", [some_tool])

    def with_content(content: Any) -> list[dict[str, Any]]:
        # twice: some templates treat the last assistant turn differently
        assistant = {"role": "assistant", "content": content}
        return [user, assistant, user, assistant]

    non_null = has(with_content(""), _USER_NEEDLE) and not has(with_content(None), _USER_NEEDLE)

    def calls_msg(calls: list[dict[str, Any]]) -> dict[str, Any]:
        return {"role": "assistant", "content": "" if non_null else None, "tool_calls": calls}

    def response(call_id: str, name: str, content: str) -> dict[str, Any]:
        return {"role": "tool", "name": name, "content": content, "tool_call_id": call_id}

    args = {"argument_needle": "print('Hello, World!')"}

    def renders_args(arguments: Any) -> bool:
        out = _raw(template, [user, calls_msg([_tool_call("ipython", arguments)]),
                              response("call_1___", "ipython", "Hello, World!")], None, bos, eos)
        return any(n in out for n in ("<parameter=argument_needle>", '"argument_needle":', "'argument_needle':"))

    str_args = renders_args(json.dumps(args, ensure_ascii=False, separators=(",", ":")))
    obj_args = renders_args(args)
    tool_calls = str_args or obj_args
    object_arguments = not str_args and obj_args
    tool_responses = False
    if tool_calls:
        compact = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        call = _tool_call("test_tool1", args if object_arguments else compact)
        out = _raw(template, [user, calls_msg([call]), response("call_911_", "test_tool1", "Some response!")],
                   None, bos, eos)
        tool_responses = "Some response!" in out
    caps = TemplateCaps(tools_ok, tool_calls, tool_responses, system_role, object_arguments, non_null, typed)
    if tools_ok:
        return caps
    return TemplateCaps(**{**caps.__dict__, "tool_call_example": _tool_call_example(template, bos, eos, caps)})


def _tool_call_example(template: str, bos: str, eos: str, caps: TemplateCaps) -> str:
    """The text the template (with polyfills) renders for one tool call: the difference between
    a conversation ending in a generation prompt and one ending in the call."""
    from genai_shim.chat import render_chat_template

    args: Any = {"arg1": "some_value"}
    call_msg = {
        "role": "assistant",
        "content": "" if caps.requires_non_null_content else None,
        "tool_calls": [_tool_call("tool_name", args if caps.requires_object_arguments else _dump(args))],
    }
    user = {"role": "user", "content": "Hey"}
    try:
        prefix = render_chat_template(template, [user], add_generation_prompt=True, bos_token=bos,
                                      eos_token=eos, caps=caps)
        full = render_chat_template(template, [user, call_msg], add_generation_prompt=False,
                                    bos_token=bos, eos_token=eos, caps=caps)
    except ChatTemplateLimitError:
        raise
    except Exception as e:  # noqa: BLE001 - the real prints and renders without an example
        sys.stderr.write(f"Failed to generate tool call example: {e}\n")
        return ""
    last_eos = full.rfind(eos)
    if last_eos != -1 and (
        last_eos == len(prefix) - len(eos) or (full.endswith("\n") and last_eos == len(full) - len(eos) - 1)
    ):
        full = full[:last_eos]
    common = 0
    for i in range(min(len(prefix), len(full))):
        if prefix[i] != full[i]:
            break
        if prefix[i] != "<":  # do not consume the '<' of a tag the two renders start differently
            common = i + 1
    example = full[common:]
    if "tool_name" not in example and "some_value" not in example:
        sys.stderr.write("Failed to infer a tool call example (possible template bug)\n")
        return ""
    return example


@dataclass(frozen=True)
class _Fills:
    """Which rewrites a conversation needs under a template's capabilities."""

    system: bool
    tools: bool
    calls: bool
    responses: bool
    object_args: bool
    typed: bool

    def any(self) -> bool:
        return self.system or self.tools or self.calls or self.responses or self.object_args or self.typed


def _fills(messages: list[dict[str, Any]], tools: Any, caps: TemplateCaps) -> _Fills:
    has_tools = isinstance(tools, list) and bool(tools)
    has_calls = any(m.get("tool_calls") is not None for m in messages)
    has_responses = any(m.get("role") == "tool" for m in messages)
    has_str = any(isinstance(m.get("content"), str) for m in messages)
    return _Fills(
        system=not caps.supports_system_role,
        tools=has_tools and not caps.supports_tools,
        calls=has_calls and not caps.supports_tool_calls,
        responses=has_responses and not caps.supports_tool_responses,
        object_args=has_calls and caps.requires_object_arguments,
        typed=has_str and caps.requires_typed_content,
    )


def polyfilled_messages(
    messages: list[dict[str, Any]], tools: Any, caps: TemplateCaps
) -> list[dict[str, Any]]:
    """``messages`` rewritten for what the template cannot render (unchanged if it can)."""
    fills = _fills(messages, tools, caps)
    if not fills.any():
        return messages

    out: list[dict[str, Any]] = []
    adjusted = [dict(m) for m in messages]
    if fills.tools:
        adjusted = _add_system(adjusted, _tools_prompt(tools, caps))
    pending = ""
    for message in adjusted:
        _check_message(message)
        role = message["role"]
        if "tool_calls" in message:
            _polyfill_calls(message, fills.object_args or fills.calls, fills.calls)
        if fills.responses and role == "tool":
            _response_as_user(message)
        if message.get("content") is not None and fills.system:
            pending, keep = _fold_system(message, role, pending, out, fills.typed)
            if not keep:
                continue
        _add(out, message, fills.typed)
    if pending:
        _add(out, {"role": "user", "content": pending}, fills.typed)
    return out


def _add(out: list[dict[str, Any]], msg: dict[str, Any], typed: bool) -> None:
    """Append ``msg``, its string content as typed content when the template requires it."""
    content = msg.get("content")
    if typed and isinstance(content, str):
        out.append({"role": msg["role"], "content": [{"type": "text", "text": content}]})
    else:
        out.append(msg)


def _tools_prompt(tools: Any, caps: TemplateCaps) -> str:
    prompt = "You can call any of the following tools to satisfy the user's requests: " + _dump(tools, 2)
    if caps.tool_call_example:
        prompt += "\n\nExample tool call syntax:\n\n" + caps.tool_call_example + "\n\n"
    return prompt


def _check_message(message: dict[str, Any]) -> None:
    if "role" not in message or ("content" not in message and "tool_calls" not in message):
        raise ValueError(
            "message must have 'role' and one of 'content' or 'tool_calls' fields: " + _dump(message)
        )


def _response_as_user(message: dict[str, Any]) -> None:
    """A tool response becomes a user turn holding it as JSON text."""
    response: dict[str, Any] = {}
    if "name" in message:
        response["tool"] = message["name"]
    response["content"] = message.get("content")
    if "tool_call_id" in message:
        response["tool_call_id"] = message["tool_call_id"]
    message["role"] = "user"
    message["content"] = json.dumps({"tool_response": response}, ensure_ascii=False, indent=2)
    message.pop("name", None)


def _fold_system(
    message: dict[str, Any], role: str, pending: str, out: list[dict[str, Any]], typed: bool
) -> tuple[str, bool]:
    """System text waits for the next user turn (or becomes one before any other turn);
    returns the text still pending and whether ``message`` itself is kept."""
    content = message["content"]
    if role == "system":
        return (pending + "\n" + content if pending else content), False
    if role == "user":
        if pending:
            message["content"] = pending + ("\n" + content if content else "")
            pending = ""
    elif pending:
        _add(out, {"role": "user", "content": pending}, typed)
        pending = ""
    return pending, True


def _add_system(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + prompt}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]


def _polyfill_calls(message: dict[str, Any], parse_arguments: bool, as_text: bool) -> None:
    calls = [dict(c) for c in message["tool_calls"]]
    if parse_arguments:
        for call in calls:
            if call.get("type") == "function":
                call["function"] = function = dict(call["function"])
                if isinstance(function.get("arguments"), str):
                    try:
                        function["arguments"] = json.loads(function["arguments"])
                    except ValueError as e:
                        sys.stderr.write(f"Failed to parse arguments: {e}\n")
    message["tool_calls"] = calls
    if not as_text:
        return
    rendered = []
    for call in calls:
        if call.get("type") != "function":
            continue
        item = {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
        if "id" in call:
            item["id"] = call["id"]
        rendered.append(item)
    obj: dict[str, Any] = {"tool_calls": rendered}
    content = message.get("content")
    if content is not None and content != "" and content != [] and content != {}:
        obj["content"] = content
    message["content"] = json.dumps(obj, ensure_ascii=False, indent=2)
    del message["tool_calls"]
