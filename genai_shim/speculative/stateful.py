"""Speculative decoding with a draft model: openvino.genai's stateful FastDraft pipeline."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.chat import ChatHistory
from genai_shim.chat_session import ChatSession, require_template
from genai_shim.decoding import continuation_feed
from genai_shim.generation_config import SIZE_MAX, GenerationConfig
from genai_shim.model_folder import MODEL_XML
from genai_shim.npu_compile import compile_npu
from genai_shim.npu_config import get_kv_axes_pos
from genai_shim.perf_metrics import RawPerfMetrics, SDPerModelsPerfMetrics
from genai_shim.pipeline_args import encoded_inputs
from genai_shim.results import DecodedResults, EncodedResults, GenerationFinishReason
from genai_shim.speculative.draft import DEFAULT_NUM_ASSISTANT_TOKENS, DraftModel, tokenizers_equal
from genai_shim.streamers import StreamingStatus, make_streamer, status_from_callback
from genai_shim.tokenizer import TokenizedInputs, Tokenizer
from ov_npu_emu.errors import ConfigError, PromptTooLongError, UserInputError

__all__ = [
    "SpeculativeDecoder",
    "generate_speculative",
]

logger = logging.getLogger(__name__)


def _us(seconds: float) -> float:
    return seconds * 1e6


class _InferWrapper:
    """One stateful model driven token by token (the real ``LLMInferWrapper``): greedy argmax of
    the last rows, a processed-token counter, KV trimming and the capacity rules."""

    def __init__(
        self,
        core: Any,
        folder: Path,
        device: str,
        properties: dict[str, Any],
        max_generation_token_len: int | None = None,
    ) -> None:
        self.device = device
        self.is_npu = device.split(".")[0] == "NPU"
        model = core.read_model(folder / MODEL_XML)
        self._seq_axis = get_kv_axes_pos(model)[1]
        self.max_prompt_len = SIZE_MAX
        self.kvcache_total = SIZE_MAX  # what the real pipeline believes
        self._kv_limit = SIZE_MAX  # what the compiled model really holds
        if self.is_npu:
            props = dict(properties)
            if max_generation_token_len is not None:
                props["NPUW_LLM_MAX_GENERATION_TOKEN_LEN"] = max_generation_token_len
            npu = compile_npu(core, model, props)
            compiled = npu.compiled
            self.max_prompt_len = npu.max_prompt_len
            total = self.max_prompt_len + npu.min_response_len
            self.kvcache_total = total
            # NPUW keeps M slots of the KV buffer for the tokens of one generate call.
            m = int(compiled.get_property("NPUW_LLM_MAX_GENERATION_TOKEN_LEN"))
            self._kv_limit = total - m
        else:
            compiled = core.compile_model(model, device, properties)
        self._request = compiled.create_infer_request()
        names = {n for p in compiled.inputs for n in p.get_names()}
        self._has_pos = "position_ids" in names
        self._has_beam = "beam_idx" in names
        self.config = GenerationConfig()
        self.raw = RawPerfMetrics()
        self.raw.m_inference_durations = [0.0]
        self.num_processed = 0
        self.first_prompt_len = 0
        self.last_token = -1

    # -- capacity (the real's arithmetic) ------------------------------------------------------
    def kvcache_capacity(self) -> int:
        if self.is_npu:
            return min(self.kvcache_total, self._kv_limit) - self.num_processed
        return SIZE_MAX

    def generation_capacity(self) -> int:
        max_new = self.config.get_max_new_tokens()
        if self.first_prompt_len > 0:
            return max_new - (self.num_processed - self.first_prompt_len + 1)
        return max_new

    def can_infer(self, n: int = 1) -> bool:
        if self.is_npu and n > self.kvcache_capacity():
            return False
        cfg = self.config
        # The real looks at the last token sampled by the last call, even if it was rejected.
        if not cfg.ignore_eos and self.last_token == cfg.eos_token_id:
            return False
        if self.last_token in cfg.stop_token_ids:
            return False
        return self.generation_capacity() > 0

    # -- inference -----------------------------------------------------------------------------
    def _run(self, ids: list[int], start: int) -> np.ndarray:
        feed = continuation_feed(ids, start, self._has_pos, self._has_beam)
        t0 = time.perf_counter()
        out = self._request.infer(feed, share_outputs=True)
        self._infer_us = _us(time.perf_counter() - t0)
        return np.asarray(out["logits"])

    def infer_first(self, ids: list[int]) -> int:
        t0 = time.perf_counter()
        if self.is_npu and len(ids) > self.max_prompt_len:
            raise PromptTooLongError(
                f"LLM model on NPU may only process prompts up to {self.max_prompt_len} tokens. "
                'Set the "MAX_PROMPT_LEN" config option to increase the limit.'
            )
        logits = self._run(ids, 0)
        self.num_processed = self.first_prompt_len = len(ids)
        self.last_token = int(np.argmax(logits[0, -1]))
        self._record(self._infer_us, _us(time.perf_counter() - t0), 1)
        return self.last_token

    def infer_next(self, token: int, append_perf_stat: bool = False) -> int:
        t0 = time.perf_counter()
        logits = self._run([token], self.num_processed)
        self.num_processed += 1
        self.last_token = int(np.argmax(logits[0, -1]))
        if append_perf_stat:
            # The prefix token's call and this one count as one candidate.
            self.raw.m_durations[-1] += _us(time.perf_counter() - t0)
            self.raw.m_inference_durations[0] += self._infer_us
        else:
            self._record(self._infer_us, _us(time.perf_counter() - t0), 1)
        return self.last_token

    def infer_next_return_all(self, tokens: list[int]) -> list[int]:
        t0 = time.perf_counter()
        logits = self._run(tokens, self.num_processed)
        self.num_processed += len(tokens)
        # The valid rows are the last ones (NPUW right-aligns a short call).
        rows = logits[0, logits.shape[1] - len(tokens) :]
        sampled = [int(t) for t in np.argmax(rows, axis=-1)]
        self.last_token = sampled[-1]
        self._record(self._infer_us, _us(time.perf_counter() - t0), len(tokens))
        return sampled

    def _record(self, infer_us: float, call_us: float, tokens: int) -> None:
        self.raw.m_durations.append(call_us)
        self.raw.m_inference_durations[0] += infer_us
        self.raw.m_batch_sizes.append(tokens)

    def trim_kv_cache(self, n: int) -> None:
        """Forget the last ``n`` processed tokens: NPUW rolls back through the next call's
        position_ids; elsewhere the KV states are cut."""
        if n >= self.num_processed:
            raise UserInputError(f"cannot trim {n} of {self.num_processed} processed tokens")
        keep = self.num_processed - n
        if not self.is_npu and n:
            for state in self._request.query_state():
                data = np.asarray(state.state.data)
                index = [slice(None)] * data.ndim
                index[self._seq_axis] = slice(0, keep)
                state.state = ov.Tensor(np.ascontiguousarray(data[tuple(index)]))
        self.num_processed = keep

    def reset(self) -> None:
        self._request.reset_state()
        self.raw = RawPerfMetrics()
        self.raw.m_inference_durations = [0.0]
        self.num_processed = self.first_prompt_len = 0
        self.last_token = -1


class SpeculativeDecoder:
    """The real ``StatefulSpeculativeLLMPipeline`` loop over a main and a draft model.

    The draft proposes ``num_assistant_tokens`` candidates one by one; the main model scores the
    last accepted token plus all candidates in one call and keeps the longest matching prefix
    plus its own next token; both KV caches drop the rejected tail.  The candidate count grows
    by 2 (up to twice the requested number) after a fully accepted step and shrinks by 1
    otherwise.  Greedy only, batch 1.
    """

    def __init__(
        self,
        core: Any,
        main_folder: Path,
        main_device: str,
        main_props: dict[str, Any],
        draft: DraftModel,
        tokenizer: Tokenizer,
        config: GenerationConfig,
    ) -> None:
        draft_tokenizer = Tokenizer(draft.models_path)
        if not tokenizers_equal(tokenizer, draft_tokenizer):
            raise ConfigError(
                "Tokenizers for draft and main models are different! Speculative decoding needs "
                "a draft model exported with the main model's tokenizer (same special tokens).",
                key="draft_model",
            )
        self.tokenizer = tokenizer
        draft_device = draft.device or main_device
        draft_props = dict(draft.properties)
        if not draft_props and draft_device == main_device:
            # the main model's properties, less its blob: one BLOB_PATH cannot hold two models
            draft_props = {k: v for k, v in main_props.items() if k not in ("BLOB_PATH", "EXPORT_BLOB")}
        self.draft = _InferWrapper(core, draft.models_path, draft_device, draft_props)
        self.ensure_num_assistant_tokens(config)
        self.max_candidates = 2 * int(config.num_assistant_tokens)
        self.candidates = int(config.num_assistant_tokens)
        self.main = _InferWrapper(
            core, main_folder, main_device, main_props, self.max_candidates + 1
        )
        self.cancelled = False

    @staticmethod
    def ensure_num_assistant_tokens(config: GenerationConfig) -> None:
        if config.assistant_confidence_threshold != 0:
            raise ConfigError(
                "Stateful (non-Continuous Batching) Speculative Decoding pipeline only supports "
                "num_assistant_tokens, not assistant_confidence_threshold. Set "
                "assistant_confidence_threshold to 0.f or remove its specification.",
                key="assistant_confidence_threshold",
            )
        if config.num_assistant_tokens == 0:
            config.num_assistant_tokens = DEFAULT_NUM_ASSISTANT_TOKENS

    def prepare(self, config: GenerationConfig) -> None:
        """Per-call config checks (after the pipeline's own resolution and validation)."""
        self.ensure_num_assistant_tokens(config)
        self.candidates = int(config.num_assistant_tokens)
        self.max_candidates = 2 * self.candidates
        config.validate()

    def _update_candidates(self, accepted: int) -> None:
        if accepted == self.candidates:
            self.candidates = min(self.candidates + 2, self.max_candidates)
        else:
            self.candidates = max(self.candidates - 1, 1)

    def generate(
        self, ids: np.ndarray, mask: np.ndarray, config: GenerationConfig, streamer: Any
    ) -> EncodedResults:
        _check_request(ids, config)
        self.cancelled = False
        main, draft = self.main, self.draft
        self._configure_models(config)
        stream = make_streamer(streamer, self.tokenizer)
        perf = SDPerModelsPerfMetrics()
        prompt = ids[0][mask[0].astype(bool)].tolist() if mask.all() else None
        if prompt is None:
            raise UserInputError(
                "Speculative decoding takes an unpadded prompt (attention_mask of ones)"
            )
        tokens: list[int] = []
        status = StreamingStatus.RUNNING
        try:
            status = self._decode(prompt, stream, perf, tokens)
            self.cancelled = status == StreamingStatus.CANCEL
            if stream is not None:
                stream.end()
        finally:
            # Every call starts from empty caches, chat turns too (the whole templated history is
            # prefilled again, as the real does) and after an error. The real's start_chat skips
            # this reset, which breaks a stateful CPU draft on turn 2 (docs/genai_shim.md).
            main_raw, draft_raw = main.raw, draft.raw
            main.reset()
            draft.reset()
        perf.main_model_metrics.raw_metrics = main_raw
        perf.draft_model_metrics.raw_metrics = draft_raw
        perf.num_input_tokens = int(ids.shape[1])
        res = EncodedResults()
        res.tokens = [tokens]
        res.scores = [0.0]
        res.finish_reasons = [self._finish_reason(status)]
        res.perf_metrics = perf
        res.extended_perf_metrics = perf
        return res

    def _configure_models(self, config: GenerationConfig) -> None:
        """The main model decodes with ``config``; the draft ignores EOS and stop strings, so
        only the main model's limits end the answer."""
        main, draft = self.main, self.draft
        main.config = config
        draft.config = config.copy()
        draft.config.ignore_eos = True
        draft.config.stop_strings = set()
        draft.config.max_new_tokens = config.get_max_new_tokens()

    def _decode(
        self, prompt: list[int], stream: Any, perf: SDPerModelsPerfMetrics, tokens: list[int]
    ) -> StreamingStatus:
        """Prefill both models, then speculate until the main model or the streamer stops;
        appends the answer to ``tokens`` and returns the last streaming status."""
        main, draft = self.main, self.draft
        raw = perf.raw_metrics
        t0 = time.perf_counter()
        out = main.infer_first(prompt)
        t1 = time.perf_counter()
        self._token_stat(raw, _us(t1 - t0), t1, 1)
        draft.infer_first(prompt)
        status = self._stream(stream, [out])
        tokens.append(out)
        prefix = -1  # the draft's last accepted candidate, not yet in its KV cache
        while main.can_infer() and status == StreamingStatus.RUNNING:
            it0 = time.perf_counter()
            room = min(
                draft.kvcache_capacity() - (1 if prefix == -1 else 0),
                main.kvcache_capacity() - 1,
            )
            n = min(room, main.generation_capacity() - 1)
            if n <= 0:
                return self._finish_without_draft(out, stream, raw, tokens, it0, status)
            out, prefix, status = self._speculate(out, prefix, min(self.candidates, n), stream, perf, tokens, it0)
        return status

    def _finish_without_draft(
        self, out: int, stream: Any, raw: RawPerfMetrics, tokens: list[int], it0: float,
        status: StreamingStatus,
    ) -> StreamingStatus:
        """No room for candidates: finish token by token if the KV cache allows."""
        main = self.main
        remainder = main.generation_capacity()
        if remainder > 0 and main.can_infer(remainder):
            for _ in range(remainder):
                out = main.infer_next(out)
                t_end = time.perf_counter()
                status = self._stream(stream, [out])
                tokens.append(out)
                self._token_stat(raw, _us(time.perf_counter() - it0), t_end, 1)
                it0 = time.perf_counter()
        return status

    def _speculate(
        self, out: int, prefix: int, n: int, stream: Any, perf: SDPerModelsPerfMetrics, tokens: list[int],
        it0: float,
    ) -> tuple[int, int, StreamingStatus]:
        """One round: the draft proposes ``n`` candidates after ``out``, the main model
        validates them in one call; returns the new last token, the draft's pending prefix
        (-1: none) and the streaming status."""
        main, draft = self.main, self.draft
        if prefix != -1:
            draft.infer_next(prefix)
        cand = [draft.infer_next(out, prefix != -1)]
        for _ in range(1, n):
            cand.append(draft.infer_next(cand[-1]))
        prefix = cand[-1]
        ref = main.infer_next_return_all([out, *cand])
        t_main = time.perf_counter()
        accepted = 0
        for r, c in zip(ref[:-1], cand, strict=False):
            if r != c:
                break
            accepted += 1
        rejected = len(cand) - accepted
        validated = ref[: len(ref) - rejected]
        out = validated[-1]
        if rejected:
            draft.trim_kv_cache(rejected - 1)
            main.trim_kv_cache(rejected)
            prefix = -1
        self._update_candidates(accepted)
        main.raw.m_batch_sizes[-1] -= rejected
        perf.num_draft_tokens += n
        perf.num_accepted_tokens += accepted
        status = self._stream(stream, validated)
        tokens.extend(validated)
        self._token_stat(perf.raw_metrics, _us(time.perf_counter() - it0), t_main, len(validated))
        return out, prefix, status

    def _finish_reason(self, status: StreamingStatus) -> GenerationFinishReason:
        """The real stateful pipeline reports LENGTH whatever ended the answer, STOP / NONE when
        the streamer stopped / cancelled it (measured)."""
        if self.cancelled:
            return GenerationFinishReason.NONE
        if status == StreamingStatus.STOP:
            return GenerationFinishReason.STOP
        if status == StreamingStatus.TOOL_CALL_STOP:
            return GenerationFinishReason.TOOL_CALL
        return GenerationFinishReason.LENGTH

    @staticmethod
    def _token_stat(raw: RawPerfMetrics, duration_us: float, when: float, n: int) -> None:
        raw.m_token_infer_durations.append(duration_us)
        raw.m_inference_durations[0] += duration_us
        raw.m_new_token_times.append(when)
        raw.m_batch_sizes.append(n)

    @staticmethod
    def _stream(stream: Any, tokens: list[int]) -> StreamingStatus:
        if stream is None:
            return StreamingStatus.RUNNING
        return status_from_callback(stream.write(list(tokens)))


def _check_request(ids: np.ndarray, config: GenerationConfig) -> None:
    """What stateful speculative decoding supports: one prompt, greedy, one sequence."""
    if ids.shape[0] != 1:
        raise UserInputError("Currently only batch size=1 is supported")
    if not config.is_greedy_decoding():
        raise UserInputError(
            "Currently only greedy decoding is supported (speculative decoding); remove "
            "do_sample / num_beams"
        )
    if config.num_return_sequences != 1:
        raise UserInputError('Currently only "num_return_sequences" equal to 1 is supported!')


def generate_speculative(
    spec: SpeculativeDecoder,
    inputs: Any,
    config: GenerationConfig,
    streamer: Any,
    start: float,
    chat: ChatSession,
    load_time: float,
) -> Any:
    """openvino.genai's StatefulSpeculativeLLMPipeline: batch 1, greedy, the prompt (or the
    whole templated chat history) prefilled into both models each call."""
    spec.prepare(config)
    if isinstance(inputs, (TokenizedInputs, ov.Tensor, np.ndarray)):
        ids, mask = encoded_inputs(inputs)
        res = spec.generate(ids, mask, config, streamer)
        res.perf_metrics.raw_metrics.generate_durations = [(time.perf_counter() - start) * 1e6]
        res.perf_metrics.reevaluate(start)
        return res
    t0 = time.perf_counter()
    as_str = isinstance(inputs, str)
    if isinstance(inputs, ChatHistory):
        if not config.apply_chat_template:
            raise ConfigError(
                "Chat template must be applied when using ChatHistory in generate method."
            )
        require_template(spec.tokenizer)
        if not len(inputs):
            raise UserInputError(
                "Chat history must not be empty when using ChatHistory in generate method."
            )
        text = spec.tokenizer.apply_chat_template(inputs, add_generation_prompt=True)
        enc = spec.tokenizer.encode(text, add_special_tokens=False)
    elif as_str or (
        isinstance(inputs, (list, tuple)) and all(isinstance(p, str) for p in inputs)
    ):
        prompts = [inputs] if as_str else list(inputs)
        if len(prompts) != 1 and not getattr(spec, "batched", False):
            raise UserInputError(
                "Currently only batch size=1 is supported (speculative decoding); "
                "generate one prompt at a time"
            )
        prompt = prompts[0]
        if len(prompts) > 1:  # continuous batching: each prompt as the real's adapter takes it
            if chat.active:
                raise UserInputError("In chat mode generate() takes a single string; call finish_chat() for batches")
            templated = config.apply_chat_template and bool(spec.tokenizer.chat_template)
            texts = [
                spec.tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
                if templated else p
                for p in prompts
            ]
            enc = spec.tokenizer.encode(texts, add_special_tokens=not templated)
        elif chat.active:
            text = spec.tokenizer.apply_chat_template(chat.user_turn(prompt), add_generation_prompt=True)
            enc = spec.tokenizer.encode(text, add_special_tokens=False)
        elif config.apply_chat_template and spec.tokenizer.chat_template:
            text = spec.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True
            )
            enc = spec.tokenizer.encode(text, add_special_tokens=False)
        else:
            enc = spec.tokenizer.encode(prompt)
    else:
        raise UserInputError(
            "generate() takes a str, a list of str, a ChatHistory, TokenizedInputs or an "
            f"openvino.Tensor of ids; got {type(inputs).__name__}"
        )
    tokenize_us = (time.perf_counter() - t0) * 1e6
    ids, mask = np.array(enc.input_ids.data), np.array(enc.attention_mask.data)
    try:
        res = spec.generate(ids, mask, config, streamer)
    except Exception:
        if chat.active and not isinstance(inputs, ChatHistory):
            chat.drop_user_turn()
        raise
    t1 = time.perf_counter()
    out = DecodedResults()
    out.texts = [spec.tokenizer.decode(t) for t in res.tokens]
    out.scores, out.finish_reasons = res.scores, res.finish_reasons
    if chat.active and not isinstance(inputs, ChatHistory):
        if spec.cancelled:
            chat.drop_user_turn()  # CANCEL drops the user turn
        else:
            chat.answer(out.texts[0])
    pm = res.perf_metrics
    raw = pm.raw_metrics
    raw.tokenization_durations = [tokenize_us]
    raw.detokenization_durations = [(time.perf_counter() - t1) * 1e6]
    raw.generate_durations = [(time.perf_counter() - start) * 1e6]
    pm.load_time = load_time
    pm.reevaluate(start)
    out.perf_metrics = pm
    out.extended_perf_metrics = res.extended_perf_metrics
    return out.texts[0] if as_str else out
