"""Structured output: ``StructuredOutputConfig`` and grammar-constrained decoding with xgrammar.

openvino.genai 2026.4 constrains generation with xgrammar (its C++ core, v0.1.31): every step
the grammar matcher fills a bitmask of the tokens allowed next, the masked-out logits become
-inf (after the min_new_tokens EOS penalty, before the repetition / presence / frequency
penalties and the sampling filters), and every sampled token is fed back to the matcher.  This
module does the same with the ``xgrammar`` wheel from PyPI (pinned to that version), built from
the same inputs the real builds its ``xgrammar::TokenizerInfo`` from:

* the vocabulary: the raw bytes of every token of the detokenizer IR's ``VocabDecoder``
  constants (begins / ends / chars), as ``VocabType::RAW`` with ``add_prefix_space=true``;
  for byte-level BPE (GPT-2 style) openvino_tokenizers stores real bytes there;
* the vocabulary size: the model's logits width;
* the stop tokens: the tokenizer's EOS id; the matcher overrides them with the request's
  ``stop_token_ids``; ``terminate_without_stop_token=false``, ``max_rollback_tokens=0``;
* the grammar: ``FromJSONSchema`` (any whitespace, strict mode), ``FromRegex``, ``FromEBNF``
  (root rule ``root``) or ``FromStructuralTag`` with the JSON the real writes for its
  structural-tag classes.

Only xgrammar's compiled binding is loaded (not its Python package ``__init__``, which imports
torch and transformers): the matcher fills a numpy int32 bitmask, numpy applies it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from ov_npu_emu.errors import ConfigError

__all__ = [
    "GrammarConstraint",
    "StructuralTagItem",
    "StructuralTagsConfig",
    "StructuredOutputConfig",
    "check_structured_output",
    "make_constraint",
]

#: the xgrammar release the real openvino.genai 2026.4 builds in (its src/cpp/CMakeLists.txt)
XGRAMMAR_VERSION = "0.1.31"
logger = logging.getLogger(__name__)

_INSTALL_HINT = (
    f'pip install --no-deps "xgrammar=={XGRAMMAR_VERSION}" (--no-deps: its package metadata requires '
    'torch, which genai_shim never imports; pip install "ov-npu-emu[structured]" takes that route)'
)


# -- structural tags (the real's StructuredOutputConfig.Regex / .JSONSchema / ... classes) ----
def _q(text: str) -> str:
    """A JSON string literal (the real's format_for_json)."""
    return json.dumps(text, ensure_ascii=False)


class _Tag:
    """Common base: ``a + b`` → Concat, ``a | b`` → Union (flattening like the real)."""

    def to_json(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __add__(self, other: Any) -> Concat:
        return _combine(Concat, self, other)

    def __radd__(self, other: Any) -> Concat:
        return _combine(Concat, other, self)

    def __or__(self, other: Any) -> Union_:
        return _combine(Union_, self, other)

    def __ror__(self, other: Any) -> Union_:
        return _combine(Union_, other, self)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]


def _check_tag(value: Any, where: str) -> Any:
    if isinstance(value, (str, _Tag)):
        return value
    raise ConfigError(
        f"{where}: a structural tag must be a str or one of StructuredOutputConfig.Regex, "
        "JSONSchema, EBNF, ConstString, AnyText, QwenXMLParametersFormat, Union, Concat, Tag, "
        f"TriggeredTags, TagsWithSeparator; got {type(value).__name__}"
    )


def _tag_json(tag: Any) -> str:
    return tag if isinstance(tag, str) else tag.to_json()


def _tag_str(tag: Any) -> str:
    return tag if isinstance(tag, str) else repr(tag)


def _combine(kind: type, left: Any, right: Any) -> Any:
    parts: list[Any] = []
    for side in (left, right):
        side = _check_tag(side, f"StructuredOutputConfig.{kind.__name__.rstrip('_')}")
        parts.extend(side.elements if isinstance(side, kind) else [side])
    return kind(parts)


class _Valued(_Tag):
    _json_type = ""
    _json_key = ""

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise ConfigError(f"{type(self).__name__}() takes a str, got {type(value).__name__}")
        self.value = value

    def __repr__(self) -> str:
        return f'{type(self).__name__}("{self.value}")'

    def to_json(self) -> str:
        return f'{{"type": "{self._json_type}", "{self._json_key}": {_q(self.value)}}}'


class Regex(_Valued):
    """Text matching a regular expression."""

    _json_type, _json_key = "regex", "pattern"


class JSONSchema(_Valued):
    """JSON text valid under a JSON schema (given as a JSON string)."""

    def to_json(self) -> str:
        return f'{{"type": "json_schema", "json_schema": {self.value}}}'


class EBNF(_Valued):
    """Text of an EBNF grammar (root rule ``root``)."""

    _json_type, _json_key = "grammar", "grammar"


class ConstString(_Valued):
    """Exactly this text."""

    _json_type, _json_key = "const_string", "value"


class AnyText(_Tag):
    """Any text."""

    def __repr__(self) -> str:
        return "AnyText()"

    def to_json(self) -> str:
        return '{"type": "any_text"}'


class QwenXMLParametersFormat(_Tag):
    """Qwen's XML tool-call parameters for a JSON schema."""

    def __init__(self, json_schema: str) -> None:
        if not isinstance(json_schema, str):
            raise ConfigError("QwenXMLParametersFormat() takes a JSON schema str")
        self.json_schema = json_schema

    def __repr__(self) -> str:
        return f"QwenXMLParametersFormat(json_schema={self.json_schema})"

    def to_json(self) -> str:
        return f'{{"type": "qwen_xml_parameter", "json_schema": {self.json_schema}}}'


class _Group(_Tag):
    _json_type = ""

    def __init__(self, *elements: Any) -> None:
        if len(elements) == 1 and not isinstance(elements[0], (str, _Tag)):
            elements = tuple(elements[0])
        name = f"StructuredOutputConfig.{type(self).__name__.rstrip('_')}"
        self.elements = [_check_tag(e, name) for e in elements]
        if len(self.elements) < 2:
            raise ConfigError(f"{name} requires at least two elements")

    def __repr__(self) -> str:
        inner = ", ".join(_tag_str(e) for e in self.elements)
        return f"{type(self).__name__.rstrip('_')}({inner})"

    def to_json(self) -> str:
        inner = ", ".join(_tag_json(e) for e in self.elements)
        return f'{{"type": "{self._json_type}", "elements": [{inner}]}}'


class Concat(_Group):
    """The elements one after the other (``a + b``)."""

    _json_type = "sequence"


class Union_(_Group):
    """Any one of the elements (``a | b``)."""

    _json_type = "or"


Union_.__name__ = Union_.__qualname__ = "Union"


class Tag(_Tag):
    """``begin``, then text matching ``content``, then ``end``."""

    def __init__(self, begin: str, content: Any, end: str) -> None:
        self.begin = str(begin)
        self.content = _check_tag(content, "StructuredOutputConfig.Tag")
        self.end = str(end)

    def __repr__(self) -> str:
        return f'Tag(begin="{self.begin}", content={_tag_str(self.content)}, end="{self.end}")'

    def to_json(self) -> str:
        return (
            f'{{"type": "tag", "begin": {_q(self.begin)}, "content": {_tag_json(self.content)}, '
            f'"end": {_q(self.end)}}}'
        )


def _tags(tags: Iterable[Any], where: str) -> list[Tag]:
    out = list(tags)
    for t in out:
        if not isinstance(t, Tag):
            raise ConfigError(f"{where}: tags must be StructuredOutputConfig.Tag, got {type(t).__name__}")
    return out


def _flag(v: bool) -> str:
    return "true" if v else "false"


class TriggeredTags(_Tag):
    """Free text until a trigger; then one of the tags."""

    def __init__(
        self,
        triggers: Iterable[str],
        tags: Iterable[Tag],
        at_least_one: bool = False,
        stop_after_first: bool = False,
    ) -> None:
        self.triggers = [str(t) for t in triggers]
        self.tags = _tags(tags, "StructuredOutputConfig.TriggeredTags")
        self.at_least_one = bool(at_least_one)
        self.stop_after_first = bool(stop_after_first)

    def __repr__(self) -> str:
        trig = ", ".join(f'"{t}"' for t in self.triggers)
        tags = ", ".join(repr(t) for t in self.tags)
        return (
            f"TriggeredTags(triggers=[{trig}], tags=[{tags}], at_least_one={self.at_least_one}, "
            f"stop_after_first={self.stop_after_first})"
        )

    def to_json(self) -> str:
        trig = ", ".join(_q(t) for t in self.triggers)
        tags = ", ".join(t.to_json() for t in self.tags)
        return (
            f'{{"type": "triggered_tags", "triggers": [{trig}], "tags": [{tags}], '
            f'"at_least_one": {_flag(self.at_least_one)}, '
            f'"stop_after_first": {_flag(self.stop_after_first)}}}'
        )


class TagsWithSeparator(_Tag):
    """Tags separated by ``separator``."""

    def __init__(
        self,
        tags: Iterable[Tag],
        separator: str,
        at_least_one: bool = False,
        stop_after_first: bool = False,
    ) -> None:
        self.tags = _tags(tags, "StructuredOutputConfig.TagsWithSeparator")
        self.separator = str(separator)
        self.at_least_one = bool(at_least_one)
        self.stop_after_first = bool(stop_after_first)

    def __repr__(self) -> str:
        tags = ", ".join(repr(t) for t in self.tags)
        return (
            f'TagsWithSeparator(separator="{self.separator}", tags=[{tags}], '
            f"at_least_one={_flag(self.at_least_one)}, "
            f"stop_after_first={_flag(self.stop_after_first)})"
        )

    def to_json(self) -> str:
        tags = ", ".join(t.to_json() for t in self.tags)
        return (
            f'{{"type": "tags_with_separator", "separator": {_q(self.separator)}, '
            f'"tags": [{tags}], "at_least_one": {_flag(self.at_least_one)}, '
            f'"stop_after_first": {_flag(self.stop_after_first)}}}'
        )


class StructuralTagItem:
    """Deprecated (as in the real): one tag of a :class:`StructuralTagsConfig`."""

    def __init__(self, **kwargs: Any) -> None:
        self.begin, self.schema, self.end = "", "", ""
        for k, v in kwargs.items():
            if k not in ("begin", "schema", "end"):
                raise ConfigError(f"StructuralTagItem has no field {k!r} (begin, schema, end)", key=k)
            setattr(self, k, str(v))

    def __repr__(self) -> str:
        return f'StructuralTagItem(begin="{self.begin}", schema="{self.schema}", end="{self.end}")'


class StructuralTagsConfig:
    """Deprecated (as in the real): TriggeredTags of JSON-schema tags."""

    def __init__(self, **kwargs: Any) -> None:
        self.structural_tags: list[StructuralTagItem] = []
        self.triggers: list[str] = []
        for k, v in kwargs.items():
            if k not in ("structural_tags", "triggers"):
                raise ConfigError(
                    f"StructuralTagsConfig has no field {k!r} (structural_tags, triggers)", key=k
                )
            setattr(self, k, list(v))

    def __repr__(self) -> str:
        return (
            f"StructuralTagsConfig(structural_tags=[{', '.join(map(repr, self.structural_tags))}], "
            f"triggers=[{', '.join(self.triggers)}])"
        )

    def to_json(self) -> str:
        tags = [Tag(t.begin, JSONSchema(t.schema), t.end) for t in self.structural_tags]
        return TriggeredTags(self.triggers, tags).to_json()


_STRING_FIELDS = ("json_schema", "regex", "grammar")
_FIELDS = (*_STRING_FIELDS, "structural_tags_config", "compound_grammar")
_BACKENDS = ("xgrammar",)


class StructuredOutputConfig:
    """Constraint for generated text (exactly one field set): ``json_schema`` (a JSON schema as
    a JSON string), ``regex``, ``grammar`` (EBNF, root rule ``root``), ``structural_tags_config``
    (a structural tag: the nested classes, a JSON string or a deprecated
    :class:`StructuralTagsConfig`) or ``compound_grammar`` (deprecated alias of a structural
    tag)."""

    Regex = Regex
    JSONSchema = JSONSchema
    EBNF = EBNF
    ConstString = ConstString
    AnyText = AnyText
    QwenXMLParametersFormat = QwenXMLParametersFormat
    Concat = Concat
    Union = Union_
    Tag = Tag
    TriggeredTags = TriggeredTags
    TagsWithSeparator = TagsWithSeparator

    def __init__(self, **kwargs: Any) -> None:
        for name in _FIELDS:
            object.__setattr__(self, name, None)
        object.__setattr__(self, "backend", None)
        if not kwargs:
            return
        for k, v in kwargs.items():
            if k == "backend":
                object.__setattr__(self, "backend", None if v is None else str(v))
            elif k in _FIELDS:
                # the real's kwargs path converts any value through ov::Any (5 -> "5")
                if k in _STRING_FIELDS and v is not None and not isinstance(v, str):
                    v = str(v)
                setattr(self, k, v)
            else:
                raise ConfigError(
                    f"StructuredOutputConfig has no field {k!r}; the fields are "
                    f"{', '.join(_FIELDS)}",
                    key=k,
                )
        self.validate()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _STRING_FIELDS:
            if value is not None and not isinstance(value, str):
                raise ConfigError(
                    f"StructuredOutputConfig.{name} must be a str or None, got {type(value).__name__}",
                    key=name,
                )
        elif name in ("structural_tags_config", "compound_grammar"):
            if value is not None and not isinstance(value, StructuralTagsConfig):
                _check_tag(value, f"StructuredOutputConfig.{name}")
            if name == "compound_grammar" and isinstance(value, StructuralTagsConfig):
                raise ConfigError("StructuredOutputConfig.compound_grammar takes a structural tag")
        elif name != "backend":
            raise AttributeError(f"'StructuredOutputConfig' object has no attribute {name!r}")
        object.__setattr__(self, name, value)

    def validate(self) -> None:
        """The real's checks: a known backend, exactly one constraint set."""
        backend = self.backend if self.backend is not None else "xgrammar"
        if backend not in _BACKENDS:
            raise ConfigError(
                f"Structured output backend '{backend}' is not registered. Please recompile with "
                f"-DENABLE_{backend.upper()}=ON option to enable it.",
                key="backend",
            )
        set_ = [n for n in _FIELDS if getattr(self, n) is not None]
        if len(set_) != 1:
            parts = []
            for n in set_:
                v = getattr(self, n)
                label = "json" if n == "json_schema" else n
                parts.append(f"{label}={v if isinstance(v, str) else repr(v)}")
            raise ConfigError(
                "Only one of json, regex, grammar, structural_tags_config, or compound_grammar "
                "should be set in StructuredOutputConfig, but got: " + ", ".join(parts)
            )

    def __repr__(self) -> str:
        def r(v: Any) -> str:
            return repr(v)

        return (
            f"StructuredOutputConfig(json_schema={r(self.json_schema)}, regex={r(self.regex)}, "
            f"grammar={r(self.grammar)}, structural_tags_config={r(self.structural_tags_config)}, "
            f"compound_grammar={r(self.compound_grammar)})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StructuredOutputConfig) and all(
            getattr(self, n) == getattr(other, n) for n in (*_FIELDS, "backend")
        )

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> StructuredOutputConfig:
        import copy

        new = StructuredOutputConfig()
        for n in (*_FIELDS, "backend"):
            object.__setattr__(new, n, copy.deepcopy(getattr(self, n), memo))
        return new


# -- the xgrammar engine -----------------------------------------------------------------------
_core_lock = threading.Lock()
_core_module: Any = None


def xgrammar_core() -> Any:
    """xgrammar's compiled binding, loaded without the package ``__init__`` (torch-free)."""
    global _core_module
    with _core_lock:
        if _core_module is not None:
            return _core_module
        name = "xgrammar.xgrammar_bindings"
        mod = sys.modules.get(name)
        if mod is None:
            try:
                spec = importlib.util.find_spec("xgrammar")
            except (ImportError, ValueError):
                spec = None
            folder = (spec.submodule_search_locations or [None])[0] if spec else None
            lib = None
            if folder and os.path.isdir(folder):
                lib = next(
                    (f for f in sorted(os.listdir(folder)) if f.startswith("xgrammar_bindings.")
                     and f.endswith((".so", ".pyd"))),
                    None,
                )
            if lib is None:
                raise ConfigError(
                    "Structured output (GenerationConfig.structured_output_config) needs xgrammar's "
                    f"compiled core, which is not installed: {_INSTALL_HINT}",
                    key="structured_output_config",
                )
            lib_spec = importlib.util.spec_from_file_location(name, os.path.join(folder, lib))
            if lib_spec is None or lib_spec.loader is None:  # pragma: no cover
                raise ConfigError(f"Cannot load xgrammar's core from {folder}: {_INSTALL_HINT}")
            mod = importlib.util.module_from_spec(lib_spec)
            lib_spec.loader.exec_module(mod)
            sys.modules[name] = mod
        _core_module = mod
        return mod


def _grammar_error(kind: str, exc: BaseException) -> ConfigError:
    return ConfigError(
        f"Invalid {kind} in StructuredOutputConfig: {exc}", key="structured_output_config"
    )


def build_grammar(config: StructuredOutputConfig) -> Any:
    """xgrammar Grammar for a config, as the real's create_grammar(); ConfigError if invalid."""
    config.validate()
    xg = xgrammar_core()
    try:
        if config.json_schema is not None:
            return xg.Grammar.from_json_schema(
                config.json_schema, True, None, None, True, None, False
            )
        if config.regex is not None:
            return xg.Grammar.from_regex(config.regex, False)
        if config.grammar is not None:
            return xg.Grammar.from_ebnf(config.grammar, "root")
    except Exception as e:  # xgrammar raises RuntimeError / ValueError with its parser's text
        kind = "json_schema" if config.json_schema is not None else (
            "regex" if config.regex is not None else "grammar"
        )
        raise _grammar_error(kind, e) from e
    tag = config.structural_tags_config
    if tag is None:
        tag = config.compound_grammar
    if isinstance(tag, StructuralTagsConfig):
        fmt = tag.to_json()
    else:
        fmt = _tag_json(tag)
    text = fmt if isinstance(tag, str) else f'{{"type": "structural_tag", "format": {fmt}}}'
    try:
        return xg.Grammar.from_structural_tag(text)
    except Exception as e:
        raise ConfigError(
            f"Failed to create grammar from structural tag: {e}", key="structured_output_config"
        ) from e


class _Compiler:
    """One xgrammar TokenizerInfo + GrammarCompiler per (tokenizer, vocabulary size)."""

    def __init__(self, vocab: list[bytes], vocab_size: int, eos: int) -> None:
        xg = xgrammar_core()
        if not vocab:
            raise ConfigError(
                "Structured output requires the tokenizer to expose its full vocabulary, but the "
                "detokenizer has no VocabDecoder constants (convert the tokenizer with "
                "openvino_tokenizers' with_detokenizer=True)",
                key="structured_output_config",
            )
        stop = [int(eos)] if eos >= 0 else []
        # RAW bytes, as the real (its add_prefix_space argument is true)
        info = xg.TokenizerInfo(list(vocab), 0, int(vocab_size), stop, True)
        self.compiler = xg.GrammarCompiler(info, 8, True, -1)
        self.vocab_size = int(vocab_size)


_compilers: weakref.WeakKeyDictionary[Any, dict[int, _Compiler]] = weakref.WeakKeyDictionary()
_compilers_lock = threading.Lock()


class _Times:
    """What the real's structured-output controller times per tokenizer: each backend's compiler
    set-up (kept: every later generate reports it too) and each grammar compilation (handed to
    the next generate's metrics, then cleared), in microseconds."""

    def __init__(self) -> None:
        self.init: dict[str, float] = {}
        self.compile: list[float] = []


_times: weakref.WeakKeyDictionary[Any, _Times] = weakref.WeakKeyDictionary()


def take_structured_output_times(tokenizer: Any) -> tuple[dict[str, float], list[float]]:
    """(compiler set-up time per backend, grammar compile times since the last call), in µs,
    for the PerfMetrics of a generate that used ``tokenizer`` (the real's Sampler does the same)."""
    with _compilers_lock:
        t = _times.get(tokenizer)
        if t is None:
            return {}, []
        compiled, t.compile = t.compile, []
        return dict(t.init), compiled


def add_structured_output_times(perf: Any, tokenizer: Any) -> None:
    """Put :func:`take_structured_output_times` into a generate's PerfMetrics."""
    init, compiled = take_structured_output_times(tokenizer)
    perf.grammar_compiler_init_times.update(init)
    perf.raw_metrics.grammar_compile_times.extend(compiled)


def _compiler_for(tokenizer: Any, vocab_size: int) -> _Compiler:
    with _compilers_lock:
        per = _compilers.setdefault(tokenizer, {})
        comp = per.get(vocab_size)
        if comp is None:
            vocab = list(getattr(tokenizer, "_vocab_bytes", None) or [])
            t0 = time.perf_counter()
            comp = per[vocab_size] = _Compiler(vocab, vocab_size, tokenizer.get_eos_token_id())
            _times.setdefault(tokenizer, _Times()).init["xgrammar"] = (time.perf_counter() - t0) * 1e6
        return comp


def _compiled(tokenizer: Any, comp: _Compiler, grammar: Any) -> Any:
    t0 = time.perf_counter()
    compiled = comp.compiler.compile_grammar(grammar)
    with _compilers_lock:
        _times.setdefault(tokenizer, _Times()).compile.append((time.perf_counter() - t0) * 1e6)
    return compiled


class GrammarConstraint:
    """The per-sequence matcher: :meth:`mask` before selection, :meth:`accept` after."""

    def __init__(self, tokenizer: Any, config: StructuredOutputConfig, stop_token_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self._grammar = build_grammar(config)  # parse now: a bad schema fails before inference
        self._stops = sorted(int(t) for t in stop_token_ids)
        self._matcher: Any = None
        self._bitmask: np.ndarray | None = None
        self._vocab = 0
        self._steps = 0
        self._warned = False

    def _start(self, vocab_size: int) -> None:
        xg = xgrammar_core()
        comp = _compiler_for(self._tokenizer, vocab_size)
        compiled = _compiled(self._tokenizer, comp, self._grammar)
        self._matcher = xg.GrammarMatcher(compiled, self._stops, False, 0)
        self._bitmask = np.full((1, (vocab_size + 31) // 32), -1, dtype=np.int32)
        self._vocab = vocab_size

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """Set the logits of tokens the grammar forbids next to -inf (in place; float32 row)."""
        if self._matcher is None:
            self._start(int(logits.size))
        if self._matcher.is_terminated():
            return logits
        bits = self._bitmask
        assert bits is not None
        self._matcher.fill_next_token_bitmask(bits, 0, False)
        allowed = np.unpackbits(bits.view(np.uint8), bitorder="little")[: self._vocab].astype(bool)
        n = min(logits.size, self._vocab)
        row = logits[:n]
        row[~allowed[:n]] = -np.inf
        if not self._warned and not allowed[:n].any():
            self._warned = True
            logger.warning(
                "structured output: the grammar allows no token of this vocabulary at step %d "
                "(every logit is masked, so token 0 is picked, as the real openvino_genai does). "
                "The vocabulary is given to xgrammar as the detokenizer's raw token strings, as "
                "the real does; SentencePiece-style vocabularies ('\u2581' spaces, <0xNN> byte "
                "tokens) cannot spell most text that way",
                self._steps,
            )
        self._steps += 1
        return logits

    def accept(self, token: int) -> None:
        if self._matcher is None or self._matcher.is_terminated():
            return
        self._matcher.accept_token(int(token), False)


def check_structured_output(config: Any, *, speculative: bool = False) -> None:
    """Reject structured output where genai_shim's decode paths cannot apply it (never ignore it)."""
    if config.is_beam_search():
        raise ConfigError(
            "structured_output_config is not supported with beam search (num_beams > 1) in "
            "genai_shim; use greedy or multinomial decoding",
            key="structured_output_config",
        )
    if speculative:
        raise ConfigError(
            "structured_output_config is not supported with speculative decoding (draft_model) in "
            "genai_shim; create the pipeline without draft_model",
            key="structured_output_config",
        )


def make_constraint(tokenizer: Any, config: Any) -> GrammarConstraint | None:
    """A constraint for a request's GenerationConfig, or None without structured output."""
    so = getattr(config, "structured_output_config", None)
    if so is None:
        return None
    return GrammarConstraint(tokenizer, so, config.stop_token_ids)

