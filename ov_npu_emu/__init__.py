"""ov_npu_emu: an OpenVINO-compatible runtime that emulates Intel's NPU LLM stack.

``import ov_npu_emu as ov`` stands in for ``import openvino as ov``.  What runs a model on a
device is ours (``Core``, ``CompiledModel``, ``InferRequest``, ``AsyncInferQueue``,
``VariableState``, ``ProfilingInfo``, ``compile_model``); everything device-independent is
openvino's own object, lent (not re-invented): ``Model``, ``Tensor``, ``Type``, ``Layout``,
``PartialShape``, ``Dimension``, ``Node``, the opsets, ``preprocess``, ``properties``, ``utils``,
``save_model``, ``convert_model`` ...  Their submodules import through this package too
(``from ov_npu_emu.preprocess import PrePostProcessor``, ``import ov_npu_emu.properties.hint``).
docs/conformance.md lists every public name of openvino and where it comes from.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

from openvino import (
    AxisSet,
    AxisVector,
    Coordinate,
    CoordinateDiff,
    Dimension,
    DiscreteTypeInfo,
    Extension,
    Input,
    Layout,
    Model,
    Node,
    Op,
    OpExtension,
    Output,
    OVAny,
    PartialShape,
    RemoteContext,
    RemoteTensor,
    RTMap,
    Shape,
    Strides,
    Symbol,
    Tensor,
    TensorVector,
    Type,
    VAContext,
    VASurfaceTensor,
    convert_model,
    get_batch,
    get_version,
    save_model,
    serialize,
    set_batch,
    shutdown,
    tensor_from_file,
)

from ov_npu_emu.api import AsyncInferQueue, CompiledModel, Core, InferRequest, Port, ResultDict, Version
from ov_npu_emu.api.ports import ConstOutput
from ov_npu_emu.errors import NpuEmuError
from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.runtime.device import ProfilingInfo, VariableState

#: openvino's public submodules, lent as they are: ``ov_npu_emu.<name>[.<sub>]`` is
#: ``openvino.<name>[.<sub>]`` (so is any other openvino submodule this package does not have)
LENT_MODULES = frozenset({
    "exceptions", "experimental", "frontend", "helpers", "layout_helpers", "op", "package_utils",
    "preprocess", "properties", "tools", "utils", *(f"opset{i}" for i in range(1, 18)),
})

__all__ = [
    "AsyncInferQueue", "AxisSet", "AxisVector", "CompiledModel", "ConstOutput", "Coordinate",
    "CoordinateDiff", "Core", "Dimension", "DiscreteTypeInfo", "Extension", "InferRequest", "Input",
    "Layout", "Model", "Node", "NpuEmuError", "OVAny", "Op", "OpExtension", "Output", "PartialShape",
    "Port", "ProfilingInfo", "RTMap", "RemoteContext", "RemoteTensor", "ResultDict", "Shape",
    "Strides", "Symbol", "Tensor", "TensorVector", "Type", "VAContext", "VASurfaceTensor",
    "VariableState", "Version", "compile_model", "convert_model", "get_batch", "get_version",
    "hookimpl", "save_model", "serialize", "set_batch", "shutdown", "tensor_from_file",
    *sorted(LENT_MODULES),
]


def compile_model(model: Any, device_name: str | None = None, config: dict[str, Any] | None = None) -> CompiledModel:
    """Shortcut like ``openvino.compile_model``: a fresh Core, then ``compile_model``."""
    return Core().compile_model(model, device_name, config)


class _LentModuleLoader(importlib.abc.Loader):
    """Hands out openvino's module object itself, so both names are one module."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self._module

    def exec_module(self, module: types.ModuleType) -> None:
        """Already executed, as openvino's."""


def _openvino_module(path: list[str]) -> types.ModuleType | None:
    """``openvino.<path>``: an importable submodule, or one that is an attribute (pybind's
    ``layout_helpers`` lives in ``openvino._pyopenvino``)."""
    import openvino

    module: Any = openvino
    for part in path:
        try:
            module = importlib.import_module(f"{module.__name__}.{part}")
        except ModuleNotFoundError:
            module = getattr(module, part, None)
        if not isinstance(module, types.ModuleType):
            return None
    return module


class _LentModuleFinder(importlib.abc.MetaPathFinder):
    """``import ov_npu_emu.<name>[.<sub>]`` resolves to ``openvino.<name>[.<sub>]`` when this
    package has no module of that name (the finder comes last in ``sys.meta_path``)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != __name__:
            return None
        module = _openvino_module(parts[1:])
        if module is None:
            return None
        loader = _LentModuleLoader(module)
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=hasattr(module, "__path__"))


if not any(isinstance(f, _LentModuleFinder) for f in sys.meta_path):
    sys.meta_path.append(_LentModuleFinder())


def __getattr__(name: str) -> Any:
    import openvino

    if name == "__version__":
        from ov_npu_emu.version import package_version

        return package_version()
    # private names are not lent, but for the pybind module code names in annotations
    # (``openvino._pyopenvino.Model``, as openvino's own tests' helpers do)
    value = getattr(openvino, name, None) if not name.startswith("_") or name == "_pyopenvino" else None
    if isinstance(value, types.ModuleType):
        return importlib.import_module(f"{__name__}.{name}")
    if value is not None:
        return value
    raise AttributeError(f"module 'ov_npu_emu' has no attribute {name!r}")

