"""Videos in genai_shim.VLMPipeline for Qwen2-VL and Qwen2.5-VL (tests/fixtures/vlm/qwen2vl-fp32,
qwen2_5vl-fp32), against the goldens the real openvino_genai.VLMPipeline 2026.4.1 recorded
(golden.json ``videos``: tools/vlm_goldens.py VIDEO_CASES and VIDEO_CHAT) on "CPU" (f32) and on
"NPU" (NPUW_DEVICES=CPU, f32 sub-configs), and side by side with the real where the case is not a
golden (tags, ChatHistory), when openvino_genai is installed."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from genai_shim.vlm.qwen2vl import EncodedImage, smart_resize
from ov_npu_emu.errors import UserInputError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vlm"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import (  # noqa: E402
    CPU_PROPS,
    MAX_NEW_TOKENS,
    NPU_PROPS,
    PROMPT,
    VIDEO_CASES,
    video_case_inputs,
    video_chat_turns,
)
from vlm_goldens import test_image as make_image  # noqa: E402
from vlm_goldens import test_video as make_video  # noqa: E402

FAMILIES = ("qwen2vl-fp32", "qwen2_5vl-fp32")
#: the language model on the emulated NPU, exact (f32 said explicitly)
EMULATED = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_LLM_SHARED_HEAD": "NO"}
NPU_CHAT_ERROR = "Chat mode is currently not supported with video input for NPU device!"


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "golden.json").read_text(encoding="utf-8"))["videos"]
    return data


def _config(lib: Any) -> Any:
    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    return cfg


def _video(frames: int, h: int, w: int, shift: int = 7) -> ov.Tensor:
    return ov.Tensor(make_video(frames, h, w, shift))


def _run(pipe: Any, lib: Any, prompt: str, **kw: Any) -> tuple[str, int]:
    r = pipe.generate(prompt, generation_config=_config(lib), **kw)
    return r.texts[0], r.perf_metrics.get_num_input_tokens()


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def cpu(family: str) -> Any:
    return genai_shim.VLMPipeline(FIXTURES / family, "CPU", **CPU_PROPS)


@pytest.mark.parametrize("case", list(VIDEO_CASES))
def test_cpu_videos_give_the_real_goldens(cpu: Any, family: str, case: str) -> None:
    """Frame pairs, an odd last frame, a one-frame video, VideoMetadata sampling, an image with a
    video, two videos: the real's texts and input token counts."""
    prompt, kw = video_case_inputs(case, genai_shim)
    golden = _golden(family)["cpu"][case]
    assert _run(cpu, genai_shim, prompt, **kw) == (golden["text"], golden["num_input_tokens"])


def test_cpu_video_chat_gives_the_real_goldens(cpu: Any, family: str) -> None:
    """A start_chat chat: a video in turn 1, text in turn 2, a video and an image in turn 3."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ours = video_chat_turns(cpu, genai_shim)
    assert ours == [(t["text"], t["num_input_tokens"]) for t in _golden(family)["cpu"]["chat"]]


def test_goldens_have_margins(family: str) -> None:
    margins = _golden(family)["margins"]
    assert all(margins[case]["min"] >= 0.1 and margins[case]["text_equals_golden"] for case in VIDEO_CASES)


def test_video_frames_matter(cpu: Any) -> None:
    """The video branch takes both frames of a pair: another second frame, another encoding;
    reversed frames, another answer."""
    emb = cpu._embedder
    a = make_video(2, 56, 56)
    b = a.copy()
    b[1] = b[1, ::-1]
    ea, eb = emb.encode_videos([a]), emb.encode_videos([b])
    assert ea[0].grid_thw == eb[0].grid_thw == (1, 4, 4)
    assert not np.allclose(ea[0].patches, eb[0].patches, atol=1e-4)
    v = make_video(4, 70, 90)
    assert (_run(cpu, genai_shim, PROMPT, videos=[ov.Tensor(v)])
            != _run(cpu, genai_shim, PROMPT, videos=[ov.Tensor(np.ascontiguousarray(v[::-1]))]))


def test_frame_pairs_and_grid(cpu: Any) -> None:
    """grid_t = ceil(frames / 2): the last odd frame is encoded as an image (tiled), so a video of
    3 frames ends with what the third frame alone gives as an image."""
    emb = cpu._embedder
    v = make_video(3, 40, 100, 11)
    enc = emb.encode_videos([v])[0]
    assert enc.grid_thw == (2, 2, 8)
    assert emb.tokens_for(enc) == 8
    alone = emb.encode_images([ov.Tensor(np.ascontiguousarray(v[2:3]))])[0]
    np.testing.assert_allclose(enc.patches[16:], alone.patches, atol=1e-5)
    assert smart_resize(70, 90, 28, 3136, 12544) == (84, 84)  # 70 / 28 = 2.5 rounds up (std::round)


def test_video_positions_and_prompt(cpu: Any) -> None:
    """A video's tag goes before the images', expands to <|video_pad|> tokens; its M-RoPE
    temporal positions step by tokens_per_second per frame pair."""
    emb = cpu._embedder
    video = EncodedImage(np.zeros((2 * 16, 1), np.float32), (2, 4, 4))
    image = EncodedImage(np.zeros((16, 1), np.float32), (1, 4, 4))
    text = emb.normalize_prompt("Hi", [image], [video])
    assert text == ("<|vision_start|>" + "<|video_pad|>" * 8 + "<|vision_end|>"
                    + "<|vision_start|>" + "<|image_pad|>" * 4 + "<|vision_end|>Hi")
    ids = np.array([[emb.vision_start] + [emb.video_pad] * 8 + [emb.vision_end] + [7]], np.int64)
    pos, delta = emb.position_ids(ids, [], [video])
    tps = emb.tokens_per_second
    assert pos[0, 0, 1:9].tolist() == [1] * 4 + [1 + tps] * 4
    assert pos[1, 0, 1:9].tolist() == [1, 1, 2, 2] * 2
    assert pos[2, 0, 1:9].tolist() == [1, 2, 1, 2] * 2
    assert pos[:, 0, 9].tolist() == [2 + tps] * 3  # vision_end after max(tps + 1, 2)
    assert delta == int(pos.max()) + 1 - ids.shape[1]


def test_image_tag_before_video_tag_takes_its_own_grid(cpu: Any) -> None:
    """Prompt order: a <|vision_start|> followed by <|image_pad|> takes the image's grid even
    when an image's tag comes first (the real takes every video's grid first: docs/genai_shim.md)."""
    emb = cpu._embedder
    video = EncodedImage(np.zeros((2 * 16, 1), np.float32), (2, 4, 4))
    image = EncodedImage(np.zeros((36, 1), np.float32), (1, 6, 6))
    ids = np.array([[emb.vision_start] + [emb.image_pad] * 9 + [emb.vision_end]
                    + [emb.vision_start] + [emb.video_pad] * 8 + [emb.vision_end]], np.int64)
    pos, _ = emb.position_ids(ids, [image], [video])
    assert pos[1, 0, 1:10].tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3]  # the image's 3x3 merged grid
    assert pos[:, 0, 10].tolist() == [4] * 3  # vision_end after max(1, 3) image positions
    assert pos[0, 0, 12:20].tolist() == [6] * 4 + [6 + emb.tokens_per_second] * 4


def test_video_errors(cpu: Any) -> None:
    with pytest.raises(UserInputError, match="at least one frame"):
        cpu.generate(PROMPT, videos=[ov.Tensor(np.zeros((0, 56, 56, 3), np.uint8))], max_new_tokens=2)
    with pytest.raises(UserInputError, match="got rank 3"):
        cpu.generate(PROMPT, videos=[ov.Tensor(np.zeros((2, 56, 56), np.uint8))], max_new_tokens=2)
    with pytest.raises(UserInputError, match="C = 3"):
        cpu.generate(PROMPT, videos=[ov.Tensor(np.zeros((2, 56, 56, 4), np.uint8))], max_new_tokens=2)
    for shape in ((2, 56, 0, 3), (2, 0, 56, 3)):  # the real's Qwen2-VL: SIGFPE
        with pytest.raises(UserInputError, match="at least 1x1 pixel"):
            cpu.generate(PROMPT, videos=[ov.Tensor(np.zeros(shape, np.uint8))], max_new_tokens=2)
    with pytest.raises(UserInputError, match="native vision tags"):
        cpu.generate("<|vision_start|><|video_pad|><|vision_end|>" * 2 + PROMPT, videos=[_video(2, 56, 56)],
                     max_new_tokens=2)
    with pytest.raises(UserInputError, match="Missing image/video with index 1"):
        cpu.generate("<ov_genai_video_1>" + PROMPT, videos=[_video(2, 56, 56)], max_new_tokens=2)
    meta = genai_shim.VideoMetadata()
    meta.frames_indices = [0, 1]
    with pytest.raises(UserInputError, match="must match"):
        cpu.generate(PROMPT, videos=[_video(2, 56, 56)], videos_metadata=[meta, meta], max_new_tokens=2)
    with pytest.raises(UserInputError, match="aspect ratio"):
        cpu.generate(PROMPT, videos=[_video(2, 1, 300)], max_new_tokens=2)


# -- NPU --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("props", [NPU_PROPS, EMULATED], ids=["npuw_cpu", "emulated"])
def test_npu_videos_give_the_real_npus_goldens(family: str, props: dict[str, Any]) -> None:
    """On "NPU" (NPUW on CPU, and the language model on the emulated NPU): the real NPU's texts;
    a video in a chat is the real's error, start_chat or ChatHistory."""
    pipe = genai_shim.VLMPipeline(FIXTURES / family, "NPU", **props)
    golden = _golden(family)["npuw_cpu"]
    for case in ("4_frames_70x90", "image_and_video", "5_of_8_frames_80x80"):
        prompt, kw = video_case_inputs(case, genai_shim)
        assert _run(pipe, genai_shim, prompt, **kw) == (golden[case]["text"], golden[case]["num_input_tokens"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(UserInputError) as err:
            video_chat_turns(pipe, genai_shim)
    assert str(err.value) == golden["chat_error"] == NPU_CHAT_ERROR
    history = genai_shim.ChatHistory([{"role": "user", "content": PROMPT}])
    with pytest.raises(UserInputError, match="Chat mode is currently not supported"):
        pipe.generate(history, videos=[_video(2, 56, 56)], max_new_tokens=2)


# -- side by side with the real -----------------------------------------------------------------------
def _chat_history(pipe: Any, lib: Any) -> list[tuple[str, int]]:
    """A ChatHistory: a video in turn 1, text, then an image with a video named by universal tags
    (the video's tag first)."""
    h = lib.ChatHistory()
    turns: list[tuple[str, dict[str, Any]]] = [
        ("Describe the video.", {"videos": [_video(4, 70, 90)]}),
        ("What moves?", {}),
        ("<ov_genai_video_1> and <ov_genai_image_0>: what differs?",
         {"images": [ov.Tensor(make_image())], "videos": [_video(3, 60, 60)]}),
    ]
    out = []
    for prompt, kw in turns:
        h.append({"role": "user", "content": prompt})
        r = pipe.generate(h, generation_config=_config(lib), **kw)
        out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        h.append({"role": "assistant", "content": r.texts[0]})
    return out


def test_tags_and_history_chat_match_real(cpu: Any, family: str) -> None:
    og = pytest.importorskip("openvino_genai")
    real = og.VLMPipeline(str(FIXTURES / family), "CPU", **CPU_PROPS)
    cases = [
        ("Watch <|vision_start|><|video_pad|><|vision_end|> then " + PROMPT, {"videos": [_video(4, 70, 90)]}),
        ("<ov_genai_video_0> and <ov_genai_image_0>: " + PROMPT,
         {"images": [ov.Tensor(make_image())], "videos": [_video(4, 60, 110)]}),
    ]
    for prompt, kw in cases:
        assert _run(cpu, genai_shim, prompt, **kw) == _run(real, og, prompt, **kw)
    assert _chat_history(cpu, genai_shim) == _chat_history(real, og)


def test_vision_on_the_emulated_npu_gives_the_real_npus_golden(family: str) -> None:
    """Every embedder model on the emulated NPU too (DEVICE_PROPERTIES AUTO -> NPU): the frame
    pairs' preprocessing on CPU, the patch embedding and the merger on the NPU."""
    pipe = genai_shim.VLMPipeline(FIXTURES / family, "NPU", **EMULATED,
                                  DEVICE_PROPERTIES={"AUTO": {"MULTI_DEVICE_PRIORITIES": "NPU"}})
    golden = _golden(family)["npuw_cpu"]["3_frames_40x100"]
    prompt, kw = video_case_inputs("3_frames_40x100", genai_shim)
    assert _run(pipe, genai_shim, prompt, **kw) == (golden["text"], golden["num_input_tokens"])
