"""Synthetic Llama-family models: stateful optimum-layout IR, numpy reference, tokenizer IR, folders."""

from __future__ import annotations

from ov_npu_emu.modelbuilder.config import DTYPES
from ov_npu_emu.modelbuilder.config import PRESETS
from ov_npu_emu.modelbuilder.config import LlamaConfig
from ov_npu_emu.modelbuilder.config import get_preset
from ov_npu_emu.modelbuilder.folder import MANIFEST_NAME
from ov_npu_emu.modelbuilder.folder import MODEL_FILES
from ov_npu_emu.modelbuilder.folder import load_reference
from ov_npu_emu.modelbuilder.folder import load_weights
from ov_npu_emu.modelbuilder.folder import make_model_folder
from ov_npu_emu.modelbuilder.folder import read_manifest
from ov_npu_emu.modelbuilder.graph import MASK_MIN
from ov_npu_emu.modelbuilder.graph import build_model
from ov_npu_emu.modelbuilder.graph import kv_variable_ids
from ov_npu_emu.modelbuilder.reference import KVCache
from ov_npu_emu.modelbuilder.reference import LlamaReference
from ov_npu_emu.modelbuilder.tokenizer import CHAT_TEMPLATE
from ov_npu_emu.modelbuilder.tokenizer import ByteLevelVocab
from ov_npu_emu.modelbuilder.tokenizer import build_tokenizer
from ov_npu_emu.modelbuilder.tokenizer import build_vocab
from ov_npu_emu.modelbuilder.weights import LlamaWeights
from ov_npu_emu.modelbuilder.weights import StoredWeight
from ov_npu_emu.modelbuilder.weights import init_weights

__all__ = [
    # configuration
    "LlamaConfig",
    "PRESETS",
    "DTYPES",
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
