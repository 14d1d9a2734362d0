"""LLMInferRequest: routes calls to prefill (whole or chunked) or generate and owns the KV buffer."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import numpy as np
import openvino as ov

from ov_npu_emu.errors import KVCacheFullError, PromptTooLongError, UserInputError
from ov_npu_emu.runtime.device import DeviceInferRequest, VariableState
from ov_npu_emu.runtime.pages import zeroed
from ov_npu_emu_npuw.attention_rewrites import CALL_POSITIONS
from ov_npu_emu_npuw.blockkv import BlockKV
from ov_npu_emu_npuw.config import select_variant
from ov_npu_emu_npuw.kvcache import KVBuffers
from ov_npu_emu_npuw.lora import LoraStates, lora_inputs
from ov_npu_emu_npuw.model_io import DEEPSTACK, EMBEDS, TOKEN_TYPES, VISUAL_MASK
from ov_npu_emu_npuw.prefix_cache import PrefixCache
from ov_npu_emu_npuw.transform import EMBED, SCALE_SUFFIX, ZP_SUFFIX

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel
    from ov_npu_emu.api.infer_request import InferRequest
    from ov_npu_emu_npuw.compiled_model import LLMCompiledModel

__all__ = ["LLMInferRequest", "StoredTokensState"]

logger = logging.getLogger(__name__)

STORED_TOKENS_STATE = "npuw_stored_tokens_state"


class StoredTokensState(VariableState):
    """``npuw_stored_tokens_state`` (i64[1]): read or rewind the number of tokens in the KV cache."""

    def __init__(self, req: LLMInferRequest) -> None:
        self._req = req

    @property
    def name(self) -> str:
        return STORED_TOKENS_STATE

    def get_state(self) -> ov.Tensor:
        return ov.Tensor(np.array([self._req.num_stored_tokens], dtype=np.int64))

    def set_state(self, value: ov.Tensor) -> None:
        data = np.asarray(value.data if isinstance(value, ov.Tensor) else value).ravel()
        if data.size != 1:
            raise UserInputError(
                f"{STORED_TOKENS_STATE} takes one integer, got shape {list(np.shape(data))}"
            )
        if data.dtype.kind not in "iu":  # int("abc") / int(1.5) would fail late or truncate
            raise UserInputError(f"{STORED_TOKENS_STATE} takes an integer, got dtype {data.dtype}")
        n = int(data[0])
        if n > self._req.capacity:
            raise UserInputError(
                "Number of updated stored tokens in KV-Cache is greater than total KV-Cache size."
            )
        if n < 0:
            raise UserInputError("Number of updated stored tokens is negative!")
        self._req.num_stored_tokens = n

    def reset(self) -> None:
        self._req.reset_state()


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """(min, max) of an integer input; a decode step's [1, 1] input is read as one scalar
    (each numpy reduction costs a few µs, a step checks ids and positions)."""
    if a.size == 1:
        v = int(a.flat[0])
        return v, v
    return int(a.min()), int(a.max())


class _Staging:
    """Host arrays bound once (zero-copy) to a sub-request's small inputs and all its outputs.

    Binding the outputs too means a step never looks a port up: the device writes ``present`` and
    ``logits`` straight into arrays we already hold.
    """

    def __init__(
        self,
        req: InferRequest,
        q_len: int,
        mask_len: int,
        present_names: tuple[str, ...],
        embed: np.ndarray | None = None,
        bind_embed: bool = False,
        lora: LoraStates | None = None,
    ) -> None:
        if lora is not None:
            lora.bind(req)  # every sub-model reads the same padded LoRA tensors
        ins = {n: p for p in req.model_inputs for n in p.names}
        # the tokens: input_ids [1, L], or a VLM language model's inputs_embeds [1, L, E]
        tokens = EMBEDS if EMBEDS in ins and "input_ids" not in ins else "input_ids"
        port = ins[tokens]
        self.ids = np.zeros(tuple(port.partial_shape.to_shape()), port.element_type.to_dtype())
        self.mask = np.zeros((1, mask_len), np.int64)
        # positions [1, L], or M-RoPE's [3, 1, L]; pos2 views them as [rows, L]
        self.pos = np.zeros(tuple(ins["position_ids"].partial_shape.to_shape()), np.int64)
        self.pos2 = self.pos.reshape(-1, q_len)
        # Gemma 3's token_type_ids [1, L], laid out like the tokens (0 on padding)
        self.types: np.ndarray | None = None
        if TOKEN_TYPES in ins:
            self.types = np.zeros((1, q_len), ins[TOKEN_TYPES].element_type.to_dtype())
            req.set_tensor(TOKEN_TYPES, ov.Tensor(self.types, shared_memory=True))
        # Qwen3-VL's visual_pos_masks [1, L] (like the tokens, false on padding) and its
        # deepstack_visual_embeds [layers, L, hidden] (the call's vision-token rows first, then 0)
        self.vmask: np.ndarray | None = None
        self.deep: np.ndarray | None = None
        if VISUAL_MASK in ins and DEEPSTACK in ins:
            self.vmask = np.zeros((1, q_len), ins[VISUAL_MASK].element_type.to_dtype())
            self.deep = np.zeros(tuple(ins[DEEPSTACK].partial_shape.to_shape()), ins[DEEPSTACK].element_type.to_dtype())
            req.set_tensor(VISUAL_MASK, ov.Tensor(self.vmask, shared_memory=True))
            req.set_tensor(DEEPSTACK, ov.Tensor(self.deep, shared_memory=True))
        for name, arr in (
            (tokens, self.ids),
            ("attention_mask", self.mask),
            ("position_ids", self.pos),
        ):
            req.set_tensor(name, ov.Tensor(arr, shared_memory=True))
        # a chunked prefill whose model reduces over the positions (longrope): the whole call's
        self.call_pos: np.ndarray | None = None
        port = next((p for p in req.model_inputs if CALL_POSITIONS in p.names), None)
        if port is not None:
            self.call_pos = np.zeros(tuple(port.partial_shape.to_shape()), port.element_type.to_dtype())
            req.set_tensor(CALL_POSITIONS, ov.Tensor(self.call_pos, shared_memory=True))
        # every name of a port: a device may keep other names beside ours (gpt2's embed output)
        outs = {n: p for p in req.model_outputs for n in p.names}
        self.present: list[np.ndarray] = []
        for name in present_names:
            port = outs[name]
            # a prefill's window writes its real token rows only: pages committed as written
            arr = zeroed(tuple(port.partial_shape.to_shape()), port.element_type.to_dtype())
            self.present.append(arr)
            req.set_tensor(name, ov.Tensor(arr, shared_memory=True))
        # Steps call the device request directly: the facade already validated every binding
        # above, and the outer request's facade wraps device errors into ExecutionError.
        self.run = req.impl.infer
        if embed is not None:
            # Shared head: the last hidden state is copied into the head's input after each
            # call. Binding `embed` itself as this output corrupted the heap in the CPU plugin
            # (prefill, where the output comes from a Slice), so it is a copy of E values.
            self._get = req.impl.get_tensor
            self._embed_index = outs[EMBED].index
            self._embed = embed
            self._embed_out: np.ndarray | None = None
            if bind_embed:
                # Generate variants: an own array bound as the output makes the copy one numpy
                # assignment instead of fetching the device's output tensor every step.
                self._embed_out = np.zeros_like(embed)
                req.set_tensor(EMBED, ov.Tensor(self._embed_out, shared_memory=True))
            self.logits_tensor = None
        else:
            port = outs["logits"]
            arr = np.zeros(port.partial_shape.to_shape(), port.element_type.to_dtype())
            self.logits_tensor = ov.Tensor(arr, shared_memory=True)
            req.set_tensor("logits", self.logits_tensor)

    def hand_embed(self) -> None:
        """Copy this model's last hidden state into the shared head's input."""
        if self._embed_out is not None:
            self._embed[...] = self._embed_out
        else:
            self._embed[...] = self._get(self._embed_index, False).data

    def zero(self) -> None:
        self.ids.fill(0)
        self.mask.fill(0)
        self.pos.fill(0)
        if self.types is not None:
            self.types.fill(0)
        if self.vmask is not None and self.deep is not None:
            self.vmask.fill(0)
            self.deep.fill(0)

    def put_types(self, types: np.ndarray | None, at: int, visual: _Visual | None = None) -> None:
        """The call's token types [n] into slots at.. (all else 0), when the model takes them;
        and its DeepStack inputs: the mask into the same slots, the rows first."""
        if self.types is not None:
            self.types.fill(0)
            if types is not None:
                self.types[0, at : at + types.shape[0]] = types
        if self.vmask is not None and self.deep is not None:
            self.vmask.fill(0)
            self.deep.fill(0)
            if visual is not None:
                self.vmask[0, at : at + visual.mask.shape[0]] = visual.mask
                self.deep[:, : visual.rows.shape[1]] = visual.rows


@dataclasses.dataclass(frozen=True)
class _Visual:
    """A call's (or a chunk's) DeepStack inputs: the mask over its tokens [n] and the rows of its
    vision tokens [layers, count, hidden]."""

    mask: np.ndarray
    rows: np.ndarray

    def part(self, start: int, stop: int) -> _Visual:
        """The tokens start..stop and the rows of their vision tokens."""
        first = int(np.count_nonzero(self.mask[:start]))
        mask = self.mask[start:stop]
        return _Visual(mask, self.rows[:, first : first + int(np.count_nonzero(mask))])


class LLMInferRequest(DeviceInferRequest):
    """One conversation at a time over one pre-allocated KV buffer (see kvcache.py for the layout)."""

    def __init__(self, cm: LLMCompiledModel) -> None:
        cfg = cm.cfg
        self._cm = cm
        self._cfg = cfg
        self._index = {n: i for i, p in enumerate(cm.inputs) for n in p.names}
        self._user: list[ov.Tensor] = [
            ov.Tensor(p.element_type, [0] * p.partial_shape.rank.get_length()) for p in cm.inputs
        ]
        logits = cm.outputs[0].partial_shape
        last = logits[logits.rank.get_length() - 1] if logits.rank.is_static else None
        self._vocab = last.get_length() if last is not None and last.is_static else 0
        self._P = cfg.max_prompt_len
        self._C = cfg.chunk_size
        self._M = cfg.max_gen_len  # tokens per generate call (1 unless speculative decoding)
        self.capacity = cfg.total_size - self._M  # the largest variant's past holds K−M tokens
        self._rope_limit = cfg.total_size if cfg.cache_rope else 0
        self.kv = BlockKV(
            cm.kv.past_names,
            cm.kv.num_heads,
            cm.kv.head_dims,
            self.capacity,
            cfg.total_size,
            cfg.chunk_size,
            cm.kv_dtype,
            tuple(cm.kv.transposed(i) for i in range(len(cm.kv.past_names))),
        ) if cfg.block_kv else KVBuffers(
            cm.kv.num_heads,
            cm.kv.head_dims,
            self.capacity,
            cm.kv_dtype,
            tuple(cm.kv.transposed(i) for i in range(len(cm.kv.past_names))),
            cfg.kv_precision,
            cfg.kv_group_size,
            tuple(n.endswith(".key") for n in cm.kv.past_names),
        )
        # Shared LM head: prefill and every variant write their last hidden state into `embed`,
        # which is the head's input (zero-copy), and the head writes `logits`.
        self._head = None
        embed = None
        if cm.subs.lm_head is not None:
            self._head = cm.subs.lm_head.create_infer_request()
            port_in = self._head.model_inputs[0]
            embed = np.zeros(port_in.partial_shape.to_shape(), port_in.element_type.to_dtype())
            self._head.set_tensor(EMBED, ov.Tensor(embed, shared_memory=True))
            port_out = self._head.model_outputs[0]
            self._head_logits = ov.Tensor(
                np.zeros(port_out.partial_shape.to_shape(), port_out.element_type.to_dtype()),
                shared_memory=True,
            )
            self._head.set_tensor("logits", self._head_logits)
            self._run_head = self._head.impl.infer
        # LoRA inputs (NPUW_LLM_MAX_LORA_RANK): one padded tensor each, shared by all sub-models
        self.lora = LoraStates(lora_inputs(cm.subs.prefill.inputs), cfg.max_lora_rank)
        # Prefill: the chunked past is one more prefix view of the same KV memory.
        # PYRAMID prefill attention adds chunk models of mask length 2C, 4C, …: each past is
        # again a prefix view of the KV buffer, [1,H,size−C,D].
        self._pfs: dict[int, _Staging] = {}
        self._pf_reqs: list[InferRequest] = []
        subs = {**cm.subs.prefill_pyramid, self._P: cm.subs.prefill}
        for size, sub in sorted(subs.items()):
            req = sub.create_infer_request()
            self._pfs[size] = _Staging(
                req, self._C or self._P, size, cm.kv.present_names, embed, lora=self.lora
            )
            if self._C:
                self._bind_past(req, size - self._C)
            self._pf_reqs.append(req)
        self._prefill = self._pf_reqs[-1]
        self._pf = self._pfs[self._P]  # the staging the last prefill call ran on
        self._embed = embed
        # prefill ladder (CPU device, whole-prompt prefill): rung size -> staging, made on first use
        self._ladder: dict[int, _Staging] = {}
        self.prefill_size = self._P  # static prompt size the last prefill ran at
        self._pf_slots = self._P - self._C  # and its past slots
        # Generate variants: each past is the prefix view with K−M slots (no allocation of its own).
        self._gen: dict[int, InferRequest] = {}
        self._gs: dict[int, _Staging] = {}
        # Per variant and KV tensor: (logical past view, last row of `present`) so a decode step
        # writes its new KV row with one slice assignment per tensor and no lookups.
        self._rows: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for k, sub in cm.subs.generate.items():
            self._add_variant(k, sub)
        self.num_stored_tokens = 0
        # NPUW_LLM_ENABLE_PREFIX_CACHING: per request, like the KV it copies from
        self.prefix = (
            PrefixCache(cfg.prefix_block, cfg.prefix_max_blocks) if cfg.prefix_block else None
        )
        self.restored_tokens = 0  # prompt tokens the last prefill took from the prefix cache
        # tokens whose KV is in the buffer, in order (prompt, then generated), while the prefix
        # cache can use them; None when the conversation is not cacheable
        self._conv: list[int] | None = None
        self.variant: int = cfg.variants[0]  # KV size of the bound generate variant
        self.prefill_calls = 0  # chunks (or whole prefills) run in the last prefill
        self.switches = 0  # variant switches in this conversation
        self._fresh = True  # next call starts a conversation whatever its length
        self._types: np.ndarray | None = None  # this call's token_type_ids [n], when the model takes them
        self._visual: _Visual | None = None  # this call's DeepStack inputs, when the model takes them
        self._kv_ready = False  # copy_kvcache done for this conversation
        self._prompt_len = 0
        self._in_present = 0  # tokens of the last prefill still only in its `present`
        self._first_pos: int | None = None
        self._logits: ov.Tensor | None = None

    # -- DeviceInferRequest -------------------------------------------------------------
    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        if is_input:
            return self._user[index]
        if self._logits is None:
            raise UserInputError("Logits tensor is not available. Please run inference first.")
        return self._logits

    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        if not is_input:
            raise UserInputError(
                "NPUW LLM output 'logits' is owned by the plugin; read it with get_tensor"
            )
        self._user[index] = tensor

    def query_state(self) -> list[VariableState]:
        return [StoredTokensState(self), *self.lora.states]

    def _visual_inputs(self, n: int) -> _Visual:
        """The call's ``visual_pos_masks`` and ``deepstack_visual_embeds``, checked: a mask of one
        entry per token (or the real pipeline's [1, 1] all-false one for a prompt without vision
        tokens), at least as many rows as vision tokens."""
        vmask = self._input(VISUAL_MASK)
        if vmask.size == 1 and n > 1 and not vmask.any():
            vmask = np.zeros(n, np.bool_)
        if vmask.size != n:
            raise UserInputError(f"visual_pos_masks {list(vmask.shape)} must hold one entry per token [1, {n}]")
        flat = vmask.reshape(-1) != 0
        rows = self._input(DEEPSTACK)
        count = int(np.count_nonzero(flat))
        if rows.ndim != 3 or rows.shape[1] < count:
            raise UserInputError(
                f"deepstack_visual_embeds {list(rows.shape)} must be [layers, N, hidden] with a row for each of "
                f"the {count} vision tokens of visual_pos_masks (More visual tokens in mask than rows in deepstack "
                "source)")
        return _Visual(flat, rows[:, :count])

    def reset_state(self) -> None:
        """New conversation: the next call is a prefill, whatever its length."""
        self._fresh = True
        self.num_stored_tokens = 0

    def infer(self) -> None:
        embeds = EMBEDS in self._index and "input_ids" not in self._index
        ids, mask = self._input(EMBEDS if embeds else "input_ids"), self._input("attention_mask")
        if embeds:
            if ids.ndim != 3 or ids.shape[0] != 1 or ids.shape[1] == 0:
                raise UserInputError(f"inputs_embeds must be [1, n>0, E] (batch 1), got {list(ids.shape)}")
        elif ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
            raise UserInputError(f"input_ids must be [1, n>0] (batch 1), got {list(ids.shape)}")
        if "position_ids" in self._index:
            pos = self._input("position_ids")
        else:
            # A model without position_ids (Bloom's ALiBi) takes its positions from the mask,
            # as transformers does: the mask covers the history plus the new tokens.
            start = mask.shape[-1] - ids.shape[1]
            pos = np.arange(start, start + ids.shape[1], dtype=np.int64)[None]
        want = (3, 1, ids.shape[1]) if pos.ndim == 3 else ids.shape[:2]
        if pos.shape != want:
            raise UserInputError(
                f"position_ids {list(pos.shape)} must be {list(want)} for the tokens {list(ids.shape)}"
            )
        pos = pos.reshape(-1, ids.shape[1])  # [rows, n]: one row, or M-RoPE's three
        self._types = None
        if TOKEN_TYPES in self._index:
            types = self._input(TOKEN_TYPES)
            if types.size != ids.shape[1]:  # [1, n], or the real pipeline's [n, 1] for a step
                raise UserInputError(
                    f"token_type_ids {list(types.shape)} must hold one entry per token {list(ids.shape[:2])}")
            self._types = types.reshape(-1)
        self._visual = self._visual_inputs(ids.shape[1]) if VISUAL_MASK in self._index else None
        if mask.ndim != 2 or mask.shape[0] != 1:
            raise UserInputError(f"attention_mask must be [1, n], got {list(mask.shape)}")
        if self._vocab and not embeds:
            lo, hi = _bounds(ids)
            if lo < 0 or hi >= self._vocab:
                # the embedding Gather would read out of bounds (the CPU plugin returns zeros)
                raise UserInputError(
                    f"input_ids must be token ids in [0, {self._vocab}), got values {lo}..{hi}"
                )
        if self._rope_limit and _bounds(pos)[1] >= self._rope_limit:
            # the Gather from the RoPE table would read past it (the CPU plugin returns zeros)
            raise UserInputError(
                f"position_ids reach {_bounds(pos)[1]}, beyond the RoPE cache of {self._rope_limit} "
                "positions (NPUW_LLM_CACHE_ROPE covers the total KV size); compile with "
                "NPUW_LLM_CACHE_ROPE=NO to use larger positions"
            )
        if self._first_pos is None:
            self._first_pos = int(pos[0, 0])  # latched like the real one (0 for most models)
        # Any call starting at the first position begins a conversation, a one-token prompt
        # included (the real NPUW sends a 1-token call at position 0 to generate: its bug).
        if self._fresh or int(pos[0, 0]) == self._first_pos:
            self._infer_prefill(ids, mask, pos)
        else:
            self._infer_generate(ids, mask, pos, slot=mask.shape[-1] - ids.shape[1] if embeds else None)

    # -- helpers ------------------------------------------------------------------------
    def _add_variant(self, k: int, sub: CompiledModel) -> _Staging:
        """Request and staging of the generate variant with ``k`` KV slots (its past: a view)."""
        req = sub.create_infer_request()
        st = _Staging(
            req, self._M, k, self._cm.kv.present_names, self._embed, bind_embed=True, lora=self.lora
        )
        self._bind_past(req, k - self._M)
        self._gen[k], self._gs[k] = req, st
        if not self.kv.paged:  # block KV writes its rows through blockkv.py
            self._rows[k] = [
                (self.kv.seq(i, k - self._M), self._logical(i, p)[:, :, -1, :])
                for i, p in enumerate(st.present)
            ]
        return st

    def _bind_variant(self, k: int) -> None:
        """Make ``k`` the bound generate variant, compiling a generate-ladder rung on first use."""
        if k not in self._gs:
            self._add_variant(k, self._cm.generate_rung(k))
        self.variant = k

    def _bind_past(self, req: InferRequest, slots: int) -> None:
        """Bind the ``slots`` prefix views of the KV buffers (and u8/u4 scales) as the past."""
        if self.kv.paged:  # block inputs (blockkv.py)
            self.kv.bind(req, slots)
            return
        for i, name in enumerate(self._cm.kv.past_names):
            req.set_tensor(name, self.kv.tensor(i, slots))
            if self.kv.quantized:
                scale, zp = self.kv.aux_tensors(i, slots)
                req.set_tensor(f"{name}{SCALE_SUFFIX}", scale)
                req.set_tensor(f"{name}{ZP_SUFFIX}", zp)

    def _input(self, name: str) -> np.ndarray:
        i = self._index.get(name)
        if i is None:
            raise UserInputError(f"the model has no input {name!r}")
        return self._user[i].data

    # -- prefill ------------------------------------------------------------------------
    def _infer_prefill(self, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray) -> None:
        n = ids.shape[1]
        if n > self._P:
            raise PromptTooLongError(
                f'Input prompt is longer than configured "NPUW_LLM_MAX_PROMPT_LEN": {self._P}.\n'
                'Please either setup bigger "NPUW_LLM_MAX_PROMPT_LEN" or shorten the prompt.'
            )
        if mask.shape[1] < n:
            raise UserInputError(
                f"attention_mask has {mask.shape[1]} entries for a {n}-token prompt"
            )
        self._store_conversation()  # before its KV is cleared
        # prepare_for_new_conversation
        self.lora.apply()
        self.kv.zero(n)
        self.num_stored_tokens = 0
        self._kv_ready = False
        self.switches = 0
        # Generate ladder: the smallest rung holding the prompt and one call; it moves up as the
        # conversation grows.  Otherwise the real rule (room for MIN_RESPONSE_LEN).
        rung = next((k for k in self._cm.generate_sizes[: -len(self._cfg.variants)]
                     if k - 2 * self._M >= n), 0)
        self._bind_variant(
            rung or select_variant(list(self._cfg.variants), n, self._cfg.min_response_len)
        )
        user_mask = mask[0, -n:]
        if self._C:
            self._chunked_prefill(ids, user_mask, pos)
        else:
            self._whole_prefill(ids, user_mask, pos)
        self._prompt_len = n
        self._fresh = False
        if self._head is not None:
            self._pf.hand_embed()
            self._run_head()
            self._logits = self._head_logits
        else:
            self._logits = self._pf.logits_tensor
        logger.debug(
            "prefill %d tokens in %d call(s); generate variant kv%d",
            n,
            self.prefill_calls,
            self.variant,
        )

    def _whole_prefill(self, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray) -> None:
        """Right-align the prompt in [1, P]; the left padding is masked out.

        With the prefill ladder, P is the smallest rung that holds the prompt: the padding rows
        are masked out of every valid row's attention, so the valid rows (their KV and the last
        hidden state) are those of the full-size prefill."""
        n, P, s = ids.shape[1], self._P, self._pfs[self._P]
        rung = self._cm.ladder_rung(n)
        if rung is not None:
            P, sub = rung
            s = self._ladder.get(P)
            if s is None:
                s = _Staging(
                    sub.create_infer_request(),
                    P,
                    P,
                    self._cm.kv.present_names,
                    self._embed,
                    lora=self.lora,
                )
                self._ladder[P] = s
        self._pf = s
        self.prefill_size = P
        s.zero()
        s.ids[0, P - n :] = ids[0]
        s.mask[0, P - n :] = mask
        s.pos2[:, P - n :] = pos
        s.put_types(self._types, P - n, self._visual)
        s.run()
        self.prefill_calls = 1
        self.num_stored_tokens = n
        self._in_present = n

    def _chunked_prefill(self, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray) -> None:
        """Chunks of C read the past of earlier chunks; their KV accumulates left-aligned.

        With PYRAMID prefill attention each chunk runs on the smallest model whose past holds
        the history so far; moving up a model migrates the stored tokens to its view.
        """
        n, C = ids.shape[1], self._C
        for st in self._pfs.values():
            st.zero()
        stored, calls = 0, 0
        range_reads = False
        for st in self._pfs.values():
            if st.call_pos is not None:  # every chunk reads the whole prompt's position range
                range_reads = True
                st.call_pos[0] = _bounds(pos)
        # A block computed in another call saw another position range: not reusable when the
        # model reads it (longrope's short/long switch)
        cacheable = (self.prefix is not None and not range_reads and ids.ndim == 2
                     and self._plain_prompt(mask, pos))
        size = self._prefill_size(0)
        if cacheable:
            hit = self.prefix.match(ids[0], n - 1)
            size = self._prefill_size(len(hit) * self.prefix.block_size)
            stored = self._restore_prefix(hit, size - C)
            self._pfs[size].mask[0, :stored] = 1
        self.restored_tokens = stored
        self._conv = [int(t) for t in ids[0]] if cacheable else None
        while stored < n:
            s, past_slots = self._pfs[size], size - C
            cur = min(n - stored, C)
            s.mask[0, past_slots:] = 0
            s.mask[0, size - cur :] = mask[stored : stored + cur]
            s.ids.fill(0)
            s.ids[0, C - cur :] = ids[0, stored : stored + cur]
            s.pos.fill(0)
            s.pos2[:, C - cur :] = pos[:, stored : stored + cur]
            s.put_types(None if self._types is None else self._types[stored : stored + cur], C - cur,
                        None if self._visual is None else self._visual.part(stored, stored + cur))
            s.run()
            calls += 1
            stored += cur
            if stored >= n:
                self._in_present = cur  # the last chunk stays in `present` until copy_kvcache
                break
            need = self._prefill_size(stored)
            if need != size:  # a bigger pyramid model: same tokens, another view of the buffer
                self.kv.migrate(past_slots, need - C, stored - cur)
                self._pfs[need].mask[0, : stored - cur] = s.mask[0, : stored - cur]
                size = need
            # not the last chunk: move its KV into the past, mark it as history
            self._update_kvcache_for(s, size - C, stored, cur)
            self._pfs[size].mask[0, stored - cur : stored] = mask[stored - cur : stored]
        self._pf, self._pf_slots = self._pfs[size], size - C
        self.prefill_calls = calls
        self.num_stored_tokens = n
        if cacheable:
            self.prefix.store(ids[0], n, lambda a, b: self._prompt_rows(a, b, self._pf_slots, n))

    def _prefill_size(self, history: int) -> int:
        """Mask length of the smallest chunk-prefill model whose past holds ``history`` tokens."""
        for size in self._pfs:  # ascending
            if size - self._C >= history:
                return size
        return self._P

    # -- prefix cache -------------------------------------------------------------------
    def _store_conversation(self) -> None:
        """Cache the blocks of the ending conversation, generated tokens included.

        A chat's next prompt re-sends this history: its blocks can then be restored instead of
        prefilled.  (The real NPUW stores only blocks its prefill computed; ours also keeps the
        KV the generate steps wrote, which is what a CPU stateful pipeline would have reused.)
        """
        conv, self._conv = self._conv, None
        if conv is None or self.prefix is None or not self._kv_ready:
            return  # not cacheable, or only the prompt, whose blocks prefill already stored
        slots = self.variant - self._M
        n = min(len(conv), slots)
        self.prefix.store(
            conv, n, lambda a, b: [self.kv.seq(i, slots)[:, :, a:b, :] for i in range(len(self.kv))]
        )

    def _plain_prompt(self, mask: np.ndarray, pos: np.ndarray) -> bool:
        """Cached KV is only valid for an unpadded prompt at consecutive positions from the
        first one; anything else (padding, custom positions) bypasses the cache."""
        p0 = self._first_pos or 0
        return bool(mask.all()) and bool(
            (pos[0] == np.arange(p0, p0 + pos.shape[1], dtype=pos.dtype)).all()
        )

    def _restore_prefix(self, blocks: list, past_slots: int) -> int:
        """Copy the matched cached blocks into the prefill past; returns their token count (the
        match leaves at least the last token to compute: its logits are the output)."""
        b = self.prefix.block_size
        for j, block in enumerate(blocks):
            for i, rows in enumerate(block.kv):
                self.kv.seq(i, past_slots)[:, :, j * b : (j + 1) * b, :] = rows
        return len(blocks) * b

    def _prompt_rows(self, a: int, b: int, past_slots: int, n: int) -> list[np.ndarray]:
        """KV of prompt tokens [a, b) after a chunked prefill: the past holds [0, n − t), the
        last chunk's ``present`` holds the final t tokens."""
        t = self._in_present
        out = []
        for i, present in enumerate(self._pf.present):
            past = self.kv.seq(i, past_slots)
            if b <= n - t:
                out.append(past[:, :, a:b, :])
                continue
            new = self._logical(i, present)
            new = new[:, :, new.shape[2] - t :, :]  # token n − t + j is row j
            parts = []
            if a < n - t:
                parts.append(past[:, :, a : n - t, :])
            lo = max(a, n - t) - (n - t)
            parts.append(new[:, :, lo : b - (n - t), :])
            out.append(np.concatenate(parts, axis=2) if len(parts) > 1 else parts[0])
        return out

    def _logical(self, i: int, present: np.ndarray) -> np.ndarray:
        """``present`` of KV tensor ``i`` as [1, H, n, D] whatever its storage layout."""
        return present.transpose(0, 1, 3, 2) if self.kv.transposed[i] else present

    def _update_kvcache_for(self, st: _Staging, slots: int, stored: int, count: int) -> None:
        """Write the last ``count`` rows of ``present`` to past slots [stored−count, stored)."""

        def put(i: int) -> None:
            src = self._logical(i, st.present[i])
            self.kv.write(i, slots, stored - count, src[:, :, src.shape[2] - count :, :])

        self.kv.for_each(
            put,
            nbytes_hint=count
            * self.kv.num_heads[0]
            * self.kv.row[0]
            * self.kv.dtype.itemsize,
        )

    def _copy_kvcache(self) -> None:
        """Prefill KV → past of the bound generate variant (once per conversation, parallel over layers)."""
        n, t, slots = self._prompt_len, self._in_present, self.variant - self._M
        if self._C:  # chunked past → generate layout (aliased)
            self.kv.migrate(self._pf_slots, slots, n - t)

        def put(i: int) -> None:
            src = self._logical(i, self._pf.present[i])
            self.kv.write(i, slots, n - t, src[:, :, src.shape[2] - t :, :])

        self.kv.for_each(
            put,
            nbytes_hint=t * self.kv.num_heads[0] * self.kv.row[0] * self.kv.dtype.itemsize,
        )
        self._kv_ready = True

    # -- generate -----------------------------------------------------------------------
    def _switch_variant(self, need: int) -> None:
        """Bind the smallest larger variant whose past holds ``need`` tokens and migrate the
        stored tokens (views differ in stride)."""
        stored, M = self.num_stored_tokens, self._M
        larger = [k for k in self._cm.generate_sizes if k > self.variant and k - M >= need]
        if not larger:
            raise KVCacheFullError(
                f"KV-Cache is full: num_stored_tokens={stored} capacity={self.variant - M}"
            )
        new = larger[0]
        old = self.variant
        self._bind_variant(new)
        self.kv.migrate(old - M, new - M, stored)
        logger.debug("switch generate variant kv%d → kv%d at %d stored tokens", old, new, stored)
        self.switches += 1

    def _infer_generate(self, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray, slot: int | None = None) -> None:
        """``slot``: where the new tokens go when positions are not slots (M-RoPE's rope delta:
        the caller's mask length minus the new tokens), else the first position."""
        n, M = ids.shape[1], self._M
        if n > M:
            raise UserInputError(
                "Input prompt length is greater than output "
                f'"NPUW_LLM_MAX_GENERATION_TOKEN_LEN": {M}.\nPlease adjust it.'
            )
        if not self._kv_ready:
            self._copy_kvcache()
        p0 = int(pos[0, 0]) if slot is None else slot
        if p0 < 0:  # a negative rewind would index the KV buffer from its end
            raise UserInputError(f"position_ids[0]={p0} is negative")
        if p0 > self.num_stored_tokens:
            raise UserInputError(
                f"position_ids[0]={p0} but only {self.num_stored_tokens} tokens are in the KV cache; "
                "continue at the next position or start a new conversation at the first position"
            )
        self.num_stored_tokens = p0  # rewind (what speculative decoding uses to reject tokens)
        if self.num_stored_tokens + n > self.variant - M:  # the new rows must fit the past
            self._switch_variant(self.num_stored_tokens + n)
        K = self.variant
        s = self._gs[K]
        hist = self.num_stored_tokens
        s.mask.fill(0)
        user_hist = mask[0, :-n][:hist]  # caller's mask minus the current tokens
        s.mask[0, : user_hist.shape[0]] = user_hist
        if M == 1:
            s.ids[0, 0] = ids[0, 0]
            s.pos2[:, 0] = pos[:, 0]
            s.put_types(self._types, 0, self._visual)
            s.mask[0, -1] = 1  # the new token is the last column (past K−1 ++ new 1)
            s.run()
            # The real NPUW overlaps the head with this KV write; here a thread hand-off costs
            # more than the overlap saves: run it in line (the new token goes to slot `hist`).
            if self.kv.quantized or self.kv.paged:
                self.kv.write_step(
                    K - M, hist, [self._logical(i, p)[:, :, -1:, :] for i, p in enumerate(s.present)]
                )
            else:
                for dst, src in self._rows[K]:
                    dst[:, :, hist, :] = src
        else:
            # n ≤ M tokens right-aligned in the M slots; the padding slots are masked out
            s.ids.fill(0)
            s.ids[0, M - n :] = ids[0]
            s.pos.fill(0)
            s.pos2[:, M - n :] = pos
            s.put_types(self._types, M - n, self._visual)
            s.mask[0, K - n :] = 1
            s.run()
            self._update_kvcache_for(s, K - M, hist + n, n)
        self.num_stored_tokens = hist + n
        if self._conv is not None:
            if mask.all():
                del self._conv[hist:]  # a rewind drops the rejected tokens
                self._conv += [int(t) for t in ids[0]]
            else:  # history with holes: its KV no longer matches a plain prompt
                self._conv = None
        if self._head is not None:
            s.hand_embed()
            self._run_head()
            self._logits = self._head_logits
        else:
            self._logits = s.logits_tensor
