"""Qwen3-VL's inputs embedder as openvino.genai's (visual_language/qwen3_vl/classes.cpp): Qwen2-VL's
preprocessing, patch embeddings, pad expansion and M-RoPE positions, plus

* the learned position embeddings of the vision tower (``openvino_vision_embeddings_pos_model``: a
  table of ``num_position_embeddings`` rows on a square grid), bilinearly interpolated to each
  image's patch grid: the model gathers the four corner rows per patch and, as the real patches it
  in (its default; the ``VISION_POS_EMBEDS=CPP`` host fallback sums the same terms in the same
  order), weighs and sums them; the sums, put in the merger's patch order (``merge_size`` blocks),
  are added to the patch embeddings before the merger;
* DeepStack: the merger also returns ``deepstack_feature_lists`` [layers, vision tokens, hidden],
  which the language model adds to its first layers' hidden states at the vision tokens; it takes
  them as ``deepstack_visual_embeds`` with ``visual_pos_masks`` (bool, true at the image and video
  pad tokens). A prompt without images gets a [1, 1] false mask and [layers, 1, hidden] zeros, and
  so does every decode step (the real's lm_encoding)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from genai_shim.vlm.common import Placement, sample_videos, video_frames
from genai_shim.vlm.qwen2vl import EncodedImage, ProcessorConfig, Qwen2VLEmbedder, block_mask
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["POS_XML", "Qwen3VLEmbedder", "interpolation_corners", "merge_order", "weighted_pos_model"]

POS_XML = "openvino_vision_embeddings_pos_model.xml"
#: the real's DEFAULT_METADATA_FPS (no VideoMetadata fps)
DEFAULT_FPS = 24.0


def weighted_pos_model(model: ov.Model) -> ov.Model:
    """The position-embeddings model [4, N] -> [4, N, D] with a ``weights`` [4, N] input and the
    four corners weighed and summed on the device: ((w0 e0 + w1 e1) + w2 e2) + w3 e3 -> [N, D]
    (the real's default)."""
    results = model.get_results()
    if len(results) != 1:
        raise ConfigError(f"{POS_XML} must have one output, has {len(results)}")
    table = results[0].input_value(0)
    shape = table.get_partial_shape()
    if shape.rank.is_dynamic or shape.rank.get_length() != 3 or (shape[0].is_static and shape[0].get_length() != 4):
        raise ConfigError(f"{POS_XML}'s output must be [4, N, D], is {shape}")
    weights = ops.parameter([4, -1], ov.Type.f32, name="weights")
    weights.output(0).get_tensor().set_names({"weights"})
    axis = ops.constant(np.int64(0))
    corners = ops.split(table, axis, 4)
    scales = ops.split(weights, axis, 4)
    total: Any = None
    for i in range(4):
        row = ops.squeeze(corners.output(i), ops.constant(np.array([0], np.int64)))
        scale = ops.unsqueeze(ops.squeeze(scales.output(i), ops.constant(np.array([0], np.int64))),
                              ops.constant(np.array([1], np.int64)))
        term = ops.multiply(row, scale)
        total = term if total is None else ops.add(total, term)
    return ov.Model([ops.result(total)], [*model.get_parameters(), weights], "vision_embeddings_pos_weighted")


def interpolation_corners(grids: list[tuple[int, int, int]], side: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices i64 [4, N], weights f32 [4, N]) over every patch of ``grids`` (frame, row, column
    order): the four table rows around each patch's place on the ``side`` x ``side`` grid
    (floor/floor, floor/ceil, ceil/floor, ceil/ceil) and their bilinear weights, in f32 as the
    real computes them."""
    f32 = np.float32
    cols_i: list[np.ndarray] = []
    cols_w: list[np.ndarray] = []
    for t, h, w in grids:
        def places(n: int) -> np.ndarray:
            scale = f32(side - 1) / f32(n - 1) if n > 1 else f32(0.0)
            return (np.arange(n, dtype=f32) * scale).astype(f32)

        hp, wp = places(h), places(w)
        hf, wf = hp.astype(np.int64), wp.astype(np.int64)
        hc, wc = np.minimum(hf + 1, side - 1), np.minimum(wf + 1, side - 1)
        dh, dw = (hp - hf.astype(f32)).astype(f32), (wp - wf.astype(f32)).astype(f32)
        one = f32(1.0)
        idx = np.stack([
            (hf[:, None] * side + wf[None, :]), (hf[:, None] * side + wc[None, :]),
            (hc[:, None] * side + wf[None, :]), (hc[:, None] * side + wc[None, :]),
        ]).reshape(4, h * w)
        wts = np.stack([
            (one - dh)[:, None] * (one - dw)[None, :], (one - dh)[:, None] * dw[None, :],
            dh[:, None] * (one - dw)[None, :], dh[:, None] * dw[None, :],
        ]).astype(f32).reshape(4, h * w)
        cols_i.extend([idx] * t)
        cols_w.extend([wts] * t)
    if not cols_i:
        return np.zeros((4, 0), np.int64), np.zeros((4, 0), f32)
    return np.concatenate(cols_i, axis=1).astype(np.int64), np.ascontiguousarray(np.concatenate(cols_w, axis=1))


def merge_order(grids: list[tuple[int, int, int]], merge: int) -> np.ndarray:
    """The row of the (frame, row, column)-ordered patch list that each patch of the merger's
    order takes: per frame, ``merge`` x ``merge`` blocks in row order, each block's patches in
    row order."""
    order: list[np.ndarray] = []
    base = 0
    for t, h, w in grids:
        if h % merge or w % merge:
            raise ConfigError(f"the patch grid {h}x{w} must divide by merge_size {merge}", key="merge_size")
        r = np.arange(h).reshape(h // merge, 1, merge, 1)
        c = np.arange(w).reshape(1, w // merge, 1, merge)
        one = (r * w + c).reshape(-1)
        for ti in range(t):
            order.append(base + ti * h * w + one)
        base += t * h * w
    return np.concatenate(order) if order else np.zeros(0, np.int64)


class Qwen3VLEmbedder(Qwen2VLEmbedder):
    """Qwen2-VL's embedder with Qwen3-VL's interpolated position embeddings and DeepStack inputs."""

    #: videos sample their frames here (VideoMetadata and the video config), not in the pipeline
    samples_videos = True

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        super().__init__(core, folder, config, placement, tokenizer)
        vision = config.get("vision_config") or {}
        count = int(vision.get("num_position_embeddings", 2304))
        #: the side of the position table's square grid (the real's size_t(sqrt(n)))
        self.side = int(math.sqrt(float(count)))
        if self.side < 1:
            raise ConfigError(f"vision_config.num_position_embeddings {count} gives no position grid",
                              key="num_position_embeddings")
        self.deepstack_layers = len(vision.get("deepstack_visual_indexes") or [])
        self.pos = placement.request(core, weighted_pos_model(core.read_model(folder / POS_XML)),
                                     "vision_embeddings_pos")
        ids = tokenizer.encode("<|video_pad|>", add_special_tokens=False).input_ids.data[0]
        self.video_pad = int(ids[0])
        #: the last merge's deepstack features [layers, vision tokens, hidden] (after embed(): in
        #: the prompt order of the pad tokens)
        self._deepstack: np.ndarray | None = None
        self.video_cfg, self.sampling = read_video_config(folder)

    def _pos_embeddings(self, grids: list[tuple[int, int, int]]) -> np.ndarray:
        """[patches, embed] interpolated position embeddings in the merger's patch order."""
        indices, weights = interpolation_corners(grids, self.side)
        self.pos.infer({"input": indices, "weights": weights})
        summed = np.asarray(self.pos.get_output_tensor(0).data, dtype=np.float32)
        return summed[merge_order(grids, self.cfg.merge_size)]

    def merge(self, images: list[EncodedImage]) -> np.ndarray:
        """The merger over every image at once, the position embeddings added to the patch
        embeddings first: [sum of tokens, hidden]; keeps the deepstack features for
        :meth:`lm_inputs`."""
        grids = [im.grid_thw for im in images]
        hidden = np.concatenate([im.patches for im in images], axis=0).astype(np.float32)
        hidden = hidden + self._pos_embeddings(grids)
        frames = [0]
        for t, h, w in grids:
            frames.extend([h * w] * t)
        feed = {"hidden_states": np.ascontiguousarray(hidden),
                "attention_mask": block_mask(hidden.shape[0], np.cumsum(frames)),
                "rotary_pos_emb": self._rotary(images)}
        self.merger.infer(feed)
        self._deepstack = np.array(self.merger.get_output_tensor(1).data, dtype=np.float32, copy=True)
        return np.array(self.merger.get_output_tensor(0).data, copy=True)

    def embed(self, ids: np.ndarray, images: list[EncodedImage], videos: list[EncodedImage] | None = None
              ) -> np.ndarray:
        """Qwen2-VL's embed (the merger over the videos, then the images); the deepstack rows are
        then put in the prompt order of the pad tokens, which the language model's
        ``visual_pos_masks`` walks (the real keeps the merger's order: the same unless an image's
        tag comes before a video's, docs/genai_shim.md)."""
        self._deepstack = None
        out = super().embed(ids, images, videos) if videos else super().embed(ids, images)
        if self._deepstack is not None and videos and images:
            row = ids[0]
            pads = row[(row == self.image_pad) | (row == self.video_pad)]
            is_video = pads == self.video_pad
            n_video = int(is_video.sum())
            order = np.empty(pads.size, np.int64)
            order[is_video] = np.arange(n_video)
            order[~is_video] = n_video + np.arange(pads.size - n_video)
            self._deepstack = np.ascontiguousarray(self._deepstack[:, order])
        return out

    def lm_inputs(self, ids: np.ndarray, images: list[EncodedImage]) -> dict[str, np.ndarray]:
        """``visual_pos_masks`` [1, L] (true at the image / video pad tokens) and the merger's
        ``deepstack_visual_embeds`` after :meth:`embed` with images or videos; without: the real's
        [1, 1] false mask and [layers, 1, hidden] zeros."""
        if self._deepstack is not None:
            mask = (ids == self.image_pad) | (ids == self.video_pad)
            return {"visual_pos_masks": mask, "deepstack_visual_embeds": self._deepstack}
        return {"visual_pos_masks": np.zeros(ids.shape, np.bool_),
                "deepstack_visual_embeds": self.step_lm_inputs()["deepstack_visual_embeds"]}

    def step_lm_inputs(self) -> dict[str, np.ndarray]:
        hidden = int(self._hidden_size())
        return {"visual_pos_masks": np.zeros((1, 1), np.bool_),
                "deepstack_visual_embeds": np.zeros((self.deepstack_layers, 1, hidden), np.float32)}

    def _hidden_size(self) -> int:
        if not hasattr(self, "_hidden"):
            self._hidden = int(self.token_embeddings(np.zeros((1, 1), np.int64)).shape[-1])
        return self._hidden

    # -- videos ----------------------------------------------------------------------------------
    def encode_videos(self, videos: list[Any], metadata: Any = None) -> list[EncodedImage]:  # type: ignore[override]
        """Each video [N, H, W, 3] uint8 with its ``VideoMetadata`` (optional): the frames picked
        as the real's fill_video_metadata (the metadata's ``frames_indices``, else the video
        config's sampling, else every frame), encoded in pairs with the video config's sizes
        (Qwen2-VL's pairing: a last odd frame alone, tiled), and each pair's timestamp."""
        metas = list(metadata) if isinstance(metadata, (list, tuple)) else ([] if metadata is None else [metadata])
        if metas and len(metas) != len(videos):  # the real's text
            raise UserInputError("Number of videos and videos metadata must match if metadata provided.")
        out: list[EncodedImage] = []
        for i, video in enumerate(videos):
            frames = video_frames(video)
            meta = metas[i] if metas else None
            fps = float(getattr(meta, "fps", 0.0) or 0.0)
            given = [int(j) for j in getattr(meta, "frames_indices", None) or []]
            indices, fps = sample_indices(frames.shape[0], given, fps, self.sampling)
            picked = sample_videos([frames], [_Indices(indices)])[0]
            encoded = self._encode_video(picked)
            out.append(EncodedVideo(encoded.patches, encoded.grid_thw,
                                    frame_timestamps(indices, fps, self.cfg.merge_size)))
        return out

    def _encode_video(self, frames: np.ndarray) -> EncodedImage:
        pair = self.video_cfg.temporal_patch_size
        parts, gh, gw = [], 0, 0
        for i in range(0, frames.shape[0], pair):
            first = np.ascontiguousarray(frames[i : i + 1])
            second = np.ascontiguousarray(frames[i + 1 : i + 2]) if i + 1 < frames.shape[0] else None
            patches, gh, gw = self._encode_frames(first, second, self.video_cfg)
            parts.append(patches)
        return EncodedImage(np.concatenate(parts, axis=0), (len(parts), gh, gw))

    def video_expansion(self, video: EncodedImage) -> str:
        """Per frame pair: ``<{t:.1f} seconds>`` then its pad tokens between vision start / end
        (the real's Qwen3-VL expand_video_tags_in_prompt)."""
        gt, gh, gw = video.grid_thw
        stamps = getattr(video, "timestamps", None) or []
        if len(stamps) != gt:  # the real's text
            raise UserInputError("Timestamps size does not match the number of frames")
        pads = "<|video_pad|>" * (gh * gw // (self.cfg.merge_size ** 2))
        return "".join(f"<{float(ts):.1f} seconds><|vision_start|>{pads}<|vision_end|>" for ts in stamps)

    def position_ids(self, ids: np.ndarray, images: list[EncodedImage], videos: list[EncodedImage] | None = None
                     ) -> tuple[np.ndarray, int]:
        """Qwen2-VL's M-RoPE positions with each video frame pair a grid of its own (its own
        ``<|vision_start|>``, after its timestamp text), as the real's."""
        if not videos:
            return super().position_ids(ids, images)
        return super().position_ids(ids, images, per_frame(videos))

    # -- pruning ---------------------------------------------------------------------------------
    def pruning_regions(self, ids: np.ndarray, images: list[EncodedImage], videos: list[EncodedImage]
                        ) -> list[tuple[int, int, int]]:
        """The (t, h, w) grid of each vision region of ``ids`` in prompt order: a video's frame
        pairs one region each, an image one (the real's PruningContext for Qwen3-VL)."""
        row = ids[0]
        queues = {True: [f.grid_thw for f in per_frame(videos)], False: [im.grid_thw for im in images]}
        out = []
        for start in np.flatnonzero(row == self.vision_start).tolist():
            nxt = int(row[start + 1]) if start + 1 < row.size else -1
            if nxt in (self.image_pad, self.video_pad) and queues[nxt == self.video_pad]:
                out.append(queues[nxt == self.video_pad].pop(0))
        return out

    def keep_vision_rows(self, flags: np.ndarray) -> None:
        """After pruning: the deepstack rows of the kept pad tokens (``flags`` in prompt order)."""
        if self._deepstack is not None:
            self._deepstack = np.ascontiguousarray(self._deepstack[:, flags])


@dataclass
class EncodedVideo(EncodedImage):
    """An encoded video: its patches, grid and each frame pair's timestamp in seconds."""

    timestamps: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class VideoSampling:
    """video_preprocessor_config.json's frame sampling fields (the real's VideoProcessorConfig)."""

    do_sample_frames: bool = False
    fps: float = 0.0
    num_frames: int = 0
    min_frames: int = 0
    max_frames: int = 0


@dataclass(frozen=True)
class _Indices:
    frames_indices: list[int]


def read_video_config(folder: Path) -> tuple[ProcessorConfig, VideoSampling]:
    """The video processor config as the real resolves it: processor_config.json's
    ``video_processor`` (when it has ``image_processor`` too), else video_preprocessor_config.json,
    else preprocessor_config.json."""
    data: dict[str, Any] = {}
    combined = folder / "processor_config.json"
    parsed = json.loads(combined.read_text(encoding="utf-8")) if combined.is_file() else {}
    if isinstance(parsed, dict) and "image_processor" in parsed and "video_processor" in parsed:
        data = parsed["video_processor"]
    else:
        for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
            if (folder / name).is_file():
                data = json.loads((folder / name).read_text(encoding="utf-8"))
                break
    cfg = ProcessorConfig.parse(data)
    if cfg.temporal_patch_size != 2:  # the real's text
        raise ConfigError("temporal_patch_size != 2.", key="temporal_patch_size")

    def num(key: str, kind: Any) -> Any:
        value = data.get(key)
        return kind(0) if value is None else kind(value)

    sampling = VideoSampling(bool(data.get("do_sample_frames") or False), num("fps", float),
                             num("num_frames", int), num("min_frames", int), num("max_frames", int))
    return cfg, sampling


def sample_indices(total: int, given: list[int], fps: float, cfg: VideoSampling) -> tuple[list[int], float]:
    """(frame indices, metadata fps) as the real's fill_video_metadata: the given indices as they
    are, every frame without ``do_sample_frames``, else ``num_frames`` (or ``total / fps ·
    cfg.fps`` clamped to the min / max frames, or ``total`` clamped) evenly spaced, rounded half
    away from zero; an fps-based count with no metadata fps takes 24."""
    if given:
        return given, fps
    if cfg.fps != 0.0 and cfg.num_frames != 0:  # the real's text
        raise ConfigError("num_frames and fps are mutually exclusive video config arguments.", key="fps")
    if not cfg.do_sample_frames:
        return list(range(total)), fps

    def clamp(v: int, lo: int, hi: int) -> int:  # the real's std::clamp (libstdc++): min(max(v, lo), hi),
        return min(max(v, lo), hi)  # so hi when lo > hi (min_frames over the frame count)

    count = cfg.num_frames
    if count == 0 and cfg.fps != 0.0:
        if fps == 0.0:
            fps = DEFAULT_FPS
        count = int(total / float(np.float32(fps)) * float(np.float32(cfg.fps)))
        count = clamp(count, cfg.min_frames, min(cfg.max_frames, total))
    elif count == 0:
        count = clamp(total, cfg.min_frames, cfg.max_frames)
    if not 1 < count <= total:  # the real's text
        raise UserInputError(f"Invalid number of frames ({count}) for video sampling.")
    return [int(math.floor(i * (total - 1) / (count - 1) + 0.5)) for i in range(count)], fps


def frame_timestamps(indices: list[int], fps: float, merge: int) -> list[float]:
    """Each group of ``merge`` frame indices' timestamp (f32: (first + last) / 2 / fps; the
    indices padded with the last to a multiple of ``merge``; fps 0 takes 24), as the real's
    calculate_timestamps."""
    if fps < 0.0:  # the real's text
        raise UserInputError("Video metadata fps must be non-negative for timestamp calculation.")
    rate = np.float32(fps if fps != 0.0 else DEFAULT_FPS)
    padded = list(indices)
    if padded and len(padded) % merge:
        padded += [padded[-1]] * (merge - len(padded) % merge)
    return [float(np.float32(np.float32(padded[i] + padded[i + merge - 1]) / np.float32(2.0)) / rate)
            for i in range(0, len(padded), merge)]


def per_frame(videos: list[EncodedImage]) -> list[EncodedImage]:
    """Each video's frame pairs as grids (1, h, w) of their own (no patches)."""
    empty = np.zeros((0, 0), np.float32)
    return [EncodedImage(empty, (1, h, w)) for v in videos for _ in range(v.grid_thw[0])
            for h, w in [v.grid_thw[1:]]]
