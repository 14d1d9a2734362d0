"""The OpenVINO-compatible API surface (Core, CompiledModel, InferRequest, ports)."""

from __future__ import annotations

from ov_npu_emu.api.async_queue import AsyncInferQueue
from ov_npu_emu.api.compiled_model import CompiledModel
from ov_npu_emu.api.core import Core, Version
from ov_npu_emu.api.infer_request import InferRequest
from ov_npu_emu.api.ports import Port, ResultDict

__all__ = [
    "AsyncInferQueue",
    "CompiledModel",
    "Core",
    "InferRequest",
    "Port",
    "ResultDict",
    "Version",
]
