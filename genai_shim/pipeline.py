"""LLMPipeline: openvino.genai's StatefulLLMPipeline behaviour over ov_npu_emu.Core (CPU, NPU)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.chat import ChatHistory
from genai_shim.chat_session import ChatSession, require_template
from genai_shim.continuous_batching.llm_backend import PagedBackend
from genai_shim.continuous_batching.pipeline import SchedulerConfig
from genai_shim.decoding import (
    STREAMER_FINISH,
    OneRow,
    RunningSequence,
    StatefulRequests,
    check_finish,
    encoded_results,
    stream_chunk,
    stream_tokens,
)
from genai_shim.generation_config import SIZE_MAX, GenerationConfig, check_supported
from genai_shim.lora_controller import AdapterController, resolve_adapters
from genai_shim.model_folder import MODEL_XML, model_folder
from genai_shim.npu_compile import compile_npu
from genai_shim.npu_config import get_kv_axes_pos
from genai_shim.parser_streamer import generate_with_parsers
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.pipeline_args import encoded_inputs, parse_ctor, parse_memory_ctor, split_properties, stack_rows
from genai_shim.prompt_lookup import run_prompt_lookup
from genai_shim.results import DecodedResults, EncodedResults, echo_prompts
from genai_shim.sampling import Sampler
from genai_shim.speculative.draft import DraftModel
from genai_shim.speculative.paged import CBSpeculativeDecoder, uses_continuous_batching
from genai_shim.speculative.stateful import SpeculativeDecoder, generate_speculative
from genai_shim.stateful_beam import run_beam_search
from genai_shim.stop_strings import stop_window
from genai_shim.streamers import EchoStreamer, StreamingStatus, make_streamer
from genai_shim.structured_output import check_structured_output, make_constraint
from genai_shim.tokenizer import NO_CHAT_TEMPLATE, TokenizedInputs, Tokenizer
from ov_npu_emu.errors import ConfigError, NpuEmuError, PromptTooLongError, UserInputError

__all__ = ["LLMPipeline", "SchedulerConfig"]

logger = logging.getLogger(__name__)

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
        memory = parse_memory_ctor(args, kwargs)
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
            tokenizer, device, config = parse_ctor(args[1:], kwargs)
            if not isinstance(models_path, (str, bytes, os.PathLike)):
                raise UserInputError(
                    "models_path must be a folder path (str or os.PathLike), got "
                    f"{type(models_path).__name__}"
                )
            folder = model_folder(models_path)
        opts = split_properties({**(config or {}), **kwargs})
        props, prompt_lookup, backend = opts.compile, opts.prompt_lookup, opts.backend
        draft, scheduler_config = opts.draft, opts.scheduler_config
        adapters = resolve_adapters(opts.adapters)
        if adapters and (draft is not None or prompt_lookup):
            raise ConfigError(
                "genai_shim applies LoRA adapters in the stateful and NPU pipelines only, not with "
                "draft_model or prompt_lookup; drop one of them",
                key="adapters",
            )
        if draft is not None and not isinstance(draft, DraftModel):
            raise ConfigError(
                "draft_model must be what genai_shim.draft_model(path, device, **properties) "
                f"returns (speculative decoding), got {type(draft).__name__}",
                key="draft_model",
            )
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
        self._spec: SpeculativeDecoder | CBSpeculativeDecoder | None = None
        self._lora: AdapterController | None = None
        self._chat = ChatSession()
        self._kv_tokens: list[int] = []  # ids whose keys/values sit in the KV cache (batch 1)
        self._cancelled = False  # the last generate() was cancelled by its streamer
        self._one_row: OneRow | None = None  # the decode loop's single-row step buffers
        if draft is not None and folder is None:
            raise ConfigError(
                "genai_shim does not implement speculative decoding (draft_model) for a model "
                "given in memory; pass the model's folder instead",
                key="draft_model",
            )
        if draft is not None:
            # Speculative decoding owns both models: the continuous-batching pipeline unless a
            # model is on NPU (then the stateful FastDraft one), as the real routes it.
            if uses_continuous_batching(self._device, draft.device, backend):
                self._spec = CBSpeculativeDecoder(
                    self._core, folder, self._device, props, draft, self._tokenizer, scheduler_config
                )
            else:
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
            npu = compile_npu(self._core, model, props, folder)
            self._max_prompt_len, self._kv_capacity = npu.max_prompt_len, npu.kv_capacity
            self._set_stateful(npu.compiled)
        elif self._paged and not self._prompt_lookup and folder is not None:
            pa_props = props if adapters is None else {**props, "adapters": adapters}
            self._pa = PagedBackend(folder, self._tokenizer, self._device, pa_props, scheduler_config)
            try:
                self._pa.engine  # noqa: B018  (compile now)
            except (NpuEmuError, RuntimeError) as e:
                if opts.explicit_pa:
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
        self._chat.start(system_message)
        self._reset_kv()

    def finish_chat(self) -> None:
        self._chat.finish()
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
        if isinstance(inputs, (TokenizedInputs, ov.Tensor, np.ndarray)):  # no parsers, as the real
            return self._generate(inputs, config, streamer, start)
        return generate_with_parsers(config, streamer, lambda cfg: self._generate(inputs, cfg, streamer, start))

    def _generate(self, inputs: Any, config: GenerationConfig, streamer: Any, start: float) -> Any:
        if self._spec is not None:
            return generate_speculative(self._spec, inputs, config, streamer, start, self._chat, self._load_time)
        if isinstance(inputs, (TokenizedInputs, ov.Tensor, np.ndarray)):
            ids, mask = encoded_inputs(inputs)
            self._check_ids(ids)
            res = self._generate_ids(ids, mask, config, streamer, start, keep_kv=False)
            res.perf_metrics.raw_metrics.generate_durations.append((_now() - start) * 1e6)
            res.perf_metrics._evaluated = False
            res.perf_metrics.evaluate_statistics(start)
            return res
        if isinstance(inputs, ChatHistory):
            return self._generate_history(inputs, config, streamer, start)
        if isinstance(inputs, str):
            if self._chat.active:
                res = self._generate_chat_string(inputs, config, streamer, start)
            else:
                res = self._generate_texts([inputs], config, streamer, start)
            # The real binding returns a str only when one sequence was asked for.
            return res.texts[0] if config.num_return_sequences == 1 else res
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(p, str) for p in inputs):
            if self._chat.active:
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
            parsers=True,
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
            ids, mask = stack_rows(rows)
        else:
            t0 = _now()
            enc = self._tokenizer.encode(prompts if len(prompts) > 1 else prompts[0])
            perf.raw_metrics.tokenization_durations.append((_now() - t0) * 1e6)
            ids, mask = np.array(enc.input_ids.data), np.array(enc.attention_mask.data)
        enc_res = self._generate_ids(ids, mask, config, streamer, start, keep_kv=False)
        return self._decode_results(enc_res, perf, start)

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
    def _generate_history(
        self, history: ChatHistory, config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        require_template(self._tokenizer)
        self._chat.claim("history")
        perf = PerfMetrics()
        ids, mask = self._tokenize_templated(history, perf)
        enc = self._generate_ids(ids, mask, config, streamer, start, keep_kv=True)
        return self._decode_results(enc, perf, start)

    def _generate_chat_string(
        self, prompt: str, config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        self._chat.claim("string")
        perf = PerfMetrics()
        if not self._tokenizer.chat_template:
            # as the real 2026.4.1 on CPU, SDPA and NPU (it used to feed the bare prompt)
            raise ConfigError(NO_CHAT_TEMPLATE)
        history = self._chat.user_turn(prompt)
        ids, mask = self._tokenize_templated(history, perf)
        try:
            enc_res = self._generate_ids(ids, mask, config, streamer, start, keep_kv=True)
        except Exception:
            self._chat.drop_user_turn()
            raise
        res = self._decode_results(enc_res, perf, start)
        if self._cancelled:
            self._chat.drop_user_turn()  # CANCEL drops the user turn
        else:
            self._chat.answer(res.texts[0])
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

    def _trim_kv(self, keep: int) -> None:
        """Keep the first ``keep`` positions of every KV state (CPU chat reuse)."""
        self._requests().cut(self._request, keep)
        self._kv_tokens = self._kv_tokens[:keep]

    def _requests(self) -> StatefulRequests:
        keep = self._lora.has_state_name if self._lora is not None else None
        return StatefulRequests(self._has_pos, self._has_beam, self._seq_axis, keep)

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
        # A single-row decode step passes OneRow's own buffers: they are bound (shared), and once
        # the request reads them, updated in place, so later steps feed the growing mask only.
        one = self._one_row
        share = one is not None and ids is one.ids
        bound = share and one.bound
        feed: dict[str, np.ndarray] = {"attention_mask": mask}
        if not bound:
            feed["input_ids"] = ids
            if self._has_pos:
                feed["position_ids"] = pos
            if self._has_beam:
                feed["beam_idx"] = beam
        t0 = _now()
        # share_outputs: the logits are a view of the request's output, read (sampled) before the
        # next infer overwrites it, so the per-step copy is not needed.
        out = self._request.infer(feed, share_inputs=share, share_outputs=True)
        t1 = _now()
        if share and not bound:
            one.bound = one.read_by(self._request, self._has_pos, self._has_beam)
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
        if config.echo and (self._pa is None or self._prompt_lookup):
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
        paged = self._pa is not None  # the real CPU default: every call continuous-batched
        if keep_kv and not self._is_npu and batch == 1 and not paged:
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
            RunningSequence(
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
            while len(self._pl_requests) < len(seqs) - 1:  # one KV sequence per prompt
                self._pl_requests.append(self._compiled.create_infer_request())
            requests = [self._request, *self._pl_requests[: len(seqs) - 1]]
            stream_stopped, self._cancelled = run_prompt_lookup(
                seqs,
                requests,
                self._requests(),
                self._sampler,
                lambda s: self._check_finish(s, config, stop_window, stop_strings),
                config,
                perf,
                stream,
                stop_window,
            )
            if stream is not None:
                if not stream_stopped:
                    stream_chunk(stream, seqs[0], 0)
                stream.end()
                stream.end()  # the real's prompt-lookup pipeline ends the streamer twice
            return self._encoded_results(seqs, perf, keep_kv)

        if paged:
            if config.is_beam_search():
                res = self._pa.beam_search(seqs, config, perf)
                return echo_prompts(res, prompts) if config.echo else res
            if config.echo and stream is not None:
                # the real's first write carries the prompt with the first token (one list)
                stream = EchoStreamer(stream, seqs[0].prompt)
            stream_stopped, self._cancelled = self._pa.run(seqs, config, self._sampler, stream, perf, stop_window)
            if stream is not None:
                if not stream_stopped:
                    stream_tokens(stream, seqs[0], 0)
                stream.end()
            res = self._encoded_results(seqs, perf, keep_kv)
            return echo_prompts(res, prompts) if config.echo else res

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
            res = run_beam_search(
                ids,
                full_mask,
                logits,
                config,
                perf,
                infer=self._infer,
                paged=self._paged,
                max_new_tokens=lambda prompt_len, width: self._max_new_tokens(config, prompt_len, width),
                tokenizer=self._tokenizer,
                stop_window=stop_window,
                stop_strings=stop_strings,
            )
            if keep_kv and batch == 1:
                # Chat: the KV holds the prompt followed by the last step's beams; keep the prompt
                # only, the next turn feeds the chosen answer as part of its prompt (as the real
                # one does by trimming the generated length).
                self._trim_kv(len(self._kv_tokens))
            else:
                self._kv_tokens = []
            return res
        active = list(range(batch * n))
        kv_row = {s: s // n for s in active}  # sequence -> its row in the KV cache / mask
        stream_stopped = False
        one: OneRow | None = None
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
                status = stream_tokens(stream, seqs[0], stop_window)
                stream_stopped = status != StreamingStatus.RUNNING
                if stream_stopped and seqs[0].finish is None:
                    seqs[0].finish = STREAMER_FINISH[status]
                    self._cancelled = status == StreamingStatus.CANCEL
            still = [b for b in active if seqs[b].finish is None and not seqs[b].out_of_memory]
            if not still:
                break
            # Decode step: one token per running row; beam_idx drops finished rows from the KV.
            if len(still) == 1 and len(active) == 1:
                # One row (the common case): the mask grows by a 1 in a preallocated buffer and
                # the position by one, instead of re-concatenating and re-summing the mask.
                if one is None:
                    self._one_row = one = OneRow(full_mask)
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
                stream_tokens(stream, seqs[0], 0)
            stream.end()
        return self._encoded_results(seqs, perf, keep_kv)

    def _encoded_results(self, seqs: list[RunningSequence], perf: PerfMetrics, keep_kv: bool) -> EncodedResults:
        if not keep_kv:
            self._kv_tokens = []
        return encoded_results(seqs, perf)

    def _max_new_tokens(self, config: GenerationConfig, prompt_len: int, width: int) -> int:
        """max_length counts from each prompt's own length in the real paged (continuous
        batching) pipeline, from the padded batch width in the stateful one (both measured)."""
        return config.get_max_new_tokens(prompt_len if self._paged else width)

    def _stop_strings(self, config: GenerationConfig) -> tuple[int, list[str]]:
        return stop_window(self._tokenizer, config)

    def _check_finish(self, s: RunningSequence, config: GenerationConfig, window: int, stops: list[str]) -> None:
        check_finish(s, config, self._tokenizer, window, stops, self._kv_capacity if self._is_npu else None)
