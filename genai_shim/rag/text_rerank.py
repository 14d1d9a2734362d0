"""TextRerankPipeline: openvino.genai's (src/cpp/src/rag/text_rerank_pipeline.cpp) over
ov_npu_emu.Core, for cross-encoders (optimum-intel ``--task text-classification``).

The query and each document are tokenized as a pair (the tokenizer loaded with
``add_second_input=True``; the pair's token type ids go to the model), the scores are the
sigmoid of a one-logit head or the softmax's second class of a two-class head (fused on the
model's output, as the real), sorted best first and cut to ``top_n``.  Qwen3-style decoder
rerankers (``model_type`` "qwen3", or a model with ``position_ids`` / ``beam_idx``) are refused
with a typed error for now.  The model compiles as it is on any device, as the real (no NPU
path: a dynamic model on the emulated NPU is its DynamicShapeError).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset8 as op8
from openvino import opset1 as op1

from genai_shim.rag.config import KeyedConfig, check_properties, opt_bool, opt_int, opt_str
from genai_shim.tokenizer import Tokenizer, token_type_ids
from ov_npu_emu.errors import ConfigError, IRReadError, UnsupportedFeatureError, UserTypeError

__all__ = ["TextRerankConfig", "TextRerankPipeline"]

MODEL_XML = "openvino_model.xml"


class TextRerankConfig(KeyedConfig):
    """``TextRerankPipeline.Config``: ``top_n`` (3), ``max_length``, ``pad_to_max_length``,
    ``padding_side`` (None).  ``Config(**keys)``; another key is a ConfigError (the real ignores it)."""

    top_n: int
    max_length: int | None
    pad_to_max_length: bool | None
    padding_side: str | None

    _NAME = "TextRerankPipeline.Config"
    _DEFAULTS = {"top_n": 3, "max_length": None, "pad_to_max_length": None, "padding_side": None}

    @staticmethod
    def _convert(key: str, value: Any, *, from_map: bool) -> Any:
        return _convert(key, value, from_map=from_map)


RERANK_KEYS = TextRerankConfig.keys()


def _convert(key: str, value: Any, *, from_map: bool) -> Any:
    if key == "top_n":
        if value is None:
            raise UserTypeError("top_n must be an int, got None")
        return opt_int(key, value, from_map=from_map)
    if key == "max_length":
        return opt_int(key, value, from_map=from_map)
    if key == "pad_to_max_length":
        return opt_bool(key, value, from_map=from_map)
    return opt_str(key, value)


def _make_core() -> Any:
    from ov_npu_emu import Core

    return Core()


def _scores_head(model: ov.Model) -> ov.Model:
    """Sigmoid of a one-logit head; else the softmax over the classes, class 1 kept ([batch, 1])."""
    result = model.get_results()[0]
    source = result.input_value(0)
    names = source.get_names()
    if source.get_partial_shape()[1] == 1:
        node = op1.sigmoid(source)
    else:
        one = op1.constant(np.array([1], dtype=np.int64))
        node = op8.slice(op8.softmax(source, 1), one, op1.constant(np.array([2], dtype=np.int64)), one, one)
    source.get_tensor().set_names(set())
    node.output(0).get_tensor().set_names(names)
    result.input(0).replace_source_output(node.output(0))
    model.validate_nodes_and_infer_types()
    return model


class TextRerankPipeline:
    """``TextRerankPipeline(models_path, device, config=None, **properties)``."""

    Config = TextRerankConfig

    def __init__(self, models_path: str | os.PathLike[str], device: str,
                 config: TextRerankConfig | None = None, **properties: Any) -> None:
        if not isinstance(models_path, (str, os.PathLike)):
            raise UserTypeError(f"models_path must be a folder path, got {type(models_path).__name__}")
        if config is not None and not isinstance(config, TextRerankConfig):
            raise UserTypeError(f"config must be a TextRerankPipeline.Config, got {type(config).__name__}")
        if config is None:
            config = TextRerankConfig(**{k: v for k, v in properties.items() if k in RERANK_KEYS})
            properties = {k: v for k, v in properties.items() if k not in (*RERANK_KEYS, "truncation")}
        else:
            config = config.copy()
        folder = Path(models_path)
        if not (folder / MODEL_XML).is_file():
            raise IRReadError(f"{folder / MODEL_XML} was not found; pass the folder optimum-cli exported "
                              "(optimum-cli export openvino --task text-classification)")
        cfg_path = folder / "config.json"
        model_type = json.loads(cfg_path.read_text(encoding="utf-8")).get("model_type") if cfg_path.is_file() else None
        if model_type == "qwen3":
            raise UnsupportedFeatureError("genai_shim's TextRerankPipeline runs cross-encoders (BERT-style "
                                          "text-classification exports); Qwen3 rerankers are not implemented yet",
                                          key="model_type")
        self._config = config
        self._tokenization: dict[str, Any] = {"truncation": True}
        for key in ("max_length", "pad_to_max_length", "padding_side"):
            if getattr(config, key) is not None:
                self._tokenization[key] = getattr(config, key)
        self._tokenizer = Tokenizer(folder, add_second_input=True)
        core = _make_core()
        model = core.read_model(folder / MODEL_XML)
        inputs = {n for port in model.inputs for n in port.get_names()}
        if {"position_ids", "beam_idx"} & inputs:
            raise UnsupportedFeatureError("genai_shim's TextRerankPipeline runs encoder cross-encoders; a decoder "
                                          "reranker (position_ids / beam_idx inputs) is not implemented yet",
                                          key="model_type")
        self._token_types = "token_type_ids" in inputs
        model = _scores_head(model)
        if device.split(".")[0].upper() == "CPU":
            check_properties(core, device, properties)
        self._request = core.compile_model(model, device, properties).create_infer_request()
        self._started = False

    def rerank(self, query: str, texts: list[str]) -> list[tuple[int, float]]:
        """(document index, score) pairs, the best first, at most ``top_n``."""
        self.start_rerank_async(query, texts)
        return self.wait_rerank()

    def start_rerank_async(self, query: str, texts: list[str]) -> None:
        if not isinstance(query, str):
            raise UserTypeError(f"query must be a str, got {type(query).__name__}")
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not all(
                isinstance(t, str) for t in texts):
            raise UserTypeError(f"texts must be a list of str, got {type(texts).__name__}")
        encoded = self._tokenizer.encode([query], list(texts), **self._tokenization)
        self._request.set_tensor("input_ids", encoded.input_ids)
        self._request.set_tensor("attention_mask", encoded.attention_mask)
        types = token_type_ids(encoded)
        if self._token_types:
            if types is None:  # the real leaves the input unset: the model's own shape error
                types = ov.Tensor(np.zeros(tuple(encoded.input_ids.shape), dtype=np.int64))
            self._request.set_tensor("token_type_ids", types)
        self._request.start_async()
        self._started = True

    def wait_rerank(self) -> list[tuple[int, float]]:
        if not self._started:
            raise ConfigError("nothing to wait for: call start_rerank_async() first")
        self._request.wait()
        scores = np.asarray(self._request.get_tensor("logits").data, dtype=np.float32).reshape(-1)
        order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
        return [(i, float(scores[i])) for i in order[: self._config.top_n]]
