"""Tokenizer over openvino_tokenizers IR (encode, decode, chat template, special tokens, vocab)."""

from __future__ import annotations

import json
import logging
import os
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

import genai_shim.tokenizer_files as tokenizer_files
import genai_shim.tokenizer_ir as tokenizer_ir
from ov_npu_emu.errors import ConfigError, IRReadError, UserInputError

__all__ = ["TokenizedInputs", "Tokenizer"]

logger = logging.getLogger(__name__)

TOKENIZER_XML = "openvino_tokenizer.xml"
DETOKENIZER_XML = "openvino_detokenizer.xml"

_ov_core: ov.Core | None = None
_core_lock = threading.Lock()

#: the real's text when a chat needs the model's template and it has none
NO_CHAT_TEMPLATE = (
    "Chat template wasn't found. This may indicate that the model wasn't trained for chat "
    "scenario. Please add 'chat_template' to tokenizer_config.json to use the model in chat "
    "scenario."
)

#: the real's text when a chat template renders to nothing
EMPTY_CHAT_TEMPLATE_OUTPUT = (
    "Applied chat template resulted in an empty string. Please check the chat template or apply "
    "template manually to your prompt before calling generate.For example: "
    "<start_of_turn>user{user_prompt}<end_of_turn><start_of_turn>model"
)


def _core() -> ov.Core:
    """Tokenization is host-side in the real stack too: run the IR on openvino's CPU plugin."""
    global _ov_core
    with _core_lock:
        if _ov_core is None:
            import openvino_tokenizers  # noqa: F401  (registers the tokenizer extension ops)

            _ov_core = ov.Core()
        return _ov_core


class TokenizedInputs:
    """``input_ids`` and ``attention_mask`` as i64 ``openvino.Tensor`` of shape [batch, length]."""

    def __init__(self, input_ids: ov.Tensor, attention_mask: ov.Tensor) -> None:
        self.input_ids = input_ids
        self.attention_mask = attention_mask
        #: the IR's token_type_ids output, if it has one (the real's C++ TokenizedInputs carries
        #: it, its Python binding does not show it): read with token_type_ids()
        self._token_type_ids: ov.Tensor | None = None

    def __repr__(self) -> str:
        ids, mask = self.input_ids.data.tolist(), self.attention_mask.data.tolist()
        return f"TokenizedInputs(input_ids={ids}, attention_mask={mask})"


def token_type_ids(encoded: TokenizedInputs) -> ov.Tensor | None:
    """The token type ids of an encode() result, when the tokenizer IR outputs them (BERT-style
    pairs: 0 for the first text and its specials, 1 for the second), padded as its ids."""
    return encoded._token_type_ids


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        logger.warning("cannot parse %s; ignoring it", path)
        return {}


def _const(output: ov.Output) -> np.ndarray | None:
    node = output.get_node()
    return node.get_data() if node.get_type_name() == "Constant" else None


class Tokenizer:
    """openvino_genai.Tokenizer work-alike.

    :param tokenizer_path: a folder with ``openvino_tokenizer.xml`` and/or
        ``openvino_detokenizer.xml``, plus the json files the real reads for the special tokens
        and the chat template (``genai_shim/tokenizer_files.py``).
    :param properties: ``add_second_input`` (bool, default False: give a one-input IR a second,
        paired input, as the real); the real's CPU compile properties are accepted and not
        needed (tokenization runs on the host's openvino CPU plugin with its defaults), other
        keys are dropped as the real drops them.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``Tokenizer(tokenizer_path, properties={}, **kwargs)`` or, from memory,
        ``Tokenizer(tokenizer_model: str, tokenizer_weights: Tensor, detokenizer_model: str,
        detokenizer_weights: Tensor, **kwargs)`` (IR XML text and its weights as a u8 Tensor,
        as openvino_genai's second overload; both IRs are required, as there)."""
        self._lock = threading.RLock()
        in_memory = len(args) > 1 and isinstance(args[1], ov.Tensor) or (
            "tokenizer_model" in kwargs or "tokenizer_weights" in kwargs
        )
        if in_memory:
            self._sources, folder = _memory_sources(args, kwargs), None
            self._where = "the in-memory models"
        else:
            folder = _tokenizer_folder(args, kwargs)
            self._sources = {n: folder / n for n in (TOKENIZER_XML, DETOKENIZER_XML) if (folder / n).is_file()}
            self._where = repr(os.fspath(folder))
        self._folder = folder
        properties = args[1] if len(args) > 1 and not in_memory else {}
        if not isinstance(properties, Mapping):
            raise UserInputError(f"properties must be a dict, got {type(properties).__name__}")
        properties = dict(properties)
        properties.update(kwargs.pop("properties", None) or {})
        if properties:
            warnings.warn(
                "'properties' parameters is deprecated, please use kwargs to pass config "
                "properties instead.",
                DeprecationWarning,
                stacklevel=2,
            )
        properties.update(kwargs)
        #: add a second (paired) input to a one-input tokenizer IR at load, as the real does
        self._add_second_input = tokenizer_ir.bool_property(
            "add_second_input", properties.get("add_second_input", False)
        )
        self._tok_model = self._read(TOKENIZER_XML)
        self._detok_model = self._read(DETOKENIZER_XML)
        self._encoders: dict[bool, ov.InferRequest] = {}
        #: (max_length, truncation) last set on each encoder request, by the same key as
        #: _encoders (set_states costs ~50 µs)
        self._encoder_states: dict[bool, tuple[int | None, bool]] = {}
        self._encoder_layout: tokenizer_ir.EncoderLayout | None = None
        self._decoders: dict[bool, Any] = {}
        # Special tokens and the chat template in the real's order (genai_shim/tokenizer_files.py);
        # from memory there is no folder: ids and the chat template come from the IR only.
        tokens = tokenizer_files.read_special_tokens(folder) if folder is not None else None
        tokens = tokens or tokenizer_files.SpecialTokens()
        template = tokenizer_files.read_chat_template(folder) if folder is not None else ""
        if self._tok_model is not None:
            tokenizer_files.rt_token_ids(self._tok_model, tokens)
            rt_template = tokenizer_files.rt_chat_template(self._tok_model)
            template = template if rt_template is None else rt_template
        self._original_chat_template = template
        self._chat_template = (
            tokenizer_files.remap_template(template) if self._tok_model is not None else template
        )
        self._bos_id, self._eos_id, self._pad_id = tokens.bos_id, tokens.eos_id, tokens.pad_id
        # the vocabulary (token bytes and strings) is read on first use: building it was most of a
        # 128k-token tokenizer's construction, and generation needs it only for structured output
        self._vocab: tuple[list[bytes], list[str]] | None = None
        cfg = _read_json(folder / "tokenizer_config.json") if folder is not None else {}
        self._special_ids = self._find_special_ids(cfg)
        # a string still unknown whose id is known: the detokenized id, special tokens kept
        self._bos, self._eos, self._pad = (
            self._token_text(tid, text)
            for tid, text in (
                (tokens.bos_id, tokens.bos),
                (tokens.eos_id, tokens.eos),
                (tokens.pad_id, tokens.pad),
            )
        )
        mml = cfg.get("model_max_length")
        self._model_max_length: int | None = (
            int(mml) if isinstance(mml, int) and mml < 10**9 else None
        )

    def _token_text(self, token_id: int, text: str) -> str:
        if text or token_id == -1 or self._detok_model is None:
            return text
        return str(self.decode([token_id], skip_special_tokens=False))

    # -- IR plumbing ---------------------------------------------------------------------------
    def _read(self, name: str) -> ov.Model | None:
        """A fresh ov.Model of the tokenizer or detokenizer (from the folder or from memory)."""
        src = self._sources.get(name)
        if src is None:
            return None
        model = _core().read_model(src[0], src[1]) if isinstance(src, tuple) else _core().read_model(src)
        if name == TOKENIZER_XML and self._add_second_input:
            tokenizer_ir.add_second_input(model)
        return model

    @property
    def _vocab_bytes(self) -> list[bytes]:
        return self._vocab_pair()[0]

    @property
    def _vocab_vector(self) -> list[str]:
        return self._vocab_pair()[1]

    def _vocab_pair(self) -> tuple[list[bytes], list[str]]:
        if self._vocab is None:
            self._vocab = self._read_vocab()
        return self._vocab

    def _read_vocab(self) -> tuple[list[bytes], list[str]]:
        """Token bytes and strings from the detokenizer's VocabDecoder constants (begins, ends, chars)."""
        if self._detok_model is None:
            return [], []
        for op in self._detok_model.get_ordered_ops():
            if op.get_type_name() == "VocabDecoder":
                begins, ends, chars = (_const(op.input_value(i)) for i in (1, 2, 3))
                if begins is None or ends is None or chars is None:
                    return [], []
                raw = chars.tobytes()
                pieces = [raw[int(b) : int(e)] for b, e in zip(begins, ends, strict=False)]
                return pieces, [piece.decode("utf-8", errors="replace") for piece in pieces]
        return [], []

    def _find_special_ids(self, cfg: dict[str, Any]) -> list[int]:
        ids: set[int] = set()
        if self._detok_model is not None:
            for op in self._detok_model.get_ordered_ops():
                if op.get_type_name() == "VocabDecoder" and op.get_input_size() > 4:
                    skip = _const(op.input_value(4))
                    if skip is not None:
                        ids |= {int(x) for x in np.ravel(skip)}
        for k, v in (cfg.get("added_tokens_decoder") or {}).items():
            if isinstance(v, dict) and v.get("special"):
                ids.add(int(k))
        ids |= {t for t in (self._bos_id, self._eos_id, self._pad_id) if t >= 0}
        return sorted(ids)

    def _encoder(self, add_special_tokens: bool) -> ov.InferRequest:
        """The infer request of the IR with or without its special tokens, truncation steerable."""
        with self._lock:
            if add_special_tokens not in self._encoders:
                if self._tok_model is None:
                    raise IRReadError(
                        f"{TOKENIZER_XML} was not found in {self._where}; encode() "
                        "needs it"
                    )
                model = self._read(TOKENIZER_XML) if add_special_tokens else self._without_special_tokens()
                tokenizer_ir.make_max_length_stateful(model, add_special_tokens)
                compiled = _core().compile_model(model, "CPU")
                self._encoders[add_special_tokens] = compiled.create_infer_request()
            return self._encoders[add_special_tokens]

    def _without_special_tokens(self) -> ov.Model:
        """A copy of the tokenizer whose constant special-token segments are empty.

        CombineSegments takes (begin, end, data) triples; the added special tokens (BOS, EOS…)
        are constant triples (``tokenizer_ir.special_segment``), so their ``end`` is rewired to
        their ``begin``.
        """
        model = self._read(TOKENIZER_XML)
        for op in model.get_ordered_ops():
            if op.get_type_name() != "CombineSegments":
                continue
            for i in range((op.get_input_size() - 1) // 3):  # the last input: the segment ids
                if tokenizer_ir.special_segment(op, i):
                    op.input(3 * i + 1).replace_source_output(op.input_value(3 * i))
        model.validate_nodes_and_infer_types()
        return model

    def _decoder(self, skip_special_tokens: bool) -> Any:
        with self._lock:
            if skip_special_tokens not in self._decoders:
                if self._detok_model is None:
                    raise IRReadError(
                        f"{DETOKENIZER_XML} was not found in {self._where}; "
                        "decode() needs it (convert the tokenizer with with_detokenizer=True)"
                    )
                model = self._read(DETOKENIZER_XML)
                for op in model.get_ordered_ops():
                    if op.get_type_name() == "VocabDecoder" and op.get_input_size() > 4:
                        ids = np.array(
                            self._special_ids if skip_special_tokens else [], dtype=np.int32
                        )
                        const = ov.op.Constant(ov.Type.i32, ov.Shape([len(ids)]), ids.tolist())
                        op.input(4).replace_source_output(const.output(0))
                model.validate_nodes_and_infer_types()
                self._decoders[skip_special_tokens] = _core().compile_model(model, "CPU")
            return self._decoders[skip_special_tokens]

    # -- encode / decode -------------------------------------------------------------------------
    def encode(self, *args: Any, **kwargs: Any) -> TokenizedInputs:
        """Tokenize as openvino_genai's four ``encode`` overloads do.

        ``encode(prompt: str, ...)``, ``encode(prompts: list[str], ...)``,
        ``encode(prompts_1: list[str], prompts_2: list[str], ...)`` and
        ``encode(prompts: list[[str, str]], ...)`` (paired prompts need a tokenizer IR with two
        inputs: ``supports_paired_input()``), then the options, by position or name:

        :param add_special_tokens: add BOS/EOS as the tokenizer's post-processor says.
        :param pad_to_max_length: pad every row to ``max_length`` (default: the IR's, i.e. the
            original tokenizer's ``model_max_length``); longer rows stay longer.
        :param max_length: the length that ``truncation`` and ``pad_to_max_length`` use,
            special tokens included.
        :param padding_side: "left" or "right"; default: the IR's (the original's side).
        :param truncation: cut the prompt tokens to fit ``max_length``, on the side (and with
            the pair strategy) of the original tokenizer.
        """
        first, second, opts = _encode_arguments(args, kwargs)
        side = opts["padding_side"]
        if side not in (None, "left", "right"):
            raise UserInputError(f"padding_side should be either 'left' or 'right', but got: {side!r}")
        layout = self._layout()
        if second is not None and not layout.paired:
            raise UserInputError(
                "this tokenizer IR takes one input (supports_paired_input() is False); load it "
                "with Tokenizer(path, add_second_input=True) or convert the tokenizer with "
                "openvino_tokenizers' number_of_inputs=2 for paired prompts"
            )
        max_length = opts["max_length"]
        if max_length is not None:
            max_length = int(max_length)
            if max_length < 0:
                raise UserInputError(f"max_length must be >= 0, got {max_length}")
        inputs = {0: np.array(first)}
        if layout.paired:
            inputs[1] = np.array(second if second is not None else [], dtype=str)
        with self._lock:
            special = bool(opts["add_special_tokens"])
            request = self._encoder(special)
            states = (max_length, bool(opts["truncation"]))
            if self._encoder_states.get(special) != states:  # the IR's Assigns keep them
                tokenizer_ir.set_states(request, *states)
                self._encoder_states[special] = states
            request.infer(inputs)
            ids = np.array(request.get_tensor("input_ids").data, dtype=np.int64)
            mask = np.array(request.get_tensor("attention_mask").data, dtype=np.int64)
            types = None
            if any("token_type_ids" in port.get_names() for port in request.model_outputs):
                types = np.array(request.get_tensor("token_type_ids").data, dtype=np.int64)
        limit = max_length if max_length is not None else layout.default_max_length
        width = limit if opts["pad_to_max_length"] and limit is not None else 0
        pad_right = layout.pad_right if side is None else side == "right"
        new_ids, new_mask = tokenizer_ir.repad(ids, mask, width, pad_right, layout.pad_value)
        encoded = TokenizedInputs(ov.Tensor(new_ids), ov.Tensor(new_mask))
        if types is not None:
            encoded._token_type_ids = ov.Tensor(tokenizer_ir.repad(types, mask, width, pad_right, 0)[0])
        return encoded

    def _layout(self) -> tokenizer_ir.EncoderLayout:
        if self._tok_model is None:
            raise IRReadError(f"{TOKENIZER_XML} was not found in {self._where}; encode() needs it")
        if self._encoder_layout is None:
            self._encoder_layout = tokenizer_ir.layout(self._tok_model)
        return self._encoder_layout

    def decode(
        self, tokens: Any, skip_special_tokens: bool = True, **kwargs: Any
    ) -> str | list[str]:
        """Detokenize a list of ids (→ str), a list of lists or a 2-D tensor (→ list of str)."""
        if isinstance(tokens, ov.Tensor):
            arr = np.asarray(tokens.data)
            batch = True
        elif isinstance(tokens, np.ndarray):
            arr, batch = tokens, tokens.ndim == 2
        else:
            if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
                raise UserInputError(f"decode() takes token ids (a list or tensor), got {type(tokens).__name__}")
            seq = list(tokens)
            batch = bool(seq) and isinstance(seq[0], (list, tuple, np.ndarray))
            if batch:
                # Ragged rows are decoded one by one: padding would show up unless skipped.
                return [str(self.decode(list(s), skip_special_tokens)) for s in seq]
            if not all(isinstance(t, (int, np.integer)) for t in seq):
                raise UserInputError("decode() takes integer token ids")
            arr = np.array([int(t) for t in seq], dtype=np.int64)
        try:
            arr = np.asarray(arr, dtype=np.int64)
        except (ValueError, TypeError) as e:  # a tensor/array of strings
            raise UserInputError(f"decode() takes integer token ids: {e}") from e
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise UserInputError(f"decode() takes ids of rank 1 or 2, got shape {list(arr.shape)}")
        if arr.shape[1] == 0:
            texts = [""] * arr.shape[0]
        else:
            with self._lock:
                res = self._decoder(bool(skip_special_tokens))({0: np.ascontiguousarray(arr)})
            texts = [str(t) for t in np.asarray(next(iter(res.values()))).tolist()]
        return texts if batch else texts[0]

    # -- chat template ---------------------------------------------------------------------------
    @property
    def chat_template(self) -> str:
        return self._chat_template

    @chat_template.setter
    def chat_template(self, value: str) -> None:
        self.set_chat_template(value)

    def set_chat_template(self, chat_template: str) -> None:
        """Use ``chat_template`` (a known template the real cannot render is replaced by its
        simplified form, as the real does); ``get_original_chat_template()`` then returns it."""
        self._original_chat_template = str(chat_template)
        self._chat_template = tokenizer_files.remap_template(self._original_chat_template)

    def get_chat_template(self) -> str:
        return self._chat_template

    def get_original_chat_template(self) -> str:
        return self._original_chat_template

    def apply_chat_template(
        self,
        history: Any,
        add_generation_prompt: bool,
        chat_template: str = "",
        tools: list[dict[str, Any]] | None = None,
        extra_context: dict[str, Any] | None = None,
    ) -> str:
        """Render the conversation with the model's Jinja template (HF conventions)."""
        from genai_shim.chat import ChatHistory, render_chat_template

        template = tokenizer_files.remap_template(chat_template) if chat_template else self._chat_template
        if not template:
            raise ConfigError(NO_CHAT_TEMPLATE)
        if isinstance(history, ChatHistory):
            messages = history.get_messages()
            tools = tools if tools is not None else history.get_tools() or None
            extra = {**history.get_extra_context(), **(extra_context or {})}
        else:
            messages, extra = list(history), dict(extra_context or {})
        text = render_chat_template(
            template,
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self._bos,
            eos_token=self._eos,
            pad_token=self._pad,
            tools=tools,
            extra_context=extra,
        )
        if not text:
            raise ConfigError(EMPTY_CHAT_TEMPLATE_OUTPUT, key="chat_template")
        return text

    # -- special tokens and vocab ----------------------------------------------------------------
    def get_bos_token_id(self) -> int:
        return self._bos_id

    def get_eos_token_id(self) -> int:
        return self._eos_id

    def get_pad_token_id(self) -> int:
        return self._pad_id

    def get_bos_token(self) -> str:
        return self._bos

    def get_eos_token(self) -> str:
        return self._eos

    def get_pad_token(self) -> str:
        return self._pad

    def get_vocab(self) -> dict[bytes, int]:
        """Token bytes → id (``bytes`` keys, exactly as the real Python binding returns them)."""
        return {tok: i for i, tok in enumerate(self._vocab_bytes)}

    def get_vocab_vector(self) -> list[str]:
        return list(self._vocab_vector)

    def supports_paired_input(self) -> bool:
        """Whether the tokenizer IR takes a second string input (paired prompts)."""
        return self._tok_model is not None and self._layout().paired


#: encode()'s options after the prompts, in the real's positional order, with its defaults
_ENCODE_OPTIONS = {
    "add_special_tokens": True,
    "pad_to_max_length": False,
    "max_length": None,
    "padding_side": None,
    "truncation": False,
}


def _strings(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)


def _encode_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[str], list[str] | None, dict[str, Any]]:
    """(first prompts, second prompts or None, options) of one encode() call."""
    kwargs = dict(kwargs)
    rest = list(args)
    names = [n for n in ("prompt", "prompts", "prompts_1") if n in kwargs]
    if names and rest:
        raise UserInputError(f"encode() got the prompts twice (by position and as {names[0]!r})")
    if len(names) > 1:
        raise UserInputError(f"encode() got the prompts twice ({', '.join(names)})")
    prompts = kwargs.pop(names[0]) if names else (rest.pop(0) if rest else None)
    second = kwargs.pop("prompts_2", None)
    if second is None and rest and _strings(rest[0]) and not isinstance(rest[0], str):
        second = rest.pop(0)
    if prompts is None:
        raise UserInputError("encode() needs a prompt: encode(prompt), encode(prompts) or encode(prompts_1, prompts_2)")
    if len(rest) > len(_ENCODE_OPTIONS):
        raise UserInputError(f"encode() takes at most {len(_ENCODE_OPTIONS) + 2} positional arguments")
    opts = dict(_ENCODE_OPTIONS)
    for name, value in zip(_ENCODE_OPTIONS, rest, strict=False):
        opts[name] = value
    unknown = sorted(set(kwargs) - set(_ENCODE_OPTIONS))
    if unknown:
        raise UserInputError(f"encode() got unexpected keyword arguments {unknown}; it takes {sorted(_ENCODE_OPTIONS)}")
    opts.update(kwargs)
    if isinstance(prompts, str):
        first = [prompts]
    elif _strings(prompts):
        first = list(prompts)
    elif isinstance(prompts, (list, tuple)) and prompts and all(
        _strings(p) and len(p) == 2 for p in prompts
    ) and second is None:
        first, second = [p[0] for p in prompts], [p[1] for p in prompts]
    else:
        raise UserInputError(
            "encode() takes a str, a list of str, two lists of str (prompts_1, prompts_2) or a list "
            f"of [str, str] pairs, got {type(prompts).__name__}"
        )
    if not first:
        raise UserInputError("encode() got an empty list of prompts")
    if second is not None:
        second = list(second) if _strings(second) else None
        if second is None:
            raise UserInputError("prompts_2 must be a list of str")
        if len(first) != len(second) and 1 not in (len(first), len(second)):
            raise UserInputError(
                "prompts_1 and prompts_2 should be of the same size or one of them should be of size 1, "
                f"got {len(first)} and {len(second)}"
            )
    return first, second, opts


def _memory_sources(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The in-memory overload's IRs (XML text, weights Tensor) by file name; pops them from kwargs."""
    names = ("tokenizer_model", "tokenizer_weights", "detokenizer_model", "detokenizer_weights")
    if len(args) > 4:
        raise UserInputError(
            "Tokenizer(tokenizer_model, tokenizer_weights, detokenizer_model, "
            f"detokenizer_weights, **properties) takes 4 positional arguments, got {len(args)}"
        )
    parts = dict(zip(names, args, strict=False))
    for n in names[len(args) :]:
        if n not in kwargs:
            raise UserInputError(f"Tokenizer(...) from memory is missing {n!r}")
        parts[n] = kwargs.pop(n)
    for xml_key, w_key in (names[:2], names[2:]):
        if not isinstance(parts[xml_key], str):
            raise UserInputError(
                f"{xml_key} must be the IR's XML text (str), got {type(parts[xml_key]).__name__}"
            )
        if not isinstance(parts[w_key], ov.Tensor):
            raise UserInputError(f"{w_key} must be an openvino.Tensor, got {type(parts[w_key]).__name__}")
    sources: dict[str, Any] = {
        TOKENIZER_XML: (parts["tokenizer_model"], parts["tokenizer_weights"]),
        DETOKENIZER_XML: (parts["detokenizer_model"], parts["detokenizer_weights"]),
    }
    if not all(xml.strip() for xml, _ in sources.values()):
        # the real reads both and fails on an empty one (measured, 2026.4.1)
        raise IRReadError(
            "Unable to read the model. Please check if the model format is supported "
            "and model is correct. (an in-memory tokenizer needs both IRs' XML text)"
        )
    return sources


def _tokenizer_folder(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Path:
    """The folder overload's folder (a file path means its folder); pops tokenizer_path."""
    if not args and "tokenizer_path" not in kwargs:
        raise UserInputError("Tokenizer() needs tokenizer_path")
    tokenizer_path = args[0] if args else kwargs.pop("tokenizer_path")
    if len(args) > 2:
        raise UserInputError(
            f"Tokenizer(tokenizer_path, properties={{}}, **kwargs) got {len(args)} positional arguments"
        )
    if not isinstance(tokenizer_path, (str, bytes, os.PathLike)):
        raise UserInputError(f"tokenizer_path must be a folder path, got {type(tokenizer_path).__name__}")
    folder = Path(os.fsdecode(tokenizer_path))
    if folder.is_file():
        folder = folder.parent
    if not (folder / TOKENIZER_XML).is_file() and not (folder / DETOKENIZER_XML).is_file():
        raise IRReadError(
            f"Neither {TOKENIZER_XML} nor {DETOKENIZER_XML} found in {os.fspath(folder)!r}; convert the "
            "tokenizer with openvino_tokenizers (convert_tokenizer(..., with_detokenizer=True))"
        )
    return folder
