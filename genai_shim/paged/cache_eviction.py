"""``CacheEvictionConfig`` and ``AggregationMode``: the real's configuration objects (their fields,
defaults, checks and texts from openvino.genai's cache_eviction.hpp; code written anew), so that a
script that builds one imports and runs.  Cache eviction itself is not implemented: a
``SchedulerConfig`` with ``use_cache_eviction=True`` is a ConfigError at pipeline construction
(continuous_batching/impl.py)."""

from __future__ import annotations

from typing import Any

from genai_shim.enums import BindingEnum
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["AggregationMode", "CacheEvictionConfig"]


class AggregationMode(BindingEnum):
    """How per-token importance scores are aggregated for eviction (the real's values)."""

    SUM = 0
    NORM_SUM = 1
    ADAPTIVE_RKV = 2


class CacheEvictionConfig:
    """``CacheEvictionConfig(start_size, recent_size, max_cache_size, aggregation_mode,
    apply_rotation=False, snapkv_window_size=8, kvcrush_config=None)``, checked as the real's."""

    def __init__(self, start_size: int, recent_size: int, max_cache_size: int, aggregation_mode: Any,
                 apply_rotation: bool = False, snapkv_window_size: int = 8, kvcrush_config: Any = None) -> None:
        if not isinstance(aggregation_mode, AggregationMode):
            raise UserInputError(f"aggregation_mode must be a genai_shim.AggregationMode, got "
                                 f"{type(aggregation_mode).__name__}")
        for name, value in (("start_size", start_size), ("recent_size", recent_size),
                            ("max_cache_size", max_cache_size), ("snapkv_window_size", snapkv_window_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserInputError(f"{name} must be a non-negative int, got {value!r}")
        if kvcrush_config is not None:  # the real's KVCrushConfig is not implemented here
            raise ConfigError("KVCrushConfig is not implemented in genai_shim; leave kvcrush_config None",
                              key="kvcrush_config")
        for name, value in (("start_size", start_size), ("recent_size", recent_size),
                            ("max_cache_size", max_cache_size)):
            if not value:  # the real's texts
                raise ConfigError(f"CacheEvictionConfig.{name} must be non-zero", key=name)
        if max_cache_size <= start_size + recent_size:
            raise ConfigError("CacheEvictionConfig.max_cache_size must be larger than CacheEvictionConfig.start_size "
                              "+ CacheEvictionConfig.recent_size", key="max_cache_size")
        self._start, self._recent, self._max = int(start_size), int(recent_size), int(max_cache_size)
        self.aggregation_mode = aggregation_mode
        self.apply_rotation = bool(apply_rotation)
        self.snapkv_window_size = int(snapkv_window_size)
        #: the real's KVCrushConfig / AdaptiveRKVConfig objects: not implemented here (None)
        self.kvcrush_config: Any = None
        self.adaptive_rkv_config: Any = None

    def get_start_size(self) -> int:
        return self._start

    def get_recent_size(self) -> int:
        return self._recent

    def get_max_cache_size(self) -> int:
        return self._max

    def get_evictable_size(self) -> int:
        return self._max - self._start - self._recent

    def to_string(self) -> str:
        """The real's text, without its KVCrushConfig block (KVCrush is not implemented here)."""
        lines = ["CacheEvictionConfig { ", f"  start_size: {self._start}", f"  recent_size: {self._recent}",
                 f"  max_cache_size: {self._max}", f"  evictable_size: {self.get_evictable_size()}"]
        if self.aggregation_mode in (AggregationMode.SUM, AggregationMode.NORM_SUM):
            lines.append(f"  aggregation_mode: {self.aggregation_mode.name}")
        lines += [f"  apply_rotation: {str(self.apply_rotation).lower()}",
                  f"  snapkv_window_size: {self.snapkv_window_size}", " }"]
        return "\n".join(lines)
