"""Typed configuration values: one parser per kind of value, shared by every layer.

Every property a user passes (``NPU_EMU_*``, ``NPUW_*``, genai's ``GENERATE_HINT``...) goes through
these converters, so a spelling accepted in one place is accepted everywhere and a bad value is a
:class:`~ov_npu_emu.errors.ConfigError` naming the key -- never a silent default.

Each owner of keys declares them once, as the real NPUW's ``DEFINE_OPT(NAME, type, default)``: an
:class:`Option` per key (name, converter, default, doc, whether the real stack has it) gathered in
an :class:`OptionTable`, which parses a properties dict, refuses unknown keys of its namespace
with a "did you mean", lists its properties and renders the docs' key table
(``tools/option_tables.py``).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ov_npu_emu.errors import ConfigError

__all__ = [
    "TRUE_WORDS",
    "FALSE_WORDS",
    "Option",
    "OptionTable",
    "as_bool",
    "as_choice",
    "as_flag",
    "as_int",
    "as_str",
    "as_uint",
    "check_known",
    "did_you_mean",
]

#: the spellings of a boolean property (case-insensitive), as OpenVINO users write them
TRUE_WORDS = ("YES", "TRUE", "1", "ON")
FALSE_WORDS = ("NO", "FALSE", "0", "OFF")


def as_bool(key: str, value: Any) -> bool:
    """YES/NO (also TRUE/FALSE, 1/0, ON/OFF, any case, or a Python bool); anything else raises."""
    if isinstance(value, bool):
        return value
    s = str(value).strip().upper()
    if s in TRUE_WORDS:
        return True
    if s in FALSE_WORDS:
        return False
    raise ConfigError(f"{key}={value!r}: expected YES or NO", key=key)


def as_flag(key: str, value: Any) -> bool:
    """:func:`as_bool`, where "" reads as NO (genai passes empty strings for keys it does not set)."""
    return False if isinstance(value, str) and not value.strip() else as_bool(key, value)


def as_int(key: str, value: Any, *, minimum: int = 0) -> int:
    """An integer ≥ ``minimum`` from an int (or anything with ``__index__``) or a decimal string;
    the error names the type it got (NPUW's keys: ``NPUW_LLM_MAX_PROMPT_LEN`` and the like)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) and not hasattr(value, "__index__"):
        raise ConfigError(f"{key} must be an integer, got {type(value).__name__} {value!r}", key=key)
    try:
        n = int(value) if not isinstance(value, str) else int(value.strip(), 10)
    except ValueError as e:
        raise ConfigError(f'{key} must be an integer, got {value!r}; pass e.g. {key}="256"', key=key) from e
    if n < minimum:
        what = "positive" if minimum > 0 else "non-negative"
        raise ConfigError(f"{key} must be a {what} integer, got {n}", key=key)
    return n


def as_str(key: str, value: Any) -> str:
    """Any value as its text; None reads as ""."""
    return "" if value is None else str(value)


def as_uint(key: str, value: Any, *, minimum: int = 0) -> int:
    """A whole number ≥ ``minimum`` (an int or its decimal string)."""
    try:
        n = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        n = None
    if n is None or n < minimum:
        raise ConfigError(f"{key}={value!r}: expected a whole number >= {minimum}", key=key)
    return n


def as_choice(key: str, value: Any, choices: Iterable[str]) -> str:
    """One of ``choices`` (compared upper-case); the error lists them."""
    options = [c.upper() for c in choices]
    s = str(value).strip().upper()
    if s not in options:
        raise ConfigError(f"{key}={value!r}: expected one of {', '.join(options)}", key=key)
    return s


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest known key, or ""."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_known(config: Mapping[str, Any], prefixes: tuple[str, ...], known: Iterable[str], owner: str) -> None:
    """Keys in our own namespaces (``prefixes``) must be known: a typo is an error, not a no-op."""
    known = set(known)
    for key in config:
        if isinstance(key, str) and key.startswith(prefixes) and key not in known:
            raise ConfigError(f"{owner} does not know the property {key}{did_you_mean(key, known)}", key=key)


Converter = Callable[[str, Any], Any]


@dataclasses.dataclass(frozen=True)
class Option:
    """One configuration key, declared once by its owner (the real NPUW's ``DEFINE_OPT``).

    ``converter(key, value)`` turns what the user gave into the typed value, raising a
    :class:`ConfigError` naming the key; ``default`` is what an unset key reads as (passed through
    the converter too; a None default means "unset, decided later" and reads as None).  ``origin`` is "real" for a key
    of the real OpenVINO stack (same name, default and meaning unless ``doc`` says where we differ)
    and "ours" for the emulator's own.  ``shown_default`` is the docs' text when the value alone
    would not say it; ``doc`` is the docs' "meaning" column (markdown).  ``scope`` says where the
    owner applies the key (its own words: the NPU's "device", "compile", "compiled-model"); a
    ``read_only`` key is listed and documented but never taken from a config (a config that sets
    it is refused like an unknown key).
    """

    name: str
    converter: Converter
    default: Any
    doc: str
    origin: str = "real"
    shown_default: str | None = None
    scope: str = ""
    read_only: bool = False

    def __post_init__(self) -> None:
        if self.origin not in ("real", "ours"):
            raise ValueError(f"{self.name}: origin must be 'real' or 'ours', got {self.origin!r}")

    def convert(self, value: Any) -> Any:
        return self.converter(self.name, value)

    def read(self, config: Mapping[str, Any]) -> Any:
        """The typed value of this key in ``config``, else its default."""
        value = config.get(self.name, self.default)
        if value is None and self.default is None:
            return None  # unset, decided later by the owner
        return self.converter(self.name, value)

    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if isinstance(self.default, bool):
            return "YES" if self.default else "NO"
        if self.default is None:
            return "(unset)"
        if self.default == "":
            return '""'
        return str(self.default)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


class OptionTable:
    """The keys one owner (a device, NPUW) understands, each declared once as an :class:`Option`.

    ``prefixes``: the namespaces this owner keeps to itself: a key there that is neither an option
    nor in ``accepted`` (keys taken and ignored, or consumed elsewhere) is a typo, refused with the
    closest known key.  ``unknown`` formats that error from the key and the hint
    (`` (did you mean X?)`` by default, see ``hint``).
    """

    def __init__(
        self,
        owner: str,
        options: Iterable[Option],
        *,
        prefixes: tuple[str, ...] = (),
        accepted: Iterable[str] = (),
        unknown: str = "{owner} does not know the property {key}{hint}",
        hint: str = " (did you mean {close}?)",
    ) -> None:
        self.owner = owner
        self.options: dict[str, Option] = {}
        for opt in options:
            if opt.name in self.options:
                raise ValueError(f"{owner}: option {opt.name} is declared twice")
            self.options[opt.name] = opt
        self.prefixes = prefixes
        self.accepted = frozenset(accepted)
        self._unknown = unknown
        self._hint = hint

    def __contains__(self, name: object) -> bool:
        return name in self.options

    def __getitem__(self, name: str) -> Option:
        return self.options[name]

    def __iter__(self) -> Iterator[Option]:
        return iter(self.options.values())

    def __len__(self) -> int:
        return len(self.options)

    @property
    def known(self) -> frozenset[str]:
        """Every key this owner takes from a config: its options but the read-only ones, and the
        accepted ones."""
        return frozenset(o.name for o in self if not o.read_only) | self.accepted

    def scoped(self, *scopes: str) -> list[Option]:
        """The options of the given scopes, in declaration order."""
        return [o for o in self if o.scope in scopes]

    def defaults(self) -> dict[str, Any]:
        """name -> default, as declared (unconverted)."""
        return {o.name: o.default for o in self}

    def properties(self, *scopes: str) -> list[str]:
        """The option names (of ``scopes``, else all), in declaration order (for
        SUPPORTED_PROPERTIES and the docs)."""
        return [o.name for o in (self.scoped(*scopes) if scopes else self)]

    def check_unknown(self, config: Mapping[str, Any], extra: Iterable[str] = ()) -> None:
        """Refuse a key in one of ``prefixes`` that this owner does not know (nor ``extra``)."""
        if not self.prefixes:
            return
        known = self.known | set(extra)
        for key in config:
            if isinstance(key, str) and key.startswith(self.prefixes) and key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = self._hint.format(close=close[0]) if close else ""
                raise ConfigError(self._unknown.format(owner=self.owner, key=key, hint=hint), key=key)

    def get(self, config: Mapping[str, Any], name: str) -> Any:
        """The typed value of option ``name`` in ``config`` (its default when unset)."""
        return self.options[name].read(config)

    def parse(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Check for unknown keys, then every option's typed value (default when unset)."""
        self.check_unknown(config)
        return {o.name: o.read(config) for o in self if not o.read_only}

    def markdown(self) -> str:
        """The docs' key table: key, default, origin, meaning (generated, see tools/option_tables.py)."""
        lines = ["| Key | Default | Origin | Meaning |", "|---|---|---|---|"]
        for o in self:
            origin = "real" if o.origin == "real" else "**ours**"
            lines.append(f"| `{o.name}` | {_cell(o.default_text())} | {origin} | {_cell(o.doc)} |")
        return "\n".join(lines) + "\n"
