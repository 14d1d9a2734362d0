"""LLaVA-NeXT's inputs embedder as openvino.genai's (visual_language/llava_next/classes.cpp,
clip.cpp): "anyres" tiling on the host, then LLaVA's CLIP tower on every tile, then the tiles'
features put back together as the real packs them.

Per image ([H, W, 3] uint8): a base tile (the image resized to ``shortest_edge`` square, Pillow's
bicubic); the best of ``image_grid_pinpoints`` (each pair read as width, height, as the real
does; most of the image's area kept, then the least padding); the image resized into it keeping
its aspect ratio (ceil of the f32 scale) and centred on black; that cut into
``crop_size`` tiles, row by row. Every tile goes through LLaVA's preprocessing
(:func:`..llava.clip_pixels`) and ``openvino_vision_embeddings_model`` in one batch. The grid
tiles' features are laid out as one feature map, its padding cut off again (``unpad``, f32
aspect ratios of the original size), an ``image_newline`` row (config.json) appended to each
of its rows, and flattened after the base tile's features. The prompt, merge and positions are
LLaVA's."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.vlm.common import Placement, image_processor_json
from genai_shim.vlm.llava import CLIPConfig, LLaVAEmbedder, LLaVAImage, clip_pixels, pillow_bicubic
from ov_npu_emu.errors import ConfigError

__all__ = ["LLaVANextEmbedder", "best_resolution", "image_tiles", "pack_features", "resize_and_pad", "unpad"]


@dataclass(frozen=True)
class AnyResConfig:
    """What LLaVA-NeXT reads besides CLIP's preprocessing: the grids, the vision patch size and
    the newline row."""

    pinpoints: tuple[tuple[int, int], ...]  # (width, height) as the real reads each pair
    patch_size: int  # config.json vision_config.patch_size
    newline: np.ndarray  # [hidden] f32, config.json image_newline

    @classmethod
    def read(cls, folder: Path, config: dict[str, Any]) -> AnyResConfig:
        data = image_processor_json(folder)
        pins = data.get("image_grid_pinpoints") or config.get("image_grid_pinpoints") or []
        newline = config.get("image_newline")
        if not pins:
            raise ConfigError(f"{folder}: LLaVA-NeXT needs image_grid_pinpoints in preprocessor_config.json",
                              key="image_grid_pinpoints")
        if not newline:
            raise ConfigError(f"{folder}/config.json has no image_newline (optimum-cli's LLaVA-NeXT export writes "
                              "it); re-export the model", key="image_newline")
        patch = int((config.get("vision_config") or {}).get("patch_size", 14))
        return cls(tuple((int(p[0]), int(p[1])) for p in pins), patch, np.asarray(newline, np.float32))


def best_resolution(width: int, height: int, pinpoints: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The real's select_best_resolution: the (width, height) keeping the most of the image's area
    once it is scaled into it (f32 scale, truncated sizes), ties to the least waste, first wins."""
    best, best_effective, best_waste = pinpoints[0], 0, math.inf
    for w, h in pinpoints:
        scale = min(np.float32(w) / np.float32(width), np.float32(h) / np.float32(height))
        effective = min(int(np.float32(width) * scale) * int(np.float32(height) * scale), width * height)
        waste = w * h - effective
        if effective > best_effective or (effective == best_effective and waste < best_waste):
            best, best_effective, best_waste = (w, h), effective, waste
    return best


def resize_and_pad(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """The real's resize_and_pad_image: the image scaled to fit (width, height) keeping its aspect
    ratio (the other side the ceil of the f32 scale, capped), Pillow's bicubic, centred on black."""
    ny, nx = image.shape[:2]
    scale_w, scale_h = np.float32(width) / np.float32(nx), np.float32(height) / np.float32(ny)
    if scale_w < scale_h:
        new_w, new_h = width, min(math.ceil(np.float32(ny) * scale_w), height)
    else:
        new_w, new_h = min(math.ceil(np.float32(nx) * scale_h), width), height
    out = np.zeros((height, width, 3), np.uint8)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    out[top:top + new_h, left:left + new_w] = pillow_bicubic(image, new_w, new_h)
    return out


def image_tiles(image: np.ndarray, clip: CLIPConfig, pinpoints: tuple[tuple[int, int], ...]
                ) -> tuple[list[np.ndarray], tuple[int, int]]:
    """(the base tile and the grid's tiles row by row, the grid's (width, height) in pixels)."""
    h, w = image.shape[:2]
    tiles = [pillow_bicubic(image, clip.shortest_edge, clip.shortest_edge)]
    grid_w, grid_h = best_resolution(w, h, pinpoints)
    padded = resize_and_pad(image, grid_w, grid_h)
    tile = clip.crop_height
    for y in range(grid_h // tile):
        for x in range(grid_w // tile):
            tiles.append(padded[y * tile:(y + 1) * tile, x * tile:(x + 1) * tile])
    return tiles, (grid_w, grid_h)


def unpad(feature: np.ndarray, height: int, width: int) -> np.ndarray:
    """The real's unpad_image: [E, h, w] with the rows (or columns) the padding filled cut off, by
    the original (height, width)'s f32 aspect ratio."""
    _, cur_h, cur_w = feature.shape
    if np.float32(width) / np.float32(height) > np.float32(cur_w) / np.float32(cur_h):
        new_h = int(np.float32(height) * (np.float32(cur_w) / np.float32(width)))
        pad = (cur_h - new_h) // 2
        return feature[:, pad:cur_h - pad, :]
    new_w = int(np.float32(width) * (np.float32(cur_h) / np.float32(height)))
    pad = (cur_w - new_w) // 2
    return feature[:, :, pad:cur_w - pad]


def pack_features(features: np.ndarray, grid: tuple[int, int], tile_grid: tuple[int, int],
                  size: tuple[int, int], newline: np.ndarray) -> np.ndarray:
    """[tiles, seq, E] vision features -> [rows, E] as the real's pack_image_features_llava_next:
    the base tile's rows, then the grid tiles' feature map (``tile_grid`` = (rows, columns) of
    tiles, each ``grid`` = (h, w) features), unpadded to the original ``size`` = (height,
    width), each of its rows followed by ``newline``."""
    n, seq, e = features.shape
    if n > 1 and seq != grid[0] * grid[1]:
        raise ConfigError(f"the vision model gives {seq} features per tile where a {grid[0]}x{grid[1]} grid needs "
                          f"{grid[0] * grid[1]} (vision_feature_select_strategy 'full' keeps CLS; the real fails "
                          "too: 'Patch sequence length does not match the specified height and width')",
                          key="vision_feature_select_strategy")
    if n == 1:  # no grid tile: the base rows and one newline (the real copies these one row off)
        return np.concatenate([features[0], newline[None]], axis=0)
    (gh, gw), (th, tw) = grid, tile_grid
    fmap = features[1:].reshape(th, tw, gh, gw, e).transpose(4, 0, 2, 1, 3).reshape(e, th * gh, tw * gw)
    fmap = unpad(fmap, *size)
    with_newline = np.concatenate([fmap, np.broadcast_to(newline[:, None, None], (e, fmap.shape[1], 1))], axis=2)
    return np.concatenate([features[0], with_newline.reshape(e, -1).T], axis=0)


class LLaVANextEmbedder(LLaVAEmbedder):
    """LLaVA with anyres tiles: :func:`image_tiles` -> CLIP per tile -> :func:`pack_features`."""

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        super().__init__(core, folder, config, placement, tokenizer)
        self.anyres = AnyResConfig.read(folder, config)

    def _encode(self, image: np.ndarray) -> LLaVAImage:
        c, a = self.cfg, self.anyres
        tiles, (grid_w, grid_h) = image_tiles(image, c, a.pinpoints)
        pixels = np.concatenate([clip_pixels(t, c) for t in tiles], axis=0)
        self.vision.infer({"pixel_values": pixels})
        out = np.array(self.vision.get_output_tensor(0).data, dtype=np.float32, copy=True)
        out = out.reshape(len(tiles), -1, out.shape[-1])
        if a.newline.shape[0] != out.shape[-1]:
            raise ConfigError(f"config.json image_newline has {a.newline.shape[0]} values; the vision model's "
                              f"features have {out.shape[-1]}", key="image_newline")
        feature_grid = (c.crop_height // a.patch_size, c.crop_width // a.patch_size)
        tile_grid = (grid_h // c.shortest_edge, grid_w // c.shortest_edge)
        h, w = image.shape[:2]
        return LLaVAImage(pack_features(out, feature_grid, tile_grid, (h, w), a.newline))
