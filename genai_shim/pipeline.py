"""LLMPipeline: openvino.genai's StatefulLLMPipeline behaviour over ov_npu_emu.Core (CPU, NPU)."""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.beam_search import GroupBeamSearcher, SequenceGroup
from genai_shim.chat import ChatHistory
from genai_shim.continuous_batching.llm_backend import PagedBackend
from genai_shim.continuous_batching.llm_backend import supports as pa_supports
from genai_shim.continuous_batching.pipeline import SchedulerConfig
from genai_shim.generation_config import SIZE_MAX, GenerationConfig, check_supported
from genai_shim.lora_controller import AdapterController, resolve_adapters
from genai_shim.model_folder import MODEL_XML, model_folder
from genai_shim.npu_config import get_kv_axes_pos, translate_npu_config
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.results import DecodedResults, EncodedResults, GenerationFinishReason
from genai_shim.sampling import LogitProcessor, Sampler
from genai_shim.speculative import DraftModel, SpeculativeDecoder, continuation_feed
from genai_shim.stop_strings import match_stop_string, stop_window
from genai_shim.streamers import (
    StreamerBase,
    StreamingStatus,
    call_write,
    make_streamer,
    status_from_callback,
)
from genai_shim.structured_output import check_structured_output, make_constraint
from genai_shim.tokenizer import TokenizedInputs, Tokenizer
from ov_npu_emu.errors import (
    BlobFormatError,
    ConfigError,
    NpuEmuError,
    PromptTooLongError,
    UserInputError,
)

__all__ = ["LLMPipeline", "SchedulerConfig"]

logger = logging.getLogger(__name__)

_CHAT_DEPRECATION = (
    "start_chat() / finish_chat() API is deprecated and will be removed in the next major release. "
    "Please use generate() with ChatHistory argument."
)

#: properties openvino.genai consumes itself on any device (never passed to compile_model)
_GENAI_ONLY_KEYS = (
    "scheduler_config",
    "draft_model",
    "prompt_lookup",
    "adapters",
    "ATTENTION_BACKEND",
    "STATIC_PIPELINE",
)


#: features openvino.genai offers through pipeline properties that genai_shim does not implement
_UNSUPPORTED_FEATURES: dict[str, str] = {}


class _Seq:
    """One running sequence of a generate() call."""

    def __init__(
        self, prompt: list[int], config: GenerationConfig, max_new: int, constraint: Any = None
    ) -> None:
        self.prompt = prompt
        self.tokens: list[int] = []
        self.logps: list[float] = []  # per generated token (scores sum the kept ones)
        self.finish: GenerationFinishReason | None = None
        self.processor = LogitProcessor(config, prompt, constraint)
        self.max_new = max_new
        self.streamed = 0
        self.out_of_memory = False


class _OneRow:
    """Per-step inputs of a single running row, in buffers reused across the decode steps."""

    def __init__(self, mask: np.ndarray) -> None:
        n = mask.shape[1]
        self._buf = np.ones((1, max(2 * n, 64)), dtype=np.int64)
        self._buf[:, :n] = mask
        self._len = n
        self._pos = int(mask.sum()) - 1  # position of the last fed token
        self.ids = np.zeros((1, 1), dtype=np.int64)
        self.beam = np.zeros(1, dtype=np.int32)
        self._pos_arr = np.zeros((1, 1), dtype=np.int64)

    def step(self) -> tuple[np.ndarray, np.ndarray]:
        """(attention mask with one more 1, position of the new token)."""
        if self._len == self._buf.shape[1]:
            self._buf = np.concatenate([self._buf, np.ones_like(self._buf)], axis=1)
        self._len += 1
        self._pos += 1
        self._pos_arr[0, 0] = self._pos
        return self._buf[:, : self._len], self._pos_arr


def _now() -> float:
    return time.perf_counter()


def _make_core() -> Any:
    """The Core every pipeline compiles through (tests substitute one with other plugins)."""
    from ov_npu_emu import Core

    return Core()


class LLMPipeline:
    """``LLMPipeline(models_path, device="CPU", config=None, **properties)`` or
    ``LLMPipeline(models_path, tokenizer, device, config=None, **properties)``.

    One logic for both devices (openvino.genai's StatefulLLMPipeline): on "NPU" the properties
    are translated for NPUW and the model is compiled through ``ov_npu_emu.Core`` with them; the
    prompt/history is capped at MAX_PROMPT_LEN, generation ends silently at the KV capacity,
    and chat re-prefills the whole templated history each turn.  On other devices the stateful
    model runs as is and chat keeps the KV cache between turns.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        t0 = _now()
        memory = self._parse_memory_ctor(args, kwargs)
        in_config: GenerationConfig | None = None
        if memory is not None:
            # LLMPipeline(model: str, weights: Tensor, tokenizer, device, generation_config=None,
            # **properties): the IR's XML text and its weights, no folder.
            model_xml, weights, tokenizer, device, in_config = memory
            folder: Path | None = None
            config: Mapping[str, Any] | None = None
        else:
            if not args and "models_path" not in kwargs:
                raise UserInputError("LLMPipeline() needs models_path")
            models_path = args[0] if args else kwargs.pop("models_path")
            tokenizer, device, config = self._parse_ctor(args[1:], kwargs)
            if not isinstance(models_path, (str, bytes, os.PathLike)):
                raise UserInputError(
                    "models_path must be a folder path (str or os.PathLike), got "
                    f"{type(models_path).__name__}"
                )
            folder = model_folder(models_path)
        props: dict[str, Any] = dict(config or {})
        props.update(kwargs)
        for k, feature in _UNSUPPORTED_FEATURES.items():
            if props.get(k):  # silently decoding without them would lose what was asked for
                raise ConfigError(
                    f"genai_shim does not implement {feature} ({k!r}); remove the property "
                    "(see docs/genai_shim.md, 'Not supported')",
                    key=k,
                )
        prompt_lookup = props.get("prompt_lookup", False)
        if not isinstance(prompt_lookup, bool):
            raise ConfigError(
                f"prompt_lookup must be a bool, got {type(prompt_lookup).__name__}",
                key="prompt_lookup",
            )
        if prompt_lookup and props.get("draft_model") is not None:
            raise ConfigError(
                "genai_shim does not combine prompt_lookup with draft_model; use one of them",
                key="prompt_lookup",
            )
        backend = str(props.get("ATTENTION_BACKEND", "PA")).upper()
        draft = props.get("draft_model")
        if draft is not None and not isinstance(draft, DraftModel):
            raise ConfigError(
                "draft_model must be what genai_shim.draft_model(path, device, **properties) "
                f"returns (speculative decoding), got {type(draft).__name__}",
                key="draft_model",
            )
        scheduler_config = props.get("scheduler_config")
        # the real re-throws paged-attention failures only when PA was asked for explicitly
        explicit_pa = scheduler_config is not None or "ATTENTION_BACKEND" in props
        adapters = resolve_adapters(props.get("adapters"))
        if adapters and (draft is not None or prompt_lookup):
            raise ConfigError(
                "genai_shim applies LoRA adapters in the stateful and NPU pipelines only, not with "
                "draft_model or prompt_lookup; drop one of them",
                key="adapters",
            )
        for k in _GENAI_ONLY_KEYS:
            props.pop(k, None)
        self._device = str(device).upper()
        self._is_npu = self._device.split(".")[0] == "NPU"
        # The real "CPU" pipeline is continuous batching (paged attention) unless
        # ATTENTION_BACKEND=SDPA; genai_shim always runs the stateful model, but follows the
        # few rules that differ between the two (max_length per prompt, beam rows of a batch).
        self._paged = not self._is_npu and backend != "SDPA"
        # Prompt lookup: the real runs it in its continuous-batching pipeline on CPU; on NPU the
        # property has no effect (the stateful NPU pipeline decodes token by token, measured on
        # openvino_genai 2026.4.1), so genai_shim does the same and says so in the log.
        self._prompt_lookup = prompt_lookup and not self._is_npu
        self._pl_requested = bool(prompt_lookup)  # the assisting fields are not "ignored" then
        if self._prompt_lookup and backend == "SDPA":
            # the real's text (prompt lookup runs on its paged-attention pipeline only)
            raise ConfigError(
                "User properties are conflicting: some of them requires PagedAttention backend, "
                "while 'ATTENTION_BACKEND' is set to 'SDPA'",
                key="ATTENTION_BACKEND",
            )
        if prompt_lookup and self._is_npu:
            logger.warning(
                "prompt_lookup has no effect on NPU (as in openvino_genai): decoding one token "
                "per model call"
            )
        self._tokenizer = tokenizer if tokenizer is not None else Tokenizer(folder)
        if folder is None:
            self._config = in_config.copy() if in_config is not None else GenerationConfig()
        else:
            gc_path = folder / "generation_config.json"
            self._config = GenerationConfig(gc_path) if gc_path.is_file() else GenerationConfig()
        if self._config.eos_token_id == -1 and self._tokenizer.get_eos_token_id() != -1:
            self._config.set_eos_token_id(self._tokenizer.get_eos_token_id())

        self._core = _make_core()
        self._spec: SpeculativeDecoder | None = None
        self._lora: AdapterController | None = None
        # chat state
        self._chat_active = False
        self._history: list[dict[str, Any]] = []
        self._chat_input: str | None = None  # "string" or "history" for the running chat
        self._kv_tokens: list[int] = []  # ids whose keys/values sit in the KV cache (batch 1)
        self._chat_ids: list[int] = []  # template-less chat: all ids of the conversation so far
        self._cancelled = False
        if draft is not None and folder is None:
            raise ConfigError(
                "genai_shim does not implement speculative decoding (draft_model) for a model "
                "given in memory; pass the model's folder instead",
                key="draft_model",
            )
        if draft is not None:
            # Speculative decoding: the stateful FastDraft pipeline owns both models.
            self._spec = SpeculativeDecoder(
                self._core, folder, self._device, props, draft, self._tokenizer, self._config
            )
            self._load_time = (_now() - t0) * 1000.0
            return
        if folder is None:
            raw = np.ascontiguousarray(np.asarray(weights.data)).reshape(-1).view(np.uint8)
            model = self._core.read_model(model_xml.encode("utf-8"), memoryview(raw))
        else:
            model = self._core.read_model(folder / MODEL_XML)
        self._batch_axis, self._seq_axis = get_kv_axes_pos(model)
        # LoRA goes into the graph before compiling (the real's AdapterController); the paged
        # backend injects its own copy (its model is read and compiled separately).
        if adapters is not None:
            self._lora = AdapterController(model, adapters, self._device)
            self._config.adapters = adapters
        self._max_prompt_len = SIZE_MAX
        self._kv_capacity = SIZE_MAX
        self._pl_requests: list[Any] = []  # prompt lookup: one more request per extra prompt
        self._sampler = Sampler()
        # The real CPU LLMPipeline is its continuous-batching (PagedAttention) pipeline unless
        # ATTENTION_BACKEND=SDPA: greedy / multinomial calls outside chat run on ours
        # (genai_shim/continuous_batching), compiled here as the real's load; the stateful model
        # (beam search, chat, ...) is then compiled on first use.
        self._pa: PagedBackend | None = None
        self._st: tuple[Any, Any, set[str]] | None = None
        self._st_src = (model, props)
        if self._is_npu:
            self._set_stateful(self._compile_npu(model, props, folder))
        elif self._paged and not self._prompt_lookup and folder is not None:
            pa_props = props if adapters is None else {**props, "adapters": adapters}
            self._pa = PagedBackend(folder, self._tokenizer, self._device, pa_props, scheduler_config)
            try:
                self._pa.engine  # noqa: B018  (compile now)
            except (NpuEmuError, RuntimeError) as e:
                if explicit_pa:
                    raise
                # as the real: fall back to the stateful pipeline, saying why
                logger.warning("paged attention is not available (%s); using the stateful model", e)
                self._pa = None
                self._set_stateful(self._core.compile_model(model, self._device, props))
        else:
            self._set_stateful(self._core.compile_model(model, self._device, props))
        self._load_time = (_now() - t0) * 1000.0

    # -- the stateful model (compiled at construction, or on first use next to the PA backend) --
    def _set_stateful(self, compiled: Any) -> tuple[Any, Any, set[str]]:
        names = {n for p in compiled.inputs for n in p.get_names()}
        self._st = (compiled, compiled.create_infer_request(), names)
        return self._st

    def _stateful(self) -> tuple[Any, Any, set[str]]:
        if self._st is None:
            model, props = self._st_src
            return self._set_stateful(self._core.compile_model(model, self._device, props))
        return self._st

    @property
    def _compiled(self) -> Any:
        return self._stateful()[0]

    @property
    def _request(self) -> Any:
        return self._stateful()[1]

    @property
    def _input_names(self) -> set[str]:
        return self._stateful()[2]

    @property
    def _has_pos(self) -> bool:
        return "position_ids" in self._stateful()[2]

    @property
    def _has_beam(self) -> bool:
        return "beam_idx" in self._stateful()[2]

    @staticmethod
    def _parse_memory_ctor(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[str, ov.Tensor, Tokenizer, str, GenerationConfig | None] | None:
        """The in-memory overload's arguments, or None for the folder overloads."""
        if not (len(args) > 1 and isinstance(args[1], ov.Tensor)) and "weights" not in kwargs:
            return None
        names = ("model", "weights", "tokenizer", "device", "generation_config")
        if len(args) > len(names):
            raise UserInputError(
                "LLMPipeline(model, weights, tokenizer, device, generation_config=None, "
                f"**properties) takes at most 5 positional arguments, got {len(args)}"
            )
        got = dict(zip(names, args, strict=False))
        for n in names[len(args) :]:
            if n in kwargs:
                got[n] = kwargs.pop(n)
        for n in names[:4]:
            if n not in got:
                raise UserInputError(
                    f"LLMPipeline(model, weights, tokenizer, device, ...) is missing {n!r}"
                )
        checks = (
            ("model", str, "the IR's XML text (str)"),
            ("weights", ov.Tensor, "an openvino.Tensor"),
            ("tokenizer", Tokenizer, "a Tokenizer"),
            ("device", str, "a device name (str)"),
        )
        for n, typ, what in checks:
            if not isinstance(got[n], typ):
                raise UserInputError(f"{n} must be {what}, got {type(got[n]).__name__}")
        gc = got.get("generation_config")
        if gc is not None and not isinstance(gc, GenerationConfig):
            raise UserInputError(
                f"generation_config must be a GenerationConfig, got {type(gc).__name__}"
            )
        return got["model"], got["weights"], got["tokenizer"], got["device"], gc

    @staticmethod
    def _parse_ctor(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Tokenizer | None, str, Mapping[str, Any] | None]:
        tokenizer = kwargs.pop("tokenizer", None)
        device = kwargs.pop("device", None)
        config = kwargs.pop("config", None)
        rest = list(args)
        if rest and isinstance(rest[0], Tokenizer):
            tokenizer = rest.pop(0)
        if rest and isinstance(rest[0], str):
            device = rest.pop(0)
        if rest and isinstance(rest[0], Mapping):
            config = rest.pop(0)
        if rest:
            raise UserInputError(
                "LLMPipeline(models_path, device='CPU', config=None, **properties) or "
                "LLMPipeline(models_path, tokenizer, device, config=None, **properties); got "
                f"extra {rest!r}"
            )
        if config is not None and not isinstance(config, Mapping):
            raise UserInputError(
                f"config must be a dict of properties, got {type(config).__name__}"
            )
        return tokenizer, device or "CPU", config

    # -- NPU -----------------------------------------------------------------------------------
    def _compile_npu(self, model: ov.Model, props: dict[str, Any], folder: Path | None) -> Any:
        npu = translate_npu_config(model, props)
        if npu.blob_path is not None and not npu.export_blob:
            path = Path(npu.blob_path)
            if not path.is_file():
                raise BlobFormatError(f"Blob file is not found at: {npu.blob_path}")
            with open(path, "rb") as f:
                compiled = self._core.import_model(f.read(), "NPU", npu.config)
        else:
            compiled = self._core.compile_model(model, "NPU", npu.config)
            if npu.export_blob:
                # A model from memory exports next to the working directory, as the real does.
                target = npu.blob_path or os.fspath(
                    (folder or Path()) / "openvino_model.blob"
                )
                if not target.endswith(".blob"):
                    raise ConfigError(
                        f"Please provide a full path to blob file in BLOB_PATH: {target}",
                        key="BLOB_PATH",
                    )
                try:
                    with open(target, "wb") as f:
                        compiled.export_model(f)
                except OSError as e:
                    raise ConfigError(
                        f"Blob file can't be exported to: {target}", key="BLOB_PATH"
                    ) from e
        # NPUW aligns the lengths; the pipeline uses what the compiled model reports.
        self._max_prompt_len = int(compiled.get_property("NPUW_LLM_MAX_PROMPT_LEN"))
        min_response = int(compiled.get_property("NPUW_LLM_MIN_RESPONSE_LEN"))
        self._kv_capacity = self._max_prompt_len + min_response - 1
        return compiled

    # -- public API ----------------------------------------------------------------------------
    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def get_generation_config(self) -> GenerationConfig:
        return self._config.copy()

    def set_generation_config(self, config: GenerationConfig) -> None:
        new = config.copy()
        # The real pipeline keeps the model's EOS when the new config has none.
        if new.eos_token_id == -1:
            new.set_eos_token_id(self._config.eos_token_id)
        new.validate()
        self._config = new

    def start_chat(self, system_message: str = "") -> None:
        """Start a chat (deprecated upstream in favour of ``generate(ChatHistory)``)."""
        warnings.warn(_CHAT_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._reset_kv()
        self._chat_active = True
        self._chat_input = None
        self._history = [{"role": "system", "content": system_message}] if system_message else []
        self._chat_ids = []

    def finish_chat(self) -> None:
        warnings.warn(_CHAT_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._chat_active = False
        self._chat_input = None
        self._history = []
        self._chat_ids = []
        self._reset_kv()

    def __call__(
        self,
        inputs: Any,
        generation_config: GenerationConfig | None = None,
        streamer: Any = None,
        **kwargs: Any,
    ) -> Any:
        return self.generate(inputs, generation_config, streamer, **kwargs)

    def generate(
        self,
        inputs: Any,
        generation_config: GenerationConfig | None = None,
        streamer: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Generate for a str (→ str), list[str] / ChatHistory (→ DecodedResults), or
        TokenizedInputs / ov.Tensor of ids (→ EncodedResults)."""
        start = _now()
        config = self._resolve_config(generation_config, kwargs)
        if self._spec is not None:
            return self._generate_speculative(self._spec, inputs, config, streamer, start)
        if isinstance(inputs, (TokenizedInputs, ov.Tensor, np.ndarray)):
            ids, mask = self._encoded_inputs(inputs)
            self._check_ids(ids)
            res = self._generate_ids(ids, mask, config, streamer, start, keep_kv=False)
            res.perf_metrics.raw_metrics.generate_durations.append((_now() - start) * 1e6)
            res.perf_metrics._evaluated = False
            res.perf_metrics.evaluate_statistics(start)
            return res
        if isinstance(inputs, ChatHistory):
            return self._generate_history(inputs, config, streamer, start)
        if isinstance(inputs, str):
            if self._chat_active:
                res = self._generate_chat_string(inputs, config, streamer, start)
            else:
                res = self._generate_texts([inputs], config, streamer, start)
            # The real binding returns a str only when one sequence was asked for.
            return res.texts[0] if config.num_return_sequences == 1 else res
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(p, str) for p in inputs):
            if self._chat_active:
                raise UserInputError(
                    "In chat mode generate() takes a single string; call finish_chat() for batches"
                )
            return self._generate_texts(list(inputs), config, streamer, start)
        raise UserInputError(
            "generate() takes a str, a list of str, a ChatHistory, TokenizedInputs or an "
            "openvino.Tensor of ids; "
            f"got {type(inputs).__name__}"
        )

    # -- config --------------------------------------------------------------------------------
    def _resolve_config(
        self, generation_config: GenerationConfig | None, kwargs: dict[str, Any]
    ) -> GenerationConfig:
        if generation_config is not None and not isinstance(generation_config, GenerationConfig):
            raise UserInputError(
                "generation_config must be a GenerationConfig, got "
                f"{type(generation_config).__name__}"
            )
        config = (generation_config or self._config).copy()
        if kwargs:
            config.update_generation_config(**kwargs)
        if config.eos_token_id == -1:
            config.set_eos_token_id(self._config.eos_token_id)
        config.validate()
        check_supported(
            config,
            assisted=self._spec is not None or self._pl_requested,
            folder_defaults=self._config,
            lora=self._lora is not None,
        )
        if config.structured_output_config is not None:
            check_structured_output(config, speculative=self._spec is not None)
        return config

    # -- input preparation ---------------------------------------------------------------------
    def _check_ids(self, ids: np.ndarray) -> None:
        """Token ids outside the vocabulary would index the embedding out of bounds (the CPU
        plugin silently reads zeros), so reject them here, on every device."""
        compiled = self._pa.engine.compiled if self._st is None and self._pa else self._compiled
        shape = compiled.output("logits").get_partial_shape()
        vocab = shape[shape.rank.get_length() - 1] if shape.rank.is_static else None
        if vocab is not None and vocab.is_static and ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= vocab.get_length():
                raise UserInputError(
                    f"input_ids must be token ids in [0, {vocab.get_length()}), got values {lo}..{hi}"
                )

    @staticmethod
    def _encoded_inputs(inputs: Any) -> tuple[np.ndarray, np.ndarray]:
        try:
            return LLMPipeline._encoded_arrays(inputs)
        except (ValueError, TypeError) as e:  # numpy: strings, ragged lists, None
            if isinstance(e, UserInputError):
                raise
            raise UserInputError(f"input_ids must be integer token ids: {e}") from e

    @staticmethod
    def _encoded_arrays(inputs: Any) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(inputs, TokenizedInputs):
            ids = np.asarray(inputs.input_ids.data, dtype=np.int64)
            mask = np.asarray(inputs.attention_mask.data, dtype=np.int64)
        else:
            ids = np.asarray(
                inputs.data if isinstance(inputs, ov.Tensor) else inputs, dtype=np.int64
            )
            mask = np.ones_like(ids)
        if ids.ndim == 1:
            ids, mask = ids[None, :], mask[None, :]
        if ids.ndim != 2 or ids.shape != mask.shape or ids.shape[1] == 0:
            raise UserInputError(
                f"input_ids must be a non-empty [batch, length] tensor, got shape {list(ids.shape)}"
            )
        return np.array(ids), np.array(mask)

    def _tokenize_templated(
        self, text_or_history: Any, perf: PerfMetrics
    ) -> tuple[np.ndarray, np.ndarray]:
        t0 = _now()
        templated = self._tokenizer.apply_chat_template(text_or_history, add_generation_prompt=True)
        t1 = _now()
        enc = self._tokenizer.encode(templated, add_special_tokens=False)
        t2 = _now()
        perf.raw_metrics.chat_template_durations.append((t1 - t0) * 1e6)
        perf.raw_metrics.tokenization_durations.append((t2 - t1) * 1e6)
        return np.array(enc.input_ids.data), np.array(enc.attention_mask.data)

    def _generate_texts(
        self, prompts: list[str], config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        perf = PerfMetrics()
        if config.apply_chat_template and self._tokenizer.chat_template:
            rows = [
                self._tokenize_templated([{"role": "user", "content": p}], perf) for p in prompts
            ]
            ids, mask = self._stack(rows)
        else:
            t0 = _now()
            enc = self._tokenizer.encode(prompts if len(prompts) > 1 else prompts[0])
            perf.raw_metrics.tokenization_durations.append((_now() - t0) * 1e6)
            ids, mask = np.array(enc.input_ids.data), np.array(enc.attention_mask.data)
        enc_res = self._generate_ids(ids, mask, config, streamer, start, keep_kv=False)
        return self._decode_results(enc_res, perf, start)

    def _stack(self, rows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        width = max(r[0].shape[1] for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, (r_ids, r_mask) in enumerate(rows):
            n = r_ids.shape[1]
            ids[i, width - n :], mask[i, width - n :] = r_ids[0], r_mask[0]
        return ids, mask

    def _decode_results(
        self, enc: EncodedResults, perf: PerfMetrics, start: float
    ) -> DecodedResults:
        t0 = _now()
        texts = [self._tokenizer.decode(t) for t in enc.tokens]
        detok = (_now() - t0) * 1e6
        out = DecodedResults()
        out.texts, out.scores, out.finish_reasons = texts, enc.scores, enc.finish_reasons
        pm = enc.perf_metrics
        raw = pm.raw_metrics
        raw.tokenization_durations = (
            perf.raw_metrics.tokenization_durations + raw.tokenization_durations
        )
        raw.chat_template_durations = (
            perf.raw_metrics.chat_template_durations + raw.chat_template_durations
        )
        raw.detokenization_durations.append(detok)
        raw.generate_durations.append((_now() - start) * 1e6)
        pm._evaluated = False
        pm.evaluate_statistics(start)
        out.perf_metrics = pm
        return out

    # -- chat ----------------------------------------------------------------------------------
    def _require_template(self) -> None:
        if not self._tokenizer.chat_template:
            raise ConfigError(
                "Chat template must not be empty when using ChatHistory in generate method."
            )

    def _generate_history(
        self, history: ChatHistory, config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        self._require_template()
        if self._chat_input == "string":
            raise UserInputError(
                "Chat doesn't support switching between input types. Please, continue using "
                "StringInputs or restart the chat."
            )
        perf = PerfMetrics()
        ids, mask = self._tokenize_templated(history, perf)
        enc = self._generate_ids(ids, mask, config, streamer, start, keep_kv=True)
        return self._decode_results(enc, perf, start)

    def _generate_chat_string(
        self, prompt: str, config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        if self._chat_input == "history":
            raise UserInputError(
                "Chat doesn't support switching between input types. Please, continue using "
                "ChatHistory or restart the chat."
            )
        self._chat_input = "string"
        perf = PerfMetrics()
        self._history.append({"role": "user", "content": prompt})
        if self._tokenizer.chat_template:
            ids, mask = self._tokenize_templated(self._history, perf)
        else:
            # No template: the conversation is the plain concatenation of turns (our choice;
            # documented), re-prefilled on NPU, continued from the KV cache elsewhere.
            t0 = _now()
            enc = self._tokenizer.encode(prompt)
            perf.raw_metrics.tokenization_durations.append((_now() - t0) * 1e6)
            ids = np.concatenate(
                [
                    np.array([self._chat_ids], dtype=np.int64).reshape(1, -1),
                    np.array(enc.input_ids.data),
                ],
                axis=1,
            )
            mask = np.ones_like(ids)
        try:
            enc_res = self._generate_ids(ids, mask, config, streamer, start, keep_kv=True)
        except Exception:
            self._history.pop()
            raise
        res = self._decode_results(enc_res, perf, start)
        if self._cancelled:
            self._history.pop()  # CANCEL drops the user turn
        else:
            self._chat_ids = ids[0].tolist() + enc_res.tokens[0]
            self._history.append({"role": "assistant", "content": res.texts[0]})
        return res

    # -- KV cache ------------------------------------------------------------------------------
    def _reset_kv(self) -> None:
        if self._spec is None and self._st is not None:  # speculative: reset every call
            if self._lora is not None:  # the adapters' variables outlive a conversation
                self._lora.reset_kv(self._request)
            else:
                self._request.reset_state()
        self._kv_tokens = []

    def _apply_adapters(self, config: GenerationConfig) -> None:
        # (without a controller check_supported refused a non-default GenerationConfig.adapters)
        if self._lora is not None:
            self._lora.apply(self._request, resolve_adapters(config.adapters))

    # -- speculative decoding ------------------------------------------------------------------
    def _generate_speculative(
        self,
        spec: SpeculativeDecoder,
        inputs: Any,
        config: GenerationConfig,
        streamer: Any,
        start: float,
    ) -> Any:
        """openvino.genai's StatefulSpeculativeLLMPipeline: batch 1, greedy, the prompt (or the
        whole templated chat history) prefilled into both models each call."""
        spec.prepare(config)
        if isinstance(inputs, (TokenizedInputs, ov.Tensor, np.ndarray)):
            ids, mask = self._encoded_inputs(inputs)
            res = spec.generate(ids, mask, config, streamer)
            res.perf_metrics.raw_metrics.generate_durations = [(_now() - start) * 1e6]
            res.perf_metrics._evaluated = False
            res.perf_metrics.evaluate_statistics(start)
            return res
        t0 = _now()
        as_str = isinstance(inputs, str)
        if isinstance(inputs, ChatHistory):
            if not config.apply_chat_template:
                raise ConfigError(
                    "Chat template must be applied when using ChatHistory in generate method."
                )
            self._require_template()
            if not len(inputs):
                raise UserInputError(
                    "Chat history must not be empty when using ChatHistory in generate method."
                )
            text = self._tokenizer.apply_chat_template(inputs, add_generation_prompt=True)
            enc = self._tokenizer.encode(text, add_special_tokens=False)
        elif as_str or (
            isinstance(inputs, (list, tuple)) and all(isinstance(p, str) for p in inputs)
        ):
            prompts = [inputs] if as_str else list(inputs)
            if len(prompts) != 1:
                raise UserInputError(
                    "Currently only batch size=1 is supported (speculative decoding); "
                    "generate one prompt at a time"
                )
            prompt = prompts[0]
            if self._chat_active:
                self._history.append({"role": "user", "content": prompt})
                text = self._tokenizer.apply_chat_template(
                    self._history, add_generation_prompt=True
                )
                enc = self._tokenizer.encode(text, add_special_tokens=False)
            elif config.apply_chat_template and self._tokenizer.chat_template:
                text = self._tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], add_generation_prompt=True
                )
                enc = self._tokenizer.encode(text, add_special_tokens=False)
            else:
                enc = self._tokenizer.encode(prompt)
        else:
            raise UserInputError(
                "generate() takes a str, a list of str, a ChatHistory, TokenizedInputs or an "
                f"openvino.Tensor of ids; got {type(inputs).__name__}"
            )
        tokenize_us = (_now() - t0) * 1e6
        ids, mask = np.array(enc.input_ids.data), np.array(enc.attention_mask.data)
        try:
            res = spec.generate(ids, mask, config, streamer)
        except Exception:
            if self._chat_active and not isinstance(inputs, ChatHistory):
                self._history.pop()
            raise
        t1 = _now()
        out = DecodedResults()
        out.texts = [self._tokenizer.decode(t) for t in res.tokens]
        out.scores, out.finish_reasons = res.scores, res.finish_reasons
        if self._chat_active and not isinstance(inputs, ChatHistory):
            if spec.cancelled:
                self._history.pop()  # CANCEL drops the user turn
            else:
                self._history.append({"role": "assistant", "content": out.texts[0]})
        pm = res.perf_metrics
        raw = pm.raw_metrics
        raw.tokenization_durations = [tokenize_us]
        raw.detokenization_durations = [(_now() - t1) * 1e6]
        raw.generate_durations = [(_now() - start) * 1e6]
        pm.load_time = self._load_time
        pm._evaluated = False
        pm.evaluate_statistics(start)
        out.perf_metrics = pm
        out.extended_perf_metrics = res.extended_perf_metrics
        return out.texts[0] if as_str else out

    def _trim_kv(self, keep: int) -> None:
        """Keep the first ``keep`` positions of every KV state (CPU chat reuse)."""
        self._cut_states(self._request, keep)
        self._kv_tokens = self._kv_tokens[:keep]

    def _cut_states(self, request: Any, keep: int) -> None:
        for state in request.query_state():
            if self._lora is not None and self._lora.has_state_name(state.get_name()):
                continue
            data = np.asarray(state.state.data)
            index = [slice(None)] * data.ndim
            index[self._seq_axis] = slice(0, keep)
            state.state = ov.Tensor(np.ascontiguousarray(data[tuple(index)]))

    # -- the generation loop -------------------------------------------------------------------
    def _check_npu(self, ids: np.ndarray, config: GenerationConfig) -> None:
        if ids.size > self._max_prompt_len:
            raise PromptTooLongError(
                f"Stateful LLM pipeline on NPU may only process prompts or hold chat history up to "
                f"{self._max_prompt_len} tokens. {ids.size} is passed.\n Set the "
                '"MAX_PROMPT_LEN" config option to '
                "increase the limit."
            )
        if ids.shape[0] != 1:
            raise UserInputError(
                "Currently only batch size equal to 1 is supported for NPU device!"
            )
        if not (config.is_greedy_decoding() or config.is_multinomial()):
            raise UserInputError(
                "Currently only greedy and multinomial decoding are supported for NPU device!"
            )
        if config.num_return_sequences != 1:
            raise UserInputError(
                'Currently only "num_return_sequences" equal to 1 is supported for NPU device!'
            )

    def _infer(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        pos: np.ndarray,
        beam: np.ndarray,
        perf: PerfMetrics,
    ) -> np.ndarray:
        feed: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": mask}
        if self._has_pos:
            feed["position_ids"] = pos
        if self._has_beam:
            feed["beam_idx"] = beam
        t0 = _now()
        # share_outputs: the logits are a view of the request's output, read (sampled) before the
        # next infer overwrites it, so the per-step copy is not needed.
        out = self._request.infer(feed, share_outputs=True)
        t1 = _now()
        raw = perf.raw_metrics
        raw.m_token_infer_durations.append((t1 - t0) * 1e6)
        raw.m_inference_durations[0] += (t1 - t0) * 1e6
        raw.m_new_token_times.append(t1)
        raw.m_batch_sizes.append(int(ids.shape[0]))
        return np.asarray(out["logits"])

    def _generate_ids(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        config: GenerationConfig,
        streamer: Any,
        start: float,
        keep_kv: bool,
    ) -> EncodedResults:
        self._cancelled = False
        if self._is_npu:
            self._check_npu(ids, config)
        if config.echo:
            raise UserInputError("Echo is not supported in the stateful pipeline")
        if (
            self._paged
            and config.max_new_tokens == SIZE_MAX
            and config.max_length != SIZE_MAX
            and int(mask.sum(axis=1).max()) >= config.max_length
        ):
            # Nothing may be generated; the real CPU pipeline rejects it with this message.
            raise ConfigError(
                "'max_length' must be greater than the number of prompt tokens", key="max_length"
            )
        batch = ids.shape[0]
        if self._prompt_lookup:
            if not config.is_prompt_lookup():
                # the real text (a RuntimeError from PromptLookupImpl::add_request)
                raise ConfigError(
                    "`max_ngram_size` && `num_assistant_tokens` should be specified for "
                    "`prompt lookup decoding`",
                    key="max_ngram_size",
                )
            keep_kv = False  # every call prefills the whole prompt (the output is the same)
        # Parallel sampling: n sequences per prompt share the prompt's KV row (beam_idx copies it).
        n = int(config.num_return_sequences) if config.is_multinomial() else 1
        stream = make_streamer(streamer, self._tokenizer)
        if stream is not None and (batch * n != 1 or config.is_beam_search()):
            raise UserInputError(
                "Currently streaming is possible only with batch size=1 and only for greedy or "
                "multinomial decoding"
            )
        perf = PerfMetrics()
        perf.load_time = self._load_time
        perf.raw_metrics.m_inference_durations = [0.0]
        # The stateful pipeline counts the padded batch (size × width); the paged one returns
        # the metrics of its first request, i.e. the first prompt's tokens (both measured).
        perf.num_input_tokens = int(mask[0].sum()) if self._paged else int(ids.size)
        self._sampler.set_seed(config.rng_seed)

        # New conversation vs. continuing one: on NPU (full-history mode) and outside chat the
        # state is reset and the whole prompt is prefilled; CPU chat reuses the common prefix.
        past = 0
        if keep_kv and not self._is_npu and batch == 1:
            row = ids[0][mask[0].astype(bool)].tolist()
            common = 0
            for a, b in zip(self._kv_tokens, row, strict=False):
                if a != b:
                    break
                common += 1
            common = min(common, len(row) - 1)  # at least one new token must be fed
            if common == 0:
                self._reset_kv()
            elif common < len(self._kv_tokens):
                self._trim_kv(common)
            past = common
        else:
            self._reset_kv()
        prompts = [ids[b][mask[b].astype(bool)].tolist() for b in range(batch)]
        seqs = [
            _Seq(
                prompts[b],
                config,
                self._max_new_tokens(config, len(prompts[b]), ids.shape[1]),
                make_constraint(self._tokenizer, config),
            )
            for b in range(batch)
            for _ in range(n)
        ]
        stop_window, stop_strings = self._stop_strings(config)
        if self._prompt_lookup:
            stream_stopped = self._prompt_lookup_run(
                seqs, config, perf, stream, stop_window, stop_strings
            )
            if stream is not None:
                if not stream_stopped:
                    self._stream_list(stream, seqs[0], 0)
                stream.end()
                stream.end()  # the real's prompt-lookup pipeline ends the streamer twice
            return self._encoded_results(seqs, perf, keep_kv)

        if self._pa is not None and pa_supports(config, keep_kv):
            stream_stopped = self._pa.run(self, seqs, config, stream, perf, stop_window)
            if stream is not None:
                if not stream_stopped:
                    self._stream(stream, seqs[0], 0)
                stream.end()
            return self._encoded_results(seqs, perf, keep_kv)

        self._apply_adapters(config)  # the stateful model's (the paged backend has its own)
        # Prefill: positions count only real (unmasked) tokens, padding gets 0.
        feed_ids, feed_mask = ids[:, past:], mask
        pos = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)[:, past:].astype(np.int64)
        full_mask = np.ascontiguousarray(feed_mask, dtype=np.int64)
        logits = self._infer(
            np.ascontiguousarray(feed_ids),
            full_mask,
            np.ascontiguousarray(pos),
            np.arange(batch, dtype=np.int32),
            perf,
        )
        if keep_kv and batch == 1:
            self._kv_tokens = seqs[0].prompt[:]
        if config.is_beam_search():
            return self._beam_search(
                ids, full_mask, logits, config, perf, keep_kv, stop_window, stop_strings
            )
        active = list(range(batch * n))
        kv_row = {s: s // n for s in active}  # sequence -> its row in the KV cache / mask
        stream_stopped = False
        one: _OneRow | None = None
        last = np.repeat(logits[:, -1, :], n, axis=0)
        while True:
            for row, b in enumerate(active):
                s = seqs[b]
                token, logp = self._sampler.sample(s.processor, last[row])
                s.tokens.append(token)
                s.processor.register(token)
                s.logps.append(logp)
                self._check_finish(s, config, stop_window, stop_strings)
            if stream is not None and not stream_stopped:
                status = self._stream(stream, seqs[0], stop_window)
                stream_stopped = status != StreamingStatus.RUNNING
                if stream_stopped and seqs[0].finish is None:
                    seqs[0].finish = {
                        StreamingStatus.STOP: GenerationFinishReason.STOP,
                        StreamingStatus.CANCEL: GenerationFinishReason.NONE,
                        StreamingStatus.TOOL_CALL_STOP: GenerationFinishReason.TOOL_CALL,
                    }[status]
                    self._cancelled = status == StreamingStatus.CANCEL
            still = [b for b in active if seqs[b].finish is None and not seqs[b].out_of_memory]
            if not still:
                break
            # Decode step: one token per running row; beam_idx drops finished rows from the KV.
            if len(still) == 1 and len(active) == 1:
                # One row (the common case): the mask grows by a 1 in a preallocated buffer and
                # the position by one, instead of re-concatenating and re-summing the mask.
                if one is None:
                    one = _OneRow(full_mask)
                full_mask, step_pos = one.step()
                step_ids = one.ids
                step_ids[0, 0] = seqs[still[0]].tokens[-1]
                beam = one.beam
            else:
                one = None
                beam = np.array([kv_row[b] for b in still], dtype=np.int32)
                full_mask = np.concatenate(
                    [full_mask[beam], np.ones((len(still), 1), dtype=np.int64)], axis=1
                )
                step_ids = np.array([[seqs[b].tokens[-1]] for b in still], dtype=np.int64)
                step_pos = (full_mask.sum(axis=1, keepdims=True) - 1).astype(np.int64)
            logits = self._infer(step_ids, full_mask, step_pos, beam, perf)
            if keep_kv and batch * n == 1:
                self._kv_tokens.append(int(step_ids[0, 0]))
            active = still
            kv_row = {b: i for i, b in enumerate(still)}
            last = logits[:, -1, :]
        if stream is not None:
            if not stream_stopped:
                self._stream(stream, seqs[0], 0)
            stream.end()
        return self._encoded_results(seqs, perf, keep_kv)

    def _encoded_results(self, seqs: list[_Seq], perf: PerfMetrics, keep_kv: bool) -> EncodedResults:
        res = EncodedResults()
        for s in seqs:
            res.tokens.append(s.tokens)
            # Tokens a stop string removed take their log-probabilities with them (measured).
            res.scores.append(float(sum(s.logps[: len(s.tokens)])))
            res.finish_reasons.append(
                s.finish if s.finish is not None else GenerationFinishReason.NONE
            )
        if not keep_kv:
            self._kv_tokens = []
        res.perf_metrics = perf
        return res

    # -- prompt lookup decoding -----------------------------------------------------------------
    @staticmethod
    def _lookup_candidates(ids: list[int], num_pred: int, max_ngram_size: int) -> list[int]:
        """openvino.genai's prompt-lookup candidates: the longest suffix n-gram (max_ngram_size
        down to 1, at most half the sequence) found earliest in prompt + generated ids; the
        tokens following that occurrence, at most ``num_pred`` of them."""
        if num_pred <= 0:
            return []
        length = len(ids)
        if max_ngram_size >= length:
            max_ngram_size = length // 2
        for size in range(max_ngram_size, 0, -1):
            ngram = ids[length - size :]
            for i in range(length - size):
                if ids[i : i + size] == ngram:
                    start = i + size
                    return ids[start : start + min(length - start, num_pred)]
        return []

    def _prompt_lookup_run(
        self,
        seqs: list[_Seq],
        config: GenerationConfig,
        perf: PerfMetrics,
        stream: StreamerBase | None,
        window: int,
        stops: list[str],
    ) -> bool:
        """Prompt-lookup decoding of every prompt in lockstep, each on its own infer request
        (the real's continuous batching keeps one KV sequence per request).

        Each step feeds a sequence's last token plus the candidates copied from its prompt /
        answer in one model call, samples every position as plain decoding would, keeps the
        candidates up to the first mismatch plus the token sampled there, and cuts the rejected
        ones from that request's KV cache.  The tokens equal plain decoding's.  Per lockstep
        step one metrics entry: ``m_batch_sizes`` = tokens sampled over all prompts (counted
        before a stop string removes any), the real's series.  An accepted candidate scores 0
        (the real appends candidates with log-probability 0 and keeps it, measured with
        logprobs).  Returns whether a streamer stopped the generation."""
        while len(self._pl_requests) < len(seqs) - 1:
            self._pl_requests.append(self._compiled.create_infer_request())
        requests = [self._request, *self._pl_requests[: len(seqs) - 1]]
        raw = perf.raw_metrics
        past = [0] * len(seqs)

        def record(t0: float, sampled: int) -> None:
            t1 = _now()
            raw.m_token_infer_durations.append((t1 - t0) * 1e6)
            raw.m_inference_durations[0] += (t1 - t0) * 1e6
            raw.m_new_token_times.append(t1)
            raw.m_batch_sizes.append(sampled)

        t0 = _now()
        for i, (s, req) in enumerate(zip(seqs, requests, strict=False)):  # prefill
            req.reset_state()
            logits = self._run_request(req, s.prompt, 0)
            token, logp = self._sampler.sample(s.processor, logits[0, -1])
            self._append(s, token, logp, config, window, stops)
            past[i] = len(s.prompt)
        record(t0, len(seqs))
        stopped = self._pl_stream(stream, seqs[0], window)
        while not stopped:
            live = [i for i, s in enumerate(seqs) if s.finish is None]
            if not live:
                break
            t0 = _now()
            sampled = 0
            for i in live:
                s, req = seqs[i], requests[i]
                left = s.max_new - len(s.tokens) - 1
                cands = self._lookup_candidates(
                    s.prompt + s.tokens,
                    min(int(config.num_assistant_tokens), left),
                    int(config.max_ngram_size),
                )
                feed = [s.tokens[-1], *cands]
                logits = self._run_request(req, feed, past[i])
                for k in range(len(feed)):
                    token, logp = self._sampler.sample(s.processor, logits[0, k])
                    accepted = k < len(cands) and token == cands[k]
                    self._append(s, token, 0.0 if accepted else logp, config, window, stops)
                    sampled += 1
                    if s.finish is not None or not accepted:
                        break
                if s.finish is None:
                    # the KV keeps everything but the newest token, which the next call feeds
                    past[i] = len(s.prompt) + len(s.tokens) - 1
                    self._cut_states(req, past[i])
            record(t0, sampled)
            stopped = self._pl_stream(stream, seqs[0], window)
        return stopped

    def _run_request(self, request: Any, ids: list[int], past: int) -> np.ndarray:
        """One call of a batch-1 request: ``ids`` after ``past`` tokens already in its KV."""
        feed = continuation_feed(ids, past, self._has_pos, self._has_beam)
        return np.asarray(request.infer(feed, share_outputs=True)["logits"])

    def _append(
        self, s: _Seq, token: int, logp: float, config: GenerationConfig, window: int, stops: list[str]
    ) -> None:
        s.tokens.append(token)
        s.processor.register(token)
        s.logps.append(logp)
        self._check_finish(s, config, window, stops)

    def _pl_stream(self, stream: StreamerBase | None, s: _Seq, window: int) -> bool:
        """Stream one step's tokens as one ``write(list)``; True when the streamer stopped."""
        if stream is None:
            return False
        status = self._stream_list(stream, s, window)
        if status == StreamingStatus.RUNNING:
            return False
        if s.finish is None:
            s.finish = {
                StreamingStatus.STOP: GenerationFinishReason.STOP,
                StreamingStatus.CANCEL: GenerationFinishReason.NONE,
                StreamingStatus.TOOL_CALL_STOP: GenerationFinishReason.TOOL_CALL,
            }[status]
        self._cancelled = status == StreamingStatus.CANCEL
        return True

    @staticmethod
    def _stream_list(stream: StreamerBase, s: _Seq, window: int) -> StreamingStatus:
        limit = len(s.tokens) if s.finish is not None else max(len(s.tokens) - window, 0)
        if s.streamed >= limit:
            return StreamingStatus.RUNNING
        chunk = s.tokens[s.streamed : limit]
        s.streamed = limit
        return status_from_callback(stream.write(chunk))

    def _beam_search(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        logits: np.ndarray,
        config: GenerationConfig,
        perf: PerfMetrics,
        keep_kv: bool,
        stop_window: int,
        stop_strings: list[str],
    ) -> EncodedResults:
        """Group beam search after the prefill: one SequenceGroup per prompt row, the running
        beams of all prompts batched in one model call, ``beam_idx`` picking each beam's parent
        row of the KV cache (the stateful model gathers the state itself)."""
        matcher = None
        if stop_strings:
            include = config.include_stop_str_in_output

            def matcher(tokens: list[int]) -> int | None:
                if len(tokens) < stop_window:
                    return None
                return self._match_stop_string(tokens, stop_window, stop_strings, include)

        # A row's prompt: its unpadded tokens in the paged pipeline (one request per prompt), the
        # padded row in the stateful one; no_repeat_ngram_size looks at it.
        width = ids.shape[1]
        rows = [ids[b][mask[b].astype(bool)] if self._paged else ids[b] for b in range(len(ids))]
        groups = [
            SequenceGroup(b, row.tolist(), config, self._max_new_tokens(config, len(row), width))
            for b, row in enumerate(rows)
        ]
        searchers = [GroupBeamSearcher(g, matcher) for g in groups]
        # Row of each prompt's first beam in the previous model call.
        offsets = {g.request_id: g.request_id for g in groups}
        active = list(groups)
        last = logits[:, -1, :]
        while True:
            # Sample: each prompt reads its own consecutive rows of the logits.
            row, sampled = 0, 0
            for g in active:
                n_rows = g.num_running()
                if n_rows:
                    sampled += 1  # the real counts one generated token per prompt and step
                searchers[g.request_id].step(last[row : row + n_rows])
                row += n_rows
            perf.raw_metrics.m_batch_sizes[-1] = sampled
            active = [g for g in active if g.num_running()]
            if not active:
                break
            step_ids: list[int] = []
            parents: list[int] = []
            for g in active:
                rows = searchers[g.request_id].beam_rows()
                for s in g.running():
                    step_ids.append(s.tokens[-1])
                    parents.append(rows.get(s.id, 0) + offsets[g.request_id])
            # This call's rows: each prompt's running beams, prompt after prompt.
            first = 0
            for i, g in enumerate(active):
                if self._paged or i == 0:
                    offsets[g.request_id] = first
                else:
                    # The stateful pipeline adds the offset stored under the previous
                    # *position* used as a request id (beam_offets[i - 1] in lm_encoding.cpp);
                    # kept, as it picks the KV rows once an earlier prompt of 3+ has finished.
                    offsets[g.request_id] = active[i - 1].num_running() + offsets.get(i - 1, 0)
                first += g.num_running()
            beam = np.asarray(parents, dtype=np.int32)
            mask = np.concatenate([mask[beam], np.ones((len(parents), 1), dtype=np.int64)], axis=1)
            pos = mask[:, :-1].sum(axis=1, keepdims=True).astype(np.int64)
            out = self._infer(
                np.asarray(step_ids, dtype=np.int64).reshape(-1, 1), mask, pos, beam, perf
            )
            last = out[:, -1, :]
        res = EncodedResults()
        lp = float(config.length_penalty)
        for g in groups:
            for s in g.results():
                res.tokens.append(list(s.tokens))
                res.scores.append(float(s.beam_score(lp)))
                res.finish_reasons.append(s.finish)
        if keep_kv and ids.shape[0] == 1:
            # Chat: the KV holds the prompt followed by the last step's beams; keep the prompt
            # only, the next turn feeds the chosen answer as part of its prompt (as the real
            # one does by trimming the generated length).
            self._trim_kv(len(self._kv_tokens))
        else:
            self._kv_tokens = []
        res.perf_metrics = perf
        return res

    def _max_new_tokens(self, config: GenerationConfig, prompt_len: int, width: int) -> int:
        """max_length counts from each prompt's own length in the real paged (continuous
        batching) pipeline, from the padded batch width in the stateful one (both measured)."""
        return config.get_max_new_tokens(prompt_len if self._paged else width)

    def _stop_strings(self, config: GenerationConfig) -> tuple[int, list[str]]:
        return stop_window(self._tokenizer, config)

    def _check_finish(
        self, s: _Seq, config: GenerationConfig, window: int, stops: list[str]
    ) -> None:
        token = s.tokens[-1]
        if not config.ignore_eos and token in config.stop_token_ids:
            s.finish = GenerationFinishReason.STOP
            return
        if stops and len(s.tokens) >= window:
            removed = self._match_stop_string(
                s.tokens, window, stops, config.include_stop_str_in_output
            )
            if removed is not None:
                del s.tokens[len(s.tokens) - removed :]
                s.finish = GenerationFinishReason.STOP
                return
        if len(s.tokens) >= s.max_new:
            s.finish = GenerationFinishReason.LENGTH
            return
        if self._is_npu and len(s.prompt) + len(s.tokens) - 1 >= self._kv_capacity:
            # The real pipeline marks the sequence OUT_OF_MEMORY and stops without an error; its
            # finish reason stays NONE (measured on openvino_genai 2026.4.1, NPU via NPUW on CPU).
            s.finish = GenerationFinishReason.NONE
            s.out_of_memory = True

    def _match_stop_string(
        self, tokens: list[int], window: int, stops: list[str], include: bool
    ) -> int | None:
        return match_stop_string(self._tokenizer, tokens, window, stops, include)

    @staticmethod
    def _stream(stream: StreamerBase, s: _Seq, window: int) -> StreamingStatus:
        """Stream tokens that can no longer be removed by a stop string."""
        limit = len(s.tokens) if s.finish is not None else max(len(s.tokens) - window, 0)
        status = StreamingStatus.RUNNING
        while s.streamed < limit:
            status = call_write(stream, s.tokens[s.streamed])
            s.streamed += 1
            if status != StreamingStatus.RUNNING:
                break
        return status
