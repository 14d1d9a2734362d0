"""NPUW plugin: one stateful LLM IR → static prefill + generate variants over one KV buffer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import openvino as ov

from ov_npu_emu.errors import PluginError
from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.runtime.device import Device, DeviceCompiledModel

from ov_npu_emu_npuw.config import is_npuw_llm_config

if TYPE_CHECKING:
    from ov_npu_emu.api.core import Core
    from ov_npu_emu.registry import DeviceRegistry

__all__ = [
    "NpuwPlaceholderDevice",
    "ovnpu_compile_model",
    "ovnpu_import_model",
    "ovnpu_register_devices",
]


class NpuwPlaceholderDevice(Device):
    """Stands in for "NPU" only while the emulated NPU plugin is absent, so NPUW configs reach us.

    Core resolves the device name before the claim hook runs; without a device named "NPU",
    ``compile_model(model, "NPU", {NPU_USE_NPUW: YES, NPUW_LLM: YES, NPUW_DEVICES: CPU})`` could not
    work.  Anything else on this placeholder is a typed error that says what is missing.
    """

    NAME = "NPU"
    FULL_DEVICE_NAME = "NPU (NPUW only; emulated NPU plugin not installed)"

    def _missing(self) -> PluginError:
        return PluginError(
            "the emulated NPU device plugin (ov_npu_emu_npu) is not installed; only NPUW LLM compilation "
            "(NPU_USE_NPUW=YES, NPUW_LLM=YES, NPUW_DEVICES=CPU) works on 'NPU' here. Use device 'CPU' otherwise."
        )

    def compile_model(self, model: ov.Model, config: Mapping[str, Any]) -> DeviceCompiledModel:
        raise self._missing()

    def import_model(self, blob: bytes, config: Mapping[str, Any]) -> DeviceCompiledModel:
        raise self._missing()


@hookimpl(trylast=True)
def ovnpu_register_devices(registry: DeviceRegistry) -> None:
    if "NPU" not in registry:  # trylast: the real emulated NPU, when present, registered first
        registry.add(NpuwPlaceholderDevice)


@hookimpl(tryfirst=True)
def ovnpu_compile_model(core: Core, model: ov.Model, device_name: str, config: Mapping[str, Any]) -> DeviceCompiledModel | None:
    """Claim "NPU" compilations with NPU_USE_NPUW=YES and NPUW_LLM=YES (what openvino.genai sets)."""
    if not is_npuw_llm_config(device_name, config):
        return None
    from ov_npu_emu_npuw.compiled_model import compile_llm

    return compile_llm(core, model, config)


@hookimpl(tryfirst=True)
def ovnpu_import_model(core: Core, blob: bytes, device_name: str, config: Mapping[str, Any]) -> DeviceCompiledModel | None:
    """Claim artefacts written by our ``export_model`` (they start with our magic bytes)."""
    from ov_npu_emu_npuw.serialize import MAGIC, import_llm

    if not blob.startswith(MAGIC):
        return None
    return import_llm(core, blob, config)
