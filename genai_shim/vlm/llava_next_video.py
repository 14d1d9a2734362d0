"""LLaVA-NeXT-Video's inputs embedder as openvino.genai's (visual_language/llava_next_video/classes.cpp):
LLaVA-NeXT's "anyres" tiles for images and sampled video frames, both preprocessed by the real's
OpenVINO graph (bicubic Interpolate to the shortest edge, centre crop, ``(x / 255 - mean) / std``,
NCHW) in front of ``openvino_vision_embeddings_model``; images then go through
``openvino_multi_modal_projector_model`` and LLaVA-NeXT's packing, videos through
``openvino_vision_resampler_model`` (a 2x2 pool) and the projector, every frame's rows in order.

The prompt: ``<video>`` tags (one per video before the prompt unless it has them) each become
``(crop / patch)² / 4 × frames`` ``<video>`` tokens and a newline, then ``<image>`` tags (put
before those) each as many ``<image>`` tokens as the real's count (base tile, the unpadded grid
and its newline rows, by ``get_unpadded_features``) and a newline; the prompt is tokenized with
special tokens ("llava-next-video tokenizer always adds special tokens in pytorch"); image rows
then video rows replace their tokens' text embeddings as LLaVA's merge does.

``VISION_PREPROCESS=CPP`` when the pipeline is built: the real's host preprocessing instead of the
graph — LLaVA-NeXT's per tile (the same pixels: the tiles are already at the shortest edge) and,
per video frame, clip.cpp's Pillow-style bicubic with a normalisation in f64
(:func:`host_frame_pixels`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from genai_shim.vlm.common import (
    Placement,
    center_crop_box,
    expand_tags,
    host_vision_preprocess,
    pillow_bicubic,
    prepend_tags,
    video_frames,
)
from genai_shim.vlm.llava import CLIPConfig, LLaVAImage, clip_pixels, merge_image_rows
from genai_shim.vlm.llava_next import LLaVANextEmbedder, best_resolution, image_tiles, pack_features

__all__ = ["LLaVANextVideoEmbedder", "host_frame_pixels", "preprocess_model", "unpadded_features"]

VIDEO_TAG = "<video>"
PROJECTOR_XML = "openvino_multi_modal_projector_model.xml"
RESAMPLER_XML = "openvino_vision_resampler_model.xml"


def preprocess_model(c: CLIPConfig) -> ov.Model:
    """The real's patch_preprocess_into_vision_encoder_model front: u8 NHWC frames, a [2] target
    size and a [2] crop size in; bicubic Interpolate (a = -0.5, asymmetric, no antialias) to the
    target, a centre crop, ``(x / 255 - mean) / std``, NCHW out."""
    frames = ops.parameter([-1, -1, -1, 3], ov.Type.u8, name="input_frames")
    target = ops.parameter([2], ov.Type.i64, name="resize_target_size")
    crop = ops.parameter([2], ov.Type.i64, name="crop_size")
    x = ops.convert(frames, ov.Type.f32)
    x = ops.interpolate(x, target, "cubic", "sizes", axes=ops.constant(np.array([1, 2], np.int64)),
                        coordinate_transformation_mode="asymmetric", cube_coeff=-0.5, nearest_mode="floor",
                        pads_begin=[0, 0], pads_end=[0, 0], antialias=False)
    axis, two = ops.constant(np.int64(0)), ops.constant(np.array([2], np.int64))
    idx = [ops.constant(np.array([i], np.int64)) for i in range(3)]
    crop_h, crop_w = ops.gather(crop, idx[0], axis), ops.gather(crop, idx[1], axis)
    shape = ops.shape_of(x)
    top = ops.divide(ops.subtract(ops.gather(shape, idx[1], axis), crop_h), two)
    left = ops.divide(ops.subtract(ops.gather(shape, idx[2], axis), crop_w), two)
    zero, big = ops.constant(np.array([0], np.int64)), ops.constant(np.array([np.iinfo(np.int64).max], np.int64))
    start = ops.concat([zero, top, left, zero], 0)
    stop = ops.concat([big, ops.add(top, crop_h), ops.add(left, crop_w), big], 0)
    x = ops.slice(x, start, stop, ops.constant(np.array([1, 1, 1, 1], np.int64)))
    x = ops.divide(x, ops.constant(np.float32(255.0)))
    x = ops.subtract(x, ops.constant(np.array(c.image_mean, np.float32).reshape(1, 1, 1, 3)))
    x = ops.divide(x, ops.constant(np.array(c.image_std, np.float32).reshape(1, 1, 1, 3)))
    x = ops.transpose(x, ops.constant(np.array([0, 3, 1, 2], np.int64)))
    return ov.Model([ops.result(x)], [frames, target, crop], "llava_next_video_preprocess")


def resize_dimensions(height: int, width: int, shortest_edge: int) -> tuple[int, int]:
    """The real's calculate_resize_dimensions: both sides times the f32 scale, truncated."""
    scale = np.float32(shortest_edge) / np.float32(min(height, width))
    return int(np.float32(height) * scale), int(np.float32(width) * scale)


def host_frame_pixels(frame: np.ndarray, c: CLIPConfig) -> np.ndarray:
    """[H, W, 3] uint8 -> [1, 3, crop_h, crop_w] f32 as the real's VISION_PREPROCESS=CPP video path
    (preprocess_clip_image_llava_next_video): Pillow-style bicubic to calculate_resize_dimensions
    (no floor at the crop size, unlike LLaVA's images), a centre crop, then ``(x - mean·255) /
    (std·255)`` in f64 with the products taken in f32 (``float * 255``), stored as f32."""
    h, w = resize_dimensions(frame.shape[0], frame.shape[1], c.shortest_edge)
    crop = pillow_bicubic(frame, w, h, center_crop_box(h, w, c.crop_height, c.crop_width))
    mean = (np.array(c.image_mean, np.float32) * np.float32(255.0)).astype(np.float64)
    std = (np.array(c.image_std, np.float32) * np.float32(255.0)).astype(np.float64)
    x = ((crop.astype(np.float64) - mean) / std).astype(np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def unpadded_features(height: int, width: int, patches_h: int, patches_w: int, scale_h: int, scale_w: int
                      ) -> tuple[int, int]:
    """The real's get_unpadded_features: (unpadded feature count, newline count)."""
    cur_h, cur_w = patches_h * scale_h, patches_w * scale_w
    if np.float32(width) / np.float32(height) > np.float32(cur_w) / np.float32(cur_h):
        new_h = math.floor(np.float32(height) * (np.float32(cur_w) / np.float32(width)))
        cur_h -= (cur_h - new_h) // 2 * 2
    else:
        new_w = math.floor(np.float32(width) * (np.float32(cur_h) / np.float32(height)))
        cur_w -= (cur_w - new_w) // 2 * 2
    return cur_h * cur_w, cur_h


class LLaVANextVideoEmbedder(LLaVANextEmbedder):
    """LLaVA-NeXT with the real's in-graph preprocessing, a separate projector, and videos."""

    #: the real tokenizes this family's prompt with special tokens
    prompt_special_tokens = True
    #: the native video tag (the families that take videos have one)
    video_tag = VIDEO_TAG

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        super().__init__(core, folder, config, placement, tokenizer)
        self.projector = placement.request(core, core.read_model(folder / PROJECTOR_XML), "multi_modal_projector")
        self.resampler = placement.request(core, core.read_model(folder / RESAMPLER_XML), "resampler")
        #: VISION_PREPROCESS=CPP: tiles and frames preprocessed on the host (LLaVA-NeXT's clip_pixels
        #: per tile, host_frame_pixels per frame), no graph
        self.host_preprocess = host_vision_preprocess()
        self.pre = (None if self.host_preprocess
                    else core.compile_model(preprocess_model(self.cfg), "CPU").create_infer_request())
        ids = tokenizer.encode(VIDEO_TAG, add_special_tokens=False).input_ids.data[0]
        self.video_token = int(ids[-1])

    def _pixels(self, frames: np.ndarray, tiles: bool = False) -> np.ndarray:
        """[N, H, W, 3] uint8 -> the vision model's [N, 3, crop_h, crop_w]: the real's graph, or its
        host path (images' ``tiles`` as LLaVA-NeXT's, video frames as the video path)."""
        c = self.cfg
        if self.pre is None:
            one = (lambda f: clip_pixels(f, c)) if tiles else (lambda f: host_frame_pixels(f, c))
            return np.concatenate([one(f) for f in frames], axis=0)
        target = np.array(resize_dimensions(frames.shape[1], frames.shape[2], c.shortest_edge), np.int64)
        self.pre.infer({"input_frames": np.ascontiguousarray(frames), "resize_target_size": target,
                        "crop_size": np.array([c.crop_height, c.crop_width], np.int64)})
        return np.array(self.pre.get_output_tensor(0).data, np.float32, copy=True)

    def _vision(self, pixels: np.ndarray) -> np.ndarray:
        self.vision.infer({"pixel_values": pixels})
        return np.array(self.vision.get_output_tensor(0).data, np.float32, copy=True)

    def _project(self, features: np.ndarray) -> np.ndarray:
        self.projector.infer({"image_features": features})
        return np.array(self.projector.get_output_tensor(0).data, np.float32, copy=True)

    def _encode(self, image: np.ndarray) -> LLaVAImage:
        c, a = self.cfg, self.anyres
        tiles, (grid_w, grid_h) = image_tiles(image, c, a.pinpoints)
        out = self._project(self._vision(self._pixels(np.stack(tiles), tiles=True)))
        feature_grid = (c.crop_height // a.patch_size, c.crop_width // a.patch_size)
        tile_grid = (grid_h // c.shortest_edge, grid_w // c.shortest_edge)
        h, w = image.shape[:2]
        packed = pack_features(out, feature_grid, tile_grid, (h, w), a.newline)
        best_w, best_h = best_resolution(w, h, a.pinpoints)
        unpadded, newlines = unpadded_features(h, w, *feature_grid, best_h // c.crop_height, best_w // c.crop_width)
        return LLaVAImage(packed, tokens=unpadded + newlines + feature_grid[0] * feature_grid[1])

    def encode_videos(self, videos: list[Any]) -> list[np.ndarray]:
        """Each video [N, H, W, 3] uint8 -> its rows [N * tokens per frame, hidden]."""
        out = []
        for video in videos:
            frames = video_frames(video)
            feats = self._vision(self._pixels(frames))
            self.resampler.infer({"image_features": feats})
            pooled = np.array(self.resampler.get_output_tensor(0).data, np.float32, copy=True)
            rows = self._project(pooled)
            out.append(rows.reshape(-1, rows.shape[-1]))
        return out

    def normalize_prompt(self, prompt: str, images: list[LLaVAImage], videos: list[np.ndarray] | None = None) -> str:
        """Video tags expanded first, then LLaVA's image tags (put before them)."""
        videos = videos or []
        prompt = prepend_tags(prompt, VIDEO_TAG, len(videos))
        prompt = expand_tags(prompt, VIDEO_TAG, (VIDEO_TAG * rows.shape[0] + "\n" for rows in videos))
        return super().normalize_prompt(prompt, images)

    def embed(self, ids: np.ndarray, images: list[LLaVAImage], videos: list[np.ndarray] | None = None) -> np.ndarray:
        emb = super().embed(ids, images)
        if videos:
            emb = merge_image_rows(emb, ids[0], self.video_token, videos)
        return emb
