"""CPU passthrough device plugin: runs models on the real OpenVINO CPU plugin behind our API."""

from __future__ import annotations

import functools
import hashlib
import io
import struct
from collections.abc import Mapping
from typing import Any, ClassVar

import openvino as ov
from openvino._pyopenvino import InferRequest as _OvRequest

from ov_npu_emu.api.core import openvino_core
from ov_npu_emu.errors import BlobFormatError, ConfigError, ExecutionError, UserInputError
from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.registry import DeviceRegistry
from ov_npu_emu.runtime.device import (
    Device,
    DeviceCompiledModel,
    DeviceInferRequest,
    PortInfo,
    ProfilingInfo,
    VariableState,
)
from ov_npu_emu_cpu.bank import BankEntry, lift_weights
from ov_npu_emu_cpu.options import CPU_OPTIONS

__all__ = ["CpuDevice", "ovnpu_register_devices"]

#: our export envelope: magic | u64 payload length | SHA-256 of the payload | the CPU plugin's
#: export. A foreign, truncated or damaged blob is a typed error, never handed to openvino (whose
#: importer may accept a damaged stream and compute with it)
_MAGIC = b"OVNPUEMU-CPU\x00\x02"
_MAGIC_V1 = b"OVNPUEMU-CPU\x00\x01"
_ENVELOPE = struct.Struct("<Q32s")


def _seal(payload: bytes) -> bytes:
    return _MAGIC + _ENVELOPE.pack(len(payload), hashlib.sha256(payload).digest()) + payload


def _unseal(blob: bytes) -> bytes:
    if blob.startswith(_MAGIC_V1):
        raise BlobFormatError("CPU blob was exported by an older ov-npu-emu (no checksum); re-export it "
                              "with CompiledModel.export_model() on device CPU")
    if not blob.startswith(_MAGIC):
        raise BlobFormatError("not a CPU export of ov_npu_emu (bad magic); re-export it with "
                              "CompiledModel.export_model() on device CPU")
    head = len(_MAGIC) + _ENVELOPE.size
    if len(blob) < head:
        raise BlobFormatError("CPU blob is truncated (envelope incomplete); re-export it")
    size, digest = _ENVELOPE.unpack_from(blob, len(_MAGIC))
    if size != len(blob) - head:
        raise BlobFormatError(f"CPU blob is truncated or extended: the envelope says {size} bytes of export, "
                              f"the file has {len(blob) - head}; re-export it")
    payload = blob[head:]
    if hashlib.sha256(payload).digest() != digest:
        raise BlobFormatError("CPU blob is damaged (SHA-256 mismatch over the CPU plugin's export); re-export it")
    return payload


#: keys openvino's Core itself handles in a compile config (its model cache), not the CPU plugin
_CORE_KEYS = ("CACHE_DIR", "CACHE_MODE")


def _ov_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Keep what the real CPU plugin and openvino's Core understand (NPU/NPUW keys may be merged
    in upstream); CACHE_DIR goes through to openvino's own model cache."""
    supported = openvino_core().get_property("CPU", "SUPPORTED_PROPERTIES")  # name -> "RO"/"RW"/"WO"
    return {k: v for k, v in config.items() if supported.get(k) in ("RW", "WO") or (k in _CORE_KEYS and v)}


def _is_f32(precision: Any) -> bool:
    if isinstance(precision, ov.Type):
        return precision == ov.Type.f32
    return str(precision).strip().lower() in ("f32", "float32")


def _bank_name(config: Mapping[str, Any]) -> str:
    """The weights bank this compilation shares ("" = none): NPUW's ``NPUW_WEIGHTS_BANK`` names
    one per LLM (prefill, generate variants, ladder rungs, LM head), as for the emulated NPU;
    ``CPU_EMU_WEIGHTS_BANK=NO`` turns it off.  Only under an f32 inference precision (bank.py)."""
    bank = str(config.get("NPUW_WEIGHTS_BANK") or "")
    if not bank or not CPU_OPTIONS.get(config, "CPU_EMU_WEIGHTS_BANK"):
        return ""
    precision = config.get("INFERENCE_PRECISION_HINT")
    if precision is None:
        precision = openvino_core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    return bank if _is_f32(precision) else ""


def _refuse_npu_keys(properties: Mapping[str, Any]) -> None:
    """The emulated NPU's keys set on this device would be stored and never read: an error naming
    the CPU device's own key when there is one (``NPU_EMU_WEIGHTS_BANK`` -> ``CPU_EMU_WEIGHTS_BANK``).
    A compile config may carry them (NPUW passes them to every sub-model's device)."""
    for key in properties:
        if isinstance(key, str) and key.startswith("NPU_EMU_"):
            ours = "CPU_EMU_" + key.removeprefix("NPU_EMU_")
            hint = f"; the CPU device's key is {ours}" if ours in CPU_OPTIONS else ""
            raise ConfigError(f"{key} is a key of the emulated NPU, not of the CPU device{hint}", key=key)


class CpuVariableState(VariableState):
    def __init__(self, state: Any) -> None:
        self._s = state

    @property
    def name(self) -> str:
        return self._s.name

    def get_state(self) -> ov.Tensor:
        return self._s.state

    def set_state(self, value: ov.Tensor) -> None:
        if not isinstance(value, ov.Tensor):
            raise UserInputError(f"VariableState.state expects an openvino.Tensor, got {type(value).__name__}")
        try:
            self._s.state = value
        except RuntimeError as e:
            raise UserInputError(f"cannot set state {self.name!r}: {e}") from e

    def reset(self) -> None:
        self._s.reset()


#: graphs with at most this many runtime nodes, and single-threaded ones, run on the caller's
#: thread (see CpuInferRequest.infer)
_INLINE_MAX_NODES = 16


class CpuInferRequest(DeviceInferRequest):
    def __init__(self, req: ov.InferRequest, inline: bool = False, bank: list[BankEntry] | None = None,
                 first_bank_input: int = 0) -> None:
        self._req = req
        # bound once: the lifted weights are inputs nobody else sets (see bank.py)
        for i, entry in enumerate(bank or ()):
            req.set_input_tensor(first_bank_input + i, entry.tensor)
        self._states: list[VariableState] | None = None
        # Bound once: the base class's methods skip openvino's Python argument dispatch.
        self._start = functools.partial(_OvRequest.start_async, req, {}, None)
        self._wait = functools.partial(_OvRequest.wait, req)
        self._inline = inline

    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        return self._req.get_input_tensor(index) if is_input else self._req.get_output_tensor(index)

    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        try:
            if is_input:
                self._req.set_input_tensor(index, tensor)
            else:
                self._req.set_output_tensor(index, tensor)
        except RuntimeError as e:
            raise UserInputError(str(e)) from e

    def infer(self) -> None:
        # start_async + wait instead of infer(): the same computation, but the CPU plugin runs it
        # on its own (pinned) stream thread rather than the caller's, which is faster per call on
        # small decode models (docs/performance_log.md, "Figures that code comments used to
        # quote"); and openvino's Python infer() also copies every
        # output into a fresh numpy dict that nobody reads.  A graph of a few nodes (an LM head)
        # has nothing to parallelise, so the thread hand-off would cost more than it runs: inline;
        # likewise a single-threaded graph (INFERENCE_NUM_THREADS=1).
        try:
            if self._inline:
                _OvRequest.infer(self._req, {}, True, True)
            else:
                self._start()
                self._wait()
        except RuntimeError as e:
            raise ExecutionError(f"CPU inference failed: {e}") from e

    def query_state(self) -> list[VariableState]:
        if self._states is None:
            self._states = [CpuVariableState(s) for s in self._req.query_state()]
        return list(self._states)

    def reset_state(self) -> None:
        self._req.reset_state()

    def get_profiling_info(self) -> list[ProfilingInfo]:
        return [
            ProfilingInfo(p.node_name, p.node_type, p.exec_type, p.real_time, p.cpu_time, str(p.status).split(".")[-1])
            for p in self._req.get_profiling_info()
        ]


class CpuCompiledModel(DeviceCompiledModel):
    def __init__(
        self,
        compiled: ov.CompiledModel,
        bank: list[BankEntry] | None = None,
        source: tuple[ov.Model, dict[str, Any]] | None = None,
    ) -> None:
        self._cm = compiled
        self._inline: bool | None = None  # decided at the first request (reads the runtime graph)
        #: the weights this model reads from the bank, bound to its last len(bank) inputs
        self.bank = list(bank or ())
        # the unbanked model and its config, compiled again by export_model (a banked
        # compilation has no weights of its own to export)
        self._source = source
        own = len(compiled.inputs) - len(self.bank)
        self.inputs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(compiled.inputs[:own])]
        self.outputs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(compiled.outputs)]

    def create_infer_request(self) -> CpuInferRequest:
        if self._inline is None:
            try:
                self._inline = (
                    len(self._cm.get_runtime_model().get_ops()) <= _INLINE_MAX_NODES
                    # one thread: nothing for the stream thread to parallelise, and the hand-off
                    # is a sizeable share of a small model's decode step
                    or int(self._cm.get_property("INFERENCE_NUM_THREADS")) == 1
                )
            except RuntimeError:  # no runtime graph to inspect: the general (async) path
                self._inline = False
        return CpuInferRequest(self._cm.create_infer_request(), self._inline, self.bank, len(self.inputs))

    @property
    def loaded_from_cache(self) -> bool:  # type: ignore[override]
        """openvino's own answer (its CACHE_DIR model cache)."""
        try:
            return bool(self._cm.get_property("LOADED_FROM_CACHE"))
        except RuntimeError:
            return False

    def export_model(self) -> bytes:
        compiled = self._cm
        if self._source is not None:
            # the artefact must hold its weights: compile the unbanked model for it (a transient
            # private copy of the weights, freed when the export is written)
            model, config = self._source
            compiled = openvino_core().compile_model(model, "CPU", config)
        return _seal(compiled.export_model().getvalue())

    def get_property(self, name: str) -> Any:
        try:
            return self._cm.get_property(name)
        except RuntimeError as e:
            raise ConfigError(f"Unsupported property {name} by CPU compiled model", key=name) from e

    def get_runtime_model(self) -> ov.Model:
        return self._cm.get_runtime_model()


class CpuDevice(Device):
    """Device "CPU": the real OpenVINO CPU plugin (dynamic shapes, stateful models, export)."""

    NAME = "CPU"
    FULL_DEVICE_NAME = "OpenVINO CPU plugin (passthrough)"  # where the real CPU plugin gives none

    #: our own keys (options.py); every other name is the real CPU plugin's
    DEFAULT_PROPERTIES: ClassVar[Mapping[str, Any]] = CPU_OPTIONS.defaults()

    def set_property(self, properties: Mapping[str, Any]) -> None:
        _refuse_npu_keys(properties)
        CPU_OPTIONS.parse(properties)  # a bad value or a misspelt CPU_EMU_* key fails here, not at the next compile
        super().set_property(properties)

    def get_property(self, name: str) -> Any:
        if name == "SUPPORTED_PROPERTIES":  # the real CPU plugin's keys in its order (it answers
            # them, FULL_DEVICE_NAME included: the passthrough is that plugin), then ours
            real = dict(openvino_core().get_property("CPU", name))  # name -> "RO"/"RW"/"WO"
            fixed = ("SUPPORTED_PROPERTIES", "FULL_DEVICE_NAME")
            ours = {k: "RO" if k in fixed else "RW" for k in super().get_property(name)}
            return {**real, **{k: v for k, v in ours.items() if k not in real}}
        if name in self._properties:
            return super().get_property(name)
        try:
            return openvino_core().get_property("CPU", name)
        except RuntimeError as e:  # the real's own words (its last line: "Cannot get unsupported property: X")
            raise ConfigError(str(e).strip().splitlines()[-1], key=name) from e

    def compile_model(self, model: ov.Model, config: Mapping[str, Any]) -> CpuCompiledModel:
        CPU_OPTIONS.parse(config)
        ov_config = _ov_config(config)
        bank = _bank_name(config)
        try:
            if bank:
                lifted, entries = lift_weights(model, bank)
                if entries:
                    compiled = openvino_core().compile_model(lifted, "CPU", ov_config)
                    return CpuCompiledModel(compiled, entries, (model, ov_config))
            return CpuCompiledModel(openvino_core().compile_model(model, "CPU", ov_config))
        except RuntimeError as e:
            raise ExecutionError(f"CPU plugin could not compile {model.get_friendly_name()!r}: {e}") from e

    def import_model(self, blob: bytes, config: Mapping[str, Any]) -> CpuCompiledModel:
        payload = _unseal(blob)
        try:
            return CpuCompiledModel(openvino_core().import_model(io.BytesIO(payload), "CPU", _ov_config(config)))
        except RuntimeError as e:
            raise BlobFormatError(
                f"CPU blob could not be imported (corrupt or from another OpenVINO version): {e}"
            ) from e

    def query_model(self, model: ov.Model, config: Mapping[str, Any]) -> dict[str, str]:
        """The real CPU plugin's own answer."""
        try:
            return dict(openvino_core().query_model(model, "CPU", _ov_config(config)))
        except RuntimeError as e:
            raise ExecutionError(f"CPU plugin could not query {model.get_friendly_name()!r}: {e}") from e


@hookimpl
def ovnpu_register_devices(registry: DeviceRegistry) -> None:
    registry.add(CpuDevice)
