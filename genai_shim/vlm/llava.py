"""LLaVA's inputs embedder as openvino.genai's (visual_language/llava/classes.cpp, clip.cpp): CLIP
preprocessing on the host — the shortest edge resized to ``size.shortest_edge`` with Pillow's
bicubic in fixed point (a = -0.5, 22 fraction bits), a centre crop to ``crop_size``,
``(x / 255 - mean) / std`` in f32 — then ``openvino_vision_embeddings_model`` (CLIP tower and
projector: one row per patch); each ``<image>`` tag expands to that many ``<image>`` tokens and a
newline, whose text embeddings the image rows replace; positions are plain ``[1, L]``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.vlm.common import (
    TEXT_EMB_XML,
    VISION_XML,
    Placement,
    center_crop_box,
    clip_normalize,
    expand_tags,
    image_processor_json,
    image_rows,
    pillow_bicubic,
    pillow_bilinear,
    pillow_resize,
    prepend_tags,
    text_embeddings,
)
from ov_npu_emu.errors import UserInputError

# (clip_normalize and the Pillow resizes live in common.py; re-exported here for their callers)
__all__ = ["CLIPConfig", "LLaVAEmbedder", "LLaVAImage", "clip_normalize", "clip_pixels",
           "merge_image_rows", "pillow_bicubic", "pillow_bilinear", "pillow_resize"]

#: the real's VLMConfig::im_start (native and automatic tag, and the image token)
IMAGE_TAG = "<image>"


@dataclass(frozen=True)
class CLIPConfig:
    """The preprocessor_config.json fields LLaVA reads (the real's ProcessorConfig defaults)."""

    shortest_edge: int = 336
    crop_height: int = 336
    crop_width: int = 336
    image_mean: tuple[float, ...] = (0.48145466, 0.4578275, 0.40821073)
    image_std: tuple[float, ...] = (0.26862954, 0.26130258, 0.27577711)

    @classmethod
    def read(cls, folder: Path) -> CLIPConfig:
        data = image_processor_json(folder)
        if not data:
            return cls()
        kw: dict[str, Any] = {}
        size, crop = data.get("size") or {}, data.get("crop_size") or {}
        if "shortest_edge" in size:
            kw["shortest_edge"] = int(size["shortest_edge"])
        if "height" in crop:
            kw["crop_height"] = int(crop["height"])
        if "width" in crop:
            kw["crop_width"] = int(crop["width"])
        for key in ("image_mean", "image_std"):
            if key in data:
                kw[key] = tuple(float(v) for v in data[key])
        return cls(**kw)


def clip_pixels(image: np.ndarray, c: CLIPConfig) -> np.ndarray:
    """[H, W, 3] uint8 -> [1, 3, crop_h, crop_w] f32 as the real's preprocess_clip_image_llava: the
    shortest edge to ``shortest_edge`` (scale in f32, sizes truncated, never under the crop),
    Pillow's bicubic, a centre crop, CLIP's normalisation."""
    h, w = image.shape[:2]
    scale = np.float32(c.shortest_edge) / np.float32(min(w, h))
    new_w = max(int(np.float32(w) * scale), c.crop_width)
    new_h = max(int(np.float32(h) * scale), c.crop_height)
    # only the centre crop is resized (the same pixels): a 1x100000 image would otherwise build a
    # 56 x 5.6M intermediate (docs/genai_shim.md "Extreme aspect ratios")
    crop = pillow_bicubic(image, new_w, new_h, center_crop_box(new_h, new_w, c.crop_height, c.crop_width))
    return clip_normalize(crop, c.image_mean, c.image_std)


def merge_image_rows(emb: np.ndarray, row: np.ndarray, image_token: int, features: list[np.ndarray]) -> np.ndarray:
    """``emb`` [1, L, hidden] with each run of ``image_token`` in ``row`` taking its image's
    feature rows, from the end backwards as the real's merge_text_and_image_embeddings_llava (a
    truncated prefix loses the first images, not the last)."""
    end = row.size - 1
    for feats in reversed(features):
        while end >= 0 and row[end] != image_token:
            end -= 1
        if end < 0:
            break
        start = end
        while start >= 0 and row[start] == image_token:
            start -= 1
        n = min(feats.shape[0], end - start)
        emb[0, start + 1 : start + 1 + n] = feats[feats.shape[0] - n :]
        end -= n + 1
    return emb


@dataclass
class LLaVAImage:
    features: np.ndarray  # [rows, hidden] projected patch embeddings
    #: the image tokens the prompt gets, where a family counts them apart from the rows (the
    #: real's num_image_tokens; the merge then fills what the rows cover)
    tokens: int | None = None


class LLaVAEmbedder:
    """Images -> projected CLIP features; prompt ids -> text embeddings with the image rows in;
    plain positions."""

    #: the family's native image tag (universal tags become it)
    native_tag = IMAGE_TAG

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        self.cfg = CLIPConfig.read(folder)
        self.vision = placement.request(core, core.read_model(folder / VISION_XML), "vision_embeddings")
        self.text = placement.request(core, core.read_model(folder / TEXT_EMB_XML), "text_embeddings")
        ids = tokenizer.encode(IMAGE_TAG, add_special_tokens=False).input_ids.data[0]
        self.image_token = int(ids[-1])

    def encode_images(self, images: list[Any]) -> list[LLaVAImage]:
        return [self._encode(row[0]) for image in images for row in image_rows(image)]

    def _encode(self, image: np.ndarray) -> LLaVAImage:
        self.vision.infer({"pixel_values": clip_pixels(image, self.cfg)})
        out = np.array(self.vision.get_output_tensor(0).data, dtype=np.float32, copy=True)
        return LLaVAImage(out.reshape(-1, out.shape[-1]))

    def normalize_prompt(self, prompt: str, images: list[LLaVAImage]) -> str:
        """A tag per image before the prompt unless it has them; each tag -> one ``<image>`` per
        feature row and a newline (the real's normalize_prompt)."""
        prompt = prepend_tags(prompt, IMAGE_TAG, len(images))
        return expand_tags(prompt, IMAGE_TAG, (
            IMAGE_TAG * (im.features.shape[0] if im.tokens is None else im.tokens) + "\n" for im in images))

    def embed(self, ids: np.ndarray, images: list[LLaVAImage]) -> np.ndarray:
        """Text embeddings with each run of image tokens taking its image's rows, from the
        end backwards as the real's merge_text_and_image_embeddings_llava (a truncated prefix
        loses the first images, not the last)."""
        emb = text_embeddings(self.text, ids)
        row = ids[0]
        if not images:
            if np.any(row == self.image_token):
                raise UserInputError(
                    f"the prompt has {IMAGE_TAG} tokens but no image was given; pass the images with images=[...]")
            return emb
        return merge_image_rows(emb, row, self.image_token, [im.features for im in images])

    def token_embeddings(self, ids: np.ndarray) -> np.ndarray:
        return text_embeddings(self.text, ids)

    def position_ids(self, ids: np.ndarray, images: list[LLaVAImage], videos: list[Any] | None = None
                     ) -> tuple[np.ndarray, int]:
        """Plain positions 0..L-1 (images and videos take no part)."""
        return np.arange(ids.shape[1], dtype=np.int64)[None], 0

    def step_position_ids(self, length: int, delta: int) -> np.ndarray:
        return np.array([[length - 1]], np.int64)

    def lm_inputs(self, ids: np.ndarray, images: list[Any]) -> dict[str, np.ndarray]:
        """The language model's inputs besides inputs_embeds / attention_mask / position_ids /
        beam_idx for the prompt ``ids``: none for this family."""
        return {}

    def step_lm_inputs(self) -> dict[str, np.ndarray]:
        """The same for one decode step."""
        return {}
