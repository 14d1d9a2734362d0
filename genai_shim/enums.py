"""The base of genai_shim's enums: integer-valued like the real's pybind11 enums, and printed as
they print (``str`` and ``format`` give "StreamingStatus.STOP", where a Python IntEnum gives "1"),
so a sample that prints a finish reason or a status prints what the real prints."""

from __future__ import annotations

import enum

__all__ = ["BindingEnum"]


class BindingEnum(enum.IntEnum):
    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)
