"""Port objects (like openvino.ConstOutput) and the result dict (like openvino OVDict)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UserInputError, UserTypeError
from ov_npu_emu.runtime.device import PortInfo

__all__ = ["ConstOutput", "Port", "ResultDict", "resolve_port", "numpy_dtype"]

#: openvino.ConstOutput's docstring, which code (and openvino's own tests) read
_CONST_OUTPUT_DOC = "openvino.ConstOutput represents port/node output."


def numpy_dtype(t: ov.Type) -> np.dtype:
    """numpy dtype for an OpenVINO element type (sub-byte types map to their container)."""
    try:
        return np.dtype(t.to_dtype())
    except Exception as e:  # string / dynamic types
        raise UserInputError(f"element type {t} has no numpy equivalent") from e


class Port:
    __doc__ = _CONST_OUTPUT_DOC  # an input or output of a compiled model: openvino.ConstOutput's accessors

    __slots__ = ("_info", "_is_input", "_node", "_owner")

    def __init__(self, info: PortInfo, is_input: bool, owner: object) -> None:
        self._info = info
        self._is_input = is_input
        self._owner = owner
        self._node: ov.Node | None = None

    def get_node(self) -> ov.Node:
        """A node standing for the port, made once per port: a Parameter (an input) or a Result
        (an output) of the port's type and shape, named by its tensor name.  The compiled model
        keeps no openvino graph (a blob holds none), so it is not the model's own node; setting
        its friendly name changes nothing else, as on a compiled model of the real openvino."""
        if self._node is None:
            import openvino.opset13 as ops

            name = self._info.any_name or f"{'input' if self._is_input else 'output'}_{self.index}"
            param = ops.parameter(self._info.partial_shape, self._info.element_type, name=name)
            param.output(0).get_tensor().set_names(set(self._info.names))
            self._node = param if self._is_input else ops.result(param, name=name)
        return self._node

    @property
    def node(self) -> ov.Node:
        return self.get_node()

    # openvino.ConstOutput API ---------------------------------------------------------
    def get_any_name(self) -> str:
        if not self._info.names:
            raise UserInputError(f"{'input' if self._is_input else 'output'} {self.index} has no tensor names")
        return self._info.any_name

    @property
    def any_name(self) -> str:
        return self.get_any_name()

    def get_names(self) -> set[str]:
        return set(self._info.names)

    @property
    def names(self) -> set[str]:
        return self.get_names()

    def get_index(self) -> int:
        return self._info.index

    @property
    def index(self) -> int:
        return self._info.index

    def get_element_type(self) -> ov.Type:
        return self._info.element_type

    @property
    def element_type(self) -> ov.Type:
        return self._info.element_type

    def get_partial_shape(self) -> ov.PartialShape:
        return self._info.partial_shape

    @property
    def partial_shape(self) -> ov.PartialShape:
        return self._info.partial_shape

    def get_shape(self) -> ov.Shape:
        if self._info.partial_shape.is_dynamic:
            raise UserInputError(
                f"Port {self._info.any_name!r} has dynamic shape {self._info.partial_shape}; "
                "use partial_shape or get_partial_shape()"
            )
        return self._info.partial_shape.to_shape()

    @property
    def shape(self) -> ov.Shape:
        return self.get_shape()

    # plumbing --------------------------------------------------------------------------
    @property
    def info(self) -> PortInfo:
        return self._info

    @property
    def is_input(self) -> bool:
        return self._is_input

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Port)
            and other._owner is self._owner
            and other._is_input == self._is_input
            and other.index == self.index
        )

    def __hash__(self) -> int:
        return hash((id(self._owner), self._is_input, self.index))

    def __repr__(self) -> str:
        names = ", ".join(self._info.names)
        return f"<Port: names[{names}] shape{self._info.partial_shape} type: {self._info.element_type.get_type_name()}>"


class _ConstOutputType(type):
    """``isinstance(x, ConstOutput)`` holds for our ports and for openvino's own ConstOutput
    objects (the ports of a model compiled by the real openvino)."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, (Port, ov.ConstOutput))

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, (Port, ov.ConstOutput))


class ConstOutput(metaclass=_ConstOutputType):
    """``ov_npu_emu.ConstOutput``: what a compiled model's ports are, for ``isinstance`` (ours are
    :class:`Port`); a port is had from a compiled model, not made."""

    __doc__ = _CONST_OUTPUT_DOC

    def __new__(cls, *args: Any, **kwargs: Any) -> ConstOutput:
        raise UserInputError("a ConstOutput is a port of a compiled model: use compiled_model.input(...) / "
                             "output(...), inputs or outputs")


def resolve_port(key: Any, ports: list[Port], what: str) -> Port:
    """Find a port by Port, openvino port, tensor name or index; a typed error otherwise."""
    if isinstance(key, Port):
        for p in ports:
            if p == key or (p.info == key.info and p.is_input == key.is_input):
                return p
        key = key.info.any_name
    elif not isinstance(key, (str, int, np.integer)) and hasattr(key, "get_names"):
        names = set(key.get_names())  # an openvino Output / ConstOutput
        for p in ports:
            if names & p.get_names():
                return p
        raise UserInputError(f"{what} port {key} is not a port of this model")
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if 0 <= int(key) < len(ports):
            return ports[int(key)]
        raise UserInputError(f"{what} index {key} is out of range: the model has {len(ports)} {what}s")
    if isinstance(key, str):
        for p in ports:
            if key in p.info.names:
                return p
        known = sorted(n for p in ports for n in p.info.names)
        raise UserInputError(f"Port for tensor name {key} was not found. Check the tensor names of the model's "
                             f"{what}s: {known}")
    raise UserTypeError(f"Incompatible key type for {what}: {key!r}; select it by tensor name, index or port")


class ResultDict(Mapping[Port, np.ndarray]):
    """Inference results keyed by output port; also indexable by name and index (openvino OVDict)."""

    def __init__(
        self, ports: list[Port], values: list[np.ndarray], lookup: dict[Any, int] | None = None
    ) -> None:
        self._ports = ports
        self._values = values
        # name/index → position, shared by the results of one request (filled on first use)
        self._lookup = {} if lookup is None else lookup

    def __getitem__(self, key: Any) -> np.ndarray:
        hashable = isinstance(key, (str, int)) and not isinstance(key, bool)
        if hashable:
            i = self._lookup.get(key)
            if i is not None:
                return self._values[i]
        i = resolve_port(key, self._ports, "output").index
        if hashable:
            self._lookup[key] = i
        return self._values[i]

    def __iter__(self) -> Iterator[Port]:
        return iter(self._ports)

    def __len__(self) -> int:
        return len(self._ports)

    def __repr__(self) -> str:
        return repr(dict(zip(self._ports, self._values, strict=False)))

    def names(self) -> tuple[set[str], ...]:
        return tuple(p.get_names() for p in self._ports)

    def to_dict(self) -> dict[Port, np.ndarray]:
        return dict(zip(self._ports, self._values, strict=False))

    def to_tuple(self) -> tuple[np.ndarray, ...]:
        return tuple(self._values)
