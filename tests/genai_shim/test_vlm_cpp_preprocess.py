"""``VISION_PREPROCESS=CPP`` in genai_shim.VLMPipeline: the real's host-side image and video
preprocessing (clip.cpp's Pillow-style bicubic and CLIP normalisation instead of the OpenVINO
graph), read when a pipeline is built, for Qwen2-VL, Qwen2.5-VL, Qwen3-VL and LLaVA-NeXT-Video.

Against the goldens the real openvino_genai.VLMPipeline 2026.4.1 recorded on "CPU" (f32) built
under ``VISION_PREPROCESS=CPP`` (golden.json ``vision_preprocess_cpp``: tools/vlm_goldens.py
CPP_CASES, each with the real's default-graph text as ``graph_text``), and side by side with the
real where the case is not a golden (gray and RGBA images), when openvino_genai is installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from genai_shim.vlm.common import host_vision_preprocess, pillow_bicubic
from genai_shim.vlm.qwen2vl import _preprocess_model, host_patches, smart_resize

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vlm"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import CPU_PROPS, MAX_NEW_TOKENS, MIN_MARGIN, cpp_case_inputs, vision_preprocess  # noqa: E402
from vlm_goldens import test_image as make_image  # noqa: E402

FAMILIES = ("qwen2vl-fp32", "qwen2_5vl-fp32", "qwen3vl-fp32", "llava_next_video-fp32")


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "golden.json").read_text(encoding="utf-8"))
    return data["vision_preprocess_cpp"]


def _cases() -> list[tuple[str, str]]:
    return [(family, case) for family in FAMILIES for case in _golden(family)["cpu"]]


def _pipeline(family: str, value: str | None = "CPP") -> Any:
    with vision_preprocess(value):
        return genai_shim.VLMPipeline(FIXTURES / family, "CPU", **CPU_PROPS)


def _run(pipe: Any, prompt: str, **kw: Any) -> tuple[str, int]:
    r = pipe.generate(prompt, max_new_tokens=MAX_NEW_TOKENS, **kw)
    return r.texts[0], r.perf_metrics.get_num_input_tokens()


@pytest.fixture(scope="module")
def pipes() -> dict[str, Any]:
    """One CPP pipeline per family, built on first use (the environment is unset again at once)."""
    return {}


@pytest.mark.parametrize(("family", "case"), _cases())
def test_cpp_gives_the_real_goldens(pipes: dict[str, Any], family: str, case: str) -> None:
    """Odd sizes, sizes the smart resize scales up or down, two images, videos (frame pairs, an odd
    last frame, one frame), an image with a video: the real's texts and input token counts."""
    if family not in pipes:
        pipes[family] = _pipeline(family)
    prompt, kw = cpp_case_inputs(case)
    golden = _golden(family)["cpu"][case]
    assert _run(pipes[family], prompt, **kw) == (golden["text"], golden["num_input_tokens"])


@pytest.mark.parametrize("family", FAMILIES)
def test_goldens_have_margins_and_tell_the_modes_apart(family: str) -> None:
    """Every case's greedy margin is safe; some cases per family (its videos for LLaVA-NeXT-Video,
    whose image tiles are already at the graph's size) answer otherwise under the graph."""
    entry = _golden(family)
    assert all(entry["margins"][c]["min"] >= MIN_MARGIN and entry["margins"][c]["text_equals_golden"]
               for c in entry["cpu"])
    assert sum(c["text"] != c["graph_text"] for c in entry["cpu"].values()) >= 4


def _differing_case(family: str) -> str:
    return next(name for name, c in _golden(family)["cpu"].items() if c["text"] != c["graph_text"])


@pytest.mark.parametrize("family", ("qwen2vl-fp32", "llava_next_video-fp32"))
def test_the_value_is_read_when_the_pipeline_is_built(family: str) -> None:
    """Only exactly ``CPP`` switches (the real ignores "cpp", "OV", "": measured), and only when
    the pipeline is built: setting or unsetting it later changes nothing."""
    case = _differing_case(family)
    golden = _golden(family)["cpu"][case]
    prompt, kw = cpp_case_inputs(case)
    cpp = _pipeline(family, "CPP")
    with vision_preprocess(None):
        assert _run(cpp, prompt, **kw)[0] == golden["text"]
    graph = _pipeline(family, None)
    with vision_preprocess("CPP"):
        assert _run(graph, prompt, **kw)[0] == golden["graph_text"]
    for other in ("cpp", "OV", ""):
        assert _run(_pipeline(family, other), prompt, **kw)[0] == golden["graph_text"]
    with vision_preprocess("cpp"):
        assert not host_vision_preprocess()


def test_host_patches_lay_pixels_out_as_the_graph() -> None:
    """At the smart size already (no resize either way) the host patches are the graph's up to
    the normalisation's rounding ((x / 255 - mean) / std against (x - 255·mean) · 1 / (255·std)),
    for an image (its frame repeated) and a video pair; a resize gives Pillow's pixels."""
    from genai_shim.vlm.qwen2vl import ProcessorConfig

    cfg = ProcessorConfig.read(FIXTURES / "qwen2vl-fp32")
    h, w = smart_resize(56, 84, 28, cfg.min_pixels, cfg.max_pixels)
    assert (h, w) == (56, 84)
    first = make_image(56, 84)
    second = np.ascontiguousarray(np.roll(first, 5, axis=2))
    graph = ov.Core().compile_model(_preprocess_model(None, cfg), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    t, m, p = cfg.temporal_patch_size, cfg.merge_size, cfg.patch_size
    gh, gw = h // p, w // p
    for frames in ([first], [first, second]):
        feed = {"cond_img_vid": np.array([1.0 if len(frames) == 1 else 0.0], np.float32),
                "raw_images_1": frames[0], "raw_images_2": frames[-1], "resize_shape": np.array([h, w], np.int64),
                "tile_shape": np.array([t, 1, 1, 1], np.int64),
                "reshape_shape8d": np.array([1, t * 3, gh // m, m, p, gw // m, m, p], np.int64),
                "reshape_shape4d": np.array([gh * gw, t, 3, p * p], np.int64),
                "reshape_shape2d": np.array([gh * gw, 3 * t * p * p], np.int64)}
        ours = host_patches(frames, h, w, cfg)
        assert ours.shape == (gh * gw, 3 * t * p * p) and ours.dtype == np.float32
        np.testing.assert_allclose(ours, graph.create_infer_request().infer(feed)[0], atol=2e-6, rtol=0)
    resized = host_patches([make_image(77, 100)], 84, 112, cfg)
    x = (pillow_bicubic(make_image(77, 100)[0], 112, 84).astype(np.float32) / np.float32(255.0)
         - np.float32(cfg.image_mean[0])) / np.float32(cfg.image_std[0])
    assert resized[0, :p * p].tolist() == x[:p, :p, 0].ravel().tolist()  # first patch, red, frame 0


def test_gray_and_rgba_images_as_the_real() -> None:
    """The real's Qwen embedder makes gray and RGBA images RGB before either preprocessing
    (measured under CPP: RGBA gives RGB's text, gray its own); ours as the real."""
    og = pytest.importorskip("openvino_genai")
    rgba = np.random.default_rng(0).integers(0, 256, (48, 40, 4), dtype=np.uint8)
    views = [rgba, rgba[..., :3], rgba[..., :1]]
    ours = [_run(_pipeline("qwen2vl-fp32"), "Describe the picture.", image=ov.Tensor(np.ascontiguousarray(v)))
            for v in views]
    real = []
    for v in views:  # a fresh real pipeline each: a long-lived one's texts depend on what it ran before
        with vision_preprocess("CPP"):
            pipe = og.VLMPipeline(str(FIXTURES / "qwen2vl-fp32"), "CPU", **CPU_PROPS)
        real.append(_run(pipe, "Describe the picture.", image=ov.Tensor(np.ascontiguousarray(v))))
    assert ours == real
    assert ours[0] == ours[1] != ours[2]
