"""Synthetic Llama-family models: optimum-layout IR, numpy reference, tokenizer IR, folders."""

from __future__ import annotations

from ov_npu_emu.modelbuilder.config import (
    ARCHITECTURES,
    DTYPES,
    GROUP_SIZES,
    PRESETS,
    LlamaConfig,
    get_preset,
)
from ov_npu_emu.modelbuilder.folder import (
    MANIFEST_NAME,
    MODEL_FILES,
    load_reference,
    load_weights,
    make_model_folder,
    read_manifest,
)
from ov_npu_emu.modelbuilder.graph import MASK_MIN, build_model, kv_variable_ids
from ov_npu_emu.modelbuilder.reference import KVCache, LlamaReference
from ov_npu_emu.modelbuilder.tokenizer import (
    CHAT_TEMPLATE,
    ByteLevelVocab,
    build_tokenizer,
    build_vocab,
)
from ov_npu_emu.modelbuilder.weights import LlamaWeights, StoredWeight, init_weights

__all__ = [
    # configuration
    "LlamaConfig",
    "PRESETS",
    "ARCHITECTURES",
    "DTYPES",
    "GROUP_SIZES",
    "get_preset",
    # weights and graph
    "LlamaWeights",
    "StoredWeight",
    "init_weights",
    "build_model",
    "kv_variable_ids",
    "MASK_MIN",
    # reference
    "LlamaReference",
    "KVCache",
    # tokenizer
    "ByteLevelVocab",
    "build_vocab",
    "build_tokenizer",
    "CHAT_TEMPLATE",
    # folders
    "make_model_folder",
    "read_manifest",
    "load_weights",
    "load_reference",
    "MANIFEST_NAME",
    "MODEL_FILES",
]
