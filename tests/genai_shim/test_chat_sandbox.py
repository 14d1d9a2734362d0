"""Chat templates come from downloaded model folders: hostile ones (SSTI, memory, CPU,
recursion) end in a typed error or harmless output within 10 CPU seconds and 300 MB, and real-world
templates render as before (tests/genai_shim/test_chat.py compares them with the real)."""

from __future__ import annotations

import re
import time
import tracemalloc

import pytest

from genai_shim import template_sandbox
from genai_shim.chat import render_chat_template
from genai_shim.template_sandbox import MAX_ITEMS, ChatTemplateLimitError
from ov_npu_emu.errors import ConfigError

MESSAGES = [{"role": "user", "content": "hi"}]

#: (payload, the unsafe attribute named in the error, or None: it renders as nothing)
SSTI = [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "__class__"),
    ("{{ cycler.__init__.__globals__.os.popen('id').read() }}", "__init__"),
    ("{{ messages.__class__.__base__.__subclasses__() }}", "__class__"),
    ("{% set x = messages.append({'role': 'system'}) %}{{ messages|length }}", "append"),
    ("{{ messages.pop() }}", "pop"),
    ("{{ raise_exception.__globals__ }}", None),  # a function's globals read as undefined
]

MEMORY = [
    "{{ ('a' * 10**10)|length }}",
    "{{ ([1] * 10**9)|length }}",
    "{{ 'a'.center(10**10) }}",
    "{{ 'a'|center(10**10) }}",
    "{{ 'ab'.ljust(10**9) }}",
    "{{ 2 ** (10 ** 10) }}",
    "{{ '%10000000000s' % 'a' }}",
    "{{ '{:>10000000000}'.format(1) }}",
    "{{ '%099999999d'|format(1) }}",
    "{{ 'ab'.replace('', 'x' * 3000000) }}",
    "{{ 'ab'|replace('', 'x' * 3000000) }}",
    "{% set s = 'a' * 3000000 %}{{ (s + s)|length }}",
    "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "{% set s = 'a' * 3000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
    "{{ ('\\t' * 100000).expandtabs(100000) }}",
    "{{ (range(100000)|list)|tojson(indent=100000000) }}",
    "{% set s = 'a\\n' * 2000000 %}{{ s|indent(100000) }}",
    "{{ ','.join(['a' * 1000] * 1000000) }}",
]

CPU = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% if i == j %}{% endif %}{% endfor %}{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}",
]

RECURSION = [
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{{ range(10**10)|length }}",
]


def _render(template: str) -> tuple[BaseException | str, float, int]:
    tracemalloc.start()
    tracemalloc.reset_peak()
    # CPU seconds of this process, not wall time: a loaded CI machine must not fail these checks
    t0 = time.process_time()
    try:
        out: BaseException | str = render_chat_template(template, MESSAGES, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - the test looks at what came out
        out = e
    seconds = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, seconds, peak


@pytest.mark.parametrize(("template", "attribute"), SSTI)
def test_ssti_payloads_are_config_errors_or_nothing(template, attribute):
    out, seconds, _ = _render(template)
    assert seconds < 10
    if attribute is None:
        assert out == ""
    else:
        assert isinstance(out, ConfigError) and f"access to attribute '{attribute}'" in str(out), out


@pytest.mark.parametrize("template", MEMORY)
def test_memory_payloads_stop_before_they_allocate(template):
    out, seconds, peak = _render(template)
    # stopped by a size check before the allocation, not by a MemoryError after trying it
    assert isinstance(out, ChatTemplateLimitError) and re.search("would have|asks for|would compute", str(out)), out
    assert seconds < 10 and peak < 300 << 20, (seconds, peak)


@pytest.mark.parametrize("template", CPU)
def test_cpu_payloads_stop_within_the_time_budget(template, monkeypatch):
    monkeypatch.setattr(template_sandbox, "MAX_SECONDS", 1.0)  # the same check as at 5 s, sooner
    out, seconds, peak = _render(template)
    assert isinstance(out, ChatTemplateLimitError) and "longer than 1 s" in str(out), out
    assert seconds < 3 and peak < 300 << 20


@pytest.mark.parametrize("template", RECURSION)
def test_recursion_and_overflow_are_config_errors(template):
    out, seconds, _ = _render(template)
    assert isinstance(out, ConfigError) and seconds < 10, out


def test_values_up_to_the_budget_still_render():
    n = MAX_ITEMS // 2
    out = render_chat_template(f"{{{{ ('a' * {n})|length }}}} {{{{ 'x'.center(9) }}}} {{{{ 2 ** 100 }}}}", MESSAGES,
                               add_generation_prompt=True)
    assert out == f"{n} {'x'.center(9)} {2 ** 100}"
    big_prompt = [{"role": "user", "content": "word " * 200_000}]
    out = render_chat_template("{% for m in messages %}{{ m['role'] ~ ': ' ~ m['content'] }}{% endfor %}",
                               big_prompt, add_generation_prompt=True)
    assert len(out) == len("user: ") + 1_000_000
