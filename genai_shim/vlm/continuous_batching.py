"""ContinuousBatchingPipeline on a VLM folder (openvino.genai's ContinuousBatchingImpl with
ModelInputType::EMBEDDINGS; facts from its continuous_batching/pipeline_base.cpp and
model_runner.hpp, code written anew): the prompts and their images / videos go through the
family's inputs embedder (VLMFrontEnd, genai_shim/vlm/pipeline.py), and the resulting prompt
embeddings, positions and extra inputs are scheduled by the paged engine
(genai_shim/paged/engine.py) over the paged-attention form of the language model.

Each request keeps its prompt rows (:class:`VisionPrompt`); a step feeds, per scheduled chunk,
the prompt rows it covers and the text embeddings of the generated tokens it covers (one call of
the text embeddings model per step), with M-RoPE's [3, T] positions (the Qwen families) or plain
[T] ones, Gemma 3's ``token_type_ids`` and Qwen3-VL's DeepStack rows of the scheduled vision
tokens, as the real's model runner does (:class:`VisionRows`).  With ``prompt_lookup`` the same
rows feed prompt lookup's paged side (:class:`VLMPromptLookupImpl`).
"""

from __future__ import annotations

import functools
import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.chat import ChatHistory
from genai_shim.continuous_batching.prompt_lookup import NOT_PROMPT_LOOKUP, PromptLookupImpl
from genai_shim.generation_config import GenerationConfig
from genai_shim.paged.engine import GenerationHandle, PagedEngine, RequestState
from genai_shim.paged.scheduler import ScheduledChunk
from genai_shim.results import GenerationFinishReason, GenerationResult, GenerationStatus
from genai_shim.speculative.cb_api import SpeculativeHandle
from genai_shim.speculative.paged import SpecRequest
from genai_shim.streamers import make_streamer
from genai_shim.tokenizer import Tokenizer
from genai_shim.vlm.pipeline import (
    LANGUAGE_XML,
    VLMDecodedResults,
    VLMFrontEnd,
    VLMPerfMetrics,
    _read_config,
    _split_props,
)
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["VLMContinuousBatchingImpl", "VLMPromptLookupImpl", "VisionPrompt", "VisionRequests", "VisionRows",
           "is_vlm_folder", "make_vlm_impl"]

#: the per-token extra inputs of a prompt ([1, L]); generated tokens take the step's value
_DEEPSTACK = "deepstack_visual_embeds"
_VISUAL_MASK = "visual_pos_masks"


def is_vlm_folder(folder: Path) -> bool:
    """A folder optimum-cli exported with --task image-text-to-text (the real's check: its
    language model's file)."""
    return (folder / LANGUAGE_XML).is_file()


class VisionPrompt:
    """One request's prompt as the language model takes it: embeddings [L, hidden], positions
    [rows, L] (3 rows for M-RoPE), the rope delta, the per-token extra inputs [L] and Qwen3-VL's
    DeepStack rows (one per True of ``visual_pos_masks``)."""

    def __init__(self, embeds: np.ndarray, pos: np.ndarray, delta: int, extras: dict[str, np.ndarray],
                 ids: list[int] | None = None) -> None:
        self.embeds = np.ascontiguousarray(embeds.reshape(-1, embeds.shape[-1]), dtype=np.float32)
        self.length = self.embeds.shape[0]
        self.pos = np.ascontiguousarray(pos.reshape(pos.shape[0] if pos.ndim == 3 else 1, -1))
        self.delta = int(delta)
        deep = extras.get(_DEEPSTACK)
        self.deepstack = None if deep is None else np.array(deep, dtype=np.float32)
        self.per_token = {k: np.array(v).reshape(-1) for k, v in extras.items() if k != _DEEPSTACK}
        mask = self.per_token.get(_VISUAL_MASK)
        #: vision tokens before each prompt position (DeepStack rows of a chunk start there)
        self.vision_before = None if mask is None else np.concatenate([[0], np.cumsum(mask.astype(np.int64))])
        self._ids = ids

    @functools.cached_property
    def cache_keys(self) -> list[tuple[int, tuple[int, ...], bytes]] | None:
        """The prefix cache's key of each prompt position (PagedEngine: Request.cache_keys; made
        on first use, so only with prefix caching): the token, its position(s) and a digest of
        its embedding row, so that two prompts with the same ids but other images never share
        cached blocks (the real's prefix caching on a VLM folder tells them apart too, measured)."""
        if self._ids is None:
            return None
        cols = [tuple(int(v) for v in col) for col in self.pos.T]
        return [(t, col, hashlib.blake2b(row.tobytes(), digest_size=8).digest())
                for t, col, row in zip(self._ids, cols, self.embeds, strict=True)]


class VisionRows:
    """The language model's embedding inputs of a step (the real's model runner for embeddings),
    for the paged engine and for prompt lookup's paged side."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        step = embedder.step_lm_inputs()
        self._step_extras = {k: np.array(v).reshape(-1)[:1] for k, v in step.items() if k != _DEEPSTACK}
        deep = step.get(_DEEPSTACK)
        self._no_deepstack = None if deep is None else np.zeros_like(np.asarray(deep, np.float32))

    def build(self, items: list[tuple[VisionPrompt, int, int, list[int]]]) -> dict[str, np.ndarray]:
        """``items``: per scheduled sequence (its prompt, tokens already cached, tokens now, its
        generated tokens): inputs_embeds [T, hidden], position_ids ([T] or M-RoPE's [3, T]) and
        the family's extra inputs, in order."""
        embeds: list[np.ndarray] = []
        pos: list[np.ndarray] = []
        per_token: dict[str, list[np.ndarray]] = {}
        deep: list[np.ndarray] = []
        generated: list[int] = []
        gen_slots: list[int] = []  # index in ``embeds`` of each generated token's row
        for vis, start, count, gen in items:
            end = start + count
            p_end = min(end, vis.length)
            if start < p_end:
                embeds.append(vis.embeds[start:p_end])
                pos.append(vis.pos[:, start:p_end])
                for k, v in vis.per_token.items():
                    per_token.setdefault(k, []).append(v[start:p_end])
                if vis.deepstack is not None and vis.vision_before is not None:
                    a, b = int(vis.vision_before[start]), int(vis.vision_before[p_end])
                    if b > a:
                        deep.append(vis.deepstack[:, a:b])
            for p in range(max(start, vis.length), end):
                generated.append(gen[p - vis.length])
                gen_slots.append(len(embeds))
                embeds.append(np.empty((1, vis.embeds.shape[1]), np.float32))  # filled below
                step = np.asarray(self._embedder.step_position_ids(p + 1, vis.delta)).reshape(-1, 1)
                pos.append(np.broadcast_to(step, (vis.pos.shape[0], 1)))
                for k in vis.per_token:
                    per_token.setdefault(k, []).append(self._step_extras[k])
        if generated:
            rows = np.asarray(self._embedder.token_embeddings(np.array([generated], np.int64)), np.float32)
            rows = rows.reshape(len(generated), -1)
            for i, slot in enumerate(gen_slots):
                embeds[slot] = rows[i : i + 1]
        positions = np.concatenate(pos, axis=1).astype(np.int64)
        out = {"inputs_embeds": np.concatenate(embeds, axis=0),
               "position_ids": positions if positions.shape[0] == 3 else positions[0]}
        for k, parts in per_token.items():
            # the real's model runner: token_type_ids [T, 1], visual_pos_masks [1, T]
            out[k] = np.concatenate(parts)[:, None] if k == "token_type_ids" else np.concatenate(parts)[None]
        if self._no_deepstack is not None:
            out[_DEEPSTACK] = np.concatenate(deep, axis=1) if deep else self._no_deepstack
        return out


class VisionRequests(VLMFrontEnd):
    """What the VLM paged implementations share: a prompt with its images / videos made a
    request's prompt (ids and :class:`VisionPrompt`), generate()'s batch with the real's chat
    rules, and the chat after it."""

    #: the embedder's visual-token pruning setting: the last generate()'s (add_request reads it,
    #: as the real's, whose add_request never sets it)
    _pruning: GenerationConfig

    def _vision_prompt(self, prompt: Any, images: list[Any], videos: list[Any], videos_metadata: Any,
                       config: Any, perf: VLMPerfMetrics, pruning: Any) -> tuple[list[int], VisionPrompt, Any]:
        """(prompt ids, VisionPrompt, rollback of its chat turn); ``pruning``: the config whose
        pruning_ratio / relevance_weight prune its visual tokens."""
        if not isinstance(config, GenerationConfig):
            raise UserInputError(f"generation_config must be a GenerationConfig, got {type(config).__name__}")
        videos = self._checked_videos(list(videos), videos_metadata)
        prune = config.copy()
        prune.pruning_ratio, prune.relevance_weight = pruning.pruning_ratio, pruning.relevance_weight
        ids, embeds, pos, delta, extras, rollback = self._prepare(prompt, list(images), videos,
                                                                  videos_metadata, prune, perf)
        self._pruning = prune  # the embedder keeps the last setting (the real's add_request uses it)
        tokens = [int(t) for t in ids.reshape(-1)]
        return tokens, VisionPrompt(embeds, pos, delta, extras, tokens), rollback

    def _outside_chat(self, make: Any) -> Any:
        """``make()`` with the start_chat() history aside (add_request never joins it, as the real's)."""
        saved = self._chat
        self._chat = None
        try:
            return make()
        finally:
            self._chat = saved

    def _batch(self, prompts: list[Any], configs: list[Any], images_b: list[Any], videos_b: list[Any],
               metas: list[Any], add: Any) -> tuple[list[VLMPerfMetrics], list[Any], list[Any], bool, bool]:
        """Each prompt made a request by ``add(i, ids, vision, config)`` (its result kept): (perf
        metrics, added, rollbacks, whether ChatHistory prompts, whether in a start_chat() chat);
        on an error every chat turn made is forgotten."""
        n = len(prompts)
        histories = bool(prompts) and isinstance(prompts[0], ChatHistory)
        in_chat = self._chat is not None and not histories
        if in_chat and n != 1:  # the real's text
            raise UserInputError("Can't chat with multiple prompts")
        perfs = [VLMPerfMetrics() for _ in range(n)]
        added: list[Any] = []
        rollbacks: list[Any] = []
        try:
            for i, p in enumerate(prompts):
                _check_prompt(p, histories, configs[i])
                # the real sets the embedder's pruning once per call from the first config (per
                # history for ChatHistory prompts)
                prune = configs[i] if histories else configs[0]
                ids, vision, rollback = self._vision_prompt(p, images_b[i], videos_b[i], metas[i], configs[i],
                                                            perfs[i], prune)
                rollbacks.append(rollback)
                added.append(add(i, ids, vision, configs[i]))
        except Exception:
            for rb in reversed(rollbacks):
                rb()
            raise
        return perfs, added, rollbacks, histories, in_chat

    def _after_batch(self, histories: bool, in_chat: bool, cancelled: list[bool], first_text: str,
                     rollbacks: list[Any]) -> None:
        """The chat after generate(): the assistant's answer joins a start_chat() history, a
        cancelled turn goes; a ChatHistory generate leaves the pipeline in chat mode."""
        if in_chat:
            if cancelled[0]:
                rollbacks[0]()
            else:
                assert self._chat is not None
                self._chat.append({"role": "assistant", "content": first_text})
        elif histories:
            for c, rb in zip(cancelled, rollbacks, strict=True):
                if c:
                    rb()
            if self._chat is None:
                # as the real's: a ChatHistory generate leaves the pipeline in chat mode (its
                # m_is_chat_conversation), so later str prompts form a start_chat() history until
                # finish_chat(); the upstream tests call finish_chat() after one for that reason
                self._start_chat_state("")


class VLMContinuousBatchingImpl(PagedEngine, VisionRequests):
    """The paged engine fed embeddings; its VLMFrontEnd side turns prompts and images into them."""

    takes_vision = True

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any], tokenizer: Tokenizer | None,
                 config_factory: Any, scheduler_config: Any, adapters: Any) -> None:
        cfg = _read_config(folder)
        lm_props, placement = _split_props(device, props)
        tok = tokenizer if tokenizer is not None else Tokenizer(folder)
        self._init_front(core, folder, cfg, placement, tok)
        #: the embedder's visual-token pruning setting: the last generate()'s (add_request reads it,
        #: as the real's, whose add_request never sets it)
        self._pruning = GenerationConfig()
        self._rows_per_pos: int | None = None
        super().__init__(core, folder, device, lm_props, tok, config_factory(folder, tok), scheduler_config,
                         adapters)
        self._rows = VisionRows(self._embedder)

    def _read_model(self, core: Any, folder: Path) -> Any:
        return core.read_model(folder / LANGUAGE_XML)

    # -- chat --------------------------------------------------------------------------------------
    def start_chat(self, system_message: str = "") -> None:
        self._start_chat_state(system_message)

    def finish_chat(self) -> None:
        self._finish_chat_state()

    # -- requests ------------------------------------------------------------------------------------
    def _prepared_state(self, prompt: Any, images: list[Any], videos: list[Any], videos_metadata: Any,
                        config: Any, perf: VLMPerfMetrics, pruning: Any) -> tuple[RequestState, Any]:
        """A request state for a prompt with its images / videos (not added yet), and the
        rollback of its chat turn."""
        ids, vision, rollback = self._vision_prompt(prompt, images, videos, videos_metadata, config, perf, pruning)
        try:
            state = self.new_state(ids, config)
        except Exception:
            rollback()
            raise
        state.req.vision = vision
        return state, rollback

    def add_request(self, request_id: int, prompt: Any, generation_config: GenerationConfig,  # type: ignore[override]
                    images: Any = (), videos: Any = (), videos_metadata: Any = None) -> GenerationHandle:
        """A str prompt with its images and videos (the real templates it as generate() does
        only when the config's ``apply_chat_template`` says); its visual tokens are pruned as the
        last generate() call's config said, not as ``generation_config`` says (the real's)."""
        if not isinstance(prompt, str):
            raise UserInputError(
                "add_request on a VLM folder takes a str prompt (with images= / videos=), got "
                f"{type(prompt).__name__}; token ids do not carry images")
        perf = VLMPerfMetrics()
        state, _ = self._outside_chat(lambda: self._prepared_state(prompt, list(images), list(videos), videos_metadata,
                                                                   generation_config, perf, self._pruning))
        state.request_id = int(request_id)
        self.add_states([state])
        return GenerationHandle(state, self)

    # -- the model's inputs ----------------------------------------------------------------------------
    def _model_rows(self, chunks: list[ScheduledChunk]) -> dict[str, np.ndarray]:
        """inputs_embeds, position_ids and the extra inputs of every scheduled token, in the
        order of ``chunks`` (the real's model runner for embeddings)."""
        return self._rows.build([(c.request.vision, c.past, c.count, c.request.generated) for c in chunks])

    # -- generate --------------------------------------------------------------------------------------
    def generate(self, prompts: Any, generation_config: Any = None, streamer: Any = None,  # type: ignore[override]
                 images: Any = None, videos: Any = None, videos_metadata: Any = None,
                 vision_results: bool = True) -> list[Any]:
        """One VLMDecodedResults per prompt (str or ChatHistory) with its images and videos
        (``vision_results=False``: GenerationResult, as the real's generate without them)."""
        start = self._begin_generate()
        prompts, configs, images_b, videos_b, metas = _batches(prompts, generation_config, images, videos,
                                                               videos_metadata, self._config)
        n = len(prompts)
        self.apply_adapters(configs)  # the real's set_adapters: the first config's, the same for all
        stream = make_streamer(streamer, self._tokenizer)
        if stream is not None and not (
            n == 1 and configs[0].num_return_sequences == 1 and configs[0].num_beams == 1
        ):
            raise UserInputError(
                "Currently streaming is possible only with batch size=1 and only for greedy or multinomial decoding"
            )

        def add(i: int, ids: list[int], vision: VisionPrompt, config: Any) -> RequestState:
            state = self.new_state(ids, config)
            state.req.vision = vision
            state.request_id = i
            return state

        perfs, states, rollbacks, histories, in_chat = self._batch(prompts, configs, images_b, videos_b, metas, add)
        self.add_states(states)
        pm = self._run_states(states, stream, start)
        results = [self._result(i, st, perfs[i], pm, start, vision_results) for i, st in enumerate(states)]
        first = results[0].texts[0] if vision_results else results[0].m_generation_ids[0]
        self._after_batch(histories, in_chat, [st.status == GenerationStatus.CANCEL for st in states], first,
                          rollbacks)
        return results

    def _result(self, i: int, s: RequestState, perf: VLMPerfMetrics, pm: Any, start: float, vision: bool) -> Any:
        """Prompt ``i``'s VLMDecodedResults (GenerationResult without images: the real's
        conversion), its perf metrics the call's steps plus its own embedding times."""
        raw_res = self._generate_result(i, s, False, pm.raw_metrics)
        perf.load_time = self.load_time
        for name in ("m_inference_durations", "m_token_infer_durations", "m_new_token_times", "m_batch_sizes"):
            setattr(perf.raw_metrics, name, list(getattr(pm.raw_metrics, name)))
        perf.raw_metrics.detokenization_durations = list(pm.raw_metrics.detokenization_durations[i:i + 1])
        perf.raw_metrics.generate_durations = [(time.perf_counter() - start) * 1e6]
        perf.evaluate_statistics(start)
        perf.num_input_tokens = len(s.req.prompt)
        res: Any
        if vision:
            res = VLMDecodedResults()
            res.texts, res.scores = list(raw_res.m_generation_ids), list(raw_res.m_scores)
            res.finish_reasons = list(raw_res.m_finish_reasons)
        else:
            res = GenerationResult()
            res.m_request_id = i
            res.m_generation_ids, res.m_scores = raw_res.m_generation_ids, raw_res.m_scores
            res.m_finish_reasons, res.m_status = raw_res.m_finish_reasons, raw_res.m_status
        res.perf_metrics = perf
        return res

    def _run_states(self, states: list[RequestState], stream: Any, start: float) -> Any:
        """Step to the end (the engine's loop), the shared PerfMetrics of the call."""
        from genai_shim.perf_metrics import PerfMetrics

        pm = PerfMetrics()
        raw = pm.raw_metrics
        raw.m_inference_durations = [0.0]
        self._run_to_end(states, stream, raw)
        self.drop_states(states)
        self._release_cache()
        return pm


def _batches(prompts: Any, configs: Any, images: Any, videos: Any, metas: Any, default: GenerationConfig
             ) -> tuple[list[Any], list[Any], list[list[Any]], list[list[Any]], list[Any]]:
    """generate()'s per-prompt lists, checked with the real's texts (images / videos /
    metadata not given: none for every prompt)."""
    prompts = list(prompts)
    n = len(prompts)
    configs = list(configs) if configs is not None else [default] * n
    if len(configs) != n:
        raise UserInputError("Number of prompts should be equal to the number of generation configs.")
    images_b = [list(x) for x in images] if images else [[] for _ in range(n)]
    videos_b = [list(x) for x in videos] if videos else [[] for _ in range(n)]
    if len(images_b) != n or len(videos_b) != n:
        raise UserInputError("Number of prompts should be equal to the number of images and videos vectors.")
    metas = list(metas) if metas else [None] * n
    if len(metas) != n:
        raise UserInputError("Number of prompts should be equal to the number of videos metadata vector.")
    return prompts, configs, images_b, videos_b, metas


def _check_prompt(p: Any, histories: bool, config: Any) -> None:
    """One prompt of generate(): all str or all ChatHistory (the real's texts for the latter)."""
    if (histories and not isinstance(p, ChatHistory)) or (not histories and not isinstance(p, str)):
        raise UserInputError("generate() takes a list of str prompts or a list of ChatHistory, "
                             f"got {type(p).__name__} among them")
    if histories:
        if not getattr(config, "apply_chat_template", True):
            raise UserInputError("Chat template must be applied when using ChatHistory in generate method.")
        if len(p) == 0:
            raise UserInputError("Chat history must not be empty when using ChatHistory in generate method.")


def make_vlm_impl(core: Any, folder: Path, device: str, props: dict[str, Any], tokenizer: Tokenizer | None,
                  scheduler_config: Any, adapters: Any, prompt_lookup: bool = False) -> Any:
    """The VLM folder's implementation: prompt lookup's, or the paged engine's."""
    from genai_shim.generation_config import folder_generation_config

    if prompt_lookup:
        return VLMPromptLookupImpl(core, folder, device, props, tokenizer, scheduler_config, adapters)
    return VLMContinuousBatchingImpl(core, folder, device, props, tokenizer, folder_generation_config,
                                     scheduler_config, adapters)


class VLMPromptLookupImpl(PromptLookupImpl, VisionRequests):
    """``ContinuousBatchingPipeline(vlm_folder, ..., {"prompt_lookup": True})``: prompt lookup's
    paged side (continuous_batching/prompt_lookup.py) on the paged language model, fed the
    prompts' embeddings and the text embeddings of the answers and candidates (VisionRows), as
    the real's PromptLookupImpl with its inputs embedder; candidates are looked up in the
    prompt's ids (the vision pads included) and the answer."""

    takes_vision = True

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any], tokenizer: Tokenizer | None,
                 scheduler_config: Any, adapters: Any) -> None:
        from genai_shim.generation_config import folder_generation_config

        cfg = _read_config(folder)
        lm_props, placement = _split_props(device, props)
        tok = tokenizer if tokenizer is not None else Tokenizer(folder)
        self._init_front(core, folder, cfg, placement, tok)
        self._pruning = GenerationConfig()
        self._rows = VisionRows(self._embedder)
        super().__init__(core, folder, device, lm_props, tok, folder_generation_config(folder, tok), scheduler_config,
                         adapters, model_xml=LANGUAGE_XML, rows_for=self._spec_rows)

    def _spec_rows(self, chunks: list[tuple[SpecRequest, int]]) -> dict[str, np.ndarray]:
        return self._rows.build([(r.vision, r.processed, n, r.tokens) for r, n in chunks])

    def start_chat(self, system_message: str = "") -> None:
        self._start_chat_state(system_message)

    def finish_chat(self) -> None:
        self._finish_chat_state()

    def add_request(self, request_id: int, prompt: Any, generation_config: Any,  # type: ignore[override]
                    images: Any = (), videos: Any = (), videos_metadata: Any = None) -> SpeculativeHandle:
        """A str prompt with its images and videos (pruned as the last generate() said)."""
        if not isinstance(prompt, str):
            raise UserInputError(
                "add_request on a VLM folder takes a str prompt (with images= / videos=), got "
                f"{type(prompt).__name__}; token ids do not carry images")
        if isinstance(generation_config, GenerationConfig) and not generation_config.is_prompt_lookup():
            raise ConfigError(NOT_PROMPT_LOOKUP, key="max_ngram_size")
        perf = VLMPerfMetrics()
        ids, vision, _ = self._outside_chat(lambda: self._vision_prompt(
            prompt, list(images), list(videos), videos_metadata, generation_config, perf, self._pruning))
        return self._add_ids(request_id, ids, vision, generation_config)

    def _add_ids(self, request_id: int, ids: list[int], vision: VisionPrompt, config: Any) -> SpeculativeHandle:
        handle = PromptLookupImpl.add_request(self, request_id, ov.Tensor(np.asarray([ids], np.int64)), config)
        handle.request.vision = vision
        return handle

    def generate(self, prompts: Any, generation_config: Any = None, streamer: Any = None,  # type: ignore[override]
                 images: Any = None, videos: Any = None, videos_metadata: Any = None,
                 vision_results: bool = True) -> list[Any]:
        """One VLMDecodedResults per prompt (GenerationResult without images), as the plain
        VLM implementation's generate()."""
        start = time.perf_counter()
        if self.main.requests:
            raise UserInputError(
                "Generate cannot be called while ContinuousBatchingPipeline is already in running "
                "state. Use ContinuousBatchingPipeline::add_request"
            )
        prompts, configs, images_b, videos_b, metas = _batches(prompts, generation_config, images, videos,
                                                               videos_metadata, self._config)
        for c in configs:  # PromptLookupImpl's first check
            if isinstance(c, GenerationConfig) and not c.is_prompt_lookup():
                raise ConfigError(NOT_PROMPT_LOOKUP, key="max_ngram_size")
        stream = make_streamer(streamer, self._tokenizer)
        if stream is not None and (len(prompts) != 1 or configs[0].is_beam_search()):
            raise UserInputError(
                "Currently streaming is possible only with batch size=1 and only for greedy or multinomial decoding"
            )
        perfs, handles, rollbacks, histories, in_chat = self._batch(
            prompts, configs, images_b, videos_b, metas, lambda i, ids, vision, c: self._add_ids(i, ids, vision, c))
        try:
            self._run(handles, stream)
        finally:
            for h in handles:  # after an error too: nothing stays scheduled
                self.drop(h.request.rid)
        results = [self._spec_result(i, h, perfs[i], start, vision_results) for i, h in enumerate(handles)]
        first = results[0].texts[0] if vision_results else results[0].m_generation_ids[0]
        self._after_batch(histories, in_chat, [h.get_status() == GenerationStatus.CANCEL for h in handles], first,
                          rollbacks)
        return results

    def _spec_result(self, i: int, h: SpeculativeHandle, perf: VLMPerfMetrics, start: float, vision: bool) -> Any:
        r = h.request
        settled = len(r.tokens) - r.validate  # a stopped request keeps its pending candidates
        t_d = time.perf_counter()
        text = self._tokenizer.decode(r.tokens[:settled])
        perf.raw_metrics.detokenization_durations.append((time.perf_counter() - t_d) * 1e6)
        shared = self.session_metrics().raw_metrics
        for name in ("m_inference_durations", "m_token_infer_durations", "m_new_token_times", "m_batch_sizes"):
            setattr(perf.raw_metrics, name, list(getattr(shared, name)))
        perf.load_time = self.load_time
        perf.raw_metrics.generate_durations = [(time.perf_counter() - start) * 1e6]
        perf.evaluate_statistics(start)
        perf.num_input_tokens = len(r.prompt)
        finish = r.finish if r.finish is not None else GenerationFinishReason.NONE
        res: Any
        if vision:
            res = VLMDecodedResults()
            res.texts, res.scores, res.finish_reasons = [text], [r.score], [finish]
        else:
            res = GenerationResult()
            res.m_request_id = i
            res.m_generation_ids, res.m_scores, res.m_finish_reasons = [text], [r.score], [finish]
            res.m_status = h.get_status()
        res.perf_metrics = perf
        return res
