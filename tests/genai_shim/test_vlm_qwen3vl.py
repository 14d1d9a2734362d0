"""genai_shim.VLMPipeline on Qwen3-VL (tests/fixtures/vlm/qwen3vl-fp32), side by side with the real
openvino_genai.VLMPipeline 2026.4.1 under f32 hints: Qwen2-VL's preprocessing and M-RoPE with the
vision tower's interpolated position embeddings and DeepStack (the merger's per-layer features the
language model adds at the image tokens: ``deepstack_visual_embeds`` / ``visual_pos_masks``).

Ours gives the real's CPU texts on "CPU", on "NPU" with NPUW_DEVICES=CPU, with the language model
on the emulated NPU and with the vision models there too.  Two real-stack bugs are pinned, not
copied (docs/genai_shim.md): the real NPU path loses the DeepStack features (its image answers are
those with the features zeroed), and the real's chat turns after an image turn are not its own
one-shot answer for the same templated history."""

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
from genai_shim.vlm import qwen3_vl
from genai_shim.vlm.qwen2vl import smart_resize
from genai_shim.vlm.qwen3_vl import interpolation_corners, merge_order
from ov_npu_emu.errors import ConfigError, PromptTooLongError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "vlm" / "qwen3vl-fp32"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import (  # noqa: E402
    CHAT,
    CPU_PROPS,
    MAX_NEW_TOKENS,
    NPU_PROPS,
    PROMPT,
    chat_turns,
    pruning_case_inputs,
    video_case_inputs,
)
from vlm_goldens import test_image as make_image  # noqa: E402
from vlm_goldens import test_video as make_video  # noqa: E402

og = pytest.importorskip("openvino_genai")

EMULATED = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_LLM_SHARED_HEAD": "NO"}
ALL_ON_NPU = {"DEVICE_PROPERTIES": {"AUTO": {"MULTI_DEVICE_PRIORITIES": "NPU"}}}
TAG = "<|vision_start|><|image_pad|><|vision_end|>"
#: 80x80 rounds 80/32 = 2.5 up (std::round) to a 3x3 merged grid; 30x200 is clamped to the pixel bounds
SIZES = [(80, 80), (64, 96), (30, 200), None]


def _golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FOLDER / "golden.json").read_text(encoding="utf-8"))
    return data


def _image(h: int = 80, w: int = 80) -> ov.Tensor:
    return ov.Tensor(make_image(h, w))


def _run(pipe: Any, hw: tuple[int, int] | None, prompt: str = PROMPT, **kw: Any) -> tuple[str, int]:
    images = {"images": [_image(*hw)]} if hw else {}
    r = pipe.generate(prompt, max_new_tokens=MAX_NEW_TOKENS, **images, **kw)
    return r.texts[0], r.perf_metrics.get_num_input_tokens()


@pytest.fixture(scope="module")
def real() -> Any:
    return og.VLMPipeline(str(FOLDER), "CPU", **CPU_PROPS)


@pytest.fixture(scope="module")
def real_texts(real: Any) -> dict[Any, tuple[str, int]]:
    return {hw: _run(real, hw) for hw in SIZES}


@pytest.fixture(scope="module")
def shim() -> Any:
    return genai_shim.VLMPipeline(FOLDER, "CPU", **CPU_PROPS)


def test_cpu_matches_real(shim: Any, real_texts: dict[Any, tuple[str, int]]) -> None:
    golden = _golden()["cpu"]
    assert real_texts[(80, 80)] == (golden["image"]["text"], golden["image"]["num_input_tokens"])
    for hw in SIZES:
        assert _run(shim, hw) == real_texts[hw], hw
    assert real_texts[(80, 80)][1] == real_texts[None][1] + 2 + 9  # vision start/end, 3x3 merged pads


def test_position_embeddings_and_deepstack_matter(shim: Any, real_texts: dict[Any, tuple[str, int]],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the two Qwen3-VL pieces changes the answer: without them ours would not be the real's."""
    emb = shim._embedder
    pos = emb._pos_embeddings
    monkeypatch.setattr(emb, "_pos_embeddings", lambda grids: 0.0 * pos(grids))
    assert _run(shim, (80, 80)) != real_texts[(80, 80)]
    monkeypatch.setattr(emb, "_pos_embeddings", pos)
    merge = emb.merge

    def zeroed(images: list[Any]) -> np.ndarray:
        out = merge(images)
        emb._deepstack = np.zeros_like(emb._deepstack)
        return out

    monkeypatch.setattr(emb, "merge", zeroed)
    no_deepstack = _run(shim, (80, 80))
    assert no_deepstack != real_texts[(80, 80)]
    # the real NPU's answer (golden npuw_cpu): the DeepStack features lost (a real bug, not copied)
    npu = _golden()["npuw_cpu"]["image"]
    assert no_deepstack == (npu["text"], npu["num_input_tokens"])


def test_two_images_and_universal_tags_match_real(shim: Any, real: Any) -> None:
    a, b = _image(), _image(64, 96)
    for prompt, images in ((PROMPT, [a, b]), (f"First {TAG} then {TAG}. {PROMPT}", [b, a]),
                           (f"<ov_genai_image_1> and <ov_genai_image_0>: {PROMPT}", [a, b]),
                           ("<ov_genai_image_0> twice <ov_genai_image_0>", [b])):
        ours = shim.generate(prompt, images=images, max_new_tokens=MAX_NEW_TOKENS)
        theirs = real.generate(prompt, images=images, max_new_tokens=MAX_NEW_TOKENS)
        assert (ours.texts, ours.perf_metrics.get_num_input_tokens()) == (
            theirs.texts, theirs.perf_metrics.get_num_input_tokens()), prompt
    with pytest.raises(UserInputError, match="Missing image/video with index 1"):
        shim.generate("<ov_genai_image_1>", images=[a], max_new_tokens=2)
    for shape in ((2, 32, 0, 3), (0, 32, 32, 3)):  # the real: SIGFPE on 0-pixel frames
        with pytest.raises(UserInputError, match="at least"):
            shim.generate(PROMPT, videos=[ov.Tensor(np.zeros(shape, np.uint8))], max_new_tokens=2)


def test_chat_turns_are_the_reals_one_shot_answers(shim: Any, real: Any) -> None:
    """Ours: each turn is what the real answers in one generate() for the same templated history
    and images; the real's own chat turns after the first differ from that (a real bug)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        turns = chat_turns(shim, genai_shim)
    golden = _golden()["cpu"]["chat"]
    assert turns[0] == (golden[0]["text"], golden[0]["num_input_tokens"])
    tok = real.get_tokenizer()
    history = [{"role": "user", "content": TAG + CHAT[0]}, {"role": "assistant", "content": turns[0][0]},
               {"role": "user", "content": CHAT[1]}]
    one_shot = _run(real, (80, 80), tok.apply_chat_template(history, add_generation_prompt=True),
                    apply_chat_template=False)
    assert turns[1] == one_shot
    assert (golden[1]["text"], golden[1]["num_input_tokens"]) != one_shot
    h = genai_shim.ChatHistory()
    out = []
    for i, prompt in enumerate(CHAT):
        h.append({"role": "user", "content": prompt})
        kw = {"images": [_image()]} if i == 0 else {}
        r = shim.generate(h, max_new_tokens=MAX_NEW_TOKENS, **kw)
        out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        h.append({"role": "assistant", "content": r.texts[0]})
    assert out == turns


def test_models_from_memory_match_the_folder(shim: Any, real_texts: dict[Any, tuple[str, int]]) -> None:
    def ir(stem: str) -> tuple[str, ov.Tensor]:
        return ((FOLDER / f"{stem}.xml").read_text(encoding="utf-8"),
                ov.Tensor(np.fromfile(FOLDER / f"{stem}.bin", np.uint8)))

    models = {x.stem.removeprefix("openvino_").removesuffix("_model"): ir(x.stem) for x in FOLDER.glob("*.xml")
              if "tokenizer" not in x.name}
    tok = genai_shim.Tokenizer(*ir("openvino_tokenizer"), *ir("openvino_detokenizer"))
    pipe = genai_shim.VLMPipeline(models, tok, FOLDER, "CPU", **CPU_PROPS)
    assert _run(pipe, (80, 80)) == real_texts[(80, 80)]
    del models["vision_embeddings_pos"]
    with pytest.raises(ConfigError, match="'vision_embeddings_pos'"):
        genai_shim.VLMPipeline(models, tok, FOLDER, "CPU")


@pytest.mark.parametrize("setup", ["npuw_cpu", "emulated", "vision_on_npu"])
def test_npu_gives_the_reals_cpu_text(setup: str, real_texts: dict[Any, tuple[str, int]]) -> None:
    props = {"npuw_cpu": NPU_PROPS, "emulated": EMULATED, "vision_on_npu": {**EMULATED, **ALL_ON_NPU}}[setup]
    pipe = genai_shim.VLMPipeline(FOLDER, "NPU", **props)
    if setup == "vision_on_npu":
        assert type(pipe._embedder.pos).__name__ == "StaticShapeRequest"
    for hw in SIZES[:2] + SIZES[3:]:
        assert _run(pipe, hw) == real_texts[hw], hw
    golden = _golden()
    assert _run(pipe, None) == (golden["npuw_cpu"]["text_only"]["text"],
                                golden["npuw_cpu"]["text_only"]["num_input_tokens"])


def test_model_properties_place_the_position_model(real_texts: dict[Any, tuple[str, int]]) -> None:
    """MODEL_PROPERTIES["vision_embeddings_pos"] (a role the real reads for Qwen3-VL) moves that
    model alone to the emulated NPU."""
    pipe = genai_shim.VLMPipeline(FOLDER, "NPU", **EMULATED, MODEL_PROPERTIES={
        "vision_embeddings_pos": {"MULTI_DEVICE_PRIORITIES": "NPU"}})
    emb = pipe._embedder
    assert type(emb.pos).__name__ == "StaticShapeRequest" and type(emb.merger).__name__ != "StaticShapeRequest"
    assert _run(pipe, (64, 96)) == real_texts[(64, 96)]


def test_chunked_prefill_splits_the_deepstack_rows(real_texts: dict[Any, tuple[str, int]]) -> None:
    """Chunks of 8 tokens: the image's 9 pad tokens span two chunks, each taking its own rows."""
    pipe = genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_PROPS, NPUW_LLM_PREFILL_CHUNK_SIZE=8)
    assert _run(pipe, (80, 80)) == real_texts[(80, 80)]


def test_npu_prompt_over_max_prompt_len() -> None:
    pipe = genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_PROPS, MAX_PROMPT_LEN=16)
    expected = _golden()["npu_too_long"]["error"].split("\n", 1)[1].rstrip("\n")
    with pytest.raises(PromptTooLongError) as e:
        pipe.generate(PROMPT, images=[_image()], max_new_tokens=4)
    assert str(e.value) == expected


def test_npuw_checks_the_deepstack_inputs() -> None:
    """The language model through NPUW directly: a mask of the wrong length, or fewer rows than
    vision tokens, are typed errors; the real pipeline's [1, 1] false mask of a text prompt is
    taken."""
    from genai_shim.npu_compile import compile_npu
    from ov_npu_emu import Core

    core = Core()
    req = compile_npu(core, core.read_model(FOLDER / "openvino_language_model.xml"), dict(NPU_PROPS)).compiled
    req = req.create_infer_request()
    n = 6
    base = {"inputs_embeds": np.zeros((1, n, 64), np.float32), "attention_mask": np.ones((1, n), np.int64),
            "position_ids": np.tile(np.arange(n)[None, None], (3, 1, 1)), "beam_idx": np.zeros(1, np.int32)}
    mask = np.zeros((1, n), np.bool_)
    mask[0, 2:4] = True
    with pytest.raises(UserInputError, match="a row for each of the 2 vision tokens"):
        req.infer({**base, "visual_pos_masks": mask, "deepstack_visual_embeds": np.zeros((2, 1, 64), np.float32)})
    req.reset_state()
    with pytest.raises(UserInputError, match="one entry per token"):
        req.infer({**base, "visual_pos_masks": mask[:, :4], "deepstack_visual_embeds": np.zeros((2, 2, 64),
                                                                                                  np.float32)})
    req.reset_state()
    req.infer({**base, "visual_pos_masks": np.zeros((1, 1), np.bool_),
               "deepstack_visual_embeds": np.zeros((2, 1, 64), np.float32)})


def test_interpolation_and_merge_order() -> None:
    # 80x80 at patch 16 after the smart resize: 96x96 (std::round takes 2.5 up)
    assert smart_resize(80, 80, 32, 4096, 16384) == (96, 96)
    idx, w = interpolation_corners([(1, 2, 3)], 4)
    # rows 0 and 3 of the 4x4 table; columns 0, 1.5, 3
    assert idx[:, 1].tolist() == [1, 2, 5, 6] and np.allclose(w[:, 1], [0.5, 0.5, 0, 0])
    assert idx[:, 5].tolist() == [15, 15, 15, 15] and np.allclose(w[:, 5], [1, 0, 0, 0])
    assert np.allclose(w.sum(axis=0), 1.0)
    assert merge_order([(1, 4, 4)], 2)[:8].tolist() == [0, 1, 4, 5, 2, 3, 6, 7]
    with pytest.raises(ConfigError, match="merge_size"):
        merge_order([(1, 3, 4)], 2)


def test_pos_model_must_be_four_corners() -> None:
    import openvino.opset13 as ops

    x = ops.parameter([2, -1], ov.Type.i64, name="input")
    bad = ov.Model([ops.result(ops.convert(x, ov.Type.f32))], [x])
    with pytest.raises(ConfigError, match=r"\[4, N, D\]"):
        qwen3_vl.weighted_pos_model(bad)


def _cases(kind: str) -> dict[str, Any]:
    entry: dict[str, Any] = _golden()[kind]["cpu"]
    return {k: v for k, v in entry.items() if isinstance(v, dict)}


def _video_run(pipe: Any, name: str) -> tuple[str, int]:
    prompt, kw = video_case_inputs(name, genai_shim)
    r = pipe.generate(prompt, max_new_tokens=MAX_NEW_TOKENS, **kw)
    return r.texts[0], r.perf_metrics.get_num_input_tokens()


def _pruning_run(pipe: Any, name: str) -> tuple[str, int]:
    r = pipe.generate(PROMPT, **pruning_case_inputs(name, genai_shim))
    return r.texts[0], r.perf_metrics.get_num_input_tokens()


def test_videos_match_the_reals_goldens(shim: Any) -> None:
    """Qwen3-VL videos (golden ``videos``, the real on CPU f32, margins >= 0.27): frames in pairs,
    a ``<t seconds>`` timestamp and a vision region per pair, odd and even frame counts, metadata
    sampling and fps, an image with a video, two videos, universal tags."""
    cases = _cases("videos")
    assert len(cases) == 10 and min(m["min"] for k, m in _golden()["videos"]["margins"].items()
                                    if isinstance(m, dict)) >= 0.1
    for name, want in cases.items():
        assert _video_run(shim, name) == (want["text"], want["num_input_tokens"]), name


@pytest.mark.parametrize("setup", ["npuw_cpu", "emulated"])
def test_videos_on_npu_give_the_reals_cpu_text(setup: str) -> None:
    """On "NPU" (NPUW on CPU; the language model on the emulated NPU): the real's CPU texts (the
    real NPU loses the DeepStack rows, a real bug: its golden npuw_cpu texts differ)."""
    props = NPU_PROPS if setup == "npuw_cpu" else EMULATED
    pipe = genai_shim.VLMPipeline(FOLDER, "NPU", **props)
    cases = _cases("videos")
    for name in ("3_frames_40x100", "image_and_video"):
        assert _video_run(pipe, name) == (cases[name]["text"], cases[name]["num_input_tokens"]), name
    with pytest.raises(UserInputError, match="Chat mode is currently not supported with video input"):
        pipe.start_chat()
        try:
            pipe.generate(PROMPT, videos=[ov.Tensor(make_video(2, 64, 64))], max_new_tokens=2)
        finally:
            pipe.finish_chat()


def test_video_timestamps_and_frame_positions(shim: Any) -> None:
    """The expanded prompt (the real's text: ``<0.0 seconds>`` per frame pair, fps 24 without
    metadata) and the M-RoPE positions of each pair as an image of its own."""
    emb = shim._embedder
    clips = emb.encode_videos([make_video(3, 64, 64)])
    assert clips[0].grid_thw == (2, 4, 4) and clips[0].timestamps == pytest.approx([0.5 / 24, 2.0 / 24], rel=1e-6)
    pads = "<|video_pad|>" * 4
    assert emb.normalize_prompt("x", [], clips) == (
        f"<0.0 seconds><|vision_start|>{pads}<|vision_end|><0.1 seconds><|vision_start|>{pads}<|vision_end|>x")
    meta = genai_shim.VideoMetadata()
    meta.fps, meta.frames_indices = 2.0, [1, 4, 6]
    assert emb.encode_videos([make_video(8, 64, 64)], [meta])[0].timestamps == [1.25, 3.0]
    ids = np.array([[1, emb.vision_start, *[emb.video_pad] * 4, emb.vision_end, 2, emb.vision_start,
                     *[emb.video_pad] * 4, emb.vision_end, 3]], np.int64)
    pos, delta = emb.position_ids(ids, [], clips)
    # each pair: temporal = its start, 2x2 rows / columns; the second pair starts after the first's text
    assert pos[0, 0].tolist() == [0, 1, 2, 2, 2, 2, 4, 5, 6, 7, 7, 7, 7, 9, 10]
    assert pos[2, 0].tolist() == [0, 1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 7, 8, 9, 10]
    assert delta == 11 - ids.shape[1]


def test_frame_sampling_as_the_real() -> None:
    """fill_video_metadata's rules: given indices win; no do_sample_frames: every frame;
    ``num_frames``; ``fps`` (metadata fps, else 24) clamped to min / max frames (min over the
    frame count gives the frame count, the real's libstdc++ std::clamp); the real's errors."""
    off = qwen3_vl.VideoSampling()
    assert qwen3_vl.sample_indices(5, [], 0.0, off) == ([0, 1, 2, 3, 4], 0.0)
    assert qwen3_vl.sample_indices(5, [4, 0], 3.0, off) == ([4, 0], 3.0)
    num = qwen3_vl.VideoSampling(True, num_frames=4)
    assert qwen3_vl.sample_indices(10, [], 0.0, num)[0] == [0, 3, 6, 9]
    assert qwen3_vl.sample_indices(8, [], 0.0, num)[0] == [0, 2, 5, 7]  # 7/3 = 2.33, 4.67 -> 2, 5
    fps = qwen3_vl.VideoSampling(True, fps=2.0, min_frames=4, max_frames=768)
    assert qwen3_vl.sample_indices(10, [], 0.0, fps) == ([0, 3, 6, 9], 24.0)  # 10/24*2 = 0 -> 4
    assert len(qwen3_vl.sample_indices(30, [], 5.0, fps)[0]) == 12  # 30 / 5 * 2
    assert qwen3_vl.sample_indices(6, [], 0.0, qwen3_vl.VideoSampling(True, num_frames=3))[0] == [0, 3, 5]  # 2.5 up
    assert qwen3_vl.sample_indices(3, [], 0.0, fps)[0] == [0, 1, 2]
    with pytest.raises(ConfigError, match="num_frames and fps are mutually exclusive video config arguments."):
        qwen3_vl.sample_indices(4, [], 0.0, qwen3_vl.VideoSampling(True, fps=2.0, num_frames=3))
    with pytest.raises(UserInputError, match=r"Invalid number of frames \(5\) for video sampling."):
        qwen3_vl.sample_indices(3, [], 0.0, qwen3_vl.VideoSampling(True, num_frames=5))
    assert qwen3_vl.frame_timestamps([0, 3, 6], 0.0, 2) == pytest.approx([1.5 / 24, 6.0 / 24], rel=1e-6)
    with pytest.raises(UserInputError, match="fps must be non-negative"):
        qwen3_vl.frame_timestamps([0], -1.0, 2)


def test_video_config_sampling_matches_real(tmp_path: Path) -> None:
    """A video_preprocessor_config.json that samples by fps (and another pixel range): the real's
    texts and input token counts (a fresh real pipeline per case)."""
    for name in FOLDER.iterdir():
        if name.name != "golden.json":
            (tmp_path / name.name).symlink_to(name)
    cfg = json.loads((FOLDER / "preprocessor_config.json").read_text(encoding="utf-8"))
    cfg.update({"do_sample_frames": True, "fps": 2, "min_frames": 4, "max_frames": 768,
                "size": {"shortest_edge": 8192, "longest_edge": 16384}})
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    shim = genai_shim.VLMPipeline(tmp_path, "CPU", **CPU_PROPS)
    for lib_meta_fps in (None, 24.0):
        outs = []
        for lib, pipe in ((og, og.VLMPipeline(str(tmp_path), "CPU", **CPU_PROPS)), (genai_shim, shim)):
            kw: dict[str, Any] = {"videos": [ov.Tensor(make_video(12, 64, 64))]}
            if lib_meta_fps:
                meta = lib.VideoMetadata()
                meta.fps = lib_meta_fps
                kw["videos_metadata"] = [meta]
            r = pipe.generate("Describe the video.", max_new_tokens=MAX_NEW_TOKENS, **kw)
            outs.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        assert outs[0] == outs[1], lib_meta_fps


def test_pruning_matches_the_reals_goldens(shim: Any) -> None:
    """Visual-token pruning (golden ``pruning``, the real on CPU f32, margins >= 0.46): images at
    25 / 50 / 75 %, relevance weights 0.3 .. 1.0, two images, videos (each frame pair a region),
    an image with a video, and 100 % (nothing pruned); DeepStack rows follow the kept tokens."""
    cases = _cases("pruning")
    assert len(cases) == 13
    for name, want in cases.items():
        assert _pruning_run(shim, name) == (want["text"], want["num_input_tokens"]), name


def test_pruning_prunes_the_deepstack_rows(shim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pruning the DeepStack rows too the answer is not the real's."""
    want = _cases("pruning")["image_and_video_r50_w0.5"]
    emb = shim._embedder
    monkeypatch.setattr(emb, "keep_vision_rows", lambda flags: None)
    assert _pruning_run(shim, "image_and_video_r50_w0.5")[0] != want["text"]
    monkeypatch.undo()
    assert _pruning_run(shim, "image_and_video_r50_w0.5") == (want["text"], want["num_input_tokens"])


@pytest.mark.parametrize("setup", ["npuw_cpu", "emulated"])
def test_pruning_on_npu_gives_the_reals_cpu_text(setup: str) -> None:
    props = NPU_PROPS if setup == "npuw_cpu" else EMULATED
    pipe = genai_shim.VLMPipeline(FOLDER, "NPU", **props)
    cases = _cases("pruning")
    for name in ("r50_w0.5", "image_and_video_r50_w0.5"):
        assert _pruning_run(pipe, name) == (cases[name]["text"], cases[name]["num_input_tokens"]), name


def test_pruning_errors_as_the_real(shim: Any) -> None:
    with pytest.raises(ConfigError, match="Percentage is too small, would result in zero tokens"):
        shim.generate(PROMPT, images=[_image(64, 64)], max_new_tokens=2, pruning_ratio=90)
    assert shim.generate(PROMPT, max_new_tokens=2, pruning_ratio=50).texts  # no image: nothing to prune
