"""The draft model of speculative decoding, shared by LLMPipeline and ContinuousBatchingPipeline:
what ``draft_model()`` returns, the default number of candidates, the tokenizer check."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.model_folder import model_folder
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import UserInputError

__all__ = [
    "DEFAULT_NUM_ASSISTANT_TOKENS",
    "DraftModel",
    "draft_model",
    "tokenizers_equal",
]

#: candidates per step when neither the pipeline's nor the call's config sets num_assistant_tokens
DEFAULT_NUM_ASSISTANT_TOKENS = 5
_TOKENIZER_PROBE = "Could you please tell me something about OpenVINO.GenAI?"


@dataclass
class DraftModel:
    """What :func:`draft_model` returns: a folder, a device ("" = the main model's) and its
    compile properties; pass it as ``LLMPipeline(..., draft_model=...)``."""

    models_path: Path
    device: str = ""
    properties: dict[str, Any] = field(default_factory=dict)


def draft_model(models_path: str | os.PathLike, device: str = "", **properties: Any) -> DraftModel:
    """``openvino_genai.draft_model(path, device, **properties)``: describe the draft model."""
    if not isinstance(models_path, (str, os.PathLike)):
        raise UserInputError(
            f"draft_model() takes a model folder path, got {type(models_path).__name__}"
        )
    folder = model_folder(models_path, "the draft model's optimum-intel export folder to draft_model()")
    if not isinstance(device, str):
        raise UserInputError(f"draft_model() device must be a str, got {type(device).__name__}")
    return DraftModel(folder, device.upper(), dict(properties))


def tokenizers_equal(lhs: Tokenizer, rhs: Tokenizer) -> bool:
    """The real ``are_tokenizers_equal``: same length of one probe encoding and the same
    BOS / EOS / PAD ids (it does not compare vocabularies)."""
    a = np.asarray(lhs.encode(_TOKENIZER_PROBE).input_ids.data).shape
    b = np.asarray(rhs.encode(_TOKENIZER_PROBE).input_ids.data).shape
    return (
        a == b
        and lhs.get_eos_token_id() == rhs.get_eos_token_id()
        and lhs.get_bos_token_id() == rhs.get_bos_token_id()
        and lhs.get_pad_token_id() == rhs.get_pad_token_id()
    )


