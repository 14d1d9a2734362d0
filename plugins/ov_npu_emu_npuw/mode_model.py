"""The compiled model of one of NPUW's non-LLM modes (text embedding, Whisper decoder): the
model's own ports over static sub-models, read-only properties (the LLM config's, then the
mode's own keys), as the real's mode-specific compiled models answer them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.runtime.device import DeviceCompiledModel
from ov_npu_emu_npuw.config import LLMConfig


class ModeCompiledModel(DeviceCompiledModel):
    """Subclasses set ``name``, ``cfg`` and ``device`` and say what the mode adds."""

    #: the mode in error texts ("text-embedding", "Whisper")
    mode = ""
    name: str
    cfg: LLMConfig
    device: str

    def mode_properties(self) -> dict[str, Any]:
        """The mode's own keys, read back over the LLM config's."""
        return {}

    def get_property(self, name: str) -> Any:
        props = {**self.cfg.properties(), **self.mode_properties()}
        if name in props:
            return props[name]
        if name == "SUPPORTED_PROPERTIES":
            return sorted({*props, "SUPPORTED_PROPERTIES", "NETWORK_NAME", "MODEL_NAME", "EXECUTION_DEVICES"})
        if name in ("NETWORK_NAME", "MODEL_NAME"):
            return self.name
        if name == "EXECUTION_DEVICES":
            return [self.device]
        raise ConfigError(f"Unsupported property {name} by NPUW {self.mode} compiled model", key=name)

    def set_property(self, properties: Mapping[str, Any]) -> None:
        raise ConfigError(
            f"NPUW compiled model properties are read-only; pass {sorted(properties)} to compile_model")
