"""LoRA adapters: ``Adapter`` (a PEFT-style safetensors file) and ``AdapterConfig`` (which adapters,
with which alphas, in which mode) — openvino.genai's names, overloads and error texts.

How the adapters get into a model (variables or constants, blending, per-call switching) lives in
:mod:`genai_shim.lora_controller`; this module only parses and holds them.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.enums import BindingEnum
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["Adapter", "AdapterConfig", "LoRATensors", "read_safetensors"]

#: the real's default_lora_patterns(): what a tensor name must look like to be A, B or alpha; the
#: captured prefix names the model layer (matched against MatMul node names later)
_ALPHA = re.compile(r"(.*)\.alpha")
_A = re.compile(r"((.*)[_.](lora[_.](A|down)\.weight))|((.*lora[12])\.(down\.weight))")
_B = re.compile(r"((.*)[_.](lora[_.](B|up)\.weight))|((.*lora[12])\.(up\.weight))")
#: the real's default_lora_constant_patterns(): whole replacement weights, not low-rank factors
_CONSTANT = re.compile(r"(.*)\.(lm_head|embed_tokens)\.weight")

#: safetensors dtypes the real accepts (safetensors_to_ov_element_type); everything else is refused
_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


def _layer(pattern: re.Pattern[str], name: str, groups: tuple[int, ...]) -> str | None:
    m = pattern.fullmatch(name)
    if m is None:
        return None
    for g in groups:
        if m.group(g) is not None:
            return m.group(g)
    return None


#: the real's text when the bytes are not a safetensors file
_NOT_SAFETENSORS = "Cannot parse safetensor as a Safetensors file format. Safetensors file format is supported only"


def read_safetensors(data: bytes | memoryview, origin: str) -> dict[str, np.ndarray]:
    """The documented format: u64 little-endian header size, a JSON header of
    ``name -> {dtype, shape, data_offsets}`` (plus an optional ``__metadata__``), then the data.
    Tensors come back as float32 arrays (bf16/f16 widened: LoRA math runs in f32 here)."""
    buf = memoryview(data).cast("B")
    if len(buf) < 8:
        raise UserInputError(f"{_NOT_SAFETENSORS} ({origin}: shorter than its 8-byte header size)")
    (hsize,) = struct.unpack("<Q", buf[:8])
    if 8 + hsize > len(buf):
        raise UserInputError(f"{_NOT_SAFETENSORS} ({origin}: header size {hsize} past the end)")
    try:
        header = json.loads(bytes(buf[8 : 8 + hsize]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserInputError(f"{_NOT_SAFETENSORS} ({origin}: header is not JSON: {e})") from e
    if not isinstance(header, dict):
        raise UserInputError(f"{_NOT_SAFETENSORS} ({origin}: header is not a JSON object)")
    body = buf[8 + hsize :]
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], [int(d) for d in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise UserInputError(f"{origin}: tensor {name!r} has a malformed header entry: {info!r}") from e
        if dtype not in _DTYPES:
            raise UserInputError(
                f"Not supported safetensors dtype: {dtype} (tensor {name!r} in {origin}); use F32, F16 or BF16"
            )
        np_type = _DTYPES[dtype]
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(body) or end - begin != count * np_type.itemsize:
            raise UserInputError(f"{origin}: tensor {name!r} data_offsets {[begin, end]} do not fit its shape {shape}")
        raw = np.frombuffer(body[begin:end], dtype=np_type).reshape(shape)
        if dtype == "BF16":  # bf16 is the upper half of an f32
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = np.ascontiguousarray(raw, dtype=np.float32)
    return out


class LoRATensors:
    """One layer's factors: A [rank, in], B [out, rank] (alpha from the file is kept, unused: the
    real uses only the alpha of the AdapterConfig)."""

    __slots__ = ("A", "B", "alpha")

    def __init__(self) -> None:
        self.A: np.ndarray | None = None
        self.B: np.ndarray | None = None
        self.alpha: np.ndarray | None = None

    @property
    def rank(self) -> int:
        assert self.A is not None
        return int(self.A.shape[0])


def _as_2d(name: str, a: np.ndarray, what: str) -> np.ndarray:
    # a pointwise (1x1) convolution's factors carry trailing 1s; anything wider is not a MatMul's
    if a.ndim > 2 and any(d > 1 for d in a.shape[2:]):
        raise UserInputError(
            f"LoRA adapter with not pointwise Convolutional kernel is not supported ({what} of {name})"
        )
    return a.reshape(a.shape[0], -1) if a.ndim != 2 else a


def _group(tensors: dict[str, np.ndarray], origin: str) -> tuple[dict[str, LoRATensors], dict[str, np.ndarray]]:
    layers: dict[str, LoRATensors] = {}
    constants: dict[str, np.ndarray] = {}
    for name in sorted(tensors):  # the real keeps them in a std::map: name order
        t = tensors[name]
        if _CONSTANT.fullmatch(name):
            constants[name] = t
        elif (layer := _layer(_A, name, (2, 6))) is not None:
            layers.setdefault(layer, LoRATensors()).A = _as_2d(layer, t, "A")
        elif (layer := _layer(_B, name, (2, 6))) is not None:
            layers.setdefault(layer, LoRATensors()).B = _as_2d(layer, t, "B")
        elif (layer := _layer(_ALPHA, name, (1,))) is not None:
            layers.setdefault(layer, LoRATensors()).alpha = t
    for layer, parts in layers.items():
        if parts.A is None or parts.B is None:
            raise UserInputError(
                f"Either A, B or both matrices are missing in LoRA tensors for layer: {layer} "
                f"(in {origin}); a PEFT adapter names them <layer>.lora_A.weight / <layer>.lora_B.weight"
            )
        if parts.B.shape[1] != parts.A.shape[0]:
            raise UserInputError(
                f"LoRA tensors for layer {layer} (in {origin}) disagree on the rank: A is "
                f"{list(parts.A.shape)}, B is {list(parts.B.shape)}"
            )
    return layers, constants


class Adapter:
    """Immutable LoRA Adapter that carries the adaptation matrices and serves as unique adapter
    identifier.  ``Adapter(path)`` reads a ``.safetensors`` file, ``Adapter(safetensor)`` an
    ``openvino.Tensor`` holding one; ``Adapter()`` is the empty (falsy) adapter."""

    def __init__(self, path: Any = None, *, safetensor: ov.Tensor | None = None) -> None:
        if safetensor is not None or isinstance(path, ov.Tensor):
            tensor = safetensor if safetensor is not None else path
            raw = np.ascontiguousarray(np.asarray(tensor.data)).reshape(-1).view(np.uint8)
            self._layers, self._constants = _group(read_safetensors(raw.tobytes(), "safetensor"), "safetensor")
            self._constants = {}  # the real's Tensor constructor groups A/B/alpha only
            self._source: str | None = "safetensor"
            return
        self._source = None
        if path is None:
            self._layers, self._constants = {}, {}
            return
        if not isinstance(path, (str, os.PathLike)):
            raise UserInputError(
                f"Adapter(path) takes a path to a .safetensors file (str or os.PathLike) or an "
                f"openvino.Tensor with its bytes, got {type(path).__name__}"
            )
        p = Path(path)
        if not p.exists():
            raise UserInputError(f"LoRA adapter path does not exist: {os.fspath(path)}")
        if p.suffix != ".safetensors":
            raise UserInputError(f"Expected .safetensors file, got: {os.fspath(path)}")
        self._layers, self._constants = _group(read_safetensors(p.read_bytes(), os.fspath(p)), os.fspath(p))
        self._source = os.fspath(p)
        if self._constants:
            raise ConfigError(
                f"{os.fspath(p)} carries whole replacement weights ({', '.join(sorted(self._constants))}); "
                "genai_shim applies low-rank A/B factors only: drop those tensors from the adapter",
                key="adapters",
            )

    @property
    def _valid(self) -> bool:
        # as the real: any adapter read from a file or tensor is truthy, even one whose tensors
        # match no LoRA name (pipelines then warn that they are unused)
        return self._source is not None

    def __bool__(self) -> bool:
        return self._valid

    # -- used by the pipeline (lora_controller.py) ---------------------------------------------
    @property
    def layers(self) -> Mapping[str, LoRATensors]:
        """The adapter's LoRA layers by tensor-name stem (read-only)."""
        return MappingProxyType(self._layers)

    # Immutable and compared by identity (the real compares the shared implementation pointer):
    # a GenerationConfig copy must keep referring to the same adapter.
    def __copy__(self) -> Adapter:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Adapter:
        return self

    def __repr__(self) -> str:
        return f"<Adapter {self._source}: {len(self._layers)} layers>" if self._valid else "<Adapter: empty>"


class AdapterConfig:
    """Adapter config that defines a combination of LoRA adapters with blending parameters.

    ``AdapterConfig(mode=MODE_AUTO)``, ``(adapter, alpha, mode=...)``, ``(adapter, mode=...)``,
    ``(adapters: list[Adapter], mode=...)`` or ``(adapters: list[tuple[Adapter, float]], mode=...)``;
    an adapter given without alpha has alpha 1."""

    class Mode(BindingEnum):
        MODE_AUTO = 0  # the pipeline picks (DYNAMIC on CPU, GPU and NPU, as the real)
        MODE_DYNAMIC = 1  # A, B and alpha are model variables: anything changes per generate()
        MODE_STATIC_RANK = 2  # as DYNAMIC, rank fixed at construction (sum of the adapters' ranks)
        MODE_STATIC = 3  # A, B and alpha are constants next to the weight: fixed at construction
        MODE_FUSE = 4  # W + alpha * B @ A folded into the weight: fixed at construction

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._adapters: list[Adapter] = []
        self._alphas: list[float] = []
        rest = list(args)
        mode = kwargs.pop("mode", None)
        adapters: list[tuple[Adapter, float]] = []
        if "adapter" in kwargs or (rest and isinstance(rest[0], Adapter)):
            adapter = kwargs.pop("adapter") if "adapter" in kwargs else rest.pop(0)
            alpha: Any = 1.0
            if "alpha" in kwargs:
                alpha = kwargs.pop("alpha")
            elif rest and not isinstance(rest[0], AdapterConfig.Mode) and isinstance(rest[0], (int, float)):
                alpha = rest.pop(0)
            adapters = [(adapter, alpha)]
        elif "adapters" in kwargs or (rest and isinstance(rest[0], (list, tuple))):
            items = kwargs.pop("adapters") if "adapters" in kwargs else rest.pop(0)
            adapters = [self._pair(it) for it in items]
        if rest and mode is None:
            mode = rest.pop(0)
        if rest or kwargs:
            raise UserInputError(
                "AdapterConfig(mode=MODE_AUTO), AdapterConfig(adapter, alpha, mode=...), "
                "AdapterConfig(adapter, mode=...) or AdapterConfig(adapters: list, mode=...); "
                f"got extra {rest + list(kwargs)!r}"
            )
        self._mode = self._check_mode(AdapterConfig.Mode.MODE_AUTO if mode is None else mode)
        for adapter, alpha in adapters:
            self.add(adapter, alpha)

    @staticmethod
    def _pair(item: Any) -> tuple[Adapter, float]:
        if isinstance(item, Adapter):
            return item, 1.0
        if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], Adapter):
            return item[0], item[1]
        raise UserInputError(f"AdapterConfig adapters are Adapter or (Adapter, alpha) pairs, got {item!r}")

    @staticmethod
    def _check_mode(mode: Any) -> AdapterConfig.Mode:
        try:
            return AdapterConfig.Mode(mode)
        except ValueError as e:
            raise UserInputError(f"Unrecognized AdapterConfig::Mode was used: {mode!r}") from e

    @staticmethod
    def _check_alpha(alpha: Any) -> float:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)):
            raise UserInputError(f"LoRA alpha must be a float, got {type(alpha).__name__}")
        return float(np.float32(alpha))  # the real keeps it as a C++ float

    @staticmethod
    def _check_adapter(adapter: Any) -> Adapter:
        if not isinstance(adapter, Adapter):
            raise UserInputError(f"expected an Adapter, got {type(adapter).__name__}")
        return adapter

    def _index(self, adapter: Adapter, what: str) -> int:
        for i, a in enumerate(self._adapters):
            if a is adapter:
                return i
        raise UserInputError(what)

    # -- the real's methods --------------------------------------------------------------------
    def add(self, adapter: Adapter, alpha: float = 1.0) -> AdapterConfig:
        self._check_adapter(adapter)
        if any(a is adapter for a in self._adapters):
            raise UserInputError("Adapter object passed to AdapterConfig::add was already registered")
        self._adapters.append(adapter)
        self._alphas.append(self._check_alpha(alpha))
        return self

    def set_alpha(self, adapter: Adapter, alpha: float) -> AdapterConfig:
        i = self._index(
            self._check_adapter(adapter),
            "Unknown adapter object passed to AdapterConfig::set_alpha, "
            "register adapter object first with AdapterConfig::add",
        )
        self._alphas[i] = self._check_alpha(alpha)
        return self

    def get_alpha(self, adapter: Adapter) -> float:
        i = self._index(
            self._check_adapter(adapter),
            "Unknown adapter object passed to AdapterConfig::get_alpha, "
            "alpha can be retrieved for previously registered adapters only",
        )
        return self._alphas[i]

    def remove(self, adapter: Adapter) -> AdapterConfig:
        i = self._index(
            self._check_adapter(adapter),
            "Unknown adapter object passed to AdapterConfig::remove, "
            "you can remove previously registered adapters only",
        )
        del self._adapters[i], self._alphas[i]
        return self

    def get_adapters(self) -> list[Adapter]:
        return list(self._adapters)

    def get_adapters_and_alphas(self) -> list[tuple[Adapter, float]]:
        return list(zip(self._adapters, self._alphas, strict=True))

    def set_adapters_and_alphas(self, adapters: Iterable[tuple[Adapter, float]]) -> None:
        pairs = [self._pair(it) for it in adapters]
        self._adapters, self._alphas = [], []
        for adapter, alpha in pairs:
            self.add(adapter, alpha)

    def __bool__(self) -> bool:
        return bool(self._adapters)

    # -- used by the pipeline (the real's C++-only accessors) ----------------------------------
    @property
    def mode(self) -> AdapterConfig.Mode:
        return self._mode

    def updated(self, other: AdapterConfig) -> AdapterConfig:
        """The real's ``update``: adapters and alphas from ``other``; its mode unless MODE_AUTO."""
        out = AdapterConfig(self._mode if other.mode == AdapterConfig.Mode.MODE_AUTO else other.mode)
        out.set_adapters_and_alphas(other.get_adapters_and_alphas())
        return out

    def __copy__(self) -> AdapterConfig:
        out = AdapterConfig(self._mode)
        out.set_adapters_and_alphas(self.get_adapters_and_alphas())
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> AdapterConfig:
        return self.__copy__()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AdapterConfig) or self._mode != other.mode:
            return False
        theirs = other.get_adapters_and_alphas()
        return (
            len(self._adapters) == len(theirs)
            and all(a is b for a, (b, _) in zip(self._adapters, theirs, strict=True))
            and self._alphas == [w for _, w in theirs]
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        pairs = ", ".join(f"({a!r}, {w})" for a, w in zip(self._adapters, self._alphas, strict=True))
        return f"AdapterConfig([{pairs}], mode={self._mode.name})"
