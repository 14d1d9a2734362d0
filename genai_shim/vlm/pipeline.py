"""VLMPipeline: openvino.genai's VLMPipeline (visual_language/pipeline.cpp) over ov_npu_emu.Core,
for Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA, LLaVA-NeXT and Gemma 3 exports (optimum-intel ``image-text-to-text``).

The vision encoder (its merger) and the text embeddings run on CPU (the real compiles them on
AUTO with CPU first when the device is "NPU"), or on the emulated NPU where DEVICE_PROPERTIES
["AUTO"] / MODEL_PROPERTIES[role] put them (``_split_props``); the language model (``inputs_embeds``,
``position_ids`` - M-RoPE's [3, 1, L] for the Qwen families, [1, L] for LLaVA (-NeXT), 1-based for
Gemma 3 -, Gemma 3's ``token_type_ids``, Qwen3-VL's DeepStack inputs and ``beam_idx``) runs on the
device: as is on "CPU", through NPUW on "NPU".  Chat re-prefills the whole templated history, with every image so far,
each turn.
"""

from __future__ import annotations

import functools
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.chat import ChatHistory
from genai_shim.chat_session import CHAT_DEPRECATION
from genai_shim.decoding import (
    STREAMER_FINISH,
    RunningSequence,
    StatefulRequests,
    check_finish,
    encoded_results,
    stream_chunk,
    stream_tokens,
)
from genai_shim.generation_config import GenerationConfig, folder_generation_config, replacement_config
from genai_shim.lora_controller import AdapterController, resolve_adapters
from genai_shim.npu_compile import compile_npu
from genai_shim.npu_config import get_kv_axes_pos, translate_npu_config
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.pipeline_args import split_properties
from genai_shim.prompt_lookup import run_prompt_lookup
from genai_shim.results import DecodedResults
from genai_shim.sampling import Sampler
from genai_shim.stop_strings import stop_window
from genai_shim.streamers import StreamingStatus, make_streamer
from genai_shim.tokenizer import Tokenizer
from genai_shim.vlm import beam as vlm_beam
from genai_shim.vlm.common import (
    ROLES,
    UNIVERSAL_IMAGE,
    UNIVERSAL_VIDEO,
    InputsEmbedder,
    Placement,
    sample_videos,
    text_embedding_times,
    universal_to_native,
)
from genai_shim.vlm.gemma3 import Gemma3Embedder
from genai_shim.vlm.history import VisionChatMemory
from genai_shim.vlm.llava import LLaVAEmbedder
from genai_shim.vlm.llava_next import LLaVANextEmbedder
from genai_shim.vlm.llava_next_video import LLaVANextVideoEmbedder
from genai_shim.vlm.pruning import PRUNING_FAMILIES, check_pruning_config, prune_qwen2vl, prune_vision
from genai_shim.vlm.qwen2_5_vl import Qwen25VLEmbedder
from genai_shim.vlm.qwen2vl import Qwen2VLEmbedder
from genai_shim.vlm.qwen3_vl import Qwen3VLEmbedder
from ov_npu_emu.errors import ConfigError, PromptTooLongError, UserInputError

__all__ = ["VLMDecodedResults", "VLMPerfMetrics", "VLMPipeline", "VLMRawPerfMetrics"]

LANGUAGE_XML = "openvino_language_model.xml"
#: config.json model_type -> its inputs embedder (the real's VLMModelType -> InputsEmbedder*)
EMBEDDERS: dict[str, Callable[..., InputsEmbedder]] = {
    "qwen2_vl": Qwen2VLEmbedder,
    "qwen2_5_vl": Qwen25VLEmbedder,
    "qwen3_vl": Qwen3VLEmbedder,
    "llava": LLaVAEmbedder,
    "llava_next": LLaVANextEmbedder,
    "llava_next_video": LLaVANextVideoEmbedder,
    "gemma3": Gemma3Embedder,
}
SUPPORTED_TYPES = tuple(EMBEDDERS)
#: keys for the NPU language model only (compile_decoder_for_npu's), never for the vision models
_NPU_ONLY = ("MAX_PROMPT_LEN", "MIN_RESPONSE_LEN", "BLOB_PATH", "EXPORT_BLOB", "CACHE_DIR", "GENERATE_HINT",
             "PREFILL_HINT", "SHARED_HEAD")


#: an argument not given (the real refuses an explicit None for images / image)
_UNSET: Any = object()


def _now() -> float:
    return time.perf_counter()


#: the beam_idx of a single sequence (its KV row stays where it is)
_ONE_ROW = np.zeros(1, np.int32)


class VLMRawPerfMetrics:
    """The VLM-only raw series (microseconds), as the real's VLMRawPerfMetrics."""

    def __init__(self) -> None:
        self.prepare_embeddings_durations: list[float] = []
        self.vision_encoding_durations: list[float] = []
        self.audio_encoding_durations: list[float] = []
        self.text_embedding_durations: list[float] = []
        #: processed image slices per input image (1 for every family here: none tiles into slices)
        self.per_image_slice_counts: list[int] = []


_VLM_SERIES = ("prepare_embeddings_durations", "vision_encoding_durations", "audio_encoding_durations",
               "text_embedding_durations", "per_image_slice_counts")


class VLMPerfMetrics(PerfMetrics):
    """PerfMetrics plus the embeddings' preparation (vision encoding included), the vision
    encoding, the audio encoding (no audio here: none), the text embedding model's calls, and the
    image slice count, in milliseconds (the raw series in microseconds), as the real's."""

    def __init__(self) -> None:
        super().__init__()
        self.vlm_raw_metrics = VLMRawPerfMetrics()

    def _series(self, name: str) -> Any:
        from genai_shim.perf_metrics import _mean_std

        return _mean_std(getattr(self.vlm_raw_metrics, name))

    def get_prepare_embeddings_duration(self) -> Any:
        return self._series("prepare_embeddings_durations")

    def get_vision_encoding_duration(self) -> Any:
        return self._series("vision_encoding_durations")

    def get_audio_encoding_duration(self) -> Any:
        return self._series("audio_encoding_durations")

    def get_text_embedding_duration(self) -> Any:
        return self._series("text_embedding_durations")

    def get_total_image_slice_count(self) -> int:
        return sum(self.vlm_raw_metrics.per_image_slice_counts)

    def __add__(self, other: PerfMetrics) -> PerfMetrics:
        res = super().__add__(other)
        if isinstance(res, VLMPerfMetrics) and isinstance(other, VLMPerfMetrics):
            for name in _VLM_SERIES:  # the left's series then the right's, as the real's operator+
                getattr(res.vlm_raw_metrics, name).extend(getattr(other.vlm_raw_metrics, name))
        return res


class VLMDecodedResults(DecodedResults):
    """DecodedResults whose perf_metrics are VLMPerfMetrics."""


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise ConfigError(f"{folder} has no config.json; pass the folder optimum-cli exported "
                          "(--task image-text-to-text)")
    cfg: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_TYPES:
        raise ConfigError(
            f"genai_shim's VLMPipeline runs {', '.join(SUPPORTED_TYPES)} models; {folder} is "
            f"{model_type!r} (MiniCPM-V, Phi-3.5-vision, InternVL ... are not implemented yet)",
            key="model_type",
        )
    return cfg


#: the AUTO plugin's own keys: they choose the device, the device never sees them
_AUTO_KEYS = ("MULTI_DEVICE_PRIORITIES", "ENABLE_STARTUP_FALLBACK", "ENABLE_RUNTIME_FALLBACK",
              "SCHEDULE_POLICY", "MODEL_PRIORITY")


def _split_props(device: str, props: dict[str, Any]) -> tuple[dict[str, Any], Placement]:
    """(language model properties, where and how the embedder's models run), as the real
    resolves them: globals, then DEVICE_PROPERTIES[device], then MODEL_PROPERTIES[role].

    On NPU the embedder's models go to AUTO with CPU first (the real's
    npu_auto_default_properties): DEVICE_PROPERTIES["AUTO"] or MODEL_PROPERTIES[role] with
    ``MULTI_DEVICE_PRIORITIES`` "NPU" places a model on the emulated NPU, which gets the global
    properties (the language model's own keys aside) and the role's; on CPU they get what
    DEVICE_PROPERTIES["AUTO"] says."""
    props = dict(props)
    dev_props = props.pop("DEVICE_PROPERTIES", None) or {}
    if not isinstance(dev_props, dict):
        raise ConfigError("DEVICE_PROPERTIES must be a dict {device: {key: value}}", key="DEVICE_PROPERTIES")
    per_role = props.pop("MODEL_PROPERTIES", None) or {}
    if not isinstance(per_role, dict) or not all(isinstance(v, dict) for v in per_role.values()):
        raise ConfigError("MODEL_PROPERTIES must be a dict {role: {key: value}}", key="MODEL_PROPERTIES")
    for role in per_role:
        if role not in ROLES:  # the real's check (utils.cpp validate_vlm_model_properties)
            raise ConfigError(f"Unknown sub-model role '{role}' in MODEL_PROPERTIES. Known roles: {', '.join(ROLES)}",
                              key="MODEL_PROPERTIES")
    globals_ = {k: v for k, v in props.items() if k not in _NPU_ONLY}
    roles = ("vision_embeddings", "text_embeddings", "vision_embeddings_merger", "vision_embeddings_pos")
    if device == "NPU":
        lm = {**props, **(dev_props.get("NPU") or {}), **per_role.get("language_model", {})}
        # the emulated NPU never sees the language model's NPUW keys
        npu_globals = {k: v for k, v in globals_.items() if not k.lstrip("+").startswith("NPUW_LLM")}
        placed: dict[str, tuple[str, dict[str, Any]]] = {}
        for role in roles:
            # f32 on CPU unless DEVICE_PROPERTIES says otherwise: the real's vision side on NPU computes
            # in f32 on a host whose CPU plugin defaults to bf16 (measured, 2026.4.1: its texts equal
            # the CPU pipeline's under f32 hints, and bf16 hints for AUTO/CPU change nothing)
            auto = {**(dev_props.get("AUTO") or {}), **per_role.get(role, {})}
            first = str(auto.get("MULTI_DEVICE_PRIORITIES", "CPU")).split(",")[0].split("(")[0].strip().upper()
            if first not in ("CPU", "NPU"):
                raise ConfigError(f"genai_shim runs the VLM's {role} model on CPU or NPU, not {first!r} "
                                  "(MULTI_DEVICE_PRIORITIES)", key="MULTI_DEVICE_PRIORITIES")
            own = {k: v for k, v in auto.items() if k not in _AUTO_KEYS}
            placed[role] = (first, {**npu_globals, **own} if first == "NPU" else own)
        return lm, Placement(placed, placed["vision_embeddings"])
    base = {**globals_, **(dev_props.get(device) or {})}
    return ({**props, **(dev_props.get(device) or {}), **per_role.get("language_model", {})},
            Placement({role: (device, {**base, **per_role.get(role, {})}) for role in roles}, (device, base)))


def _check_decoding_options(genai: Any, is_npu: bool) -> None:
    """draft_model is not implemented; prompt_lookup is, on CPU, on the real's terms."""
    if genai.draft is not None or (genai.prompt_lookup and is_npu):
        key = "prompt_lookup" if genai.prompt_lookup else "draft_model"
        where = " on NPU" if genai.draft is None else ""
        raise ConfigError(f"genai_shim's VLMPipeline does not take {key}{where} yet", key=key)
    if genai.prompt_lookup and genai.backend == "SDPA":
        # the real's text (prompt lookup runs on its continuous-batching adapter only)
        raise ConfigError("User properties are conflicting: some of them requires PagedAttention backend, "
                          "while 'ATTENTION_BACKEND' is set to 'SDPA'", key="ATTENTION_BACKEND")
    if genai.prompt_lookup and genai.adapters:
        raise ConfigError("genai_shim applies LoRA adapters without prompt_lookup only; drop one of them",
                          key="adapters")


def _make_core() -> Any:
    from ov_npu_emu import Core

    return Core()


def _nothing() -> None:
    pass


def _vision_args(plural: str, many: Any, one: Any) -> list[Any]:
    """generate()'s ``images=`` / ``image=`` (or ``videos=`` / ``video=``): one of them, as a list."""
    for name, value in ((plural, many), (plural[:-1], one)):
        if value is None:  # the real binding's text
            raise UserInputError(f'Property "{name}" can\'t be None.')
    if one is not _UNSET:
        if many is not _UNSET:
            raise UserInputError(f"pass either {plural[:-1]}= or {plural}=, not both")
        return [one]
    if many is _UNSET:
        return []
    return list(many) if isinstance(many, (list, tuple)) else [many]


#: file-derived model names whose key in the real's ModelsMap differs
_MAP_KEYS = {"vision_resampler": "resampler"}


class _ModelsInMemory:
    """The Core the embedders read their models through, answering ``read_model(folder / NAME)``
    from the user's in-memory map (the real's ModelsMap: ``openvino_<name>_model.xml`` is key
    ``name``); every other call goes to the Core."""

    def __init__(self, core: Any, models: dict[str, Any]) -> None:
        self._core, self._models = core, models

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)

    def read_model(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        stem = Path(path).stem if isinstance(path, (str, os.PathLike)) else None
        if stem is None:
            return self._core.read_model(path, *args, **kwargs)
        key = stem.removeprefix("openvino_").removesuffix("_model")
        # the real looks LLaVA-NeXT-Video's resampler up as "resampler", while its file (and the
        # encrypted_model_vlm sample's naming) gives "vision_resampler": both are taken here
        names = [_MAP_KEYS.get(key, key), key]
        found = next((n for n in names if n in self._models), None)
        if found is None:
            raise ConfigError(f"the models map has no {names[0]!r} (the real's name for {Path(path).name}); it has "
                              f"{sorted(self._models)}", key="models")
        entry = self._models[found]
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
            raise UserInputError(f"models[{key!r}] must be (IR XML text, weights Tensor)")
        return self._core.read_model(entry[0], entry[1])


class VLMPipelineBase:
    """Abstract base of VLM-style pipelines (the real's: no constructor, no methods of its own)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is VLMPipelineBase:
            raise TypeError("genai_shim.VLMPipelineBase: No constructor defined! Construct a VLMPipeline")
        return super().__new__(cls)


class VLMFrontEnd:
    """What turns a prompt and its images / videos into the language model's inputs (the
    real's InputsEmbedder side of VLMPipeline and of ContinuousBatchingPipeline on a VLM
    folder): the family's embedder, the chat kept by start_chat(), a ChatHistory's vision
    memory; VLMPipeline and genai_shim/vlm/continuous_batching.py share it."""

    def _init_front(self, core: Any, folder: Path, cfg: dict[str, Any], placement: Placement,
                    tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._embedder = EMBEDDERS[cfg["model_type"]](core, folder, cfg, placement, tokenizer)
        #: whether the real's inputs embedder of this family prunes visual tokens (CDPruner)
        self._prunes = cfg["model_type"] in PRUNING_FAMILIES
        #: the templated prompt is tokenized with special tokens for the families whose real
        #: embedder sets add_special_tokens (LLaVA-NeXT-Video); without, as the others
        self._special = bool(getattr(self._embedder, "prompt_special_tokens", False))
        self._chat: list[dict[str, str]] | None = None
        self._chat_images: list[Any] = []
        self._chat_videos: list[Any] = []
        #: images and videos given in this start_chat() chat so far (universal tags' ids count from it)
        self._chat_given = (0, 0)
        self._memory = VisionChatMemory()

    def _start_chat_state(self, system_message: str) -> None:
        self._chat = [{"role": "system", "content": system_message}] if system_message else []
        self._chat_images, self._chat_videos, self._chat_given = [], [], (0, 0)

    def _finish_chat_state(self) -> None:
        self._chat = None
        self._chat_images, self._chat_videos, self._chat_given = [], [], (0, 0)

    def _checked_videos(self, videos: list[Any], videos_metadata: Any) -> list[Any]:
        """The videos after the metadata's frame sampling (Qwen3-VL samples its own), refused
        for the families without a video tag."""
        if not getattr(self._embedder, "samples_videos", False):  # Qwen3-VL samples its own (its timestamps)
            videos = sample_videos(videos, videos_metadata)
        if videos and getattr(self._embedder, "video_tag", None) is None:
            # the real's text, then which families take videos here
            raise ConfigError("Video preprocessing isn't implemented for this model. Pass frames as independent "
                              "images. (genai_shim takes videos for Qwen2-VL, Qwen2.5-VL, Qwen3-VL and "
                              f"LLaVA-NeXT-Video, not {type(self._embedder).__name__})", key="videos")
        return videos

    def _prepare(self, prompt: Any, images: list[Any], videos: list[Any], videos_metadata: Any,
                 config: GenerationConfig, perf: VLMPerfMetrics
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, dict[str, np.ndarray], Callable[[], None]]:
        """(ids [1, L], embeds [1, L, hidden], positions, rope delta, extra inputs, rollback) of
        a str prompt (in a start_chat() chat: the whole templated history) or a ChatHistory,
        with their images and videos encoded, merged and pruned as the config says; the times
        go into ``perf``.  ``rollback`` forgets the turn (a cancelled or failed chat turn)."""
        check_pruning_config(config)  # every family, as the real's set_vision_token_pruning_config
        t_emb = _now()
        t_vis = _now()
        encoded = self._embedder.encode_images(images)
        if getattr(self._embedder, "samples_videos", False):
            clips = self._embedder.encode_videos(videos, videos_metadata) if videos else []  # type: ignore[attr-defined]
        else:
            clips = self._embedder.encode_videos(videos) if videos else []  # type: ignore[attr-defined]
        perf.vlm_raw_metrics.vision_encoding_durations.append((_now() - t_vis) * 1e6)
        perf.vlm_raw_metrics.per_image_slice_counts.extend([1] * len(encoded))
        rollback: Callable[[], None] = _nothing
        if isinstance(prompt, ChatHistory):
            turn = self._memory.turn(prompt, encoded, self._normalize, clips)
            ids, used, rollback = self._tokenize_history(turn.history, perf), turn.images, turn.rollback
            used_clips = turn.videos
        else:
            in_chat = self._chat is not None
            before = self._chat_given if in_chat else (0, 0)
            unified, named, named_clips = self._normalize(prompt, encoded, clips, *before)
            ids, used, used_clips = self._tokenize(unified, named, named_clips, config, perf)
            if in_chat:
                self._chat_given = (before[0] + len(encoded), before[1] + len(clips))
                rollback = functools.partial(self._forget_turn, len(named), len(named_clips), before)
        with text_embedding_times() as times:
            if used_clips:
                embeds = self._embedder.embed(ids, used, used_clips)  # type: ignore[call-arg]
            else:
                embeds = self._embedder.embed(ids, used)
        perf.vlm_raw_metrics.text_embedding_durations.extend(times)
        if used_clips:
            pos, delta = self._embedder.position_ids(ids, used, used_clips)  # type: ignore[call-arg]
        else:
            pos, delta = self._embedder.position_ids(ids, used)
        if self._prunes and config.pruning_ratio > 0 and (used or used_clips):
            ids, embeds, pos, delta = self._pruned(ids, embeds, pos, delta, used, used_clips, config,
                                                   rollback=rollback)
        extras = self._embedder.lm_inputs(ids, used)
        perf.vlm_raw_metrics.prepare_embeddings_durations.append((_now() - t_emb) * 1e6)
        return ids, embeds, pos, delta, extras, rollback


    def _pruned(self, ids: np.ndarray, embeds: np.ndarray, pos: np.ndarray, delta: int, images: list[Any],
                videos: list[Any], config: GenerationConfig, rollback: Callable[[], None]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The prompt after CDPruner (genai_shim/vlm/pruning.py), as the real's Qwen2-VL embedder."""
        regions = getattr(self._embedder, "pruning_regions", None)  # Qwen3-VL: videos too, DeepStack rows
        if videos and regions is None:
            rollback()
            raise ConfigError("CDPruner video pruning is not yet supported for Qwen2-VL. "
                              "Disable pruning (pruning_ratio=0) or remove video inputs.", key="pruning_ratio")
        # in a chat the same: the whole unpruned history's every image against the whole
        # history's text, as the real's CPU default (continuous batching) re-templates it each turn
        emb: Any = self._embedder
        try:
            if regions is None:
                out = prune_qwen2vl(ids, embeds, [im.grid_thw for im in images], emb.cfg.merge_size,
                                    emb.vision_start, emb.vision_end, emb.image_pad, int(config.pruning_ratio),
                                    float(config.relevance_weight))
            else:
                out = prune_vision(ids, embeds, regions(ids, images, videos), emb.cfg.merge_size, emb.vision_start,
                                   emb.vision_end, (emb.image_pad, emb.video_pad), int(config.pruning_ratio),
                                   float(config.relevance_weight))
        except ConfigError:
            rollback()
            raise
        if out is None:
            return ids, embeds, pos, delta
        if regions is not None:
            emb.keep_vision_rows(out[5])
        return out[0], out[1], out[2], out[3]

    def _normalize(self, text: str, images: list[Any], videos: list[Any], images_before: int = 0,
                   videos_before: int = 0) -> tuple[str, list[Any], list[Any]]:
        """The embedder's prompt normalization, after the universal ``<ov_genai_image_i>`` /
        ``<ov_genai_video_i>`` tags became the family's native ones (ids count the chat's earlier
        inputs first, as the real's): the text and the images / videos its tags name, in order."""
        text, order = universal_to_native(text, self._embedder.native_tag, UNIVERSAL_IMAGE, images_before,
                                          len(images))
        if order is not None:
            images = [images[i] for i in order]
        video_tag = getattr(self._embedder, "video_tag", None)
        if video_tag is not None:
            text, order = universal_to_native(text, video_tag, UNIVERSAL_VIDEO, videos_before, len(videos))
            if order is not None:
                videos = [videos[i] for i in order]
        if videos:
            return self._embedder.normalize_prompt(text, images, videos), images, videos  # type: ignore[call-arg]
        return self._embedder.normalize_prompt(text, images), images, videos

    def _forget_turn(self, n_images: int, n_videos: int, given_before: tuple[int, int]) -> None:
        """A start_chat() turn that did not happen: its user message, images and videos go."""
        assert self._chat is not None
        self._chat.pop()
        del self._chat_images[len(self._chat_images) - n_images:]
        del self._chat_videos[len(self._chat_videos) - n_videos:]
        self._chat_given = given_before

    def _tokenize(self, unified: str, encoded: list[Any], clips: list[Any], config: GenerationConfig,
                  perf: PerfMetrics) -> tuple[np.ndarray, list[Any], list[Any]]:
        """The prompt's ids and the images and videos they refer to (in chat: the whole history's)."""
        raw = perf.raw_metrics
        t0 = _now()
        if self._chat is not None:
            self._chat.append({"role": "user", "content": unified})
            self._chat_images.extend(encoded)
            self._chat_videos.extend(clips)
            text = self.tokenizer.apply_chat_template(self._chat, add_generation_prompt=True)
            t1 = _now()
            raw.chat_template_durations.append((t1 - t0) * 1e6)
            ids = self.tokenizer.encode(text, add_special_tokens=self._special).input_ids.data
            raw.tokenization_durations.append((_now() - t1) * 1e6)
            return np.array(ids, dtype=np.int64), list(self._chat_images), list(self._chat_videos)
        if config.apply_chat_template and self.tokenizer.chat_template:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": unified}],
                                                      add_generation_prompt=True)
            t1 = _now()
            raw.chat_template_durations.append((t1 - t0) * 1e6)
            ids = self.tokenizer.encode(text, add_special_tokens=self._special).input_ids.data
        else:
            t1 = _now()
            ids = self.tokenizer.encode(unified, add_special_tokens=True).input_ids.data
        raw.tokenization_durations.append((_now() - t1) * 1e6)
        return np.array(ids, dtype=np.int64), encoded, clips

    def _tokenize_history(self, history: ChatHistory, perf: PerfMetrics) -> np.ndarray:
        raw = perf.raw_metrics
        t0 = _now()
        text = self.tokenizer.apply_chat_template(history, add_generation_prompt=True)
        t1 = _now()
        raw.chat_template_durations.append((t1 - t0) * 1e6)
        ids = self.tokenizer.encode(text, add_special_tokens=self._special).input_ids.data
        raw.tokenization_durations.append((_now() - t1) * 1e6)
        return np.array(ids, dtype=np.int64)



class VLMPipeline(VLMPipelineBase, VLMFrontEnd):
    """``VLMPipeline(models_path, device, **properties)`` for an export of a family in EMBEDDERS."""

    def __init__(self, models_path: Any, *args: Any, **properties: Any) -> None:
        """``VLMPipeline(models_path, device="CPU", **properties)``, or from memory as the real's
        second overload: ``VLMPipeline(models, tokenizer, config_dir_path, device,
        generation_config=None, **properties)`` with ``models`` {name: (IR XML text, weights as a
        u8 openvino.Tensor)} named as the files without ``openvino_`` / ``_model``
        (``language``, ``text_embeddings``, ``vision_embeddings``, ...)."""
        t0 = _now()
        core = _make_core()
        models: dict[str, Any] | None = None
        generation_config: GenerationConfig | None = None
        if isinstance(models_path, dict):
            models = models_path
            names = ("tokenizer", "config_dir_path", "device", "generation_config")
            given = dict(zip(names, args, strict=False))
            for name in names:
                if name in properties:
                    given[name] = properties.pop(name)
            missing = [n for n in names[:3] if n not in given]
            if missing:
                raise UserInputError(f"VLMPipeline(models, tokenizer, config_dir_path, device, ...) needs {missing[0]}")
            tokenizer, models_path, device = given["tokenizer"], given["config_dir_path"], given["device"]
            generation_config = given.get("generation_config")
            if not isinstance(tokenizer, Tokenizer):
                raise UserInputError(f"tokenizer must be a Tokenizer, got {type(tokenizer).__name__}")
            core = _ModelsInMemory(core, models)
        else:
            if len(args) > 1:
                raise UserInputError("VLMPipeline(models_path, device, **properties) takes two positional arguments")
            device = args[0] if args else properties.pop("device", "CPU")
        if not isinstance(models_path, (str, os.PathLike)):
            raise UserInputError(f"models_path must be a folder path, got {type(models_path).__name__}")
        folder = Path(models_path)
        if models is None and not (folder / LANGUAGE_XML).is_file():
            raise ConfigError(f"{folder} has no {LANGUAGE_XML}; export the model with optimum-cli "
                              "export openvino --task image-text-to-text")
        cfg = _read_config(folder)
        dev = str(device).upper()
        if dev.split(".")[0] not in ("CPU", "NPU"):
            raise ConfigError(f"genai_shim's VLMPipeline runs on CPU or NPU, not {device!r}", key="device")
        self._is_npu = dev.startswith("NPU")
        self.tokenizer = Tokenizer(folder) if models is None else tokenizer
        self._config = folder_generation_config(folder, self.tokenizer)
        if generation_config is not None:
            self.set_generation_config(generation_config)
        genai = split_properties(properties)
        _check_decoding_options(genai, self._is_npu)
        #: prompt-lookup decoding (CPU): candidates from the prompt / answer checked in one call
        self._prompt_lookup = bool(genai.prompt_lookup)
        # scheduler_config / ATTENTION_BACKEND choose the real's backend; ours has one
        lm_props, placement = _split_props("NPU" if self._is_npu else dev, genai.compile)
        model = core.read_model(folder / LANGUAGE_XML)
        self._seq_axis = get_kv_axes_pos(model)[1] if self._prompt_lookup else 2
        # LoRA goes into the language model's graph before compiling, as the real's
        # AdapterController (tensor names prefixed "base_model.model." unless the config says)
        adapters = resolve_adapters(genai.adapters)
        self._lora = None if adapters is None else AdapterController(model, adapters, "NPU" if self._is_npu else dev)
        if adapters is not None:
            self._config.adapters = adapters
        self._max_prompt_len = 0
        self._kv_capacity: int | None = None
        if self._is_npu:
            if cfg["model_type"] == "gemma3":
                # the real's update_npu_properties: inserted (a user's NPUW_LLM_PREFILL_HINT stays,
                # a user's PREFILL_HINT is renamed over it later)
                lm_props.setdefault("NPUW_LLM_PREFILL_HINT", "STATIC")
            npu = compile_npu(core, model, lm_props)
            compiled = npu.compiled
            # the real checks the prompt against what was asked for (MAX_PROMPT_LEN, 1024), not
            # NPUW's aligned length; a blob imported from BLOB_PATH reports its own
            asked = translate_npu_config(model, lm_props)
            imported = asked.blob_path is not None and not asked.export_blob
            self._max_prompt_len = npu.max_prompt_len if imported else asked.max_prompt_len
            self._kv_capacity = npu.kv_capacity
        else:
            compiled = core.compile_model(model, dev, lm_props)
        self._request = compiled.create_infer_request()
        #: one language-model call with its metrics (a single sequence's, or the beams' rows)
        self._lm_call = vlm_beam.make_infer(self._request)
        self._init_front(core, folder, cfg, placement, self.tokenizer)
        self._sampler = Sampler()
        self._load_time = (_now() - t0) * 1000.0

    # -- public API ------------------------------------------------------------------------------
    def get_tokenizer(self) -> Tokenizer:
        return self.tokenizer

    def get_generation_config(self) -> GenerationConfig:
        return self._config.copy()

    def set_generation_config(self, config: GenerationConfig) -> None:
        self._config = replacement_config(config, self._config)

    def set_chat_template(self, chat_template: str) -> None:
        if self._chat is not None:
            raise UserInputError(
                "Chat template cannot be changed once start_chat() is called. Please, finish current "
                "chat via finish_chat()"
            )
        self.tokenizer.set_chat_template(chat_template)

    def _reset_kv(self) -> None:
        """The language model's KV states to zero; LoRA's state variables outlive it."""
        if self._lora is not None:
            self._lora.reset_kv(self._request)
        else:
            self._request.reset_state()

    def start_chat(self, system_message: str = "") -> None:
        warnings.warn(CHAT_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._start_chat_state(system_message)
        self._reset_kv()

    def finish_chat(self) -> None:
        warnings.warn(CHAT_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._finish_chat_state()
        self._reset_kv()

    def generate(
        self,
        prompt: Any,
        images: Any = _UNSET,
        generation_config: GenerationConfig | None = None,
        streamer: Any = None,
        **kwargs: Any,
    ) -> VLMDecodedResults:
        start = _now()
        images = _vision_args("images", images, kwargs.pop("image", _UNSET))
        videos = _vision_args("videos", kwargs.pop("videos", _UNSET), kwargs.pop("video", _UNSET))
        videos_metadata = kwargs.pop("videos_metadata", None)
        videos = self._checked_videos(videos, videos_metadata)
        if videos and self._is_npu and (self._chat is not None or isinstance(prompt, ChatHistory)):
            # the real's validate_inputs_for_npu (a ChatHistory generate is a chat there too)
            raise UserInputError("Chat mode is currently not supported with video input for NPU device!")
        if not isinstance(prompt, (str, ChatHistory)):
            raise UserInputError(
                f"VLMPipeline.generate() takes a str or a ChatHistory prompt, got {type(prompt).__name__}")
        config = self._resolve_config(generation_config, kwargs)
        perf = VLMPerfMetrics()
        perf.load_time = self._load_time
        ids, embeds, pos, delta, extras, rollback = self._prepare(prompt, images, videos, videos_metadata, config,
                                                                  perf)
        if self._is_npu and embeds.shape[1] > self._max_prompt_len:
            rollback()
            # the real's text
            raise PromptTooLongError(
                f"VLM pipeline on NPU may only process input embeddings up to {self._max_prompt_len} "
                f"tokens. {embeds.shape[1]} is passed.\nSet the \"MAX_PROMPT_LEN\" config option to "
                "increase the limit."
            )
        texts, res, cancelled = self._decode_texts(ids, embeds, pos, delta, extras, config, streamer, perf, rollback)
        text = texts[0]
        out = VLMDecodedResults()
        out.texts, out.scores, out.finish_reasons = texts, res.scores, res.finish_reasons
        if cancelled:
            rollback()
        elif self._chat is not None and not isinstance(prompt, ChatHistory):
            self._chat.append({"role": "assistant", "content": text})
        perf.raw_metrics.generate_durations.append((_now() - start) * 1e6)
        perf.reevaluate(start)
        out.perf_metrics = perf
        return out

    __call__ = generate

    # -- steps -----------------------------------------------------------------------------------
    def _resolve_config(self, generation_config: GenerationConfig | None, kwargs: dict[str, Any]) -> GenerationConfig:
        if generation_config is not None and not isinstance(generation_config, GenerationConfig):
            raise UserInputError(
                f"generation_config must be a GenerationConfig, got {type(generation_config).__name__}"
            )
        config = (generation_config or self._config).copy()
        config.update_generation_config(**kwargs)
        if config.eos_token_id == -1:
            config.set_eos_token_id(self._config.eos_token_id)
        if self._prompt_lookup and not config.is_prompt_lookup():
            # the real's text (its prompt-lookup pipeline's add_request, before validate)
            raise ConfigError("`max_ngram_size` && `num_assistant_tokens` should be specified for "
                              "`prompt lookup decoding`", key="max_ngram_size")
        config.validate()
        if self._is_npu:
            # the real's texts (validate_inputs_for_npu)
            if not (config.is_greedy_decoding() or config.is_multinomial()):
                raise UserInputError("Currently only greedy and multinomial decoding are supported for NPU device!")
            if config.num_return_sequences != 1:
                raise UserInputError('Currently only "num_return_sequences" equal to 1 is supported for NPU device!')
        elif self._prompt_lookup and (config.is_beam_search() or config.num_return_sequences != 1):
            # the real's text (its prompt-lookup pipeline)
            raise UserInputError("Beam search and parallel sampling are not compatible with assistant generation")
        if config.echo:
            raise ConfigError("echo is not supported by VLMPipeline", key="echo")
        wanted = resolve_adapters(config.adapters)
        if self._lora is None and wanted is not None and wanted.get_adapters():
            raise ConfigError("GenerationConfig.adapters apply only in a VLMPipeline created with the adapters "
                              "property (adapters=AdapterConfig(...)), as openvino_genai's", key="adapters")
        return config

    def _infer(self, embeds: np.ndarray, mask: np.ndarray, pos: np.ndarray, extras: dict[str, np.ndarray],
               perf: PerfMetrics) -> np.ndarray:
        return self._lm_call(embeds, mask, pos, extras, _ONE_ROW, perf)

    def _decode(self, ids: np.ndarray, embeds: np.ndarray, pos: np.ndarray, delta: int, extras: dict[str, np.ndarray],
                config: GenerationConfig, streamer: Any, perf: PerfMetrics) -> tuple[RunningSequence, bool]:
        """Prefill the whole prompt, then one token per call; returns the sequence and whether
        the streamer cancelled it."""
        stream = make_streamer(streamer, self.tokenizer)
        prompt = ids[0].tolist()
        n = len(prompt)
        perf.num_input_tokens = n
        perf.raw_metrics.m_inference_durations = [0.0]
        self._sampler.set_seed(config.rng_seed)
        seq = RunningSequence(prompt, config, config.get_max_new_tokens(n))
        window, stops = stop_window(self.tokenizer, config)
        if self._lora is not None:
            self._lora.apply(self._request, resolve_adapters(config.adapters))
        if self._prompt_lookup:
            return self._decode_lookup(seq, embeds, pos, delta, extras, config, stream, perf, window, stops)
        self._reset_kv()
        mask = np.ones((1, n), np.int64)
        logits = self._infer(np.ascontiguousarray(embeds), mask, np.ascontiguousarray(pos), extras, perf)
        step_extras = self._embedder.step_lm_inputs()
        cancelled = stopped = False
        while True:
            token, logp = self._sampler.sample(seq.processor, logits[0, -1])
            seq.tokens.append(token)
            seq.processor.register(token)
            seq.logps.append(logp)
            check_finish(seq, config, self.tokenizer, window, stops, self._kv_capacity)
            if stream is not None and not stopped:
                status = stream_tokens(stream, seq, window)
                stopped = status != StreamingStatus.RUNNING
                if stopped and seq.finish is None:
                    seq.finish = STREAMER_FINISH[status]
                    cancelled = status == StreamingStatus.CANCEL
            if seq.finish is not None:
                break
            mask = np.ones((1, mask.shape[1] + 1), np.int64)
            step_pos = self._embedder.step_position_ids(mask.shape[1], delta)
            step = self._embedder.token_embeddings(np.array([[token]], np.int64))
            logits = self._infer(step, mask, step_pos, step_extras, perf)
        if stream is not None:
            if not stopped:
                stream_tokens(stream, seq, 0)
            stream.end()
        return seq, cancelled

    def _decode_texts(self, ids: np.ndarray, embeds: np.ndarray, pos: np.ndarray, delta: int,
                      extras: dict[str, np.ndarray], config: GenerationConfig, streamer: Any, perf: PerfMetrics,
                      rollback: Callable[[], None]) -> tuple[list[str], Any, bool]:
        """(texts, EncodedResults, whether the streamer cancelled): one sequence, or on CPU beam
        search / parallel sampling (NPU refused them in _resolve_config)."""
        if config.is_beam_search() or config.num_return_sequences != 1:
            if make_streamer(streamer, self.tokenizer) is not None:
                rollback()  # the real's text
                raise UserInputError("Currently streaming is possible only with batch size=1 and only for greedy "
                                     "or multinomial decoding")
            res, cancelled = self._decode_many(ids, embeds, pos, delta, extras, config, perf), False
            t0 = _now()
            texts = [self.tokenizer.decode(tokens) for tokens in res.tokens]
        else:
            seq, cancelled = self._decode(ids, embeds, pos, delta, extras, config, streamer, perf)
            t0 = _now()
            texts = [self.tokenizer.decode(seq.tokens)]
            res = encoded_results([seq], perf)
        perf.raw_metrics.detokenization_durations.append((_now() - t0) * 1e6)
        return texts, res, cancelled

    def _decode_many(self, ids: np.ndarray, embeds: np.ndarray, pos: np.ndarray, delta: int,
                     extras: dict[str, np.ndarray], config: GenerationConfig, perf: PerfMetrics) -> Any:
        """Beam search or parallel sampling on CPU (genai_shim/vlm/beam.py): the prompt prefilled
        once, then every running sequence one token per call; returns EncodedResults."""
        prompt = ids[0].tolist()
        perf.num_input_tokens = len(prompt)
        perf.raw_metrics.m_inference_durations = [0.0]
        self._sampler.set_seed(config.rng_seed)
        window, stops = stop_window(self.tokenizer, config)
        if self._lora is not None:
            self._lora.apply(self._request, resolve_adapters(config.adapters))
        self._reset_kv()
        logits = self._infer(np.ascontiguousarray(embeds), np.ones((1, len(prompt)), np.int64),
                             np.ascontiguousarray(pos), extras, perf)
        feeder, infer = vlm_beam.StepFeeder(self._embedder, delta), self._lm_call
        if config.is_beam_search():
            return vlm_beam.beam_search(prompt, logits, config, perf, feeder=feeder, infer=infer,
                                        tokenizer=self.tokenizer, stop_window=window, stop_strings=stops)

        def finish(s: RunningSequence) -> None:
            check_finish(s, config, self.tokenizer, window, stops, self._kv_capacity)

        seqs = vlm_beam.parallel_sample(prompt, logits, config, perf, sampler=self._sampler, feeder=feeder,
                                        infer=infer, finish=finish)
        return encoded_results(seqs, perf, len(seqs))

    def _decode_lookup(self, seq: RunningSequence, embeds: np.ndarray, pos: np.ndarray, delta: int,
                       extras: dict[str, np.ndarray], config: GenerationConfig, stream: Any, perf: PerfMetrics,
                       window: int, stops: list[str]) -> tuple[RunningSequence, bool]:
        """Prompt-lookup decoding (genai_shim/prompt_lookup.py) on the language model: the prompt's
        embeddings prefilled, then the last token and its candidates embedded and checked in one
        call, the rejected ones cut from the KV; the tokens equal plain decoding's."""
        embedder = self._embedder

        class _Model:
            cut = StatefulRequests(True, True, self._seq_axis).cut

            @staticmethod
            def run(request: Any, ids: list[int], past: int) -> np.ndarray:
                # (run_prompt_lookup records the metrics of each call)
                if past == 0:  # the prefill: the prompt's embeddings, positions and inputs
                    feed = {"inputs_embeds": np.ascontiguousarray(embeds), "position_ids": np.ascontiguousarray(pos),
                            "attention_mask": np.ones((1, embeds.shape[1]), np.int64), **extras}
                else:
                    m = len(ids)
                    step_pos = [embedder.step_position_ids(past + k + 1, delta) for k in range(m)]
                    # a decode step's extra inputs are per-token zeros on axis 1: one per token fed
                    feed = {"inputs_embeds": embedder.token_embeddings(np.array([ids], np.int64)),
                            "position_ids": np.concatenate(step_pos, axis=-1),
                            "attention_mask": np.ones((1, past + m), np.int64),
                            **{k: np.repeat(v, m, axis=1) for k, v in embedder.step_lm_inputs().items()}}
                out = request.infer({**feed, "beam_idx": np.zeros(1, np.int32)}, share_outputs=True)
                return np.asarray(out["logits"])

        def finish(s: RunningSequence) -> None:
            check_finish(s, config, self.tokenizer, window, stops, self._kv_capacity)

        stopped, cancelled = run_prompt_lookup([seq], [self._request], _Model(), self._sampler,  # type: ignore[arg-type]
                                               finish, config, perf, stream, window)
        if stream is not None:
            if not stopped:
                stream_chunk(stream, seq, 0)
            stream.end()
        return seq, cancelled
