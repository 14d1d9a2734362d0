"""CompiledModel: openvino.CompiledModel's API over a device's DeviceCompiledModel."""

from __future__ import annotations

import io
from typing import Any

import openvino as ov

from ov_npu_emu.api.infer_request import InferRequest
from ov_npu_emu.api.ports import Port, ResultDict
from ov_npu_emu.api.properties import plain_properties, supported_properties
from ov_npu_emu.errors import UserInputError
from ov_npu_emu.runtime.device import DeviceCompiledModel, VariableState

__all__ = ["CompiledModel"]


class CompiledModel:
    """A model compiled for one device; same methods as ``openvino.CompiledModel``."""

    def __init__(self, impl: DeviceCompiledModel, device_name: str) -> None:
        self._impl = impl
        self._device = device_name
        self._inputs = [Port(p, True, self) for p in impl.inputs]
        self._outputs = [Port(p, False, self) for p in impl.outputs]
        self._request: InferRequest | None = None

    @property
    def inputs(self) -> list[Port]:
        return list(self._inputs)

    @property
    def outputs(self) -> list[Port]:
        return list(self._outputs)

    def input(self, key: int | str | None = None) -> Port:
        return InferRequest._single(self._inputs, key, "input")

    def output(self, key: int | str | None = None) -> Port:
        return InferRequest._single(self._outputs, key, "output")

    @property
    def device_name(self) -> str:
        return self._device

    def create_infer_request(self) -> InferRequest:
        return InferRequest(self._impl.create_infer_request(), self)

    def infer_new_request(self, inputs: Any = None) -> ResultDict:
        return self.create_infer_request().infer(inputs)

    def __call__(
        self, inputs: Any = None, share_inputs: bool = True, share_outputs: bool = False, **kw: Any
    ) -> ResultDict:
        """Infer on an internal request kept across calls (so state persists, as in openvino)."""
        if self._request is None:
            self._request = self.create_infer_request()
        return self._request.infer(inputs, share_inputs=share_inputs, share_outputs=share_outputs)

    @property
    def _infer_request(self) -> InferRequest | None:
        """The request ``__call__`` infers on (openvino's attribute of that name)."""
        return self._request

    def query_state(self) -> list[VariableState]:
        if self._request is None:
            self._request = self.create_infer_request()
        return self._request.query_state()

    def reset_state(self) -> None:
        if self._request is not None:
            self._request.reset_state()

    def export_model(self, model_stream: io.BytesIO | None = None) -> io.BytesIO | None:
        """Serialize; returns a BytesIO, or writes into ``model_stream`` when given (openvino API)."""
        data = self._impl.export_model()
        if model_stream is None:
            return io.BytesIO(data)
        if not hasattr(model_stream, "write"):
            raise UserInputError("export_model(model_stream) needs a writable binary stream")
        model_stream.write(data)
        return None

    def get_property(self, name: str) -> Any:
        if name == "EXECUTION_DEVICES":  # HETERO: the devices of its stages
            return list(getattr(self._impl, "execution_devices", [self._device]))
        if name == "LOADED_FROM_CACHE":
            return bool(getattr(self._impl, "loaded_from_cache", False))
        value = self._impl.get_property(name)
        if name == "SUPPORTED_PROPERTIES":  # a compiled model's properties read "RO", as openvino's
            return supported_properties(value, value)
        return value

    def set_property(self, properties: dict[str, Any]) -> None:
        self._impl.set_property(plain_properties(properties))

    def get_runtime_model(self) -> ov.Model | None:
        return self._impl.get_runtime_model()

    def release_memory(self) -> None:
        """No-op: buffers are freed when the requests go away."""

    @property
    def impl(self) -> DeviceCompiledModel:
        """The device-level compiled model (for tools and tests)."""
        return self._impl

    def __repr__(self) -> str:
        return f"<CompiledModel on {self._device}: inputs={self._inputs} outputs={self._outputs}>"
