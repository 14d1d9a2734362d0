"""Property values as users pass them, made plain at the API boundary.

OpenVINO users write properties with openvino's own objects: ``{hints.inference_precision:
ov.Type.f32, hints.performance_mode: hints.PerformanceMode.LATENCY, props.cache_mode:
props.CacheMode.OPTIMIZE_SIZE}``.  The real runtime accepts them wherever it accepts the strings;
here :func:`plain_properties` turns them into the strings (``"f32"``, ``"LATENCY"``,
``"OPTIMIZE_SIZE"``) once, in ``Core`` and ``CompiledModel``, so no plugin below has to know the
objects and nothing downstream (a config kept in an exported blob, a cache key) holds one that
cannot be serialised.  Values that are objects on purpose (``MODEL_PTR``'s model, a tensor) stay.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import openvino as ov

from ov_npu_emu.errors import UserInputError

__all__ = ["READ_ONLY_PROPERTIES", "plain_key", "plain_properties", "plain_value", "supported_properties"]


def plain_key(key: Any) -> str:
    """A property name: a str (openvino's ``props.*`` names are str subclasses), or a typed error."""
    if isinstance(key, str):
        return str(key)  # drops the subclass: a plain, picklable name
    raise UserInputError(
        f"property names are strings (or openvino.properties names such as hints.inference_precision), "
        f"got {type(key).__name__} {key!r}"
    )


def _is_openvino_enum(value: Any) -> bool:
    """A pybind11 enum from openvino (PerformanceMode, CacheMode, Affinity, ...)."""
    cls = type(value)
    return cls.__module__.startswith("openvino") and hasattr(cls, "__members__") and hasattr(value, "name")


_STREAMS_NUM: Any = ov.properties.streams.Num


def plain_value(value: Any) -> Any:
    """``ov.Type`` -> its short name (``"f16"``), an enum -> its name, ``OVAny`` -> what it holds,
    ``streams.Num`` -> its integer, mappings and lists element-wise."""
    if isinstance(value, ov.OVAny):  # the value of a props.*(value) pair
        value = value.value
    if isinstance(value, _STREAMS_NUM):
        return value.to_integer()
    if isinstance(value, ov.Type):
        return value.get_type_name()
    if isinstance(value, enum.Enum) or _is_openvino_enum(value):
        return str(value.name)
    if isinstance(value, Mapping):
        return plain_properties(value)
    if isinstance(value, (list, tuple)):
        return type(value)(plain_value(v) for v in value)
    return value


def plain_properties(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``config`` with plain names and values (see the module docstring)."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise UserInputError(f"properties must be a dict, got {type(config).__name__}")
    return {plain_key(k): plain_value(v) for k, v in config.items()}


#: OpenVINO's read-only device properties (metrics): SUPPORTED_PROPERTIES lists them as "RO"
READ_ONLY_PROPERTIES = frozenset({
    "SUPPORTED_PROPERTIES", "AVAILABLE_DEVICES", "FULL_DEVICE_NAME", "OPTIMIZATION_CAPABILITIES",
    "RANGE_FOR_ASYNC_INFER_REQUESTS", "RANGE_FOR_STREAMS", "DEVICE_TYPE", "DEVICE_ARCHITECTURE",
    "DEVICE_UUID", "DEVICE_LUID", "DEVICE_GOPS", "DEVICE_THERMAL", "DEVICE_PCI_INFO", "CACHING_PROPERTIES",
    "EXECUTION_DEVICES", "LOADED_FROM_CACHE", "NETWORK_NAME", "MODEL_NAME", "OPTIMAL_NUMBER_OF_INFER_REQUESTS",
    "OPTIMAL_BATCH_SIZE", "MAX_BATCH_SIZE", "COMPATIBILITY_CHECK", "NPU_DEVICE_ALLOC_MEM_SIZE",
    "NPU_DEVICE_TOTAL_MEM_SIZE", "NPU_DRIVER_VERSION", "NPU_COMPILER_VERSION",
})


def supported_properties(listed: Iterable[str] | Mapping[str, str], read_only: Iterable[str] = ()) -> dict[str, str]:
    """SUPPORTED_PROPERTIES as openvino's Python API answers it: name -> "RO" / "RW" (a device
    may list bare names; those in ``read_only`` or :data:`READ_ONLY_PROPERTIES` read "RO")."""
    if isinstance(listed, Mapping):
        return {str(k): str(v) for k, v in listed.items()}
    ro = READ_ONLY_PROPERTIES | frozenset(read_only)
    return {name: "RO" if name in ro else "RW" for name in listed}
