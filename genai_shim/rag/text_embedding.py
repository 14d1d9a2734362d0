"""TextEmbeddingPipeline: openvino.genai's (src/cpp/src/rag/text_embedding_pipeline.cpp) over
ov_npu_emu.Core, for feature-extraction exports (optimum-intel ``--task feature-extraction``:
BERT-style encoders, Qwen3-Embedding-style decoders).

The tokenizer always truncates (to ``max_length``, else to the tokenizer IR's own limit), pads
as configured; the model gets ``token_type_ids`` of zeros when it has that input (the real's
"todo"); pooling and L2 normalisation are fused on the model's output as the real fuses them
(genai_shim/rag/postprocess.py), and with ``batch_size`` or ``max_length`` the model is
reshaped first.  On "NPU" the real's static path (``batch_size``, ``max_length`` and
``pad_to_max_length`` set): the fixed-shape model with pooling fused, compiled on "NPU" as given
(the emulated NPU, or NPUW with ``NPU_USE_NPUW=YES``); otherwise the real's dynamic path: the
model as exported compiled by NPUW's text-embedding mode (``NPUW_TEXT_EMBED``, keys as the real's
``update_npu_config_text_embedding``), pooling and normalisation as a post model on CPU fed with
the call's mask zero-padded to the hidden states' length.  As the real, that path takes one text
per call (a typed error for more).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.rag.config import CONFIG_KEYS, PoolingType, TextEmbeddingConfig, check_properties
from genai_shim.rag.postprocess import apply_postprocessing, create_post_model, has_token_type_ids, reshape_model
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import ConfigError, IRReadError, UnsupportedFeatureError, UserInputError, UserTypeError

__all__ = ["PoolingType", "TextEmbeddingConfig", "TextEmbeddingPipeline"]

logger = logging.getLogger(__name__)

MODEL_XML = "openvino_model.xml"

_DROPPED_KEYS = ("truncation",)


def _max_position_embeddings(folder: Path) -> int | None:
    path = folder / "config.json"
    if not path.is_file():
        return None
    value = json.loads(path.read_text(encoding="utf-8")).get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def _make_core() -> Any:
    from ov_npu_emu import Core

    return Core()


def _check_npu_dynamic(config: TextEmbeddingConfig, fixed_len: bool) -> None:
    """The real's refusal before NPUW's text-embedding mode: left padding of a fixed length with
    CLS / LAST_TOKEN pooling."""
    if config.padding_side == "left" and fixed_len and config.pooling_type != PoolingType.MEAN:
        raise ConfigError("Padding on left is only supported for the MEAN pooling type for dynamic inputs models. "
                          "In order to fix model shape, set batch_size, max_length and pad_to_max_length in the "
                          "configuration.", key="padding_side")


def _npu_text_embedding_config(config: TextEmbeddingConfig, properties: dict[str, Any],
                               model: Any) -> dict[str, Any]:
    """The real's ``get_npu_text_embedding_config``: MAX_PROMPT_LEN = max_length, else the
    MAX_PROMPT_LEN property (popped) or 1024; MIN_RESPONSE_LEN the same; then
    ``update_npu_config_text_embedding`` adds the NPUW keys the caller did not set."""
    from genai_shim.npu_config import DEFAULT_MAX_PROMPT_LEN, _pop_int, get_kv_axes_pos

    props = dict(properties)
    for key in ("BLOB_PATH", "EXPORT_BLOB"):
        if key in props:
            # the real imports / exports the NPUW text-embedding blob here
            raise UnsupportedFeatureError(
                f"{key}: importing or exporting the NPU text-embedding model is not built yet in genai_shim; "
                "drop the key (the model is compiled at construction)", key=key)
    if config.max_length is not None:
        max_prompt = config.max_length
    else:
        max_prompt = _pop_int(props, "MAX_PROMPT_LEN", DEFAULT_MAX_PROMPT_LEN)
    batch_dim, seq_dim = get_kv_axes_pos(model)
    for key, value in (("NPU_USE_NPUW", "YES"), ("NPUW_LLM", "YES"), ("NPUW_LLM_BATCH_DIM", batch_dim),
                       ("NPUW_LLM_SEQ_LEN_DIM", seq_dim), ("NPUW_LLM_MAX_PROMPT_LEN", max_prompt),
                       ("NPUW_LLM_MIN_RESPONSE_LEN", max_prompt), ("NPUW_LLM_SHARED_HEAD", "NO"),
                       ("NPUW_TEXT_EMBED", "YES")):
        props.setdefault(key, value)
    return props


def _texts(texts: Any) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not all(
            isinstance(t, str) for t in texts):
        raise UserTypeError(f"texts must be a list of str, got {type(texts).__name__}")
    if not texts:
        # the real crashes the process here (measured, 2026.4.1: SIGSEGV)
        raise UserInputError("embed_documents() needs at least one text; got an empty list")
    return list(texts)


def _text(text: Any) -> str:
    if not isinstance(text, str):
        raise UserTypeError(f"text must be a str, got {type(text).__name__}")
    return text


class TextEmbeddingPipeline:
    """``TextEmbeddingPipeline(models_path, device, config=None, **properties)``.

    Without ``config`` the config keys (``TextEmbeddingPipeline.Config``'s fields) are read from
    ``properties`` and the rest go to the device's compile; with ``config`` every property goes
    to the compile, as the real.
    """

    PoolingType = PoolingType
    Config = TextEmbeddingConfig

    def __init__(self, models_path: str | os.PathLike[str], device: str,
                 config: TextEmbeddingConfig | None = None, **properties: Any) -> None:
        if not isinstance(models_path, (str, os.PathLike)):
            raise UserTypeError(f"models_path must be a folder path, got {type(models_path).__name__}")
        if not isinstance(device, str):
            raise UserTypeError(f"device must be a str, got {type(device).__name__}")
        if config is not None and not isinstance(config, TextEmbeddingConfig):
            raise UserTypeError(f"config must be a TextEmbeddingPipeline.Config, got {type(config).__name__}")
        if "text_embedding_config" in properties:
            raise ConfigError("pass a TextEmbeddingPipeline.Config as config=, not as the text_embedding_config "
                              "property (the real TextEmbeddingPipeline ignores it)", key="text_embedding_config")
        if config is None:
            config = TextEmbeddingConfig(**{k: v for k, v in properties.items() if k in CONFIG_KEYS})
            properties = {k: v for k, v in properties.items() if k not in CONFIG_KEYS + _DROPPED_KEYS}
        else:
            config = config.copy()
        folder = Path(models_path)
        if not (folder / MODEL_XML).is_file():
            raise IRReadError(f"{folder / MODEL_XML} was not found; pass the folder optimum-cli exported "
                              "(optimum-cli export openvino --task feature-extraction)")
        self._config = config
        self._tokenizer = Tokenizer(folder)
        config.validate()
        self._tokenization: dict[str, Any] = {"truncation": True}
        if config.max_length is not None:
            self._tokenization["max_length"] = config.max_length
        if config.pad_to_max_length is not None:
            self._tokenization["pad_to_max_length"] = config.pad_to_max_length
        if config.padding_side is not None:
            self._tokenization["padding_side"] = config.padding_side
        is_npu = device.split(".")[0].upper() == "NPU"
        fixed_len = config.max_length is not None and bool(config.pad_to_max_length)
        npuw_mode = is_npu and (config.batch_size is None or not fixed_len)
        if npuw_mode:
            _check_npu_dynamic(config, fixed_len)
        core = _make_core()
        model = core.read_model(folder / MODEL_XML)
        self._post: Any = None
        if npuw_mode:
            # the real's dynamic NPU path: the model as exported, compiled by NPUW's text-embedding
            # mode (hidden states [1, P, hidden]); pooling and normalisation as a post model on CPU
            self._post = core.compile_model(create_post_model(model, config), "CPU").create_infer_request()
            compiled = core.compile_model(model, device, _npu_text_embedding_config(config, properties, model))
            self._request = compiled.create_infer_request()
            self._token_types = has_token_type_ids(compiled)
            self._started = False
            self._mask: Any = None
            return
        if config.batch_size is not None or config.max_length is not None:
            limit = _max_position_embeddings(folder)
            if config.max_length is not None and limit is not None and config.max_length > limit:
                logger.warning("max_length is set to %d which is greater than models max_position_embeddings "
                               "(%d). Some models may fail with such configuration.", config.max_length, limit)
            # on NPU: the real's static path, a fixed batch_size x max_length model compiled on
            # "NPU" as given (the emulated NPU, or NPUW with NPU_USE_NPUW=YES)
            reshape_model(model, config)
        model = apply_postprocessing(model, config)
        if not is_npu:
            check_properties(core, device, properties)
        compiled = core.compile_model(model, device, properties)
        self._request = compiled.create_infer_request()
        self._token_types = has_token_type_ids(compiled)
        self._started = False

    # -- synchronous ---------------------------------------------------------------------------
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of ``texts`` (each prefixed with ``embed_instruction`` if set)."""
        self.start_embed_documents_async(texts)
        return self.wait_embed_documents()

    def embed(self, texts: list[str], prompt: str) -> list[list[float]]:
        """Embeddings of ``texts``, each prefixed with ``prompt``."""
        prompt = _text(prompt)
        self._start([prompt + t for t in _texts(texts)])
        return self.wait_embed_documents()

    def embed_query(self, text: str) -> list[float]:
        """The embedding of one query (prefixed with ``query_instruction`` if set)."""
        self.start_embed_query_async(text)
        return self.wait_embed_query()

    # -- asynchronous --------------------------------------------------------------------------
    def start_embed_documents_async(self, texts: list[str]) -> None:
        instruction = self._config.embed_instruction or ""
        self._start([instruction + t for t in _texts(texts)])

    def wait_embed_documents(self) -> list[list[float]]:
        return self._wait()

    def start_embed_query_async(self, text: str) -> None:
        self._start([(self._config.query_instruction or "") + _text(text)])

    def wait_embed_query(self) -> list[float]:
        return self._wait()[0]

    # -- internals -----------------------------------------------------------------------------
    def _start(self, texts: list[str]) -> None:
        batch = self._config.batch_size
        if batch is not None and len(texts) != batch:
            raise UserInputError(f"Number of texts passed to pipeline should be equal to batch_size({batch})")
        encoded = self._tokenizer.encode(texts, **self._tokenization)
        self._request.set_tensor("input_ids", encoded.input_ids)
        self._request.set_tensor("attention_mask", encoded.attention_mask)
        self._mask = np.asarray(encoded.attention_mask.data, dtype=np.int64)
        if self._token_types:
            import openvino as ov

            shape = tuple(encoded.input_ids.shape)
            self._request.set_tensor("token_type_ids", ov.Tensor(np.zeros(shape, dtype=np.int64)))
        self._request.start_async()
        self._started = True

    def _wait(self) -> list[list[float]]:
        if not self._started:
            raise UserInputError("nothing to wait for: call start_embed_documents_async() or "
                                 "start_embed_query_async() first")
        self._request.wait()
        hidden = self._request.get_tensor("last_hidden_state")
        if self._post is not None:
            hidden = self._post_model_infer(hidden)
        out = np.asarray(hidden.data, dtype=np.float32)
        result: list[list[float]] = out.reshape(out.shape[0], -1).tolist()
        return result

    def _post_model_infer(self, hidden: Any) -> Any:
        """The real's ``post_model_infer``: the call's mask zero-padded to the hidden states'
        (chunk-aligned) length, then pooling and normalisation on CPU."""
        import openvino as ov

        length = int(hidden.get_shape()[1])
        mask = self._mask.reshape(-1)
        if length < mask.size:
            raise UserInputError(f"Attention mask size mismatch: expected at least {mask.size} elements, "
                                 f"but got {length}")
        padded = np.zeros((1, length), dtype=np.int64)
        padded[0, :mask.size] = mask
        self._post.set_tensor("attention_mask", ov.Tensor(padded))
        self._post.set_tensor("embedding_hidden_state", hidden)
        self._post.infer()
        return self._post.get_tensor("last_hidden_state")


