"""Typed configuration values: one parser per kind of value, shared by every layer.

Every property a user passes (``NPU_EMU_*``, ``NPUW_*``, genai's ``GENERATE_HINT``...) goes through
these converters, so a spelling accepted in one place is accepted everywhere and a bad value is a
:class:`~ov_npu_emu.errors.ConfigError` naming the key -- never a silent default.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ov_npu_emu.errors import ConfigError

__all__ = ["TRUE_WORDS", "FALSE_WORDS", "as_bool", "as_choice", "as_uint", "check_known", "did_you_mean"]

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
