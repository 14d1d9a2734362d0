"""openvino.genai's StatefulLLMPipeline: one stateful model, token by token, batched with
beam_idx; on NPU the NPUW-compiled model with its limits (MAX_PROMPT_LEN, the KV capacity, batch
1, greedy / multinomial), elsewhere chat keeps the KV cache between turns."""

from __future__ import annotations

from typing import Any

import numpy as np

from genai_shim.decoding import STREAMER_FINISH, OneRow, StatefulRequests, stream_tokens
from genai_shim.generation_config import SIZE_MAX, GenerationConfig
from genai_shim.llm.base import DecodeCall, LLMPipelineImplBase, now
from genai_shim.lora_controller import AdapterController, resolve_adapters
from genai_shim.perf_metrics import PerfMetrics, record_infer_call
from genai_shim.results import EncodedResults
from genai_shim.stateful_beam import run_beam_search
from genai_shim.streamers import StreamingStatus
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import PromptTooLongError, UserInputError

__all__ = ["StatefulLLM", "has_linear_states"]


def has_linear_states(model: Any) -> bool:
    """Whether the stateful model keeps recurrent (linear-attention) states beside its KV cache:
    a ReadValue of rank 3 with one dynamic axis (a convolution state, LFM2) or of rank 4 with one
    dynamic and no zero-length axis (an SSM state), the real's get_cache_types rule.  Such a
    state cannot drop positions, so a conversation that does not extend the cached one starts
    over."""
    for op in model.get_ops():
        if op.get_type_name() != "ReadValue" or op.get_input_size() < 1:
            continue  # (a LoRA variable has no input)
        shape = op.get_input_partial_shape(0)
        if shape.rank.is_dynamic:
            continue
        dims = list(shape)
        dynamic = sum(1 for d in dims if d.is_dynamic)
        zero = sum(1 for d in dims if d.is_static and d.get_length() == 0)
        if (len(dims) == 3 and dynamic == 1) or (len(dims) == 4 and dynamic == 1 and zero == 0):
            return True
    return False


class StatefulLLM(LLMPipelineImplBase):
    """The stateful model of ``compiled``; ``is_npu`` adds the NPU pipeline's limits."""

    def __init__(
        self,
        compiled: Any,
        tokenizer: Tokenizer,
        config: GenerationConfig,
        *,
        seq_axis: int,
        lora: AdapterController | None = None,
        is_npu: bool = False,
        max_prompt_len: int = SIZE_MAX,
        kv_capacity: int = SIZE_MAX,
        paged_rules: bool = False,
        assisted: bool = False,
        linear_states: bool = False,
    ) -> None:
        super().__init__(tokenizer, config, paged_rules=paged_rules, assisted=assisted, lora=lora is not None)
        self.linear_states = linear_states  # see has_linear_states
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        names = {n for p in compiled.inputs for n in p.get_names()}
        self.has_pos = "position_ids" in names
        self.has_beam = "beam_idx" in names
        self.seq_axis = seq_axis
        self.is_npu = is_npu
        self.max_prompt_len = max_prompt_len
        self.kv_capacity = kv_capacity
        self._lora = lora
        self._one_row: OneRow | None = None  # the decode loop's single-row step buffers

    def logits_model(self) -> Any:
        return self.compiled

    def kv_limit(self) -> int | None:
        return self.kv_capacity if self.is_npu else None

    # -- KV cache ------------------------------------------------------------------------------
    def reset_kv(self) -> None:
        if self._lora is not None:  # the adapters' variables outlive a conversation
            self._lora.reset_kv(self.request)
        else:
            self.request.reset_state()
        self._kv_tokens = []

    def trim_kv(self, keep: int) -> None:
        """Keep the first ``keep`` positions of every KV state (CPU chat reuse); a model with
        recurrent states is reset instead (the real's needs_reset): its next call prefills all."""
        if self.linear_states:
            self.reset_kv()
            return
        self.requests().cut(self.request, keep)
        self._kv_tokens = self._kv_tokens[:keep]

    def requests(self) -> StatefulRequests:
        keep = self._lora.has_state_name if self._lora is not None else None
        return StatefulRequests(self.has_pos, self.has_beam, self.seq_axis, keep)

    def prepare_kv(self, ids: np.ndarray, mask: np.ndarray, keep_kv: bool) -> int:
        """New conversation vs. continuing one: on NPU (full-history mode) and outside chat the
        state is reset and the whole prompt is prefilled; CPU chat reuses the common prefix."""
        if not (keep_kv and not self.is_npu and ids.shape[0] == 1):
            self.reset_kv()
            return 0
        row = ids[0][mask[0].astype(bool)].tolist()
        common = 0
        for a, b in zip(self._kv_tokens, row, strict=False):
            if a != b:
                break
            common += 1
        common = min(common, len(row) - 1)  # at least one new token must be fed
        if common == 0:
            self.reset_kv()
        elif common < len(self._kv_tokens):
            self.trim_kv(common)
        return min(common, len(self._kv_tokens))  # 0 when trim_kv reset a recurrent state

    # -- checks --------------------------------------------------------------------------------
    def check_request(self, ids: np.ndarray, mask: np.ndarray, config: GenerationConfig, keep_kv: bool) -> bool:
        if self.is_npu:
            self.check_npu(ids, config)
        if config.echo:
            raise UserInputError("Echo is not supported in the stateful pipeline")
        self.check_max_length(mask, config)
        return keep_kv

    def check_npu(self, ids: np.ndarray, config: GenerationConfig) -> None:
        if ids.size > self.max_prompt_len:
            raise PromptTooLongError(
                f"Stateful LLM pipeline on NPU may only process prompts or hold chat history up to "
                f"{self.max_prompt_len} tokens. {ids.size} is passed.\n Set the "
                '"MAX_PROMPT_LEN" config option to '
                "increase the limit."
            )
        if ids.shape[0] != 1:
            raise UserInputError("Currently only batch size equal to 1 is supported for NPU device!")
        if not (config.is_greedy_decoding() or config.is_multinomial()):
            raise UserInputError("Currently only greedy and multinomial decoding are supported for NPU device!")
        if config.num_return_sequences != 1:
            raise UserInputError('Currently only "num_return_sequences" equal to 1 is supported for NPU device!')

    # -- the model call ------------------------------------------------------------------------
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
        bound = one is not None and share and one.bound
        feed: dict[str, np.ndarray] = {"attention_mask": mask}
        if not bound:
            feed["input_ids"] = ids
            if self.has_pos:
                feed["position_ids"] = pos
            if self.has_beam:
                feed["beam_idx"] = beam
        t0 = now()
        # share_outputs: the logits are a view of the request's output, read (sampled) before the
        # next infer overwrites it, so the per-step copy is not needed.
        out = self.request.infer(feed, share_inputs=share, share_outputs=True)
        t1 = now()
        if one is not None and share and not bound:
            one.bound = one.read_by(self.request, self.has_pos, self.has_beam)
        record_infer_call(perf.raw_metrics, t0, t1, int(ids.shape[0]))
        return np.asarray(out["logits"])

    # -- decoding ------------------------------------------------------------------------------
    def decode(self, call: DecodeCall) -> EncodedResults:
        ids, mask, config, batch = call.ids, call.mask, call.config, call.ids.shape[0]
        if self._lora is not None:
            # (without a controller check_supported refused a non-default GenerationConfig.adapters)
            self._lora.apply(self.request, resolve_adapters(config.adapters))
        # Prefill: positions count only real (unmasked) tokens, padding gets 0.
        pos = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)[:, call.past:].astype(np.int64)
        full_mask = np.ascontiguousarray(mask, dtype=np.int64)
        logits = self._infer(
            np.ascontiguousarray(ids[:, call.past:]),
            full_mask,
            np.ascontiguousarray(pos),
            np.arange(batch, dtype=np.int32),
            call.perf,
        )
        if call.keep_kv and batch == 1:
            self._kv_tokens = call.seqs[0].prompt[:]
        if config.is_beam_search():
            return self._beam_search(call, full_mask, logits)
        self._sample(call, full_mask, logits)
        return self.encoded_results(call.seqs, call.perf, call.keep_kv, call.n)

    def _beam_search(self, call: DecodeCall, full_mask: np.ndarray, logits: np.ndarray) -> EncodedResults:
        config = call.config
        res = run_beam_search(
            call.ids,
            full_mask,
            logits,
            config,
            call.perf,
            infer=self._infer,
            paged=self.paged_rules,
            max_new_tokens=lambda prompt_len, width: self.max_new_tokens(config, prompt_len, width),
            tokenizer=self.tokenizer,
            stop_window=call.stop_window,
            stop_strings=call.stop_strings,
        )
        if call.keep_kv and call.ids.shape[0] == 1:
            # Chat: the KV holds the prompt followed by the last step's beams; keep the prompt
            # only, the next turn feeds the chosen answer as part of its prompt (as the real
            # one does by trimming the generated length).
            self.trim_kv(len(self._kv_tokens))
        else:
            self._kv_tokens = []
        return res

    def _sample_step(self, call: DecodeCall, active: list[int], last: np.ndarray, stream_stopped: bool) -> bool:
        """Sample one token for every active row; returns whether the streamer stopped."""
        seqs, stream = call.seqs, call.stream
        for row, b in enumerate(active):
            s = seqs[b]
            token, logp = self._sampler.sample(s.processor, last[row])
            s.tokens.append(token)
            s.processor.register(token)
            s.logps.append(logp)
            self.check_finish(s, call.config, call.stop_window, call.stop_strings)
        if stream is not None and not stream_stopped:
            status = stream_tokens(stream, seqs[0], call.stop_window)
            stream_stopped = status != StreamingStatus.RUNNING
            if stream_stopped and seqs[0].finish is None:
                seqs[0].finish = STREAMER_FINISH[status]
                self.cancelled = status == StreamingStatus.CANCEL
        return stream_stopped

    def _sample(self, call: DecodeCall, full_mask: np.ndarray, logits: np.ndarray) -> None:
        seqs, n, batch = call.seqs, call.n, call.ids.shape[0]
        active = list(range(batch * n))
        kv_row = {s: s // n for s in active}  # sequence -> its row in the KV cache / mask
        stream_stopped = False
        one: OneRow | None = None
        last = np.repeat(logits[:, -1, :], n, axis=0)
        while True:
            stream_stopped = self._sample_step(call, active, last, stream_stopped)
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
                full_mask = np.concatenate([full_mask[beam], np.ones((len(still), 1), dtype=np.int64)], axis=1)
                step_ids = np.array([[seqs[b].tokens[-1]] for b in still], dtype=np.int64)
                step_pos = (full_mask.sum(axis=1, keepdims=True) - 1).astype(np.int64)
            logits = self._infer(step_ids, full_mask, step_pos, beam, call.perf)
            if call.keep_kv and batch * n == 1:
                self._kv_tokens.append(int(step_ids[0, 0]))
            active = still
            kv_row = {b: i for i, b in enumerate(still)}
            last = logits[:, -1, :]
        if call.stream is not None:
            if not stream_stopped:
                stream_tokens(call.stream, seqs[0], 0)
            call.stream.end()
