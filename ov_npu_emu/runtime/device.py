"""The device contract: what a device plugin implements so that Core can drive it.

A device plugin registers a :class:`Device` subclass (see ``hookspecs.ovnpu_register_devices``).
``Device.compile_model`` / ``Device.import_model`` return a :class:`DeviceCompiledModel`, whose
``create_infer_request`` returns a :class:`DeviceInferRequest`.  The OpenVINO-compatible facade
in ``ov_npu_emu.api`` wraps these objects and does all argument handling (port lookup by name,
index or port object; numpy → tensor conversion; shape/type validation; async; result dicts), so a
device only deals with already-validated :class:`openvino.Tensor` objects bound to port indices.

Tensors are ``openvino.Tensor`` (reused, not re-invented): ``tensor.data`` is a numpy view.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime
import enum
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import openvino as ov

__all__ = [
    "WEIGHTS_PATH_RT_KEY",
    "Device",
    "DeviceCompiledModel",
    "DeviceInferRequest",
    "MergedConfig",
    "PortInfo",
    "ProfilingInfo",
    "VariableState",
    "ir_weights_path",
]

#: where ``Core.read_model`` records the IR's weights file (rt_info; the key the real runtime
#: uses too): a device's weightless export refers to it
WEIGHTS_PATH_RT_KEY = "__weights_path"


def ir_weights_path(model: ov.Model) -> str:
    """The ``.bin`` ``model`` was read from ("" when it was not read from an IR file)."""
    if model.has_rt_info(WEIGHTS_PATH_RT_KEY):
        return str(model.get_rt_info(WEIGHTS_PATH_RT_KEY).astype(str))
    return ""


@dataclasses.dataclass(frozen=True)
class PortInfo:
    """Static description of one model input or output."""

    index: int  # position in the model's inputs (or outputs)
    names: tuple[str, ...]  # tensor names; names[0] is the "any name"
    element_type: ov.Type  # e.g. ov.Type.f32
    partial_shape: ov.PartialShape  # may be dynamic for dynamic-shape devices (CPU, NPUW)

    @classmethod
    def from_ov_port(cls, index: int, port: Any) -> PortInfo:
        """Build from an ``openvino`` Output/ConstOutput (model.inputs[i] / model.outputs[i])."""
        names = tuple(sorted(port.get_names(), key=lambda n: (n != port.get_any_name(), n))) if port.get_names() else ()
        return cls(index, names, port.get_element_type(), ov.PartialShape(port.get_partial_shape()))

    @property
    def any_name(self) -> str:
        return self.names[0] if self.names else ""

    @property
    def is_static(self) -> bool:
        return self.partial_shape.is_static


class ProfilingStatus(str, enum.Enum):
    """``ProfilingInfo.Status``: openvino's names; a member equals its name as a string."""

    NOT_RUN = "NOT_RUN"
    OPTIMIZED_OUT = "OPTIMIZED_OUT"
    EXECUTED = "EXECUTED"

    def __str__(self) -> str:
        return f"Status.{self.value}"


@dataclasses.dataclass
class ProfilingInfo:
    """Per-node (or per-task) profiling record; same attribute names as ``openvino.ProfilingInfo``."""

    Status: ClassVar[type[ProfilingStatus]] = ProfilingStatus

    node_name: str
    node_type: str
    exec_type: str
    real_time: datetime.timedelta
    cpu_time: datetime.timedelta
    status: str = ProfilingStatus.EXECUTED  # EXECUTED / NOT_RUN / OPTIMIZED_OUT (== the plain strings)

    def __post_init__(self) -> None:
        self.status = ProfilingStatus(str(self.status).split(".")[-1])


class VariableState(abc.ABC):
    """A model variable (ReadValue/Assign) as seen by the user; openvino.VariableState semantics.

    ``state`` returns an ``ov.Tensor`` *copy-free view* of the current value where the device can
    provide one; setting ``state`` copies (or binds) the user tensor.  ``reset()`` returns the
    variable to its initial value (zeros for lifted KV caches).
    """

    @property
    @abc.abstractmethod
    def name(self) -> str: ...

    @property
    def state(self) -> ov.Tensor:
        return self.get_state()

    @state.setter
    def state(self, value: ov.Tensor) -> None:
        self.set_state(value)

    @abc.abstractmethod
    def get_state(self) -> ov.Tensor: ...

    @abc.abstractmethod
    def set_state(self, value: ov.Tensor) -> None: ...

    @abc.abstractmethod
    def reset(self) -> None: ...

    def get_name(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.name}>"


class DeviceInferRequest(abc.ABC):
    """One inference request on a device.

    The facade guarantees: ``index`` is valid, tensors set on static ports have the port's shape
    and element type, tensors on dynamic ports have a compatible shape.  ``infer`` reads the
    currently bound input tensors and leaves results in the output tensors, which
    ``get_tensor(index, is_input=False)`` returns afterwards (with their actual shapes).
    """

    @abc.abstractmethod
    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        """The tensor bound to input/output ``index`` (allocated by the device if never set)."""

    @abc.abstractmethod
    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        """Bind a user tensor to input/output ``index`` (zero-copy where the device can)."""

    @abc.abstractmethod
    def infer(self) -> None:
        """Run one synchronous inference."""

    def query_state(self) -> list[VariableState]:
        """Variables of a stateful model (empty for stateless models)."""
        return []

    def reset_state(self) -> None:
        for s in self.query_state():
            s.reset()

    def get_profiling_info(self) -> list[ProfilingInfo]:
        return []


class DeviceCompiledModel(abc.ABC):
    """A model compiled for (or imported onto) a device."""

    #: set by Core when the model came out of CACHE_DIR (``LOADED_FROM_CACHE``)
    loaded_from_cache: bool = False

    inputs: Sequence[PortInfo]
    outputs: Sequence[PortInfo]

    @abc.abstractmethod
    def create_infer_request(self) -> DeviceInferRequest: ...

    @abc.abstractmethod
    def export_model(self) -> bytes:
        """Serialize so that ``Device.import_model`` (in another process) restores it."""

    def get_property(self, name: str) -> Any:
        from ov_npu_emu.errors import ConfigError

        raise ConfigError(f"Unsupported property {name} by compiled model", key=name)

    def set_property(self, properties: Mapping[str, Any]) -> None:
        from ov_npu_emu.errors import ConfigError

        raise ConfigError(f"Compiled model does not support setting properties {sorted(properties)}")

    def get_runtime_model(self) -> ov.Model | None:
        return None


class MergedConfig(dict):
    """A compile call's config with its device's properties; ``explicit_keys`` are the ones the
    caller gave or set on the device (not its defaults), for a plugin that passes some of them on
    (NPUW hands the emulator's ``NPU_EMU_*`` keys to its sub-models' devices)."""

    explicit_keys: frozenset[str] = frozenset()


class Device(abc.ABC):
    """A device plugin: compiles models, imports blobs, owns device-level properties.

    Subclasses set ``NAME`` (OpenVINO-style, upper case, e.g. "NPU") and ``FULL_DEVICE_NAME``.
    One instance exists per Core (created lazily on first use).
    """

    NAME: ClassVar[str]
    FULL_DEVICE_NAME: ClassVar[str] = ""
    #: property name -> default value; also the answer to SUPPORTED_PROPERTIES
    DEFAULT_PROPERTIES: ClassVar[Mapping[str, Any]] = {}
    #: the device's own read-only properties (SUPPORTED_PROPERTIES marks them "RO"; OpenVINO's
    #: well-known metrics are "RO" anyway)
    READ_ONLY_PROPERTIES: ClassVar[frozenset[str]] = frozenset()
    #: True: Core keeps this device's compilations under ``CACHE_DIR`` (export on the first
    #: compile, import afterwards), as OpenVINO's core does; the device must export and import.
    #: False: ``CACHE_DIR`` is passed through to the device (which caches itself or rejects it).
    MODEL_CACHE: ClassVar[bool] = False

    def __init__(self) -> None:
        self._properties: dict[str, Any] = dict(self.DEFAULT_PROPERTIES)
        self._set_keys: set[str] = set()  # properties given through set_property (not defaults)

    # -- properties -----------------------------------------------------------------
    def get_property(self, name: str) -> Any:
        from ov_npu_emu.errors import ConfigError

        if name == "SUPPORTED_PROPERTIES":
            return sorted({*self._properties, "FULL_DEVICE_NAME", "SUPPORTED_PROPERTIES"})
        if name == "FULL_DEVICE_NAME":
            return self.FULL_DEVICE_NAME or self.NAME
        if name in self._properties:
            return self._properties[name]
        raise ConfigError(f"Unsupported property {name} by {self.NAME} device", key=name)

    def set_property(self, properties: Mapping[str, Any]) -> None:
        self._properties.update(properties)
        self._set_keys.update(properties)

    def merged_config(self, config: Mapping[str, Any] | None) -> MergedConfig:
        """Device-level properties overlaid with the per-call ``config``."""
        merged = MergedConfig(self._properties)
        merged.update(config or {})
        merged.explicit_keys = frozenset({*self._set_keys, *(config or {})})
        return merged

    # -- compile / import -----------------------------------------------------------
    @abc.abstractmethod
    def compile_model(self, model: ov.Model, config: Mapping[str, Any]) -> DeviceCompiledModel:
        """Compile ``model`` (an ``openvino.Model``, not modified) with the merged ``config``."""

    @abc.abstractmethod
    def import_model(self, blob: bytes, config: Mapping[str, Any]) -> DeviceCompiledModel:
        """Restore a model exported by ``DeviceCompiledModel.export_model`` (no recompilation)."""

    def query_model(self, model: ov.Model, config: Mapping[str, Any]) -> dict[str, str]:
        """Which ops of ``model`` this device runs: ``{op friendly name: NAME}``, as
        ``openvino.Core.query_model``.  The default compiles the model: every op when that succeeds
        (the compile error otherwise); a device that can answer per op overrides it."""
        self.compile_model(model, config)
        return {op.get_friendly_name(): self.NAME for op in model.get_ops()}

    def version(self) -> str:
        from ov_npu_emu.version import package_version

        return package_version()
