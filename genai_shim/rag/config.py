"""TextEmbeddingPipeline.Config and PoolingType: the real binding's fields, defaults, types
and checks (src/python/py_rag.cpp, src/cpp/src/rag/text_embedding_pipeline.cpp)."""

from __future__ import annotations

from typing import Any

import numpy as np

from genai_shim.enums import BindingEnum
from genai_shim.tokenizer_ir import bool_property
from ov_npu_emu.errors import ConfigError, UserTypeError

__all__ = [
    "CONFIG_KEYS", "KeyedConfig", "PoolingType", "TextEmbeddingConfig", "check_properties", "opt_bool", "opt_int",
    "opt_str",
]


class PoolingType(BindingEnum):
    """How token embeddings become one embedding (``TextEmbeddingPipeline.PoolingType``)."""

    CLS = 0  #: first token embeddings
    MEAN = 1  #: the average of all token embeddings
    LAST_TOKEN = 2  #: last token embeddings


def opt_int(key: str, value: Any, *, from_map: bool) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, str) if from_map else (int, np.integer)):
        raise UserTypeError(f"{key} must be an int or None, got {type(value).__name__} {value!r}")
    try:
        number = int(value)
    except ValueError as e:
        raise ConfigError(f"{key} must be an integer, got {value!r}", key=key) from e
    if number < 0:  # the real binding: a TypeError for an attribute (size_t), a wrapped size from kwargs
        message = f"{key} must be a non-negative integer, got {number}"
        raise ConfigError(message, key=key) if from_map else UserTypeError(message)
    return number


def opt_str(key: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise UserTypeError(f"{key} must be a str or None, got {type(value).__name__} {value!r}")
    return value


def opt_bool(key: str, value: Any, *, from_map: bool) -> bool | None:
    if value is None:
        return None
    if from_map:
        return bool_property(key, value)
    if not isinstance(value, (bool, np.bool_)):
        raise UserTypeError(f"{key} must be a bool or None, got {type(value).__name__} {value!r}")
    return bool(value)


def _pooling(value: Any, *, from_map: bool) -> PoolingType:
    if isinstance(value, PoolingType):
        return value
    if from_map:
        raise ConfigError(
            f"pooling_type must be a TextEmbeddingPipeline.PoolingType (CLS, MEAN or LAST_TOKEN), "
            f"got {type(value).__name__} {value!r}", key="pooling_type")
    raise UserTypeError(f"pooling_type must be a TextEmbeddingPipeline.PoolingType, got "
                        f"{type(value).__name__} {value!r}")


class KeyedConfig:
    """A pipeline's ``Config`` of fixed keys: ``Config(**keys)`` (another key is a ConfigError,
    where the real ignores it), attributes typed by the subclass's :meth:`_convert`, ``copy``
    and ``repr``.  A subclass sets ``_NAME`` and ``_DEFAULTS`` (the keys in the real's order)."""

    _NAME = ""
    _DEFAULTS: dict[str, Any] = {}

    def __init__(self, **properties: Any) -> None:
        object.__setattr__(self, "_values", dict(self._DEFAULTS))
        keys = self.keys()
        unknown = sorted(set(properties) - set(keys))
        if unknown:
            raise ConfigError(
                f"{self._NAME} takes {', '.join(keys)}; not {', '.join(unknown)} "
                "(device properties go to the pipeline's constructor)", key=unknown[0])
        for key, value in properties.items():
            self._values[key] = self._convert(key, value, from_map=True)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(cls._DEFAULTS)

    @staticmethod
    def _convert(key: str, value: Any, *, from_map: bool) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"'Config' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._DEFAULTS:
            raise AttributeError(f"'Config' object has no attribute {name!r}")
        self._values[name] = self._convert(name, value, from_map=False)

    def copy(self) -> Any:
        new = type(self)()
        object.__getattribute__(new, "_values").update(self._values)  # an instance of self's own class
        return new

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{self._NAME}({fields})"


class TextEmbeddingConfig(KeyedConfig):
    """``TextEmbeddingPipeline.Config``: the real's fields, defaults and checks.

    ``Config()`` or ``Config(**properties)`` (the pipeline's config keys; another key is a
    ConfigError, where the real ignores it). Attributes take the real binding's types (an
    ``int``, ``bool`` or ``str`` field also takes ``None``); another type is a UserTypeError.
    """

    max_length: int | None
    pad_to_max_length: bool | None
    batch_size: int | None
    pooling_type: PoolingType
    normalize: bool
    query_instruction: str | None
    embed_instruction: str | None
    padding_side: str | None

    _NAME = "TextEmbeddingPipeline.Config"
    _DEFAULTS = {
        "max_length": None, "pad_to_max_length": None, "batch_size": None,
        "pooling_type": PoolingType.CLS, "normalize": True, "query_instruction": None,
        "embed_instruction": None, "padding_side": None,
    }

    @staticmethod
    def _convert(key: str, value: Any, *, from_map: bool) -> Any:
        return _convert(key, value, from_map=from_map)

    def validate(self) -> None:
        """Checks that are no conflicting parameters (the real's: positive max_length and batch_size)."""
        if self.max_length is not None and self.max_length <= 0:
            raise ConfigError("max_length should be greater than 0", key="max_length")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ConfigError("batch_size should be greater than 0", key="batch_size")


#: the keys the pipeline reads as its Config (the real's ``remove_config_properties`` drops
#: them, plus ``truncation``, before compiling)
CONFIG_KEYS = TextEmbeddingConfig.keys()


def _convert(key: str, value: Any, *, from_map: bool) -> Any:
    if key in ("max_length", "batch_size"):
        return opt_int(key, value, from_map=from_map)
    if key == "pad_to_max_length":
        return opt_bool(key, value, from_map=from_map)
    if key == "normalize":
        if value is None and not from_map:
            raise UserTypeError("normalize must be a bool, got None")
        return opt_bool(key, value, from_map=from_map)
    if key == "pooling_type":
        return _pooling(value, from_map=from_map)
    return opt_str(key, value)


#: keys openvino's Core itself takes in a compile config
_CORE_KEYS = ("CACHE_DIR", "ENABLE_MMAP", "FORCE_TBB_TERMINATE")


def check_properties(core: Any, device: str, properties: dict[str, Any]) -> None:
    """A key the device does not take is refused as the real CPU plugin refuses it (our CPU
    device drops keys it does not know, for NPUW's sake; a pipeline's caller gets the error)."""
    supported = core.get_property(device, "SUPPORTED_PROPERTIES")
    for key in properties:
        if key not in _CORE_KEYS and supported.get(key) not in ("RW", "WO"):
            raise ConfigError(f"Unsupported property {key} by {device} plugin. Pass the pipeline's config keys "
                              "either as properties or in config=, not both; "
                              f"device keys: core.get_property({device!r}, 'SUPPORTED_PROPERTIES')", key=key)
