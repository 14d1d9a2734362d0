"""Qwen2.5-VL's inputs embedder as openvino.genai's (visual_language/qwen2_5_vl/classes.cpp): the
Qwen2-VL one (same preprocessing, patch embeddings, rotary table, pad expansion and M-RoPE
positions) whose merger also takes the windowed attention of the vision blocks: ``window_index``
(the merged-patch order window by window) and ``window_attention_mask`` (block-diagonal over the
windows, ``cu_window_seqlens``), next to the full ``attention_mask`` of the full-attention blocks."""

from __future__ import annotations

from typing import Any

import numpy as np

from genai_shim.vlm.common import Placement
from genai_shim.vlm.qwen2vl import EncodedImage, Qwen2VLEmbedder, block_mask
from ov_npu_emu.errors import ConfigError

__all__ = ["Qwen25VLEmbedder", "window_index"]


def window_index(grids: list[tuple[int, int, int]], merge_size: int, window: int) -> tuple[np.ndarray, list[int]]:
    """(window_index, cu_window_seqlens) as the real's qwen2_5_vl_utils::get_window_index: the
    merged grid (h/merge x w/merge per frame) padded up to whole ``window``-sized windows, each
    window's valid merged patches in row order; the cumulative lengths count patches (merged
    patches x merge^2)."""
    unit = merge_size * merge_size
    order: list[int] = []
    cu = [0]
    base = 0
    for t, h, w in grids:
        lh, lw = h // merge_size, w // merge_size
        nh, nw = -(-lh // window), -(-lw // window)
        for ti in range(t):
            for wh in range(nh):
                for ww in range(nw):
                    rows = range(wh * window, min((wh + 1) * window, lh))
                    cols = range(ww * window, min((ww + 1) * window, lw))
                    order.extend(base + ti * lh * lw + r * lw + c for r in rows for c in cols)
                    cu.append(cu[-1] + len(rows) * len(cols) * unit)
        base += t * lh * lw
    return np.array(order, np.int64), cu


class Qwen25VLEmbedder(Qwen2VLEmbedder):
    """Qwen2-VL's embedder with the Qwen2.5-VL merger's window inputs."""

    def __init__(self, core: Any, folder: Any, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        super().__init__(core, folder, config, placement, tokenizer)
        vision = config.get("vision_config") or {}
        size, patch = int(vision.get("window_size", 112)), int(vision.get("patch_size", 14))
        # the real's vit_merger_window_size: window_size / merge_size / patch_size merged patches
        self.window = size // self.cfg.merge_size // patch
        if self.window < 1:
            raise ConfigError(
                f"vision_config.window_size {size} is smaller than one merged patch "
                f"({self.cfg.merge_size} x {patch} pixels); check the export's config.json",
                key="window_size")

    def _merger_extras(self, images: list[EncodedImage], n: int) -> dict[str, np.ndarray]:
        order, cu = window_index([im.grid_thw for im in images], self.cfg.merge_size, self.window)
        return {"window_index": order, "window_attention_mask": block_mask(n, cu)}
