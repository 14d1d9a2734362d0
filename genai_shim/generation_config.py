"""GenerationConfig: openvino.genai's fields, defaults, JSON loading and validate() messages."""

from __future__ import annotations

import copy
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.enums import BindingEnum
from ov_npu_emu.errors import ConfigError

__all__ = [
    "SIZE_MAX",
    "UNSUPPORTED_FIELDS",
    "GenerationConfig",
    "StopCriteria",
    "WhisperGenerationConfig",
    "check_supported",
]

logger = logging.getLogger(__name__)

#: the real default for "unlimited" (std::numeric_limits<size_t>::max())
SIZE_MAX = 2**64 - 1


class StopCriteria(BindingEnum):
    """When a beam group stops once it holds num_beams / num_beam_groups finished beams: at once
    (EARLY), when no running beam can beat the worst of them at its current length (HEURISTIC)
    or at max_new_tokens (NEVER)."""

    EARLY = 0
    HEURISTIC = 1
    NEVER = 2


#: field -> default; order follows the real header
_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": SIZE_MAX,
    "max_length": SIZE_MAX,
    "min_new_tokens": 0,
    "ignore_eos": False,
    "echo": False,
    "logprobs": 0,
    "eos_token_id": -1,
    "stop_strings": set(),
    "include_stop_str_in_output": False,
    "stop_token_ids": set(),
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "num_beam_groups": 1,
    "num_beams": 1,
    "diversity_penalty": 0.0,
    "length_penalty": 1.0,
    "num_return_sequences": 1,
    "no_repeat_ngram_size": SIZE_MAX,
    "stop_criteria": StopCriteria.HEURISTIC,
    "do_sample": False,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": SIZE_MAX,
    "min_p": 0.0,
    "rng_seed": 0,
    "assistant_confidence_threshold": 0.0,
    "num_assistant_tokens": 0,
    "max_ngram_size": 0,
    "branching_factor": 1,
    "tree_depth": 0,
    "apply_chat_template": True,
    "structured_output_config": None,
    "adapters": None,
    "parsers": [],
    "return_omni_outputs": False,
    # CDPruner: percent of visual tokens a VLMPipeline prunes (0: off) and the relevance weight
    "pruning_ratio": 0,
    "relevance_weight": 0.5,
}

#: keys read from a generation_config.json (HF names; pad/bos are informational)
_JSON_KEYS = (
    "max_new_tokens",
    "max_length",
    "min_new_tokens",
    "ignore_eos",
    "echo",
    "logprobs",
    "stop_strings",
    "include_stop_str_in_output",
    "stop_token_ids",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "num_beam_groups",
    "num_beams",
    "diversity_penalty",
    "length_penalty",
    "num_return_sequences",
    "no_repeat_ngram_size",
    "do_sample",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "rng_seed",
    "apply_chat_template",
    "num_assistant_tokens",  # measured: the real reads it (speculative decoding's window)
)


def _checked(name: str, value: Any, defaults: dict[str, Any] | None = None) -> Any:
    """Reject values of the wrong kind now (the real binding raises TypeError on assignment),
    not with a TypeError deep in validate() or the sampler."""
    kind = type((defaults or _DEFAULTS)[name])
    ok = {
        bool: lambda v: isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)),
        int: lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool),
        float: lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool),
    }.get(kind)
    if ok is None:
        return value
    if not ok(value):
        raise ConfigError(
            f"GenerationConfig.{name} must be {'an' if kind is int else 'a'} {kind.__name__}, got "
            f"{type(value).__name__} {value!r}"
        )
    return kind(value)


class GenerationConfig:
    """Generation parameters: names, defaults and checks of ``openvino_genai.GenerationConfig``.

    ``GenerationConfig()``, ``GenerationConfig("generation_config.json")`` or
    ``GenerationConfig(max_new_tokens=20, ...)``.
    """

    #: the fields and their defaults (a subclass adds its own)
    _FIELDS: dict[str, Any] = _DEFAULTS
    #: the keys read from a generation_config.json
    _JSON_FIELDS: tuple[str, ...] = _JSON_KEYS

    @classmethod
    def field_defaults(cls) -> dict[str, Any]:
        """Every field of this config class with its default."""
        return dict(cls._FIELDS)

    def __init__(self, json_path: str | os.PathLike | None = None, **kwargs: Any) -> None:
        for k, v in self._FIELDS.items():
            object.__setattr__(self, k, copy.copy(v))
        if json_path:
            self._load_json(Path(json_path))
        if kwargs:
            self.update_generation_config(**kwargs)

    # -- loading -----------------------------------------------------------------------------
    def _load_json(self, path: Path) -> None:
        if not path.is_file():
            raise ConfigError(f"Generation config file {os.fspath(path)!r} does not exist")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"Cannot parse {os.fspath(path)!r}: {e}") from e
        for k in self._JSON_FIELDS:
            if k in data and data[k] is not None:
                setattr(self, k, data[k])
        eos = data.get("eos_token_id")
        if isinstance(eos, list):
            # HF allows a list; the first is the EOS id, all of them stop generation.
            if eos:
                self.eos_token_id = int(eos[0])
            self.stop_token_ids = set(self.stop_token_ids) | {int(e) for e in eos}
        elif isinstance(eos, int):
            self.set_eos_token_id(eos)

    # -- attribute handling ------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._FIELDS:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        if name in ("stop_strings", "stop_token_ids"):
            if isinstance(value, (str, bytes, int, float)):  # set("ab") would be {"a", "b"}
                raise ConfigError(f"GenerationConfig.{name} must be a set, got {type(value).__name__}")
            value = set(value) if value is not None else set()
            if name == "stop_token_ids":
                if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
                    raise ConfigError(
                        f"GenerationConfig.stop_token_ids must hold integer ids, got {sorted(map(repr, value))}"
                    )
                value = {int(v) for v in value}
            elif not all(isinstance(v, str) for v in value):
                raise ConfigError("GenerationConfig.stop_strings must hold strings")
        elif name == "structured_output_config":
            from genai_shim.structured_output import StructuredOutputConfig

            if value is not None and not isinstance(value, StructuredOutputConfig):
                raise ConfigError(
                    "GenerationConfig.structured_output_config must be a StructuredOutputConfig "
                    f"or None, got {type(value).__name__}",
                    key=name,
                )
        elif name == "parsers":
            from genai_shim.parsers import checked_parsers

            value = checked_parsers(value)
        else:
            value = _checked(name, value, self._FIELDS)
        object.__setattr__(self, name, value)

    def update_generation_config(self, **kwargs: Any) -> None:
        """Set several fields at once; an unknown name is a ConfigError (the real ignores it)."""
        eos = kwargs.pop("eos_token_id", None)
        for k in kwargs:
            if k not in self._FIELDS:
                # the real binding ignores unknown names; nothing is dropped silently here
                raise ConfigError(
                    f"{type(self).__name__} has no field {k!r} (openvino_genai would ignore it); the "
                    f"fields are: {', '.join(self._FIELDS)}",
                    key=k,
                )
        for k, v in kwargs.items():
            setattr(self, k, v)
        if eos is not None:
            object.__setattr__(self, "eos_token_id", int(eos))
        if self.eos_token_id != -1:  # as the real: an update keeps EOS among the stop tokens
            self.set_eos_token_id(self.eos_token_id)

    def set_eos_token_id(self, tokenizer_eos_token_id: int) -> None:
        """Set EOS and make it a stop token (``stop_token_ids`` always contains EOS)."""
        object.__setattr__(self, "eos_token_id", int(tokenizer_eos_token_id))
        self.stop_token_ids = set(self.stop_token_ids) | {int(tokenizer_eos_token_id)}

    # -- predicates --------------------------------------------------------------------------
    def get_max_new_tokens(self, prompt_length: int = 0) -> int:
        """max_new_tokens wins over max_length (prompt + new)."""
        if self.max_new_tokens != SIZE_MAX:
            return int(self.max_new_tokens)
        if self.max_length != SIZE_MAX:
            if self.max_length <= prompt_length:
                raise ConfigError(
                    "Internal error: generation_config.max_length should be bigger than number of prompt tokens",
                    key="max_length",
                )
            return int(self.max_length) - int(prompt_length)
        return SIZE_MAX

    def is_greedy_decoding(self) -> bool:
        return not self.do_sample and not self.is_beam_search()

    def is_beam_search(self) -> bool:
        return int(self.num_beams) > 1

    def is_multinomial(self) -> bool:
        return bool(self.do_sample)

    def is_assisting_generation(self) -> bool:
        return self.assistant_confidence_threshold > 0 or self.num_assistant_tokens > 0

    def is_prompt_lookup(self) -> bool:
        return self.max_ngram_size > 0 and self.num_assistant_tokens > 0

    def is_tree_search(self) -> bool:
        return self.tree_depth > 0

    # -- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ConfigError (a RuntimeError) with the real messages for invalid combinations."""

        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(msg)

        need(
            self.eos_token_id == -1 or self.eos_token_id in self.stop_token_ids,
            "'stop_token_ids' must contain 'eos_token_id'. Please, call 'set_eos_token_id' with "
            "'eos_token_id' value",
        )
        for t in self.stop_token_ids:
            need(t >= 0, f"'stop_token_ids' must be non-negative, but it contains a value {t}")
        if self.ignore_eos:
            need(
                self.max_new_tokens != SIZE_MAX or self.max_length != SIZE_MAX,
                "ignore_eos is true, in this case either 'max_new_tokens', or 'max_length' should be defined.",
            )
        need(
            self.eos_token_id != -1
            or bool(self.stop_token_ids)
            or bool(self.stop_strings)
            or self.max_new_tokens != SIZE_MAX
            or self.max_length != SIZE_MAX,
            "Either 'eos_token_id', or 'stop_token_ids', or 'stop_strings', or 'max_new_tokens', "
            "or "
            "'max_length' should be defined.",
        )
        need(
            self.max_new_tokens > 0 or (self.max_new_tokens == 0 and self.echo),
            "'max_new_tokens' must be greater than 0, if `echo` is set, 0 is also accepted",
        )
        need(
            self.min_new_tokens <= self.max_new_tokens,
            "min_new_tokens must be less or equal max_new_tokens",
        )
        if not self.is_beam_search():
            need(
                self.repetition_penalty > 0.0,
                f"'repetition_penalty' must be a strictly positive float, but got {self.repetition_penalty:g}",
            )
            need(
                -2.0 <= self.presence_penalty <= 2.0,
                f"'presence_penalty' penalty must be within [-2.0; 2.0], but got {self.presence_penalty:g}",
            )
            need(
                -2.0 <= self.frequency_penalty <= 2.0,
                f"'frequence_penalty' penalty must be within [-2.0; 2.0], but got {self.frequency_penalty:g}",
            )
        else:
            # The real beam search applies no logit processor, so it rejects the penalties.
            need(
                self.frequency_penalty == 0.0,
                "'frequency_penalty' is not currently supported by beam search and should be "
                f"0.0f, but got {self.frequency_penalty:g}",
            )
            need(
                self.presence_penalty == 0.0,
                "'presence_penalty' is not currently supported by beam search and should be "
                f"0.0f, but got {self.presence_penalty:g}",
            )
            need(
                self.repetition_penalty == 1.0,
                "'repetition_penalty' is not currently supported by beam search and should be "
                f"1.0f, but got {self.repetition_penalty:g}",
            )
        if self.is_multinomial():
            need(
                self.temperature > 0.0,
                "When 'do_sample' is true, temperature must be a strictly positive float, but "
                f"got {self.temperature:g}",
            )
            need(
                0.0 < self.top_p <= 1.0,
                f"When 'do_sample' is true, top_p must be a positive float > 0.0 and <= 1.0, but got {self.top_p:g}",
            )
            need(
                0.0 <= self.min_p < 1.0,
                f"When 'do_sample' is true, min_p must be in [0.0, 1.0), but got {self.min_p:g}",
            )
        else:
            need(
                self.num_return_sequences == 1 or self.is_beam_search(),
                "'num_return_sequences' can be more than 1 only in case of beam search or "
                "multinomial sampling, "
                f"but got {self.num_return_sequences}",
            )
        if self.is_beam_search():
            need(
                self.num_beam_groups > 0 and self.num_beams % self.num_beam_groups == 0,
                f"'num_beams' ({self.num_beams}) should be divisible by 'num_beam_groups' ({self.num_beam_groups})",
            )
            need(
                self.num_beams >= self.num_return_sequences,
                f"'num_beams' ({self.num_beams}) must be greater equal than 'num_return_sequences' "
                f"({self.num_return_sequences})",
            )
            need(
                not self.do_sample,
                "Beam search with sampling is not supported yet. Please either set do_sample=false "
                "to use beam search or set num_beams=1 if you with to use multinomial sampling.",
            )
            need(self.no_repeat_ngram_size > 0, "'no_repeat_ngram_size' must be positive")
            if self.num_beam_groups > 1:
                need(
                    self.diversity_penalty != 0.0,
                    "For grouped beam search 'diversity_penalty' should not be zero, otherwise it "
                    "fallbacks to non-grouped beam search",
                )
            else:
                need(
                    self.diversity_penalty == 0.0,
                    "For beam search 'diversity_penalty' is applicable only when grouped beam "
                    "search is used, but got 'num_beam_groups' == 1",
                )

        if self.is_assisting_generation():
            need(
                not self.is_beam_search() and self.num_return_sequences == 1,
                "Beam search and parallel sampling are not compatible with assistant generation",
            )
            need(
                self.assistant_confidence_threshold == 0 or self.num_assistant_tokens == 0,
                "Parameters `assistant_confidence_threshold` and `num_assistant_tokens` are "
                "mutually exclusive in `GenerationConfig`",
            )
        if self.num_assistant_tokens == 0:
            need(
                self.max_ngram_size == 0,
                "'max_ngram_size' should be set to default value 0 when prompt lookup is disabled",
            )

        if self.structured_output_config is not None:
            self.structured_output_config.validate()

    # -- misc --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {k: copy.copy(getattr(self, k)) for k in self._FIELDS}

    def copy(self) -> GenerationConfig:
        return copy.deepcopy(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GenerationConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.to_dict().items() if v != self._FIELDS[k]}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


#: WhisperGenerationConfig's own fields and defaults (openvino_genai 2026.4.1; Whisper's
#: multilingual vocabulary ids)
_WHISPER_DEFAULTS: dict[str, Any] = {
    "decoder_start_token_id": 50258,
    "pad_token_id": 50257,
    "translate_token_id": 50358,
    "transcribe_token_id": 50359,
    "prev_sot_token_id": 50361,
    "no_timestamps_token_id": 50363,
    "max_initial_timestamp_index": 50,
    "is_multilingual": True,
    "language": None,
    "lang_to_id": {},
    "task": None,
    "return_timestamps": False,
    "word_timestamps": False,
    "alignment_heads": [],
    "initial_prompt": None,
    "hotwords": None,
    "begin_suppress_tokens": [],
    "suppress_tokens": [],
}
_WHISPER_JSON_KEYS = (
    "begin_suppress_tokens",
    "suppress_tokens",
    "decoder_start_token_id",
    "pad_token_id",
    "no_timestamps_token_id",
    "max_initial_timestamp_index",
    "prev_sot_token_id",
    "is_multilingual",
    "lang_to_id",
    "alignment_heads",
)


class WhisperGenerationConfig(GenerationConfig):
    """``openvino_genai.WhisperGenerationConfig``: GenerationConfig plus Whisper's decoding fields
    (language and task tokens, timestamps, suppressed tokens), read from a Whisper export's
    generation_config.json (``task_to_id`` included) and checked as the real checks them."""

    _FIELDS = {**_DEFAULTS, "apply_chat_template": False, **_WHISPER_DEFAULTS}
    _JSON_FIELDS = (*_JSON_KEYS, *_WHISPER_JSON_KEYS)

    def _load_json(self, path: Path) -> None:
        super()._load_json(path)
        data = json.loads(path.read_text(encoding="utf-8"))
        tasks = data.get("task_to_id")
        if self.is_multilingual and isinstance(tasks, dict):
            for task in ("transcribe", "translate"):
                if tasks.get(task) is not None:
                    setattr(self, f"{task}_token_id", tasks[task])
        self.apply_chat_template = False

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("language", "task", "initial_prompt", "hotwords"):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"WhisperGenerationConfig.{name} must be a str or None, got {type(value).__name__}")
        elif name in ("begin_suppress_tokens", "suppress_tokens"):
            value = [int(_checked("pad_token_id", v, _WHISPER_DEFAULTS)) for v in value]
        elif name == "lang_to_id":
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ConfigError("WhisperGenerationConfig.lang_to_id must map language tokens (str) to ids")
            value = {k: int(_checked("pad_token_id", v, _WHISPER_DEFAULTS)) for k, v in value.items()}
        elif name == "alignment_heads":
            try:
                value = [(int(layer), int(head)) for layer, head in value]
            except (TypeError, ValueError) as e:
                raise ConfigError(
                    "WhisperGenerationConfig.alignment_heads must be (layer, head) pairs of ints"
                ) from e
        super().__setattr__(name, value)

    def validate(self) -> None:
        """The base checks, then Whisper's (the real's messages)."""
        super().validate()

        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(msg)

        if self.is_multilingual:
            need(bool(self.lang_to_id), "'lang_to_id' map must be provided for multilingual models.")
            if self.language is not None:
                self.language_token_id(self.language)
            if self.task is not None:
                need(self.task in ("transcribe", "translate"),
                     f"'task' mast be 'transcribe' or 'translate'. Task provided: '{self.task}'.")
        else:
            need(self.language is None, "Cannot specify 'language' for not multilingual model.")
            need(self.task is None, "Cannot specify 'task' for not multilingual model.")
        need(self.num_return_sequences == 1,
             f"'num_return_sequences' must be 1. Provided: {self.num_return_sequences}.")
        need(not self.is_assisting_generation(), "Assisted generation is not supported.")
        need(not self.word_timestamps or bool(self.alignment_heads),
             "'word_timestamps' can be true only when 'alignment_heads' is set and not empty.")

    def language_token_id(self, language: str) -> int:
        """The id of a language given as ``"en"`` or ``"<|en|>"`` (lang_to_id holds the wrapped form)."""
        wrapped = language if len(language) > 4 and language.startswith("<|") and language.endswith("|>") else (
            f"<|{language}|>")
        if wrapped not in self.lang_to_id:
            raise ConfigError(f"'language' {language} must be provided in 'lang_to_id' map.")
        return self.lang_to_id[wrapped]


#: GenerationConfig fields genai_shim's LLMPipeline does not act on → why.  A value other than
#: the default is a ConfigError naming the field (the real LLMPipeline ignores most of them).
UNSUPPORTED_FIELDS: dict[str, str] = {
    "adapters": (
        "LoRA adapters apply only in an LLMPipeline created with the adapters property "
        "(adapters=AdapterConfig(...)), as openvino_genai's AdapterController"
    ),
    "parsers": (
        "output parsers run in LLMPipeline.generate for text inputs (DecodedResults.parsed); "
        "this pipeline does not run them (nor does the real one)"
    ),
    "return_omni_outputs": "only openvino_genai's OmniPipeline uses it",
    "pruning_ratio": "visual-token pruning: only openvino_genai's VLMPipeline uses it",
    "relevance_weight": "visual-token pruning: only openvino_genai's VLMPipeline uses it",
    "tree_depth": "tree search (Eagle3 speculative decoding) is not implemented in genai_shim",
    "branching_factor": "tree search (Eagle3 speculative decoding) is not implemented in genai_shim",
}

#: fields only speculative decoding (draft_model) or prompt lookup reads
ASSISTING_FIELDS = ("num_assistant_tokens", "assistant_confidence_threshold", "max_ngram_size")


def folder_generation_config(folder: Path, tokenizer: Any) -> GenerationConfig:
    """A model folder's generation_config.json (defaults without one), with the tokenizer's EOS
    when the file names none: what the real pipelines start from."""
    path = Path(folder) / "generation_config.json"
    config = GenerationConfig(path) if path.is_file() else GenerationConfig()
    if config.eos_token_id == -1 and tokenizer.get_eos_token_id() != -1:
        config.set_eos_token_id(tokenizer.get_eos_token_id())
    return config


def replacement_config(new: GenerationConfig, current: GenerationConfig) -> GenerationConfig:
    """``set_generation_config``'s checked copy of ``new``: the real pipelines keep the model's
    EOS when the new config has none."""
    config = new.copy()
    if config.eos_token_id == -1:
        config.set_eos_token_id(current.eos_token_id)
    config.validate()
    return config


def _is_default(name: str, value: Any) -> bool:
    default = _DEFAULTS[name]
    if default is None:
        return value is None or (isinstance(value, (list, tuple, dict, set)) and not value)
    return value == default


def check_supported(
    config: GenerationConfig,
    *,
    assisted: bool,
    folder_defaults: GenerationConfig | None = None,
    lora: bool = False,
    parsers: bool = False,
    vision: bool = False,
) -> None:
    """Refuse fields the pipeline would otherwise drop silently.

    ``assisted``: the pipeline has a draft model or prompt lookup (the assisting fields are
    used; otherwise they are ignored with a warning, as the real ignores them).
    ``folder_defaults``: the pipeline's own config (from generation_config.json); an
    assisting value equal to it is left alone, as openvino_genai reads it from the folder and
    uses it only for assisted generation.  ``lora``: the pipeline applies ``adapters``.
    ``parsers``: the pipeline runs ``parsers`` (LLMPipeline with text inputs).  ``vision``: the
    pipeline prunes visual tokens (``pruning_ratio`` / ``relevance_weight``: a VLM's).
    """
    for name, why in UNSUPPORTED_FIELDS.items():
        if (lora and name == "adapters") or (parsers and name == "parsers"):
            continue
        if vision and name in ("pruning_ratio", "relevance_weight"):
            continue
        value = getattr(config, name)
        if not _is_default(name, value):
            raise ConfigError(
                f"GenerationConfig.{name}={value!r} is not supported: {why}. Leave it at its "
                f"default ({_DEFAULTS[name]!r})",
                key=name,
            )
    if assisted:
        return
    for name in ASSISTING_FIELDS:
        value = getattr(config, name)
        if _is_default(name, value):
            continue
        if folder_defaults is not None and getattr(folder_defaults, name) == value:
            continue
        # The real ignores it (upstream tests pass num_assistant_tokens to plain pipelines and
        # expect plain results); ignored here too, but said once per field, not silently.
        if name not in _WARNED_ASSISTING:
            _WARNED_ASSISTING.add(name)
            logger.warning(
                "GenerationConfig.%s=%r has no effect without a draft_model or prompt_lookup=True "
                "pipeline property; ignored, as openvino_genai ignores it",
                name, value,
            )


#: assisting fields already warned about (once per process, as a log line per call would flood)
_WARNED_ASSISTING: set[str] = set()
