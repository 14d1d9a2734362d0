"""Device registry: maps OpenVINO-style device names to device classes."""

from __future__ import annotations

import difflib
import re

from ov_npu_emu.errors import DeviceNotFoundError, PluginError
from ov_npu_emu.runtime.device import Device

__all__ = ["DeviceRegistry", "canonical_device_name"]

_SUFFIX = re.compile(r"^(?P<base>[A-Z_][A-Z0-9_]*?)(?:\.(?P<idx>\d+))?$")


def canonical_device_name(name: str) -> str:
    """"npu" -> "NPU", "NPU.0" -> "NPU"; other names are upper-cased and stripped."""
    name = str(name).strip().upper()
    m = _SUFFIX.match(name)
    if m and m.group("idx") in (None, "0"):
        return m.group("base")
    return name


class DeviceRegistry:
    """Device classes by canonical name; instances are created lazily, one per registry."""

    def __init__(self) -> None:
        self._classes: dict[str, type[Device]] = {}
        self._instances: dict[str, Device] = {}

    def add(self, device_cls: type[Device]) -> None:
        name = getattr(device_cls, "NAME", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"device class {device_cls!r} has no NAME")
        self._classes[canonical_device_name(name)] = device_cls

    def names(self) -> list[str]:
        return list(self._classes)

    def __contains__(self, name: str) -> bool:
        return canonical_device_name(name) in self._classes

    def get(self, name: str) -> Device:
        key = canonical_device_name(name)
        if key not in self._classes:
            close = difflib.get_close_matches(key, self._classes, n=1, cutoff=0.3)
            raise DeviceNotFoundError(name, self.names(), close[0] if close else None)
        if key not in self._instances:
            self._instances[key] = self._classes[key]()
        return self._instances[key]

    def unload(self, name: str) -> None:
        """Forget the device's instance: the next use creates a fresh one (``Core.unload_plugin``)."""
        self.get(name)  # DeviceNotFoundError for a name no plugin registers
        self._instances.pop(canonical_device_name(name), None)
