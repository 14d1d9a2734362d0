"""What every LLMPipeline implementation shares (openvino.genai's LLMPipelineImplBase): the
tokenizer, the generation config, the chat session, the inputs of ``generate`` (str, batch,
ChatHistory, ids) turned into one token-id call, and that call's common frame (checks, streamer,
metrics, running sequences), which each implementation completes with its own decoding."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.chat import ChatHistory
from genai_shim.chat_session import ChatSession, require_template
from genai_shim.decoding import RunningSequence, check_finish, encoded_results
from genai_shim.generation_config import SIZE_MAX, GenerationConfig, check_supported, replacement_config
from genai_shim.parser_streamer import generate_with_parsers
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.pipeline_args import encoded_inputs, stack_rows
from genai_shim.results import DecodedResults, EncodedResults
from genai_shim.sampling import Sampler
from genai_shim.stop_strings import stop_window
from genai_shim.streamers import StreamerBase, make_streamer
from genai_shim.structured_output import add_structured_output_times, check_structured_output, make_constraint
from genai_shim.tokenizer import NO_CHAT_TEMPLATE, TokenizedInputs, Tokenizer
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["DecodeCall", "LLMPipelineImplBase"]


def now() -> float:
    return time.perf_counter()


@dataclass
class DecodeCall:
    """One token-id call after the common checks: its inputs, streamer, metrics and sequences."""

    ids: np.ndarray
    mask: np.ndarray
    config: GenerationConfig
    stream: StreamerBase | None
    perf: PerfMetrics
    keep_kv: bool
    past: int  # positions of ``ids`` already in the KV cache (CPU chat reuse)
    n: int  # sequences per prompt (parallel sampling)
    prompts: list[list[int]]
    seqs: list[RunningSequence]
    stop_window: int
    stop_strings: list[str]


class LLMPipelineImplBase:
    """An LLMPipeline implementation; :meth:`decode` is what each one does its own way.

    ``paged_rules``: the real CPU pipeline is continuous batching unless ATTENTION_BACKEND=SDPA,
    and a few rules differ between the two (max_length per prompt, the counted input tokens);
    implementations that stand for it follow them even when they run the stateful model.
    """

    def __init__(
        self, tokenizer: Tokenizer, config: GenerationConfig, *, paged_rules: bool = False,
        assisted: bool = False, lora: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.chat = ChatSession()
        self.load_time = 0.0
        self.paged_rules = paged_rules
        self.assisted = assisted  # prompt lookup asked for: its config fields are not "ignored"
        self.lora = lora
        self.speculative = False
        self.cancelled = False  # the last generate() was cancelled by its streamer
        self._kv_tokens: list[int] = []  # ids whose keys/values sit in the KV cache (batch 1)
        #: how many of the last call's prompt ids the KV cache already held (not fed again)
        self._kv_fed_from = 0
        self._sampler = Sampler()

    # -- what an implementation provides -------------------------------------------------------
    def decode(self, call: DecodeCall) -> EncodedResults:
        raise NotImplementedError

    def logits_model(self) -> Any:
        """The compiled model whose ``logits`` output gives the vocabulary size."""
        raise NotImplementedError

    def check_request(self, ids: np.ndarray, mask: np.ndarray, config: GenerationConfig, keep_kv: bool) -> bool:
        """Refuse what this implementation cannot run (in the real's order); returns keep_kv."""
        self.check_max_length(mask, config)
        return keep_kv

    def prepare_kv(self, ids: np.ndarray, mask: np.ndarray, keep_kv: bool) -> int:
        """Get the KV cache ready for ``ids``; returns how many of their positions it holds."""
        self.reset_kv()
        return 0

    def reset_kv(self) -> None:
        self._kv_tokens = []

    def kv_limit(self) -> int | None:
        """The KV capacity that ends generation silently (the NPU's), None without one."""
        return None

    # -- public API ----------------------------------------------------------------------------
    def get_generation_config(self) -> GenerationConfig:
        return self.config.copy()

    def set_generation_config(self, config: GenerationConfig) -> None:
        self.config = replacement_config(config, self.config)

    def start_chat(self, system_message: str = "") -> None:
        self.chat.start(system_message)
        self.reset_kv()

    def finish_chat(self) -> None:
        self.chat.finish()
        self.reset_kv()

    def generate(
        self, inputs: Any, generation_config: GenerationConfig | None, streamer: Any, kwargs: dict[str, Any]
    ) -> Any:
        start = now()
        config = self.resolve_config(generation_config, kwargs)
        if isinstance(inputs, (TokenizedInputs, ov.Tensor, np.ndarray)):  # no parsers, as the real
            return self.generate_inputs(inputs, config, streamer, start)
        return generate_with_parsers(config, streamer, lambda cfg: self.generate_inputs(inputs, cfg, streamer, start))

    def generate_inputs(self, inputs: Any, config: GenerationConfig, streamer: Any, start: float) -> Any:
        if isinstance(inputs, (TokenizedInputs, ov.Tensor, np.ndarray)):
            ids, mask = encoded_inputs(inputs)
            self.check_ids(ids)
            if self.chat.active and not self.paged_rules and ids.shape[0] == 1:
                res = self._generate_chat_encoded(ids, config, streamer)
            else:
                res = self.generate_ids(ids, mask, config, streamer, keep_kv=False)
            res.perf_metrics.raw_metrics.generate_durations.append((now() - start) * 1e6)
            res.perf_metrics.reevaluate(start)
            return res
        if isinstance(inputs, ChatHistory):
            return self._generate_history(inputs, config, streamer, start)
        if isinstance(inputs, str):
            if self.chat.active:
                res = self._generate_chat_string(inputs, config, streamer, start)
            else:
                res = self._generate_texts([inputs], config, streamer, start)
            # The real binding returns a str only when one sequence was asked for.
            return res.texts[0] if config.num_return_sequences == 1 else res
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(p, str) for p in inputs):
            if self.chat.active:
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
    def check_before_validate(self, config: GenerationConfig) -> None:
        """An implementation's own check of a call's config, made before ``validate()`` (the
        real's add_request checks run first where its messages say so)."""

    def resolve_config(self, generation_config: GenerationConfig | None, kwargs: dict[str, Any]) -> GenerationConfig:
        if generation_config is not None and not isinstance(generation_config, GenerationConfig):
            raise UserInputError(
                "generation_config must be a GenerationConfig, got "
                f"{type(generation_config).__name__}"
            )
        config = (generation_config or self.config).copy()
        # always, as the real's Python generate(): the update re-adds EOS to the stop tokens
        config.update_generation_config(**kwargs)
        if config.eos_token_id == -1:
            config.set_eos_token_id(self.config.eos_token_id)
        self.check_before_validate(config)
        config.validate()
        check_supported(
            config,
            assisted=self.speculative or self.assisted,
            folder_defaults=self.config,
            lora=self.lora,
            parsers=True,
        )
        if config.structured_output_config is not None:
            check_structured_output(config, speculative=self.speculative)
        return config

    # -- input preparation ---------------------------------------------------------------------
    def check_ids(self, ids: np.ndarray) -> None:
        """Token ids outside the vocabulary would index the embedding out of bounds (the CPU
        plugin silently reads zeros), so reject them here, on every device."""
        shape = self.logits_model().output("logits").get_partial_shape()
        vocab = shape[shape.rank.get_length() - 1] if shape.rank.is_static else None
        if vocab is not None and vocab.is_static and ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= vocab.get_length():
                raise UserInputError(
                    f"input_ids must be token ids in [0, {vocab.get_length()}), got values {lo}..{hi}"
                )

    def _tokenize_templated(self, text_or_history: Any, perf: PerfMetrics) -> tuple[np.ndarray, np.ndarray]:
        t0 = now()
        templated = self.tokenizer.apply_chat_template(text_or_history, add_generation_prompt=True)
        t1 = now()
        enc = self.tokenizer.encode(templated, add_special_tokens=False)
        t2 = now()
        perf.raw_metrics.chat_template_durations.append((t1 - t0) * 1e6)
        perf.raw_metrics.tokenization_durations.append((t2 - t1) * 1e6)
        return np.array(enc.input_ids.data), np.array(enc.attention_mask.data)

    def _generate_texts(
        self, prompts: list[str], config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        perf = PerfMetrics()
        if config.apply_chat_template and self.tokenizer.chat_template:
            rows = [self._tokenize_templated([{"role": "user", "content": p}], perf) for p in prompts]
            ids, mask = stack_rows(rows)
        else:
            t0 = now()
            enc = self.tokenizer.encode(prompts if len(prompts) > 1 else prompts[0])
            perf.raw_metrics.tokenization_durations.append((now() - t0) * 1e6)
            ids, mask = np.array(enc.input_ids.data), np.array(enc.attention_mask.data)
        enc_res = self.generate_ids(ids, mask, config, streamer, keep_kv=False)
        return self._decode_results(enc_res, perf, start)

    def _decode_results(self, enc: EncodedResults, perf: PerfMetrics, start: float) -> DecodedResults:
        t0 = now()
        texts = [self.tokenizer.decode(t) for t in enc.tokens]
        detok = (now() - t0) * 1e6
        out = DecodedResults()
        out.texts, out.scores, out.finish_reasons = texts, enc.scores, enc.finish_reasons
        pm = enc.perf_metrics
        raw = pm.raw_metrics
        raw.tokenization_durations = perf.raw_metrics.tokenization_durations + raw.tokenization_durations
        raw.chat_template_durations = perf.raw_metrics.chat_template_durations + raw.chat_template_durations
        raw.detokenization_durations.append(detok)
        raw.generate_durations.append((now() - start) * 1e6)
        pm.reevaluate(start)
        out.perf_metrics = pm
        return out

    # -- chat ----------------------------------------------------------------------------------
    def _generate_history(
        self, history: ChatHistory, config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        require_template(self.tokenizer)
        self.chat.claim("history")
        perf = PerfMetrics()
        ids, mask = self._tokenize_templated(history, perf)
        enc = self.generate_ids(ids, mask, config, streamer, keep_kv=True)
        return self._decode_results(enc, perf, start)

    def _generate_chat_encoded(self, ids: np.ndarray, config: GenerationConfig, streamer: Any) -> EncodedResults:
        """A chat turn given as token ids (the stateful pipeline's): each call brings only its new
        ids, the chat keeps every input's and answer's ids, and the model sees the whole of it --
        what the KV cache lacks (at least the last answer token, never fed) is fed with the new
        ids, as the real's align_cache_and_history does."""
        self.chat.claim("encoded")
        new = ids[0].tolist()
        history = self.chat.tokens + new
        full = np.asarray([history], dtype=np.int64)
        res = self.generate_ids(full, np.ones_like(full), config, streamer, keep_kv=True)
        if not self.cancelled:  # CANCEL drops the turn's input
            self.chat.tokens = history + [int(t) for t in res.tokens[0]]
        # the real counts the ids it fed this call, not the history
        res.perf_metrics.num_input_tokens = len(history) - self._kv_fed_from
        return res

    def _generate_chat_string(
        self, prompt: str, config: GenerationConfig, streamer: Any, start: float
    ) -> DecodedResults:
        self.chat.claim("string")
        perf = PerfMetrics()
        if not self.tokenizer.chat_template:
            # as the real 2026.4.1 on CPU, SDPA and NPU (it used to feed the bare prompt)
            raise ConfigError(NO_CHAT_TEMPLATE)
        history = self.chat.user_turn(prompt)
        ids, mask = self._tokenize_templated(history, perf)
        try:
            enc_res = self.generate_ids(ids, mask, config, streamer, keep_kv=True)
        except Exception:
            self.chat.drop_user_turn()
            raise
        res = self._decode_results(enc_res, perf, start)
        if self.cancelled:
            self.chat.drop_user_turn()  # CANCEL drops the user turn
        else:
            self.chat.answer(res.texts[0])
        return res

    # -- one token-id call ---------------------------------------------------------------------
    def generate_ids(
        self, ids: np.ndarray, mask: np.ndarray, config: GenerationConfig, streamer: Any, keep_kv: bool
    ) -> EncodedResults:
        self.cancelled = False
        keep_kv = self.check_request(ids, mask, config, keep_kv)
        batch = ids.shape[0]
        # Parallel sampling: n sequences per prompt share the prompt's KV row (beam_idx copies it).
        n = int(config.num_return_sequences) if config.is_multinomial() else 1
        stream = make_streamer(streamer, self.tokenizer)
        if stream is not None and (batch * n != 1 or config.is_beam_search()):
            raise UserInputError(
                "Currently streaming is possible only with batch size=1 and only for greedy or "
                "multinomial decoding"
            )
        perf = PerfMetrics()
        perf.load_time = self.load_time
        perf.raw_metrics.m_inference_durations = [0.0]
        # The stateful pipeline counts the padded batch (size × width); the paged one returns
        # the metrics of its first request, i.e. the first prompt's tokens (both measured).
        perf.num_input_tokens = int(mask[0].sum()) if self.paged_rules else int(ids.size)
        self._sampler.set_seed(config.rng_seed)
        past = self.prepare_kv(ids, mask, keep_kv)
        self._kv_fed_from = past
        prompts = [ids[b][mask[b].astype(bool)].tolist() for b in range(batch)]
        seqs = [
            RunningSequence(
                prompts[b],
                config,
                self.max_new_tokens(config, len(prompts[b]), ids.shape[1]),
                make_constraint(self.tokenizer, config),
            )
            for b in range(batch)
            for _ in range(n)
        ]
        window, stops = stop_window(self.tokenizer, config)
        return self.decode(DecodeCall(ids, mask, config, stream, perf, keep_kv, past, n, prompts, seqs, window, stops))

    def check_max_length(self, mask: np.ndarray, config: GenerationConfig) -> None:
        if (
            self.paged_rules
            and config.max_new_tokens == SIZE_MAX
            and config.max_length != SIZE_MAX
            and int(mask.sum(axis=1).max()) >= config.max_length
        ):
            # Nothing may be generated; the real CPU pipeline rejects it with this message.
            raise ConfigError("'max_length' must be greater than the number of prompt tokens", key="max_length")

    def encoded_results(
        self, seqs: list[RunningSequence], perf: PerfMetrics, keep_kv: bool, per_prompt: int = 1
    ) -> EncodedResults:
        if not keep_kv:
            self._kv_tokens = []
        add_structured_output_times(perf, self.tokenizer)
        return encoded_results(seqs, perf, per_prompt)

    def max_new_tokens(self, config: GenerationConfig, prompt_len: int, width: int) -> int:
        """max_length counts from each prompt's own length in the real paged (continuous
        batching) pipeline, from the padded batch width in the stateful one (both measured)."""
        return config.get_max_new_tokens(prompt_len if self.paged_rules else width)

    def check_finish(self, s: RunningSequence, config: GenerationConfig, window: int, stops: list[str]) -> None:
        check_finish(s, config, self.tokenizer, window, stops, self.kv_limit())
