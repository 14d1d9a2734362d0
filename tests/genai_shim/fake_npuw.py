"""A test double for the NPUW plugin: claims NPUW LLM compilations and runs them on CPU.

It implements only what the genai pipeline relies on — aligned MAX_PROMPT_LEN / MIN_RESPONSE_LEN
read back through get_property, the prompt and KV-capacity errors of the real NPUW, export and
import — so the NPU logic of genai_shim can be tested while the real plugin is being built.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import openvino as ov

from ov_npu_emu.errors import (
    BlobFormatError,
    ConfigError,
    KVCacheFullError,
    PluginError,
    PromptTooLongError,
)
from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.runtime.device import Device, DeviceCompiledModel, DeviceInferRequest, VariableState

MAGIC = b"FAKE-NPUW\x00"


def _align64(v: int) -> int:
    return (int(v) + 63) // 64 * 64


class FakeNpuDevice(Device):
    NAME = "NPU"
    FULL_DEVICE_NAME = "fake NPU (tests)"

    def compile_model(self, model: ov.Model, config: Mapping[str, Any]) -> DeviceCompiledModel:
        raise PluginError("fake NPU compiles only NPUW LLM configs")

    def import_model(self, blob: bytes, config: Mapping[str, Any]) -> DeviceCompiledModel:
        raise BlobFormatError("This blob wasn't serialized via NPUW!")


class FakeRequest(DeviceInferRequest):
    def __init__(self, owner: FakeLLM, inner: DeviceInferRequest) -> None:
        self.owner, self.inner, self.num_stored = owner, inner, 0
        self.names = {n: p.index for p in owner.inputs for n in p.names}

    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        return self.inner.get_tensor(index, is_input)

    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        self.inner.set_tensor(index, is_input, tensor)

    def infer(self) -> None:
        ids = self.inner.get_tensor(self.names["input_ids"], True).data
        pos = self.inner.get_tensor(self.names["position_ids"], True).data
        n = ids.shape[1]
        if n > 1 and int(pos[0, 0]) == 0:  # a new conversation: NPUW zeroes its KV
            if n > self.owner.max_prompt:
                raise PromptTooLongError(
                    f'Input prompt is longer than configured "NPUW_LLM_MAX_PROMPT_LEN": {self.owner.max_prompt}.\n'
                    'Please either setup bigger "NPUW_LLM_MAX_PROMPT_LEN" or shorten the prompt.'
                )
            self.num_stored = 0
            self.inner.reset_state()
        if self.num_stored + n > self.owner.capacity:
            raise KVCacheFullError(
                f"KV-Cache is full: num_stored_tokens={self.num_stored} capacity={self.owner.capacity}"
            )
        self.inner.infer()
        self.num_stored += n
        self.owner.infer_calls.append(n)

    def query_state(self) -> list[VariableState]:
        return []  # NPUW exposes no KV variables

    def reset_state(self) -> None:
        self.num_stored = 0
        self.inner.reset_state()


class FakeLLM(DeviceCompiledModel):
    def __init__(self, core: Any, cpu_model: DeviceCompiledModel, cfg: dict[str, Any]) -> None:
        self.core, self.cpu, self.cfg = core, cpu_model, cfg
        self.inputs, self.outputs = cpu_model.inputs, cpu_model.outputs
        self.max_prompt = _align64(cfg["NPUW_LLM_MAX_PROMPT_LEN"])
        self.min_response = _align64(cfg["NPUW_LLM_MIN_RESPONSE_LEN"])
        self.capacity = self.max_prompt + self.min_response - 1
        self.infer_calls: list[int] = []

    def create_infer_request(self) -> FakeRequest:
        return FakeRequest(self, self.cpu.create_infer_request())

    def get_property(self, name: str) -> Any:
        if name == "NPUW_LLM_MAX_PROMPT_LEN":
            return self.max_prompt
        if name == "NPUW_LLM_MIN_RESPONSE_LEN":
            return self.min_response
        if name in self.cfg:
            return self.cfg[name]
        raise ConfigError(f"Unsupported property {name}", key=name)

    def export_model(self) -> bytes:
        head = json.dumps(
            {k: v for k, v in self.cfg.items() if isinstance(v, (str, int, float, bool))}
        ).encode()
        return MAGIC + struct.pack("<I", len(head)) + head + self.cpu.export_model()


def _cpu_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if not k.startswith(("NPU", "++NPUW", "CACHE_DIR"))}


class FakeNpuwPlugin:
    """Register with ``pm.register(FakeNpuwPlugin(), name="fake_npuw")``; ``compiled`` lists results."""

    def __init__(self) -> None:
        self.compiled: list[FakeLLM] = []
        self.configs: list[dict[str, Any]] = []

    @hookimpl(trylast=True)
    def ovnpu_register_devices(self, registry: Any) -> None:
        if "NPU" not in registry:
            registry.add(FakeNpuDevice)

    @hookimpl
    def ovnpu_compile_model(
        self, core: Any, model: ov.Model, device_name: str, config: Mapping[str, Any]
    ) -> Any:
        if (
            device_name != "NPU"
            or config.get("NPU_USE_NPUW") != "YES"
            or config.get("NPUW_LLM") != "YES"
        ):
            return None
        self.configs.append(dict(config))
        cpu = core.compile_model(model, "CPU", _cpu_config(config)).impl
        out = FakeLLM(core, cpu, dict(config))
        self.compiled.append(out)
        return out

    @hookimpl
    def ovnpu_import_model(
        self, core: Any, blob: bytes, device_name: str, config: Mapping[str, Any]
    ) -> Any:
        if not blob.startswith(MAGIC):
            if device_name == "NPU":
                raise BlobFormatError("This blob wasn't serialized via NPUW!")
            return None
        (n,) = struct.unpack_from("<I", blob, len(MAGIC))
        cfg = json.loads(blob[len(MAGIC) + 4 : len(MAGIC) + 4 + n])
        cpu = core.import_model(blob[len(MAGIC) + 4 + n :], "CPU", _cpu_config(cfg)).impl
        out = FakeLLM(core, cpu, cfg)
        self.compiled.append(out)
        return out


def make_core_with_fake(plugin: FakeNpuwPlugin) -> Any:
    """A Core whose only plugins are the CPU passthrough and the fake NPUW."""
    import ov_npu_emu_cpu
    from ov_npu_emu import Core
    from ov_npu_emu.plugin_manager import get_plugin_manager

    pm = get_plugin_manager(load_entrypoints=False, builtins=False)
    pm.register(ov_npu_emu_cpu, name="cpu")
    pm.register(plugin, name="fake_npuw")
    return Core(plugin_manager=pm)


__all__ = ["FakeNpuwPlugin", "make_core_with_fake"]
