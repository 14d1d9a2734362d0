"""What every family's inputs embedder shares (the real's IInputsEmbedder): the model file names,
single images out of the user's tensors, the native-tag normalisation of a prompt, the text
embeddings model, and the real's host-side image preprocessing (clip.cpp: Pillow-style resizes,
CLIP normalisation; ``VISION_PREPROCESS=CPP``)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UserInputError

__all__ = ["ROLES", "TEXT_EMB_XML", "VISION_XML", "InputsEmbedder", "Placement", "StaticShapeRequest", "image_rows",
           "center_crop_box", "clip_normalize", "expand_tags", "host_vision_preprocess", "image_processor_json",
           "pillow_bicubic", "pillow_bilinear", "pillow_resize", "prepend_tags", "sample_videos",
           "text_embedding_times", "text_embeddings", "video_frames",
           "universal_to_native",
           "UNIVERSAL_IMAGE", "UNIVERSAL_VIDEO"]

VISION_XML = "openvino_vision_embeddings_model.xml"
TEXT_EMB_XML = "openvino_text_embeddings_model.xml"


def image_processor_json(folder: Path) -> dict[str, Any]:
    """The image processor's settings as the real resolves them (VisionEncoder's
    resolve_processor_configs): the ``image_processor`` object of a combined
    ``processor_config.json`` (what transformers 5's ``processor.save_pretrained`` writes, with no
    preprocessor_config.json) when that file has both ``image_processor`` and ``video_processor``;
    otherwise ``preprocessor_config.json``; {} (the real's defaults) when neither is there."""
    combined = folder / "processor_config.json"
    if combined.is_file():
        data = json.loads(combined.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "image_processor" in data and "video_processor" in data:
            return dict(data["image_processor"])
    path = folder / "preprocessor_config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def image_rows(image: Any, gray_and_alpha: bool = False) -> list[np.ndarray]:
    """[1|N, H, W, 3] or [H, W, 3] uint8 -> single images [1, H, W, 3] (the real's rule).
    ``gray_and_alpha``: one channel is taken as gray and four as RGBA, alpha dropped (what the
    real's Qwen-VL preprocessing graphs give, measured; its CLIP-style families read such
    buffers with a 3-channel stride, a bug not copied: they get this error)."""
    data = np.asarray(image.data if isinstance(image, ov.Tensor) else image)
    if data.dtype != np.uint8:
        raise UserInputError(f"an image must be a uint8 ov.Tensor [1, H, W, 3] (NHWC), got dtype {data.dtype}")
    if data.ndim == 3:
        data = data[None]
    if data.ndim != 4:
        raise UserInputError(f"Input image must have [NHWC] or [HWC] layout, given image shape is {list(data.shape)}")
    if data.shape[1] == 0 or data.shape[2] == 0:  # the real's Qwen2-VL dies of SIGFPE on it
        raise UserInputError(f"an image must be at least 1x1 pixel, got shape {list(data.shape)}")
    if gray_and_alpha and data.shape[3] in (1, 4):
        data = np.repeat(data, 3, axis=3) if data.shape[3] == 1 else data[..., :3]
    if data.shape[3] != 3:
        accepted = "1 (gray), 3 (RGB) or 4 (RGBA)" if gray_and_alpha else "3 (RGB)"
        raise UserInputError(f"an image must have {accepted} channels (NHWC), got shape {list(data.shape)}")
    return [np.ascontiguousarray(data[i : i + 1]) for i in range(data.shape[0])]


def video_frames(video: Any) -> np.ndarray:
    """A video [N, H, W, 3] uint8 as an array, checked (the real's texts where it has one; where
    it crashes -- SIGFPE or a CPU-plugin shape check on 0-pixel frames, a float or 4-channel
    buffer -- a UserInputError instead)."""
    frames = np.asarray(video.data if isinstance(video, ov.Tensor) else video)
    if frames.ndim != 4:  # the real's text
        raise UserInputError(f"Video tensor must have shape {{N, H, W, C}}, got rank {frames.ndim}")
    if frames.dtype != np.uint8 or frames.shape[3] != 3:
        raise UserInputError(f"Video tensor must have shape {{N, H, W, C}} (uint8, C = 3), got "
                             f"{frames.dtype} {list(frames.shape)}")
    if frames.shape[0] == 0:
        raise UserInputError("Video input must contain at least one frame.")  # the real's text
    if frames.shape[1] == 0 or frames.shape[2] == 0:
        raise UserInputError(f"a video frame must be at least 1x1 pixel, got shape {list(frames.shape)}")
    return frames


def sample_videos(videos: list[Any], metadata: Any) -> list[Any]:
    """The videos as the real's sample_video_if_needed leaves them: each video's frames at its
    ``VideoMetadata.frames_indices`` (none: all frames), with the real's checks."""
    if metadata is None:
        return videos
    metadata = list(metadata) if isinstance(metadata, (list, tuple)) else [metadata]
    if metadata and len(metadata) != len(videos):
        raise UserInputError("Number of videos and videos metadata must match if metadata provided.")
    out = []
    for i, video in enumerate(videos):
        frames = video_frames(video)
        indices = list(getattr(metadata[i], "frames_indices", [])) if metadata else []
        if len(indices) > frames.shape[0]:
            raise UserInputError(
                "Number of frames to sample cannot be greater than total number of frames in the video.")
        if any(not 0 <= int(j) < frames.shape[0] for j in indices):
            raise UserInputError(f"frames_indices must lie in [0, {frames.shape[0]}) for a video of "
                                 f"{frames.shape[0]} frames")
        out.append(np.ascontiguousarray(frames[[int(j) for j in indices]]) if indices else video)
    return out


#: the real's UNIVERSAL_IMAGE_PATTERN / UNIVERSAL_VIDEO_PATTERN
UNIVERSAL_IMAGE = re.compile(r"<ov_genai_image_(\d+)>")
UNIVERSAL_VIDEO = re.compile(r"<ov_genai_video_(\d+)>")


def universal_to_native(prompt: str, native_tag: str, pattern: re.Pattern[str], base: int, count: int
                        ) -> tuple[str, list[int] | None]:
    """The real's universal_to_native and verify_ids: ``<ov_genai_image_i>`` (or video) tags
    become the family's native tag; returns the prompt and the ids they name, relative to this
    call's ``count`` inputs numbered from ``base`` (the chat's earlier ones), in prompt order (an
    input may be named twice, or not at all), or None when the prompt has no universal tag."""
    ids = [int(m.group(1)) for m in pattern.finditer(prompt)]
    if not ids:
        return prompt, None
    if native_tag in prompt:
        raise UserInputError(
            "Prompt cannot mix universal tags (<ov_genai_image_i>/<ov_genai_video_i>) with native vision tags.")
    for i in ids:
        if i < base:
            raise UserInputError("Referring to older images/videos is not supported.")
        if i >= base + count:
            raise UserInputError(f"Missing image/video with index {i}")
    return pattern.sub(lambda _: native_tag, prompt), [i - base for i in ids]


def expand_tags(prompt: str, tag: str, expansions: Iterable[str]) -> str:
    """Each occurrence of ``tag``, in order, replaced by the next of ``expansions`` (the text
    an image or video takes in the prompt); the search goes on after each replacement."""
    pos = 0
    for expanded in expansions:
        pos = prompt.find(tag, pos)
        prompt = prompt[:pos] + expanded + prompt[pos + len(tag):]
        pos += len(expanded)
    return prompt


def prepend_tags(prompt: str, native_tag: str, n_images: int) -> str:
    """The real's IInputsEmbedder::normalize for native tags: a prompt with native tags must have
    one per image; one without gets a tag per image put before it (universal tags are turned
    into native ones before: :func:`universal_to_native`)."""
    count = prompt.count(native_tag)
    if count and count != n_images:
        raise UserInputError(
            "The number of native vision tags must match the number of provided images/videos"
            " because it's ambiguous which input should be ignored."
        )
    return prompt if count else native_tag * n_images + prompt


_TIMES = threading.local()


@contextlib.contextmanager
def text_embedding_times() -> Iterator[list[float]]:
    """The durations (µs) of the text embeddings model's calls inside the block, on this
    thread: VLMPerfMetrics' text_embedding_durations (the real times its embedding infer)."""
    times: list[float] = []
    outer = getattr(_TIMES, "sink", None)
    _TIMES.sink = times
    try:
        yield times
    finally:
        _TIMES.sink = outer


def text_embeddings(request: Any, ids: np.ndarray) -> np.ndarray:
    """openvino_text_embeddings_model's output for ``ids`` [1, L], as an f32 copy."""
    t0 = time.perf_counter()
    request.infer({"input": ids})
    out = np.array(request.get_output_tensor(0).data, dtype=np.float32, copy=True)
    sink = getattr(_TIMES, "sink", None)
    if sink is not None:
        sink.append((time.perf_counter() - t0) * 1e6)
    return out


#: the real's sub-model roles (MODEL_PROPERTIES keys; utils.cpp validate_vlm_model_properties)
ROLES = ("vision_embeddings", "text_embeddings", "text_embeddings_per_layer", "resampler", "vision_embeddings_merger",
         "vision_embeddings_pos", "vision_projection", "multi_modal_projector", "audio_encoder", "language_model")


class StaticShapeRequest:
    """A model with dynamic inputs on the emulated NPU, which runs static shapes only (as a real
    NPU): reshaped to each call's input shapes and compiled for them, the last few kept (a
    family with one image size compiles once). The request interface the embedders use:
    ``infer(feed)``, ``get_output_tensor(i)``."""

    KEEP = 4

    def __init__(self, core: Any, model: ov.Model, props: dict[str, Any]) -> None:
        self._core, self._model, self._props = core, model, props
        self._requests: dict[tuple[tuple[str, tuple[int, ...]], ...], Any] = {}
        self._last: Any = None

    def infer(self, feed: dict[str, Any]) -> None:
        key = tuple(sorted((name, tuple(np.shape(v))) for name, v in feed.items()))
        request = self._requests.pop(key, None)
        if request is None:
            model = self._model.clone()
            model.reshape({name: ov.PartialShape(list(shape)) for name, shape in key})
            request = self._core.compile_model(model, "NPU", self._props).create_infer_request()
            while len(self._requests) >= self.KEEP:
                self._requests.pop(next(iter(self._requests)))
        self._requests[key] = request  # most recent last
        request.infer(feed)
        self._last = request

    def get_output_tensor(self, index: int = 0) -> Any:
        if self._last is None:
            raise UserInputError("StaticShapeRequest: get_output_tensor before any infer")
        return self._last.get_output_tensor(index)


class Placement:
    """Where each of an embedder's models runs, with which properties: role -> (device,
    properties), as the real resolves them (the pipeline's device on CPU; on NPU its AUTO with
    CPU first, whose priorities DEVICE_PROPERTIES["AUTO"] or MODEL_PROPERTIES[role] may change).
    The emulated NPU runs a model at the shapes of each call (:class:`StaticShapeRequest`)."""

    def __init__(self, roles: dict[str, tuple[str, dict[str, Any]]], default: tuple[str, dict[str, Any]]) -> None:
        self.roles, self.default = roles, default

    def device(self, role: str) -> str:
        return self.roles.get(role, self.default)[0]

    def request(self, core: Any, model: ov.Model, role: str) -> Any:
        device, props = self.roles.get(role, self.default)
        if device == "NPU":
            return StaticShapeRequest(core, model, props)
        return core.compile_model(model, device, props).create_infer_request()


class InputsEmbedder(Protocol):
    """What VLMPipeline asks of a family's embedder (built as ``cls(core, folder, config.json,
    placement, tokenizer)``); an encoded image is the family's own record."""

    #: the family's native image tag (universal ``<ov_genai_image_i>`` tags become it)
    native_tag: str

    def encode_images(self, images: list[Any]) -> list[Any]: ...

    def normalize_prompt(self, prompt: str, images: list[Any]) -> str: ...

    def embed(self, ids: np.ndarray, images: list[Any]) -> np.ndarray: ...

    def token_embeddings(self, ids: np.ndarray) -> np.ndarray: ...

    def position_ids(self, ids: np.ndarray, images: list[Any]) -> tuple[np.ndarray, int]: ...

    def step_position_ids(self, length: int, delta: int) -> np.ndarray: ...

    def lm_inputs(self, ids: np.ndarray, images: list[Any]) -> dict[str, np.ndarray]: ...

    def step_lm_inputs(self) -> dict[str, np.ndarray]: ...


# -- host-side image preprocessing (the real's clip.cpp) -------------------------------------------

def host_vision_preprocess() -> bool:
    """The real's ``VISION_PREPROCESS`` switch, read when a pipeline is built: exactly ``CPP``
    preprocesses images and video frames on the host (clip.cpp's Pillow-style resize and
    normalisation) instead of in the OpenVINO graph the real puts in front of the vision model.
    Any other value ("cpp", "OV", ...) keeps the graph: the real ignores it (measured, 2026.4.1)."""
    return os.environ.get("VISION_PREPROCESS") == "CPP"


_PRECISION_BITS = 22  # Pillow's fixed point: 32 - 8 - 2


def _bicubic(x: np.ndarray) -> np.ndarray:
    """Pillow's bicubic kernel, a = -0.5."""
    a = -0.5
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _bilinear(x: np.ndarray) -> np.ndarray:
    """Pillow's bilinear (triangle) kernel."""
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


#: Pillow's filters: (kernel, base support)
BICUBIC = (_bicubic, 2.0)
BILINEAR = (_bilinear, 1.0)


def _coefficients(in_size: int, out_size: int, filt: tuple[Any, float] = BICUBIC,
                  span: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(first source index per output [out], fixed-point weights [out, k]) as Pillow's
    precompute_coeffs (the real's precompute_pillow_coeffs_1d), in f64: the support widens when
    downscaling, the weights are normalised then rounded away from zero. ``span``: only outputs
    ``lo:hi`` (each output's coefficients depend on its index alone)."""
    kernel, base_support = filt
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = base_support * filterscale
    k = int(math.ceil(support)) * 2 + 1
    lo, hi = span if span is not None else (0, out_size)
    center = (np.arange(lo, hi) + 0.5) * scale
    # int() truncates toward zero as the real's static_cast (negatives clamp to 0 either way)
    starts = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    stops = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size)
    taps = np.arange(k)[None, :]
    inside = taps < (stops - starts)[:, None]
    w = np.where(inside, kernel(((starts[:, None] + taps) - center[:, None] + 0.5) * (1.0 / filterscale)), 0.0)
    # cumsum adds left to right as the real's loop (np.sum's pairwise order can differ in the last bit)
    total = np.cumsum(w, axis=1)[:, -1:]
    w = np.where(total != 0.0, w / np.where(total != 0.0, total, 1.0), w)
    fixed = np.where(w < 0.0, -0.5 + w * (1 << _PRECISION_BITS), 0.5 + w * (1 << _PRECISION_BITS))
    return starts, np.trunc(fixed).astype(np.int64)


def _pass(src: np.ndarray, out_size: int, axis: int, filt: tuple[Any, float],
          span: tuple[int, int] | None = None) -> np.ndarray:
    """One separable pass over ``axis`` of a [H, W, 3] uint8 image (``span``: outputs lo:hi only)."""
    in_size = src.shape[axis]
    starts, weights = _coefficients(in_size, out_size, filt, span)
    k = weights.shape[1]
    idx = np.minimum(starts[:, None] + np.arange(k)[None, :], in_size - 1)  # zero weights past the end
    # int32 as the real's accumulators; one tap at a time keeps memory at one output's size
    moved = np.moveaxis(src, axis, 0).astype(np.int32)  # [in, other, 3]
    kk = weights.astype(np.int32)[:, :, None, None]
    acc = np.full((starts.shape[0], *moved.shape[1:]), 1 << (_PRECISION_BITS - 1), np.int32)
    for j in range(k):
        acc += kk[:, j] * moved[idx[:, j]]
    out = np.clip(acc >> _PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def pillow_resize(image: np.ndarray, width: int, height: int, filt: tuple[Any, float] = BICUBIC,
                  crop: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """[H, W, 3] uint8 resized as the real's clip.cpp resize_pillow_like (Pillow's
    ImagingResample: horizontal pass, then vertical, each rounded to uint8). ``crop`` (top, left,
    height, width) of the resized image: only those pixels are computed (the same values), so a
    centre crop of an extreme aspect ratio does not build the whole resized image first."""
    top, left, ch, cw = crop if crop is not None else (0, 0, height, width)
    out = _pass(image, width, 1, filt, (left, left + cw)) if width != image.shape[1] else image[:, left:left + cw]
    return _pass(out, height, 0, filt, (top, top + ch)) if height != image.shape[0] else out[top:top + ch]


def pillow_bicubic(image: np.ndarray, width: int, height: int,
                   crop: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """The real's clip.cpp bicubic_resize (``crop``: see pillow_resize)."""
    return pillow_resize(image, width, height, BICUBIC, crop)


def center_crop_box(height: int, width: int, crop_h: int, crop_w: int) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the centre crop of a [height, width] image, as the real's."""
    return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w


def pillow_bilinear(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """The real's clip.cpp bilinear_resize."""
    return pillow_resize(image, width, height, BILINEAR)


def clip_normalize(image: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """[H, W, 3] uint8 -> [1, 3, H, W] f32 ``(x / 255 - mean) / std``, in f32 as clip_image_preprocess."""
    f32 = np.float32
    x = image.astype(f32) / f32(255.0)
    x = (x - np.array(mean, f32)) / np.array(std, f32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])
