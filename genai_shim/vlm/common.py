"""What every family's inputs embedder shares (the real's IInputsEmbedder): the model file names,
single images out of the user's tensors, the native-tag normalisation of a prompt and the text
embeddings model."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UserInputError

__all__ = ["TEXT_EMB_XML", "VISION_XML", "InputsEmbedder", "image_rows", "prepend_tags", "text_embeddings"]

VISION_XML = "openvino_vision_embeddings_model.xml"
TEXT_EMB_XML = "openvino_text_embeddings_model.xml"
_UNIVERSAL = "<ov_genai_image_"


def image_rows(image: Any) -> list[np.ndarray]:
    """[1|N, H, W, 3] or [H, W, 3] uint8 -> single images [1, H, W, 3] (the real's rule)."""
    data = np.asarray(image.data if isinstance(image, ov.Tensor) else image)
    if data.dtype != np.uint8:
        raise UserInputError(f"an image must be a uint8 ov.Tensor [1, H, W, 3] (NHWC), got dtype {data.dtype}")
    if data.ndim == 3:
        data = data[None]
    if data.ndim != 4:
        raise UserInputError(f"Input image must have [NHWC] or [HWC] layout, given image shape is {list(data.shape)}")
    if data.shape[3] != 3:
        raise UserInputError(f"an image must have 3 channels (RGB, NHWC), got shape {list(data.shape)}")
    return [np.ascontiguousarray(data[i : i + 1]) for i in range(data.shape[0])]


def prepend_tags(prompt: str, native_tag: str, n_images: int) -> str:
    """The real's IInputsEmbedder::normalize for native tags: a prompt with native tags must have
    one per image; one without gets a tag per image put before it."""
    if _UNIVERSAL in prompt:
        raise UserInputError(
            "genai_shim's VLMPipeline does not take the universal <ov_genai_image_i> tags yet; "
            f"use the native tag {native_tag} or none (images are put before the prompt)"
        )
    count = prompt.count(native_tag)
    if count and count != n_images:
        raise UserInputError(
            "The number of native vision tags must match the number of provided images/videos"
            " because it's ambiguous which input should be ignored."
        )
    return prompt if count else native_tag * n_images + prompt


def text_embeddings(request: Any, ids: np.ndarray) -> np.ndarray:
    """openvino_text_embeddings_model's output for ``ids`` [1, L], as an f32 copy."""
    request.infer({"input": ids})
    return np.array(request.get_output_tensor(0).data, dtype=np.float32, copy=True)


class InputsEmbedder(Protocol):
    """What VLMPipeline asks of a family's embedder (built as ``cls(core, folder, config.json,
    device, properties, tokenizer)``); an encoded image is the family's own record."""

    def encode_images(self, images: list[Any]) -> list[Any]: ...

    def normalize_prompt(self, prompt: str, images: list[Any]) -> str: ...

    def embed(self, ids: np.ndarray, images: list[Any]) -> np.ndarray: ...

    def token_embeddings(self, ids: np.ndarray) -> np.ndarray: ...

    def position_ids(self, ids: np.ndarray, images: list[Any]) -> tuple[np.ndarray, int]: ...

    def step_position_ids(self, length: int, delta: int) -> np.ndarray: ...
