"""Qwen2-VL's inputs embedder as openvino.genai's (visual_language/qwen2vl/classes.cpp): the image
preprocessing the real builds into the vision model (bicubic resize to the smart size, clamp,
normalise with the preprocessor's mean/std, temporal tiling, patch flattening), the patch
embeddings, the merger (block-diagonal attention mask, 2-D rotary embeddings of the patch grid),
the ``<|vision_start|><|image_pad|>...<|vision_end|>`` expansion and the M-RoPE position ids with
their rope delta. With ``VISION_PREPROCESS=CPP`` when the pipeline is built the real (and ours)
preprocesses on the host instead (:func:`host_patches`: clip.cpp's Pillow-style bicubic, which
gives other pixels than the graph's PyTorch-style Interpolate), images and video frames alike.

Videos (the real's ``encode_frames``): the frames in pairs of ``temporal_patch_size`` (2) through
the same graph's video branch (``cond_img_vid`` 0: two frames resized to the first frame's smart
size), a last odd frame as an image (tiled); ``grid_t`` = ceil(frames / 2). Each video becomes
``<|vision_start|>`` + ``grid_t·grid_h·grid_w / merge²`` × ``<|video_pad|>`` + ``<|vision_end|>``;
the merger takes every video, then every image, in one call; M-RoPE gives a video's pair ``t``
the temporal position ``t · tokens_per_second`` (the real's rule for both families)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset8 as opset8
import openvino.opset13 as ops

from genai_shim.vlm.common import (
    TEXT_EMB_XML,
    VISION_XML,
    Placement,
    clip_normalize,
    expand_tags,
    host_vision_preprocess,
    image_processor_json,
    image_rows,
    pillow_bicubic,
    prepend_tags,
    text_embeddings,
    video_frames,
)
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["NATIVE_TAG", "NATIVE_VIDEO_TAG", "EncodedImage", "ProcessorConfig", "Qwen2VLEmbedder", "host_patches",
           "smart_resize"]

#: the real's hard-coded native image tag (the chat templates spell it out)
NATIVE_TAG = "<|vision_start|><|image_pad|><|vision_end|>"
#: and its native video tag
NATIVE_VIDEO_TAG = "<|vision_start|><|video_pad|><|vision_end|>"
MERGER_XML = "openvino_vision_embeddings_merger_model.xml"


@dataclass(frozen=True)
class ProcessorConfig:
    """The fields of preprocessor_config.json the Qwen2-VL path reads (the real's defaults)."""

    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    image_mean: tuple[float, ...] = (0.48145466, 0.4578275, 0.40821073)
    image_std: tuple[float, ...] = (0.26862954, 0.26130258, 0.27577711)

    @classmethod
    def read(cls, folder: Path) -> ProcessorConfig:
        data = image_processor_json(folder)
        if not data:
            return cls()
        return cls.parse(data)

    @classmethod
    def parse(cls, data: dict[str, Any]) -> ProcessorConfig:
        """The fields from a parsed preprocessor config (null values count as absent)."""
        data = {k: v for k, v in data.items() if v is not None}
        size = data.get("size") or {}
        kw: dict[str, Any] = {}
        for key in ("patch_size", "temporal_patch_size", "merge_size", "min_pixels", "max_pixels"):
            if key in data:
                kw[key] = int(data[key])
        if "min_pixels" not in kw and "shortest_edge" in size:
            kw["min_pixels"] = int(size["shortest_edge"])
        if "max_pixels" not in kw and "longest_edge" in size:
            kw["max_pixels"] = int(size["longest_edge"])
        for key in ("image_mean", "image_std"):
            if key in data:
                kw[key] = tuple(float(v) for v in data[key])
        return cls(**kw)


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The real's qwen2_vl_utils::smart_resize (f32 quotients rounded half away from zero as
    std::round, integer aspect check)."""
    if max(height, width) // min(height, width) > 200:
        raise UserInputError("Absolute aspect ratio must be smaller than 200")
    # std::round: halves away from zero (Python's round() would take 70 / 28 = 2.5 to 2)
    h_bar = int(math.floor(float(np.float32(height) / np.float32(factor)) + 0.5)) * factor
    w_bar = int(math.floor(float(np.float32(width) / np.float32(factor)) + 0.5)) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / float(max_pixels))
        h_bar = int(math.floor(height / beta / factor)) * factor
        w_bar = int(math.floor(width / beta / factor)) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / float(height * width))
        h_bar = int(math.ceil(height * beta / factor)) * factor
        w_bar = int(math.ceil(width * beta / factor)) * factor
    return h_bar, w_bar


def _normalized(raw: Any, size: Any, mean: np.ndarray, scale: np.ndarray) -> Any:
    """u8 NHWC -> f32 NCHW, bicubic resize (PyTorch half-pixel, a = -0.75), clamp 0..255,
    (x - mean*255) * 1/(std*255)."""
    x = ops.transpose(ops.convert(raw, ov.Type.f32), ops.constant(np.array([0, 3, 1, 2], np.int32)))
    x = ops.interpolate(
        x, size, "cubic", "sizes", axes=ops.constant(np.array([2, 3], np.int64)),
        coordinate_transformation_mode="pytorch_half_pixel", nearest_mode="round_prefer_floor",
        cube_coeff=-0.75, antialias=False,
    )
    return ops.multiply(ops.subtract(ops.clamp(x, 0.0, 255.0), ops.constant(mean)), ops.constant(scale))


def _preprocess_model(vision: ov.Model | None, cfg: ProcessorConfig) -> ov.Model:
    """The vision model with the real's preprocessing in front of it, in the real's structure: an
    If on ``cond_img_vid`` (1: an image, tiled to temporal_patch_size frames; 0: two video
    frames), then the patches reshaped/transposed and flattened.  The structure matters for the
    numerics: under a bf16 inference precision the CPU plugin keeps the If's bodies (the resize
    and the normalisation) in f32.  ``vision`` None: the preprocessing alone (its output the
    flattened patches, the vision model's ``hidden_states``)."""
    f32 = np.float32
    mean = np.array([f32(v) * f32(255.0) for v in cfg.image_mean], f32).reshape(1, -1, 1, 1)
    scale = np.array([f32(1.0) / (f32(v) * f32(255.0)) for v in cfg.image_std], f32).reshape(1, -1, 1, 1)
    u8 = ov.Type.u8
    cond = ops.parameter([1], ov.Type.f32, name="cond_img_vid")
    raw1 = ops.parameter([-1, -1, -1, -1], u8, name="raw_images_1")
    raw2 = ops.parameter([-1, -1, -1, -1], u8, name="raw_images_2")
    size = ops.parameter([2], ov.Type.i64, name="resize_shape")
    tile = ops.parameter([4], ov.Type.i64, name="tile_shape")
    shape8 = ops.parameter([8], ov.Type.i64, name="reshape_shape8d")
    shape4 = ops.parameter([4], ov.Type.i64, name="reshape_shape4d")
    shape2 = ops.parameter([2], ov.Type.i64, name="reshape_shape2d")
    t_raw, t_size, t_tile = (ops.parameter([-1, -1, -1, -1], u8), ops.parameter([2], ov.Type.i64),
                             ops.parameter([4], ov.Type.i64))
    t_res = ops.result(ops.tile(_normalized(t_raw, t_size, mean, scale), t_tile))
    then_body = ov.Model([t_res], [t_raw, t_size, t_tile], "then_body")
    e_cond, e_raw1, e_raw2, e_size = (ops.parameter([1], ov.Type.f32), ops.parameter([-1, -1, -1, -1], u8),
                                      ops.parameter([-1, -1, -1, -1], u8), ops.parameter([2], ov.Type.i64))
    frames = ops.concat([_normalized(e_raw1, e_size, mean, scale), _normalized(e_raw2, e_size, mean, scale)], 0)
    e_res = ops.result(frames)
    # (an If's condition must also be a body output, as in the real's graph)
    else_body = ov.Model([e_res, ops.result(e_cond)], [e_cond, e_raw1, e_raw2, e_size], "else_body")
    branch = opset8.if_op(cond)
    branch.set_then_body(then_body)
    branch.set_else_body(else_body)
    branch.set_input(cond.output(0), None, e_cond)
    branch.set_input(raw1.output(0), None, e_raw1)
    branch.set_input(raw2.output(0), None, e_raw2)
    branch.set_input(size.output(0), None, e_size)
    branch.set_input(raw1.output(0), t_raw, None)
    branch.set_input(size.output(0), t_size, None)
    branch.set_input(tile.output(0), t_tile, None)
    x = branch.set_output(t_res, e_res)
    x = ops.transpose(ops.reshape(x, shape8, True), ops.constant(np.array([0, 2, 5, 3, 6, 1, 4, 7], np.int32)))
    x = ops.transpose(ops.reshape(x, shape4, True), ops.constant(np.array([0, 2, 1, 3], np.int32)))
    x = ops.reshape(x, shape2, True)
    inputs = [cond, raw1, raw2, size, tile, shape8, shape4, shape2]
    if vision is None:
        return ov.Model([ops.result(x)], inputs, "vision_preprocess")
    params = vision.get_parameters()
    if len(params) != 1:
        raise ConfigError(f"{VISION_XML} must have one input (hidden_states), has {len(params)}")
    for target in list(params[0].output(0).get_target_inputs()):
        target.replace_source_output(x.output(0))
    return ov.Model(vision.get_results(), inputs, "vision_with_preprocess")


def host_patches(frames: list[np.ndarray], height: int, width: int, cfg: ProcessorConfig) -> np.ndarray:
    """The vision model's ``hidden_states`` [grid_h*grid_w, 3*t*patch²] as the real's
    encode_with_imagepreprocess_cpp (``VISION_PREPROCESS=CPP``) makes them on the host: each of
    one image's (repeated to temporal_patch_size) or two video frames' [1, H, W, 3] uint8 resized
    to (height, width) with clip.cpp's Pillow-style bicubic (u8 out, so no clamp), normalised
    ``(x / 255 - mean) / std`` in f32, then the patches laid out as the graph lays them out."""
    t, m, p = cfg.temporal_patch_size, cfg.merge_size, cfg.patch_size
    pixels = [clip_normalize(pillow_bicubic(f[0], width, height), cfg.image_mean, cfg.image_std)[0] for f in frames]
    x = np.stack([pixels[min(i, len(pixels) - 1)] for i in range(t)])  # [t, 3, H, W]
    gh, gw = height // p, width // p
    x = x.reshape(1, t, 3, gh // m, m, p, gw // m, m, p).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x.reshape(gh * gw, 3 * t * p * p))


def block_mask(n: int, bounds: Any) -> np.ndarray:
    """[1, n, n] f32 attention mask: 0 inside each block [bounds[i-1], bounds[i]), -inf elsewhere
    (the real's get_attention_mask per frame, get_window_attention_mask per window)."""
    mask = np.full((1, n, n), -np.inf, np.float32)
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        mask[0, start:end, start:end] = 0.0
    return mask


@dataclass
class EncodedImage:
    """An encoded image, or a video (``grid_t`` > 1 when it has more than two frames)."""

    patches: np.ndarray  # [grid_t*grid_h*grid_w, embed_dim] patch embeddings
    grid_thw: tuple[int, int, int]


class Qwen2VLEmbedder:
    """Images -> merged vision embeddings; prompt ids -> text embeddings; M-RoPE position ids."""

    #: the family's native image tag (universal tags become it)
    native_tag = NATIVE_TAG
    #: the native video tag (``<ov_genai_video_i>`` become it); a subclass without videos sets None
    video_tag: str | None = NATIVE_VIDEO_TAG

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        self.cfg = ProcessorConfig.read(folder)
        if self.cfg.temporal_patch_size != 2:
            raise ConfigError("temporal_patch_size != 2.", key="temporal_patch_size")
        vision = core.read_model(folder / VISION_XML)
        #: VISION_PREPROCESS=CPP: patches made on the host (host_patches), the bare vision model
        self.host_preprocess = host_vision_preprocess()
        #: on the emulated NPU the preprocessing runs on CPU before the vision model: its If and its
        #: shape inputs make the patch shapes depend on values, which a static NPU cannot compile
        self.preprocess: Any = None
        if not self.host_preprocess and placement.device("vision_embeddings") == "NPU":
            self.preprocess = core.compile_model(_preprocess_model(None, self.cfg), "CPU",
                                                 {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
        elif not self.host_preprocess:
            vision = _preprocess_model(vision, self.cfg)
        self.vision = placement.request(core, vision, "vision_embeddings")
        merger = core.read_model(folder / MERGER_XML)
        self.merger = placement.request(core, merger, "vision_embeddings_merger")
        self.rotary_dim = int(merger.input("rotary_pos_emb").get_partial_shape()[1].get_length())
        self.text = placement.request(core, core.read_model(folder / TEXT_EMB_XML), "text_embeddings")
        self.tokens_per_second = int((config.get("vision_config") or {}).get("tokens_per_second", 2) or 2)
        ids = tokenizer.encode("<|vision_start|><|vision_end|><|image_pad|><|video_pad|>",
                               add_special_tokens=False).input_ids.data[0]
        self.vision_start, self.vision_end, self.image_pad = int(ids[0]), int(ids[1]), int(ids[2])
        self.video_pad = int(ids[3])

    # -- images ----------------------------------------------------------------------------------
    def encode_images(self, images: list[Any]) -> list[EncodedImage]:
        out = []
        for image in images:
            for row in image_rows(image, gray_and_alpha=True):
                out.append(self._encode(row))
        return out

    def _encode(self, image: np.ndarray) -> EncodedImage:
        patches, gh, gw = self._encode_frames(image, None)
        return EncodedImage(patches, (1, gh, gw))

    def _encode_frames(self, first: np.ndarray, second: np.ndarray | None, cfg: ProcessorConfig | None = None
                       ) -> tuple[np.ndarray, int, int]:
        """One image (``second`` None: the graph's image branch tiles it) or two video frames
        [1, H, W, 3] through the preprocessing and the vision model: ([grid_h*grid_w, embed_dim]
        patch embeddings, grid_h, grid_w), sized by the first frame (with ``cfg``'s patch, merge
        and pixel bounds: Qwen3-VL's video config; the graph's mean / std stay the image config's,
        the host path's are ``cfg``'s, as the real's)."""
        c = cfg or self.cfg
        h, w = smart_resize(first.shape[1], first.shape[2], c.patch_size * c.merge_size, c.min_pixels, c.max_pixels)
        t, ch = c.temporal_patch_size, 3
        gt, gh, gw = 1, h // c.patch_size, w // c.patch_size
        m, p = c.merge_size, c.patch_size
        if self.host_preprocess:
            frames = [first] if second is None else [first, second]
            self.vision.infer({"hidden_states": host_patches(frames, h, w, c)})
            return np.array(self.vision.get_output_tensor(0).data, copy=True), gh, gw
        feed = {
            "cond_img_vid": np.array([0.0 if second is not None else 1.0], np.float32),
            "raw_images_1": first,
            "raw_images_2": first if second is None else second,
            "resize_shape": np.array([h, w], np.int64),
            "tile_shape": np.array([t, 1, 1, 1], np.int64),
            "reshape_shape8d": np.array([gt, t * ch, gh // m, m, p, gw // m, m, p], np.int64),
            "reshape_shape4d": np.array([gt * gh * gw, t, ch, p * p], np.int64),
            "reshape_shape2d": np.array([gt * gh * gw, ch * t * p * p], np.int64),
        }
        if self.preprocess is not None:
            self.preprocess.infer(feed)
            feed = {"hidden_states": np.array(self.preprocess.get_output_tensor(0).data, copy=True)}
        self.vision.infer(feed)
        return np.array(self.vision.get_output_tensor(0).data, copy=True), gh, gw

    # -- videos ----------------------------------------------------------------------------------
    def encode_videos(self, videos: list[Any]) -> list[EncodedImage]:
        """Each video [N, H, W, 3] uint8 (frames already sampled by VideoMetadata) -> its patch
        embeddings, ``grid_t`` = ceil(N / temporal_patch_size): adjacent frames in pairs, a last
        odd frame alone as an image (the real's encode_frames)."""
        out = []
        pair = self.cfg.temporal_patch_size
        for video in videos:
            frames = video_frames(video)
            parts, gh, gw = [], 0, 0
            for i in range(0, frames.shape[0], pair):
                first = np.ascontiguousarray(frames[i : i + 1])
                second = np.ascontiguousarray(frames[i + 1 : i + 2]) if i + 1 < frames.shape[0] else None
                patches, gh, gw = self._encode_frames(first, second)
                parts.append(patches)
            out.append(EncodedImage(np.concatenate(parts, axis=0), (len(parts), gh, gw)))
        return out

    def tokens_for(self, image: EncodedImage) -> int:
        gt, gh, gw = image.grid_thw
        return gt * gh * gw // (self.cfg.merge_size ** 2)

    def merge(self, images: list[EncodedImage]) -> np.ndarray:
        """The merger over every image at once: [sum of tokens, hidden]."""
        hidden = np.concatenate([im.patches for im in images], axis=0)
        frames = [0]
        for im in images:
            gt, gh, gw = im.grid_thw
            frames.extend([gh * gw] * gt)
        feed = {"hidden_states": hidden, "attention_mask": block_mask(hidden.shape[0], np.cumsum(frames)),
                "rotary_pos_emb": self._rotary(images), **self._merger_extras(images, hidden.shape[0])}
        self.merger.infer(feed)
        return np.array(self.merger.get_output_tensor(0).data, copy=True)

    def _merger_extras(self, images: list[EncodedImage], n: int) -> dict[str, np.ndarray]:
        """The merger's inputs beyond Qwen2-VL's (Qwen2.5-VL: its windows)."""
        return {}

    def _rotary(self, images: list[EncodedImage]) -> np.ndarray:
        m, dim = self.cfg.merge_size, self.rotary_dim
        half = dim // 2
        pos: list[tuple[int, int]] = []
        max_grid = 0
        for im in images:
            t, h, w = im.grid_thw
            max_grid = max(max_grid, h, w)
            one = [(hb * m + hs, wb * m + ws) for hb in range(h // m) for wb in range(w // m)
                   for hs in range(m) for ws in range(m)]
            pos.extend(one * t)
        inv = (1.0 / np.power(np.float32(10000.0), np.arange(half, dtype=np.float32) / np.float32(half))).astype(
            np.float32)
        freqs = np.arange(max_grid, dtype=np.float32)[:, None] * inv[None, :]
        hp = np.array([a for a, _ in pos])
        wp = np.array([b for _, b in pos])
        return np.ascontiguousarray(np.concatenate([freqs[hp], freqs[wp]], axis=1).astype(np.float32))

    # -- prompt -----------------------------------------------------------------------------------
    def normalize_prompt(self, prompt: str, images: list[EncodedImage], videos: list[EncodedImage] | None = None
                         ) -> str:
        """Prepend a native tag per image unless the prompt has them, then expand each tag to
        its image's pad tokens (the real's normalize + normalize_prompt); then the same for the
        videos with the video tag (so their tags go before the images')."""
        prompt = prepend_tags(prompt, NATIVE_TAG, len(images))
        for im in images:
            expanded = "<|vision_start|>" + "<|image_pad|>" * self.tokens_for(im) + "<|vision_end|>"
            prompt = prompt.replace(NATIVE_TAG, expanded, 1) if NATIVE_TAG in prompt else prompt
        if videos:
            prompt = prepend_tags(prompt, NATIVE_VIDEO_TAG, len(videos))
            prompt = expand_tags(prompt, NATIVE_VIDEO_TAG, (self.video_expansion(v) for v in videos))
        return prompt

    def video_expansion(self, video: EncodedImage) -> str:
        """The text a video's native tag becomes: its pad tokens between vision start / end."""
        return "<|vision_start|>" + "<|video_pad|>" * self.tokens_for(video) + "<|vision_end|>"

    def embed(self, ids: np.ndarray, images: list[EncodedImage], videos: list[EncodedImage] | None = None
              ) -> np.ndarray:
        """Text embeddings of ``ids`` [1, L] with the image pad rows replaced by the merged
        vision embeddings, in order (and the video pad rows by the videos'; the merger runs once
        over the videos then the images, as the real's)."""
        videos = videos or []
        emb = text_embeddings(self.text, ids)
        slots = np.flatnonzero(ids[0] == self.image_pad)
        video_slots = np.flatnonzero(ids[0] == self.video_pad)
        if images or videos:
            merged = self.merge(videos + images)
            n_video = sum(self.tokens_for(v) for v in videos)
            vis, video_rows = merged[n_video:], merged[:n_video]
            if vis.shape[0] != slots.size:
                raise UserInputError(
                    f"Image embeddings count ({vis.shape[0]}) does not match image pad tokens in prompt "
                    f"({slots.size})"
                )
            if video_rows.shape[0] != video_slots.size:
                raise UserInputError(
                    f"Video embeddings count ({video_rows.shape[0]}) does not match video pad tokens in prompt "
                    f"({video_slots.size})"
                )
            emb[0, slots] = vis
            emb[0, video_slots] = video_rows
        elif slots.size or video_slots.size:
            kind, n = ("image", slots.size) if slots.size else ("video", video_slots.size)
            raise UserInputError(
                f"the prompt has {n} <|{kind}_pad|> tokens but no {kind} was given; pass the "
                f"{kind}s with {kind}s=[...]"
            )
        return emb

    def token_embeddings(self, ids: np.ndarray) -> np.ndarray:
        return text_embeddings(self.text, ids)

    def step_position_ids(self, length: int, delta: int) -> np.ndarray:
        """A decode step's M-RoPE positions [3, 1, 1]: the mask length - 1 + the rope delta."""
        return np.full((3, 1, 1), length - 1 + delta, np.int64)

    def lm_inputs(self, ids: np.ndarray, images: list[Any]) -> dict[str, np.ndarray]:
        """The language model's inputs besides inputs_embeds / attention_mask / position_ids /
        beam_idx for the prompt ``ids``: none for this family."""
        return {}

    def step_lm_inputs(self) -> dict[str, np.ndarray]:
        """The same for one decode step."""
        return {}

    def position_ids(self, ids: np.ndarray, images: list[EncodedImage], videos: list[EncodedImage] | None = None
                     ) -> tuple[np.ndarray, int]:
        """M-RoPE positions [3, 1, L] and the rope delta (the real's create_position_ids): each
        ``<|vision_start|>`` takes the grid of the next video when a ``<|video_pad|>`` follows it,
        else of the next image (prompt order; the real takes every video's grid before every
        image's, which differs only when an image's tag precedes a video's: docs/genai_shim.md)."""
        row = ids[0]
        n = row.size
        pos = np.zeros((3, 1, n), np.int64)
        st, next_pos = 0, 0
        queues = {True: list(videos or []), False: list(images)}
        m = self.cfg.merge_size
        for ed in np.flatnonzero(row == self.vision_start).tolist():
            if ed < st:
                continue
            pos[:, 0, st:ed] = np.arange(next_pos, next_pos + ed - st)
            next_pos += ed - st
            pos[:, 0, ed] = next_pos
            next_pos += 1
            ed += 1
            st = ed
            queue = queues[ed < n and int(row[ed]) == self.video_pad]
            if queue:
                t, h, w = queue.pop(0).grid_thw
                lh, lw = h // m, w // m
                size = lh * lw
                for ti in range(t):
                    base = ed + ti * size
                    pos[0, 0, base : base + size] = next_pos + ti * self.tokens_per_second
                    pos[1, 0, base : base + size] = next_pos + np.repeat(np.arange(lh), lw)
                    pos[2, 0, base : base + size] = next_pos + np.tile(np.arange(lw), lh)
                next_pos += max((t - 1) * self.tokens_per_second + 1, max(lh, lw))
                st = ed + t * size
        if st < n:
            pos[:, 0, st:] = np.arange(next_pos, next_pos + n - st)
        delta = int(pos.max()) + 1 - n if n else 0
        return pos, delta
