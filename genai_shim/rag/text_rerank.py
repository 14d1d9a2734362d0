"""TextRerankPipeline: openvino.genai's (src/cpp/src/rag/text_rerank_pipeline.cpp) over
ov_npu_emu.Core, for cross-encoders (optimum-intel ``--task text-classification``) and
Qwen3-style rerankers.

A cross-encoder: the query and each document are tokenized as a pair (the tokenizer loaded with
``add_second_input=True``; the pair's token type ids go to the model), the scores are the sigmoid
of a one-logit head or the softmax's second class of a two-class head (fused on the model's
output, as the real), sorted best first and cut to ``top_n``.

A Qwen3 model (``model_type`` "qwen3" in config.json, as the real detects it): the tokenizer
takes one input, so each text is ``query + document`` (the caller formats both, as the
Qwen3-Reranker recipe); a ``--task text-generation(-with-past)`` export gives ``logits [batch,
seq, vocab]`` and the score is the softmax over the ``"no"`` and ``"yes"`` logits of the LAST
column, ``"yes"`` kept (the real reads the last column whatever the padding side: with padding
on the right a shorter text is scored at a pad token, so such a model wants ``padding_side=
"left"``, as its tokenizer from the recipe has); a seq-cls export (``logits [batch, 1]``) is a
sigmoid.  ``position_ids`` (the real's: a running count of the mask, pads included) and
``beam_idx`` (zeros) are fed when the model has them, and a stateful model's state is reset after
each call.  Another decoder whose head gives token logits is refused (the real would score a
softmax over the sequence axis).

The model compiles as it is on any device, as the real (no NPU path: a dynamic model on the
emulated NPU is its DynamicShapeError).
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


def _i64(values: list[int]) -> Any:
    return op1.constant(np.array(values, dtype=np.int64))


def _yes_no_scores(source: Any, no_id: int, yes_id: int) -> Any:
    """The real's Qwen3 post-processing: logits [batch, seq, vocab] -> the last column ->
    softmax over the ("no", "yes") logits -> "yes" ([batch])."""
    last, stop, one = _i64([-1]), _i64([np.iinfo(np.int64).max]), _i64([1])
    column = op1.squeeze(op8.slice(source, last, stop, one, one), one)
    pair = op8.softmax(op8.gather(column, _i64([no_id, yes_id]), one), 1)
    return op1.squeeze(op8.slice(pair, last, stop, one, one), one)


def _scores_head(model: ov.Model, yes_no: tuple[int, int] | None = None) -> ov.Model:
    """Sigmoid of a one-logit head; else the softmax over the classes, class 1 kept ([batch, 1]),
    or for a Qwen3 model (``yes_no``: the "no" and "yes" ids) the last column's yes/no softmax."""
    result = model.get_results()[0]
    source = result.input_value(0)
    names = source.get_names()
    if source.get_partial_shape()[1] == 1:
        node = op1.sigmoid(source)
    elif yes_no is not None:
        node = _yes_no_scores(source, *yes_no)
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
        is_qwen3 = model_type == "qwen3"
        self._config = config
        self._tokenization: dict[str, Any] = {"truncation": True}
        for key in ("max_length", "pad_to_max_length", "padding_side"):
            if getattr(config, key) is not None:
                self._tokenization[key] = getattr(config, key)
        # a Qwen3 tokenizer takes one input: query + document (the real's add_second_input(!is_qwen3))
        self._tokenizer = Tokenizer(folder, add_second_input=not is_qwen3)
        core = _make_core()
        model = core.read_model(folder / MODEL_XML)
        inputs = {n for port in model.inputs for n in port.get_names()}
        self._token_types = "token_type_ids" in inputs
        self._position_ids = "position_ids" in inputs
        self._beam_idx = "beam_idx" in inputs
        yes_no = _yes_no_ids(self._tokenizer, folder) if is_qwen3 else None
        logits = model.outputs[0].get_partial_shape()
        if yes_no is None and logits.rank.is_static and logits.rank.get_length() == 3 and logits[1] != 1:
            raise UnsupportedFeatureError(
                f"{folder / MODEL_XML} gives token logits {logits} (a causal LM) and config.json's model_type is "
                f"{model_type!r}: TextRerankPipeline scores such a model only as a Qwen3 reranker (model_type "
                "'qwen3', the 'yes'/'no' logits); export a cross-encoder with --task text-classification",
                key="model_type")
        model = _scores_head(model, yes_no)
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
        if self._tokenizer.supports_paired_input():
            encoded = self._tokenizer.encode([query], list(texts), **self._tokenization)
        else:
            encoded = self._tokenizer.encode([query + text for text in texts], **self._tokenization)
        self._request.set_tensor("input_ids", encoded.input_ids)
        self._request.set_tensor("attention_mask", encoded.attention_mask)
        types = token_type_ids(encoded)
        if self._token_types:
            if types is None:  # the real leaves the input unset: the model's own shape error
                types = ov.Tensor(np.zeros(tuple(encoded.input_ids.shape), dtype=np.int64))
            self._request.set_tensor("token_type_ids", types)
        if self._position_ids:
            mask = np.asarray(encoded.attention_mask.data, dtype=np.int64)
            # the real's initialize_position_ids: each token gets the count of real tokens before it
            positions = np.cumsum(mask, axis=1) - mask
            self._request.set_tensor("position_ids", ov.Tensor(np.ascontiguousarray(positions, dtype=np.int64)))
        if self._beam_idx:
            self._request.set_tensor("beam_idx", ov.Tensor(np.zeros(int(encoded.input_ids.shape[0]), dtype=np.int32)))
        self._request.start_async()
        self._started = True

    def wait_rerank(self) -> list[tuple[int, float]]:
        if not self._started:
            raise ConfigError("nothing to wait for: call start_rerank_async() first")
        self._request.wait()
        scores = np.asarray(self._request.get_tensor("logits").data, dtype=np.float32).reshape(-1)
        order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
        if self._beam_idx:  # a stateful export: the next call starts from an empty past
            self._request.reset_state()
        return [(i, float(scores[i])) for i in order[: self._config.top_n]]


def _yes_no_ids(tokenizer: Tokenizer, folder: Path) -> tuple[int, int]:
    """The "no" and "yes" token ids of a Qwen3 reranker's vocab (the real's vocab.at())."""
    vocab = tokenizer.get_vocab()
    missing = [w for w in ("yes", "no") if w.encode() not in vocab]
    if missing:
        raise ConfigError(f"{folder} is a Qwen3 model (config.json model_type 'qwen3') but its tokenizer has no "
                          f"{' and no '.join(repr(w) for w in missing)} token: a Qwen3 reranker is scored by the "
                          "'yes'/'no' logits; export its own tokenizer with the model", key="model_type")
    return vocab[b"no"], vocab[b"yes"]
