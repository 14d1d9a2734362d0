"""Chat templates run in a sandbox with budgets: they come from downloaded model folders.

jinja2's ``ImmutableSandboxedEnvironment`` already blocks attribute tricks (SSTI: reaching
``__class__``, ``__globals__``, mutating lists) and caps ``range`` at 100,000 items.  It does not
bound how much a template allocates or how long it runs: ``{{ ('a' * 10**10)|length }}`` asks for
10 GB, two nested ``range(100000)`` loops run for hours.  Here:

* every value the template builds with ``*``, ``+``, ``~``, ``**``, ``%``, the widening ``str`` methods
  (``center``, ``ljust``, ``rjust``, ``zfill``, ``expandtabs``, ``replace``, ``join``, ``format``)
  and the widening filters (``center``, ``indent``, ``wordwrap``, ``format``, ``replace``,
  ``join``, ``tojson``) is checked *before* it is built: at most :data:`MAX_ITEMS` characters or
  items (16 MiB of text at most);
* the output is at most :data:`MAX_ITEMS` characters;
* a render takes at most :data:`MAX_SECONDS` (checked on the template's own lines, so a loop that
  prints nothing is stopped too; off while a debugger or coverage tracer is active);
* recursion, memory and overflow errors of a template are :class:`ChatTemplateLimitError`, every
  other rendering failure a ``ConfigError``.

Real templates stay far below these limits (a 128k-token prompt is ~0.5M characters).
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from ov_npu_emu.errors import ConfigError

__all__ = ["MAX_ITEMS", "MAX_SECONDS", "ChatTemplateLimitError", "bounded_environment", "render"]

#: the most characters (or list items) one value or the output of a template may have
MAX_ITEMS = 1 << 22
#: the most seconds one render may take
MAX_SECONDS = 5.0
#: the most bits of an integer a template may compute with ``**``
MAX_POWER_BITS = 1 << 16

_FORMAT_NUMBER = re.compile(r"%[-#0 +]*(\d+)?(?:\.(\d+))?|\{[^{}]*?:[^{}]*?(\d+)(?:\.(\d+))?[^{}]*\}")


class ChatTemplateLimitError(ConfigError):
    """A chat template went past a budget (size, time, recursion) of the sandbox."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"The chat template was stopped: {what}. Chat templates come with the model folder; "
            "check its tokenizer_config.json / chat_template.jinja, or pass your own template",
            key="chat_template",
        )


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _check(n: float, what: str) -> None:
    if n > MAX_ITEMS:
        raise ChatTemplateLimitError(f"{what} would have {int(n):,} items (the limit is {MAX_ITEMS:,})")


def _check_widths(fmt: str, what: str) -> None:
    for groups in _FORMAT_NUMBER.findall(fmt):
        for number in groups:
            if number and len(number) > 7:
                raise ChatTemplateLimitError(f"{what} asks for a width or precision of {number}")
            if number:
                _check(int(number), what)


def _check_binop(operator: str, left: Any, right: Any) -> None:
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if _size(seq) and isinstance(n, int):
                _check(_size(seq) * n, "'*'")
    elif operator == "+":
        if _size(left) and _size(right):
            _check(_size(left) + _size(right), "'+'")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            bits = right * math.log2(abs(left))
            if bits > MAX_POWER_BITS:
                raise ChatTemplateLimitError(f"'**' would compute a number of about {bits:,.0f} bits")
    elif operator == "%" and isinstance(left, str):
        _check_widths(left, "'%' formatting")
        args = right if isinstance(right, tuple) else (right,)
        _check(len(left) + sum(len(str(a)) for a in args if isinstance(a, (str, int, float))), "'%' formatting")


def _widening_call(name: str, text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Check a ``str`` method call that can make a much longer string than its inputs."""
    if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
        _check(args[0], f"str.{name}")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        if isinstance(size, int):
            _check(len(text) + text.count("\t") * size, "str.expandtabs")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        old, new = args[0], args[1]
        count = text.count(old) if old else len(text) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            count = min(count, args[2])
        _check(len(text) + count * max(0, len(new) - len(old)), "str.replace")
    elif name == "join" and args:
        parts = args[0]
        if isinstance(parts, (list, tuple)):
            _check(len(parts), "str.join")
            _check(sum(_size(p) for p in parts) + len(text) * len(parts), "str.join")
    elif name in ("format", "format_map"):
        _check_widths(text, f"str.{name}")


def _bounded_filter(name: str, filt: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(filt)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        # filters are called (value, *args); with_environment / pass_context ones get those first
        values = [a for a in args if isinstance(a, (str, list, tuple, int))]
        value = next((a for a in args if isinstance(a, (str, list, tuple))), "")
        if name == "center":
            width = kwargs.get("width", next((a for a in values if isinstance(a, int)), 80))
            _check(width, "the center filter")
        elif name == "indent":
            width = kwargs.get("width", next((a for a in values if isinstance(a, int)), 4))
            if isinstance(width, int):
                _check(_size(value) + (str(value).count("\n") + 1) * width, "the indent filter")
            elif isinstance(width, str):
                _check(_size(value) + (str(value).count("\n") + 1) * len(width), "the indent filter")
        elif name == "format" and isinstance(value, str):
            _check_widths(value, "the format filter")
        elif name == "replace" and isinstance(value, str):
            strs = [a for a in args if isinstance(a, str)]
            if len(strs) >= 3:
                _widening_call("replace", strs[0], (strs[1], strs[2]), {})
        elif name == "join" and isinstance(value, (list, tuple)):
            _check(sum(len(str(v)) for v in value), "the join filter")
        elif name == "wordwrap":
            _check(_size(value) * 2, "the wordwrap filter")
        return filt(*args, **kwargs)

    return bounded


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    if isinstance(indent, int):
        _check(indent, "tojson's indent")
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _concat(parts: tuple[Any, ...]) -> str:
    """The template's ``~`` operator, checked: its result is a new string."""
    strings = [str(p) for p in parts]
    _check(sum(len(t) for t in strings), "'~'")
    return "".join(strings)


@functools.lru_cache(maxsize=1)
def _environment_class() -> type:
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedCodeGenerator(CodeGenerator):  # type: ignore[misc]
        """``a ~ b`` compiles to a call of the environment's checked concatenation."""

        def visit_Concat(self, node: Any, frame: Any) -> None:  # noqa: N802 - jinja's visitor name
            self.write("environment.checked_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class BoundedSandbox(ImmutableSandboxedEnvironment):  # type: ignore[misc]
        intercepted_binops = frozenset({"*", "+", "**", "%"})
        code_generator_class = BoundedCodeGenerator
        checked_concat = staticmethod(_concat)

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            # str.format reaches here wrapped by the sandbox's safe formatter (``__wrapped__``)
            owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
            if isinstance(owner, str):
                _widening_call(getattr(__obj, "__name__", ""), owner, args, kwargs)
            return super().call(__context, __obj, *args, **kwargs)

    return BoundedSandbox


def bounded_environment(**options: Any) -> Any:
    """A jinja2 environment: the immutable sandbox with the budgets of this module."""
    env = _environment_class()(**options)
    for name in ("center", "indent", "format", "replace", "join", "wordwrap"):
        env.filters[name] = _bounded_filter(name, env.filters[name])
    env.filters["tojson"] = _tojson
    return env


def render(template: Any, context: dict[str, Any]) -> str:
    """``template.render(**context)`` within the budgets; failures are ConfigErrors."""
    from jinja2 import TemplateError

    budget = MAX_SECONDS
    deadline = time.monotonic() + budget
    lines = 0

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        lines += 1
        if not lines & 1023 and time.monotonic() > deadline:
            raise ChatTemplateLimitError(f"rendering took longer than {budget:g} s")
        return on_line

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        return on_line if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    if previous is None:  # a debugger or coverage keeps its tracer: no time budget then
        sys.settrace(on_call)
    out: list[str] = []
    size = 0
    try:
        for chunk in template.generate(**context):
            size += len(chunk)
            _check(size, "the rendered prompt")
            out.append(chunk)
    except ConfigError:
        raise
    except RecursionError:
        raise ChatTemplateLimitError("it recursed too deeply") from None
    except MemoryError:
        raise ChatTemplateLimitError("it ran out of memory") from None
    except (OverflowError, TemplateError, ArithmeticError, TypeError, ValueError, LookupError) as e:
        raise ConfigError(f"Chat template rendering failed: {e}", key="chat_template") from e
    finally:
        if previous is None:
            sys.settrace(None)
    return "".join(out)
