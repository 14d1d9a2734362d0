"""Chat templates rendered with tools, tool calls, tool responses and system turns the template
cannot render itself: genai_shim's polyfills (genai_shim/chat_polyfills.py) against the real
tokenizer's template engine, on qwen2-fp32's template and on small templates written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import genai_shim

QWEN2 = Path(__file__).resolve().parents[1] / "fixtures" / "optimum" / "qwen2-fp32"

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CONVERSATIONS = {
    "system, user, tools": (
        [{"role": "system", "content": "You are nice."}, {"role": "user", "content": "Hi é"}], TOOLS
    ),
    "user, tools": ([{"role": "user", "content": "Hi"}], TOOLS),
    "system, user": ([{"role": "system", "content": "You are nice."}, {"role": "user", "content": "Hi"}], None),
    "tool call and response": ([
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "name": "get_weather", "content": "sunny", "tool_call_id": "c1"},
        {"role": "user", "content": "thanks"},
    ], TOOLS),
    "turns": ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
               {"role": "user", "content": "Bye"}], None),
}
TEMPLATES = {
    "folder": "",  # qwen2-fp32's own (ChatML, no tools)
    "no system role": (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    ),
    "tools": (
        "{% if tools %}TOOLS:{{ tools | tojson }}\n{% endif %}{% for m in messages %}{{ m['role'] }}: "
        "{% if m.tool_calls %}{% for c in m.tool_calls %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }}"
        "{% endfor %}{% else %}{{ m['content'] }}{% endif %}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    ),
    "object arguments": (
        "{% for m in messages %}{{ m['role'] }}: {% if m.tool_calls %}{% for c in m.tool_calls %}CALL "
        "{{ c.function.name }}{% for k, v in c.function.arguments.items() %} {{ k }}={{ v }}{% endfor %}{% endfor %}"
        "{% else %}{{ m['content'] }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    ),
    "eos": (
        "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    ),
}


def _render(mod: Any, tokenizer: Any, messages: list[dict[str, Any]], tools: Any, template: str) -> tuple[str, str]:
    history = mod.ChatHistory(messages)
    if tools:
        history.set_tools(tools)
    try:
        return "ok", tokenizer.apply_chat_template(history, add_generation_prompt=True, chat_template=template)
    except Exception as e:  # noqa: BLE001 - compared
        return "error", str(e).strip().splitlines()[-1]


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_polyfills_match_real(real_genai, template):
    ours, real = genai_shim.Tokenizer(str(QWEN2)), real_genai.Tokenizer(str(QWEN2))
    for name, (messages, tools) in CONVERSATIONS.items():
        got = _render(genai_shim, ours, messages, tools, TEMPLATES[template])
        assert got == _render(real_genai, real, messages, tools, TEMPLATES[template]), name
        assert got[0] == "ok"
        if tools and template != "tools":  # the template has no tools: they went into a system turn
            assert "You can call any of the following tools" in got[1]
