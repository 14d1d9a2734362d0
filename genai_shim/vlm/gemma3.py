"""Gemma 3's inputs embedder as openvino.genai's (visual_language/gemma3/classes.cpp): each image
resized to ``size`` {height, width} of preprocessor_config.json (Pillow's bilinear in fixed point,
no crop, no pan-and-scan) and normalised ``(x / 255 - mean) / std`` in f32, then
``openvino_vision_embeddings_model`` (SigLIP tower and the pooling projector: ``mm_tokens_per_image``
rows); each ``<start_of_image>`` tag expands to ``"\\n\\n<start_of_image>"``, one
``<image_soft_token>`` per row, ``"<end_of_image>\\n\\n"``, whose text embeddings the image rows
replace (as LLaVA's merge). The language model also takes ``token_type_ids`` (1 on the soft
tokens: the export's mask lets an image's tokens see each other, bidirectionally; 0 on every
decode step) and 1-based positions. The chat template loses its ``| trim`` filters (which would
strip the expansion's newlines), as the real patches it at construction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.vlm.common import (
    TEXT_EMB_XML,
    VISION_XML,
    Placement,
    expand_tags,
    image_processor_json,
    image_rows,
    prepend_tags,
    text_embeddings,
)
from genai_shim.vlm.llava import LLaVAImage, clip_normalize, merge_image_rows, pillow_bilinear

__all__ = ["END_OF_IMAGE", "Gemma3Config", "Gemma3Embedder", "IMAGE_SOFT_TOKEN", "START_OF_IMAGE",
           "patch_chat_template"]

#: the real's VLMConfig defaults (native and automatic tag, the image token, the closing token)
START_OF_IMAGE = "<start_of_image>"
IMAGE_SOFT_TOKEN = "<image_soft_token>"
END_OF_IMAGE = "<end_of_image>"


@dataclass(frozen=True)
class Gemma3Config:
    """The preprocessor_config.json fields Gemma 3 reads (the real's ProcessorConfig defaults)."""

    height: int = 896
    width: int = 896
    image_mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    image_std: tuple[float, ...] = (1.0, 1.0, 1.0)

    @classmethod
    def read(cls, folder: Path) -> Gemma3Config:
        data = image_processor_json(folder)
        if not data:
            return cls()
        kw: dict[str, Any] = {}
        size = data.get("size") or {}
        if "height" in size:
            kw["height"] = int(size["height"])
        if "width" in size:
            kw["width"] = int(size["width"])
        for key in ("image_mean", "image_std"):
            if key in data:
                value = data[key]
                kw[key] = tuple(float(v) for v in (value if isinstance(value, list) else [value] * 3))
        return cls(**kw)


def patch_chat_template(template: str) -> str:
    """The real's InputsEmbedderGemma3::patch_chat_template: every ``| trim`` removed."""
    return template.replace("| trim", "")


class Gemma3Embedder:
    """Images -> pooled SigLIP features; prompt ids -> text embeddings with the image rows in,
    token_type_ids; 1-based positions."""

    #: the family's native image tag (universal tags become it)
    native_tag = START_OF_IMAGE

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        self.cfg = Gemma3Config.read(folder)
        self.vision = placement.request(core, core.read_model(folder / VISION_XML), "vision_embeddings")
        self.text = placement.request(core, core.read_model(folder / TEXT_EMB_XML), "text_embeddings")
        ids = tokenizer.encode(IMAGE_SOFT_TOKEN, add_special_tokens=False).input_ids.data[0]
        self.image_token = int(ids[-1])
        template = tokenizer.chat_template
        if template:
            tokenizer.set_chat_template(patch_chat_template(template))

    def encode_images(self, images: list[Any]) -> list[LLaVAImage]:
        return [self._encode(row[0]) for image in images for row in image_rows(image)]

    def _encode(self, image: np.ndarray) -> LLaVAImage:
        c = self.cfg
        resized = pillow_bilinear(image, c.width, c.height)
        self.vision.infer({"pixel_values": clip_normalize(resized, c.image_mean, c.image_std)})
        out = np.array(self.vision.get_output_tensor(0).data, dtype=np.float32, copy=True)
        return LLaVAImage(out.reshape(-1, out.shape[-1]))

    def normalize_prompt(self, prompt: str, images: list[LLaVAImage]) -> str:
        """A ``<start_of_image>`` per image before the prompt unless it has them; each becomes
        ``\\n\\n<start_of_image>`` + a soft token per feature row + ``<end_of_image>\\n\\n``."""
        prompt = prepend_tags(prompt, START_OF_IMAGE, len(images))
        return expand_tags(prompt, START_OF_IMAGE, (
            "\n\n" + START_OF_IMAGE + IMAGE_SOFT_TOKEN * im.features.shape[0] + END_OF_IMAGE + "\n\n" for im in images))

    def embed(self, ids: np.ndarray, images: list[LLaVAImage]) -> np.ndarray:
        """Text embeddings; with images, each run of soft tokens takes its image's rows (the
        real's merge_text_and_image_embeddings_llava)."""
        emb = text_embeddings(self.text, ids)
        if not images:
            return emb
        return merge_image_rows(emb, ids[0], self.image_token, [im.features for im in images])

    def token_embeddings(self, ids: np.ndarray) -> np.ndarray:
        return text_embeddings(self.text, ids)

    def position_ids(self, ids: np.ndarray, images: list[LLaVAImage]) -> tuple[np.ndarray, int]:
        """1-based, as the real's (and optimum-intel's) Gemma 3."""
        return np.arange(1, ids.shape[1] + 1, dtype=np.int64)[None], 0

    def step_position_ids(self, length: int, delta: int) -> np.ndarray:
        return np.array([[length]], np.int64)

    def lm_inputs(self, ids: np.ndarray, images: list[LLaVAImage]) -> dict[str, np.ndarray]:
        """token_type_ids [1, L]: 1 on the image soft tokens when there are images, else all 0."""
        if not images:
            return {"token_type_ids": np.zeros(ids.shape, np.int64)}
        return {"token_type_ids": (ids == self.image_token).astype(np.int64)}

    def step_lm_inputs(self) -> dict[str, np.ndarray]:
        return {"token_type_ids": np.zeros((1, 1), np.int64)}
