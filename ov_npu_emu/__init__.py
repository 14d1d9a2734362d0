"""ov_npu_emu: an OpenVINO-compatible runtime that emulates Intel's NPU LLM stack.

``import ov_npu_emu as ov`` gives the names of ``openvino`` that matter for inference; models,
tensors and types are openvino's own objects (re-exported, not re-invented).
"""

from __future__ import annotations

from typing import Any

from openvino import Model, PartialShape, Shape, Tensor, Type

from ov_npu_emu.api import CompiledModel, Core, InferRequest, Port, ResultDict, Version
from ov_npu_emu.errors import NpuEmuError
from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.runtime.device import ProfilingInfo, VariableState

__all__ = [
    "CompiledModel",
    "Core",
    "InferRequest",
    "Model",
    "NpuEmuError",
    "PartialShape",
    "Port",
    "ProfilingInfo",
    "ResultDict",
    "Shape",
    "Tensor",
    "Type",
    "VariableState",
    "Version",
    "compile_model",
    "hookimpl",
]


def compile_model(model: Any, device_name: str | None = None, config: dict[str, Any] | None = None) -> CompiledModel:
    """Shortcut like ``openvino.compile_model``: a fresh Core, then ``compile_model``."""
    return Core().compile_model(model, device_name, config)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from ov_npu_emu.version import package_version

        return package_version()
    raise AttributeError(f"module 'ov_npu_emu' has no attribute {name!r}")
