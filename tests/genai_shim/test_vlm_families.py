"""genai_shim.VLMPipeline on the families after Qwen2-VL, side by side with the real
openvino_genai.VLMPipeline on the same tiny exports (tests/fixtures/vlm/<family>-fp32) under f32
hints: Qwen2.5-VL (windowed vision attention), LLaVA (CLIP preprocessing on the host, <image>
expansion, plain positions) and LLaVA-NeXT (LLaVA with "anyres" tiles, unpadding and newline
rows).  An image, text only, a 3-turn chat with images, on "CPU", on "NPU"
with NPUW_DEVICES=CPU, and the language model on the emulated NPU."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from genai_shim.vlm.common import center_crop_box
from genai_shim.vlm.llava import CLIPConfig, clip_normalize, pillow_bicubic
from genai_shim.vlm.qwen2_5_vl import window_index
from ov_npu_emu.errors import ConfigError, PromptTooLongError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vlm"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import CHAT, CPU_PROPS, MAX_NEW_TOKENS, NPU_PROPS, PROMPT, chat_turns  # noqa: E402
from vlm_goldens import test_image as make_image  # noqa: E402

og = pytest.importorskip("openvino_genai")

FAMILIES = ("qwen2_5vl-fp32", "llava-fp32", "llava_next-fp32", "llava_next_video-fp32")
#: the language model on the emulated NPU, exact (the cross-branch rule: f32 said explicitly)
EMULATED = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_LLM_SHARED_HEAD": "NO"}


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "golden.json").read_text(encoding="utf-8"))
    return data


def _config(lib: Any) -> Any:
    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    return cfg


def _image(h: int = 80, w: int = 80) -> ov.Tensor:
    return ov.Tensor(make_image(h, w))


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def cpu_pair(family: str) -> tuple[Any, Any]:
    folder = FIXTURES / family
    return genai_shim.VLMPipeline(folder, "CPU", **CPU_PROPS), og.VLMPipeline(str(folder), "CPU", **CPU_PROPS)


_chat = chat_turns


def _history_chat(pipe: Any, lib: Any) -> list[tuple[str, int]]:
    """A ChatHistory of three turns with images in turns 1 (80x80) and 3 (64x96)."""
    h = lib.ChatHistory()
    out = []
    for i, prompt in enumerate(CHAT):
        h.append({"role": "user", "content": prompt})
        kw = {"images": [_image()]} if i == 0 else {"images": [_image(64, 96)]} if i == 2 else {}
        r = pipe.generate(h, generation_config=_config(lib), **kw)
        out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        h.append({"role": "assistant", "content": r.texts[0]})
    return out


@pytest.mark.parametrize("hw", [(80, 80), (64, 96), (30, 200), None], ids=["80x80", "64x96", "30x200", "text_only"])
def test_cpu_matches_real(cpu_pair: tuple[Any, Any], family: str, hw: tuple[int, int] | None) -> None:
    shim, real = cpu_pair
    kw = {"images": [_image(*hw)]} if hw else {}
    ours = shim.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    theirs = real.generate(PROMPT, generation_config=_config(og), **kw)
    assert ours.texts == theirs.texts
    assert ours.perf_metrics.get_num_input_tokens() == theirs.perf_metrics.get_num_input_tokens()
    assert ours.perf_metrics.get_num_generated_tokens() == theirs.perf_metrics.get_num_generated_tokens()
    if hw in ((80, 80), None):
        key = "image" if hw else "text_only"
        assert ours.texts[0] == _golden(family)["cpu"][key]["text"]


def test_cpu_image_changes_the_answer(cpu_pair: tuple[Any, Any]) -> None:
    shim, _ = cpu_pair
    a = shim.generate(PROMPT, images=[_image()], generation_config=_config(genai_shim)).texts[0]
    b = shim.generate(PROMPT, images=[ov.Tensor(np.ascontiguousarray(make_image()[:, ::-1]))],
                      generation_config=_config(genai_shim)).texts[0]
    c = shim.generate(PROMPT, generation_config=_config(genai_shim)).texts[0]
    assert len({a, b, c}) == 3


def test_gray_and_rgba_images(cpu_pair: tuple[Any, Any], family: str) -> None:
    """Qwen2.5-VL takes gray and RGBA as the real's Qwen graphs do (alpha dropped); the CLIP-style
    families refuse them: the real reads their bytes with a 3-channel stride (RGBA's text is
    neither RGB's nor anything meaningful, measured), a bug not copied."""
    shim, _ = cpu_pair
    rgba = np.random.default_rng(0).integers(0, 256, (48, 40, 4), dtype=np.uint8)
    if family.startswith("qwen"):
        texts = [shim.generate(PROMPT, image=ov.Tensor(np.ascontiguousarray(v)), max_new_tokens=6).texts[0]
                 for v in (rgba, rgba[..., :3])]
        assert texts[0] == texts[1]
        return
    for channels in (rgba, rgba[..., :1]):
        with pytest.raises(UserInputError, match=r"3 \(RGB\) channels"):
            shim.generate(PROMPT, image=ov.Tensor(np.ascontiguousarray(channels)), max_new_tokens=2)


def test_cpu_chat_matches_real(cpu_pair: tuple[Any, Any], family: str) -> None:
    shim, real = cpu_pair
    ours = _chat(shim, genai_shim)
    assert ours == _chat(real, og)
    assert [t for t, _ in ours] == [c["text"] for c in _golden(family)["cpu"]["chat"]]


def test_cpu_history_chat_with_two_images_matches_real(cpu_pair: tuple[Any, Any]) -> None:
    shim, real = cpu_pair
    assert _history_chat(shim, genai_shim) == _history_chat(real, og)


def test_two_images_in_one_prompt_match_real(cpu_pair: tuple[Any, Any]) -> None:
    shim, real = cpu_pair
    kw = {"images": [_image(), _image(64, 96)]}
    ours = shim.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    theirs = real.generate(PROMPT, generation_config=_config(og), **kw)
    assert ours.texts == theirs.texts
    assert ours.perf_metrics.get_num_input_tokens() == theirs.perf_metrics.get_num_input_tokens()


# -- NPU: the real NPUW on CPU, and the language model on the emulated NPU -------------------------
@pytest.fixture(scope="module")
def npu_pair(family: str) -> tuple[Any, Any]:
    folder = FIXTURES / family
    return genai_shim.VLMPipeline(folder, "NPU", **NPU_PROPS), og.VLMPipeline(str(folder), "NPU", **NPU_PROPS)


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_npu_matches_real(npu_pair: tuple[Any, Any], family: str, with_image: bool) -> None:
    shim, real = npu_pair
    kw = {"images": [_image()]} if with_image else {}
    ours = shim.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    theirs = real.generate(PROMPT, generation_config=_config(og), **kw)
    assert ours.texts == theirs.texts
    assert ours.perf_metrics.get_num_input_tokens() == theirs.perf_metrics.get_num_input_tokens()
    assert ours.texts[0] == _golden(family)["npuw_cpu"]["image" if with_image else "text_only"]["text"]


def test_npu_chat_matches_real(npu_pair: tuple[Any, Any], family: str) -> None:
    shim, real = npu_pair
    ours = _chat(shim, genai_shim)
    assert ours == _chat(real, og)
    assert _history_chat(shim, genai_shim) == _history_chat(real, og)


def test_npu_prompt_over_max_prompt_len(family: str) -> None:
    expected = _golden(family)["npu_too_long"]
    ours = genai_shim.VLMPipeline(FIXTURES / family, "NPU", **NPU_PROPS, MAX_PROMPT_LEN=expected["MAX_PROMPT_LEN"])
    with pytest.raises(PromptTooLongError) as err:
        ours.generate(PROMPT, images=[_image()], max_new_tokens=4)
    assert str(err.value) in expected["error"]


@pytest.fixture(scope="module")
def emulated(family: str) -> Any:
    return genai_shim.VLMPipeline(FIXTURES / family, "NPU", **EMULATED)


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_emulated_npu_gives_the_real_npus_text(emulated: Any, family: str, with_image: bool) -> None:
    key = "image" if with_image else "text_only"
    kw = {"images": [_image()]} if with_image else {}
    ours = emulated.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    golden = _golden(family)["npuw_cpu"][key]
    assert ours.texts[0] == golden["text"]
    assert ours.perf_metrics.get_num_input_tokens() == golden["num_input_tokens"]


def test_emulated_npu_chat_gives_the_real_npus_text(emulated: Any, family: str) -> None:
    ours = _chat(emulated, genai_shim)
    assert [t for t, _ in ours] == [c["text"] for c in _golden(family)["npuw_cpu"]["chat"]]


# -- the family pieces ------------------------------------------------------------------------------
def test_window_index_matches_the_real_rule() -> None:
    """A 6x6 patch grid, merge 2: a 3x3 merged grid in 2x2 windows (padded to 4x4): windows of
    4, 2, 2 and 1 merged patches, in row order inside each window."""
    order, cu = window_index([(1, 6, 6)], 2, 2)
    assert order.tolist() == [0, 1, 3, 4, 2, 5, 6, 7, 8]
    assert cu == [0, 16, 24, 32, 36]
    # a second image continues the numbering; frames repeat the windows
    order, cu = window_index([(1, 4, 4), (2, 4, 4)], 2, 2)
    assert order.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert cu == [0, 16, 32, 48]


def test_qwen2_5_window_inputs_matter() -> None:
    """The merger's window inputs change its output: one window per image is not Qwen2.5-VL."""
    pipe = genai_shim.VLMPipeline(FIXTURES / "qwen2_5vl-fp32", "CPU", **CPU_PROPS)
    emb = pipe._embedder
    encoded = emb.encode_images([_image()])
    windowed = emb.merge(encoded)
    emb.window = 1000
    assert not np.allclose(windowed, emb.merge(encoded), atol=1e-3)


def test_llava_preprocessing_pieces() -> None:
    cfg = CLIPConfig.read(FIXTURES / "llava-fp32")
    assert (cfg.shortest_edge, cfg.crop_height, cfg.crop_width) == (56, 56, 56)
    flat = np.full((10, 12, 3), 77, np.uint8)
    assert np.array_equal(pillow_bicubic(flat, 7, 5), np.full((5, 7, 3), 77, np.uint8))  # weights sum to 1
    # Pillow 13's Image.resize(..., BICUBIC) on these (recorded in a venv with Pillow): up and down
    ramp = np.repeat(np.arange(0, 240, 20, dtype=np.uint8)[None, :, None], 3, axis=2)  # [1, 12, 3]
    assert pillow_bicubic(ramp, 24, 1)[0, :, 0].tolist() == [
        0, 3, 14, 25, 35, 45, 55, 65, 75, 85, 95, 105, 115, 125, 135, 145, 155, 165, 175, 185, 195, 206, 217, 222]
    rows = [[248, 207, 237, 211, 5, 60, 109], [82, 36, 222, 8, 15, 144, 24], [11, 104, 226, 159, 163, 41, 70],
            [40, 0, 63, 255, 8, 25, 146], [219, 100, 72, 21, 16, 107, 61]]
    small = np.repeat(np.array(rows, np.uint8)[:, :, None], 3, axis=2)
    assert pillow_bicubic(small, 3, 4)[..., 0].tolist() == [[209, 135, 62], [93, 115, 70], [49, 153, 69],
                                                            [117, 48, 70]]
    top, left, h, w = center_crop_box(5, 7, 3, 3)
    crop = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)[top:top + h, left:left + w]
    assert crop.shape == (3, 3, 3) and crop[0, 0, 0] == (1 * 7 + 2) * 3
    x = clip_normalize(np.zeros((2, 2, 3), np.uint8), (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    assert x.shape == (1, 3, 2, 2) and np.all(x == -2.0)


def test_resize_of_a_crop_is_the_crop_of_the_resize() -> None:
    """pillow_resize(..., crop=box) computes only the box, pixel for pixel the full resize's."""
    from genai_shim.vlm.common import BILINEAR, center_crop_box, pillow_resize

    rng = np.random.default_rng(5)
    for (h, w), (nh, nw), filt in [((5, 300), (56, 3360), None), ((300, 5), (3360, 56), None),
                                   ((77, 100), (42, 56), None), ((40, 33), (40, 90), BILINEAR),
                                   ((64, 64), (64, 64), None)]:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        kw = {} if filt is None else {"filt": filt}
        full = pillow_resize(img, nw, nh, **kw)
        for box in (center_crop_box(nh, nw, min(nh, 40), min(nw, 40)), (0, 0, 1, nw), (nh - 3, nw - 5, 3, 5)):
            top, left, ch, cw = box
            part = pillow_resize(img, nw, nh, crop=box, **kw)
            assert np.array_equal(part, full[top:top + ch, left:left + cw]), (h, w, nh, nw, box)


def test_extreme_aspect_image_is_cheap_and_the_reals(cpu_pair: tuple[Any, Any], family: str) -> None:
    """A 1x100000 image on LLaVA: the shortest edge to 56 makes the resized image 56 x 5.6M, of
    which the centre crop keeps 56 x 56; ours resizes the crop only (it built the whole image:
    11 GB and 51 s; the real 1.4 GB, 2.5 s). Same text as the real (at 1x20000)."""
    import tracemalloc

    from genai_shim.vlm.llava import clip_pixels

    if family != "llava-fp32":
        pytest.skip("LLaVA's preprocessing")
    shim = cpu_pair[0]
    cfg = CLIPConfig.read(FIXTURES / "llava-fp32")
    tracemalloc.start()
    clip_pixels(np.full((1, 100_000, 3), 100, np.uint8), cfg)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20, peak  # the input is 0.3 MB; the whole resize would be 17 GB of int32
    image = [ov.Tensor(np.full((1, 1, 20_000, 3), 100, np.uint8))]
    # a fresh real pipeline: the module's shared one answered otherwise here after this module's
    # earlier LLaVA tests (seen with test_gray_and_rgba_images and test_two_images_in_one_prompt_
    # match_real before it, not with either alone; not reproduced outside pytest - open)
    real = og.VLMPipeline(str(FIXTURES / family), "CPU", **CPU_PROPS)
    assert (shim.generate(PROMPT, images=image, max_new_tokens=4).texts
            == real.generate(PROMPT, images=image, max_new_tokens=4).texts)


def test_llava_image_tags(cpu_pair: tuple[Any, Any], family: str) -> None:
    """The native tag where the user puts it gives the real's text; a tag count that does not
    match the images is the real's error."""
    if not family.startswith("llava"):
        pytest.skip("LLaVA's <image> tag")
    shim, _ = cpu_pair
    # a fresh real pipeline: the module's one, after test_two_images_in_one_prompt_match_real, gave
    # another text here inside pytest (not reproduced in a plain script; see docs/genai_shim.md)
    real = og.VLMPipeline(str(FIXTURES / family), "CPU", **CPU_PROPS)
    prompt = "Look: <image> " + PROMPT
    ours = shim.generate(prompt, images=[_image()], generation_config=_config(genai_shim))
    theirs = real.generate(prompt, images=[_image()], generation_config=_config(og))
    assert ours.texts == theirs.texts
    with pytest.raises(UserInputError, match="native vision tags"):
        shim.generate("<image><image>" + PROMPT, images=[_image()], max_new_tokens=2)


def test_llava_next_anyres_pieces(tmp_path: Path) -> None:
    """The real's select_best_resolution / resize_and_pad_image / unpad_image / packing, on cases
    worked by hand (pairs read as width, height)."""
    from genai_shim.vlm.llava_next import AnyResConfig, best_resolution, pack_features, resize_and_pad, unpad
    from ov_npu_emu.errors import ConfigError

    pins = ((56, 112), (112, 56), (112, 112), (56, 168))
    assert best_resolution(80, 80, pins) == (112, 112)  # keeps 6400 pixels; the others 3136
    assert best_resolution(120, 50, pins) == (112, 56)  # 112x46 kept in both wide grids: less waste
    assert best_resolution(20, 60, pins) == (56, 112)  # every grid keeps all 1200 pixels: the least waste
    img = np.full((50, 120, 3), 200, np.uint8)
    padded = resize_and_pad(img, 112, 56)  # 112 x ceil(50 * 112/120 = 46.67) = 47 rows, 4 black above
    assert padded.shape == (56, 112, 3)
    assert not padded[:4].any() and padded[4:51].min() == 200 and not padded[51:].any()
    fmap = np.arange(2 * 8 * 4, dtype=np.float32).reshape(2, 8, 4)  # [E, h, w]: a tall map
    assert unpad(fmap, 10, 10).shape == (2, 4, 4)  # square original: the middle 4 of 8 rows
    assert np.array_equal(unpad(fmap, 10, 10), fmap[:, 2:6])
    feats = np.random.default_rng(0).standard_normal((3, 4, 2)).astype(np.float32)  # base + 1x2 tiles of 2x2
    newline = np.array([9.0, -9.0], np.float32)
    packed = pack_features(feats, (2, 2), (1, 2), (20, 40), newline)
    assert packed.shape == (4 + 2 * 5, 2)  # base rows, then 2 rows of 4 features + a newline each
    assert np.array_equal(packed[:4], feats[0])
    assert np.array_equal(packed[4:8], np.concatenate([feats[1][:2], feats[2][:2]]))  # row 0 of both tiles
    assert np.array_equal(packed[8], newline)
    with pytest.raises(ConfigError, match="features per tile"):  # a CLS row kept ('full'): the real fails too
        pack_features(np.zeros((3, 5, 2), np.float32), (2, 2), (1, 2), (20, 40), newline)
    cfg = json.loads((FIXTURES / "llava_next-fp32" / "config.json").read_text(encoding="utf-8"))
    del cfg["image_newline"]
    with pytest.raises(ConfigError, match="image_newline"):
        AnyResConfig.read(FIXTURES / "llava_next-fp32", cfg)


def test_vlm_perf_metrics_as_the_real(cpu_pair: tuple[Any, Any], family: str) -> None:
    """VLMPerfMetrics' getters and raw series (µs, as the real's binding returns them): one vision
    encoding, preparation and text-embedding entry per generate, one slice per image; the
    preparation includes the vision encoding; ``+`` concatenates the series (the real's C++
    operator+; its Python ``+=`` is PerfMetrics' and keeps the left's VLM series)."""
    if family != "llava_next-fp32":
        pytest.skip("one family is enough for the metrics")
    shim, real = cpu_pair
    kw = {"images": [_image(), _image(64, 96)]}
    ours = shim.generate(PROMPT, generation_config=_config(genai_shim), **kw).perf_metrics
    theirs = real.generate(PROMPT, generation_config=_config(og), **kw).perf_metrics
    for name in ("prepare_embeddings_durations", "vision_encoding_durations", "audio_encoding_durations",
                 "text_embedding_durations"):
        assert len(getattr(ours.vlm_raw_metrics, name)) == len(getattr(theirs.vlm_raw_metrics, name)), name
    assert list(ours.vlm_raw_metrics.per_image_slice_counts) == list(theirs.vlm_raw_metrics.per_image_slice_counts)
    assert ours.get_total_image_slice_count() == theirs.get_total_image_slice_count() == 2
    assert ours.get_audio_encoding_duration().mean == theirs.get_audio_encoding_duration().mean == -1.0
    vision, prepare = ours.get_vision_encoding_duration().mean, ours.get_prepare_embeddings_duration().mean
    text = ours.get_text_embedding_duration().mean
    assert 0.0 < text < prepare and 0.0 < vision < prepare < ours.get_generate_duration().mean
    assert prepare == pytest.approx(ours.vlm_raw_metrics.prepare_embeddings_durations[0] / 1000.0)  # µs -> ms
    both = ours + ours
    assert len(both.vlm_raw_metrics.vision_encoding_durations) == 2
    assert both.get_total_image_slice_count() == 4


def _models_in_memory(folder: Path) -> tuple[dict[str, Any], Any]:
    """The encrypted_model_vlm sample's inputs: every IR but the tokenizers' as (XML text, u8
    weights Tensor), named without ``openvino_`` / ``_model``, and the tokenizer from memory."""
    def ir(name: str) -> tuple[str, ov.Tensor]:
        return ((folder / f"{name}.xml").read_text(encoding="utf-8"),
                ov.Tensor(np.fromfile(folder / f"{name}.bin", np.uint8)))

    models = {x.stem.removeprefix("openvino_").removesuffix("_model"): ir(x.stem) for x in folder.glob("*.xml")
              if "tokenizer" not in x.name and x.with_suffix(".bin").exists()}
    return models, genai_shim.Tokenizer(*ir("openvino_tokenizer"), *ir("openvino_detokenizer"))


def test_models_from_memory_match_the_folder(cpu_pair: tuple[Any, Any], family: str) -> None:
    """The real's second constructor (models map, tokenizer, config dir, device): the texts of
    the folder's pipeline; a map without a model the family reads names it."""
    folder = FIXTURES / family
    models, tok = _models_in_memory(folder)
    pipe = genai_shim.VLMPipeline(models, tok, folder, "CPU", **CPU_PROPS)
    shim, _ = cpu_pair
    for kw in ({"images": [_image()]}, {}):
        ours = pipe.generate(PROMPT, generation_config=_config(genai_shim), **kw)
        assert ours.texts == shim.generate(PROMPT, generation_config=_config(genai_shim), **kw).texts
    del models["vision_embeddings"]
    with pytest.raises(ConfigError, match="'vision_embeddings'"):
        genai_shim.VLMPipeline(models, tok, folder, "CPU")
    with pytest.raises(UserInputError, match="config_dir_path"):
        genai_shim.VLMPipeline(models, tok)


def _video(h: int, w: int, frames: int) -> ov.Tensor:
    """[frames, h, w, 3] uint8: the test image shifted along its width frame by frame."""
    base = make_image(h, w)[0]
    return ov.Tensor(np.ascontiguousarray(np.stack([np.roll(base, 7 * i, axis=1) for i in range(frames)])))


VIDEO_CASES = {
    "video": {"videos": [_video(70, 90, 4)]},
    "wide-video": {"videos": [_video(40, 100, 3)]},
    "image-and-video": {"images": [_image()], "videos": [_video(70, 90, 2)]},
    "two-videos": {"videos": [_video(70, 90, 2), _video(60, 60, 5)]},
}


@pytest.fixture(scope="module")
def video_pair() -> tuple[Any, Any]:
    """Fresh pipelines for the video tests: the module's real pipeline, after the chat and
    two-image tests, gives other video texts than a fresh one (ours does not change; the class
    of the real's state noted in docs/genai_shim.md)."""
    folder = FIXTURES / "llava_next_video-fp32"
    return genai_shim.VLMPipeline(folder, "CPU", **CPU_PROPS), og.VLMPipeline(str(folder), "CPU", **CPU_PROPS)


@pytest.mark.parametrize("case", list(VIDEO_CASES))
def test_llava_next_video_videos_match_real(video_pair: tuple[Any, Any], case: str) -> None:
    """Videos (frames through the real's preprocessing graph, the vision tower, the 2x2 pool and
    the projector; <video> tags before the image tags): the real's texts and token counts."""
    shim, real = video_pair
    kw = VIDEO_CASES[case]
    ours = shim.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    theirs = real.generate(PROMPT, generation_config=_config(og), **kw)
    assert ours.texts == theirs.texts
    assert ours.perf_metrics.get_num_input_tokens() == theirs.perf_metrics.get_num_input_tokens()


def test_llava_next_video_tags_and_errors(video_pair: tuple[Any, Any]) -> None:
    shim, real = video_pair
    prompt = "Watch <video> then " + PROMPT  # a native tag where the user puts it
    kw = {"videos": [_video(70, 90, 2)]}
    assert (shim.generate(prompt, generation_config=_config(genai_shim), **kw).texts
            == real.generate(prompt, generation_config=_config(og), **kw).texts)
    with pytest.raises(UserInputError, match="native vision tags"):
        shim.generate("<video><video>" + PROMPT, videos=[_video(70, 90, 2)], max_new_tokens=2)
    with pytest.raises(UserInputError, match="N, H, W, C"):
        shim.generate(PROMPT, videos=[ov.Tensor(np.zeros((4, 8, 8), np.uint8))], max_new_tokens=2)
    # the real: a CPU-plugin shape check (0-pixel frames), an AvgPool shape error (no frame)
    with pytest.raises(UserInputError, match="at least 1x1 pixel"):
        shim.generate(PROMPT, videos=[ov.Tensor(np.zeros((2, 8, 0, 3), np.uint8))], max_new_tokens=2)
    with pytest.raises(UserInputError, match="at least one frame"):
        shim.generate(PROMPT, videos=[ov.Tensor(np.zeros((0, 8, 8, 3), np.uint8))], max_new_tokens=2)
    meta = genai_shim.VideoMetadata()
    meta.frames_indices = [0, 1, 2]
    with pytest.raises(UserInputError, match="cannot be greater"):
        shim.generate(PROMPT, videos=[_video(70, 90, 2)], videos_metadata=[meta], max_new_tokens=2)
    with pytest.raises(UserInputError, match="must match"):
        shim.generate(PROMPT, videos=[_video(70, 90, 4)], videos_metadata=[meta, meta], max_new_tokens=2)


def _video_chats(pipe: Any, lib: Any) -> list[tuple[str, int]]:
    """A ChatHistory chat (a video in turn 1, an image in turn 3), a start_chat chat with a video
    in turn 1, and a video sampled by VideoMetadata.frames_indices (the upstream
    video_to_text_chat sample's way)."""
    out = []
    h = lib.ChatHistory()
    for i, q in enumerate(["Describe the video.", "What moves?", "And now?"]):
        h.append({"role": "user", "content": q})
        kw = {"videos": [_video(70, 90, 4)]} if i == 0 else {"images": [_image()]} if i == 2 else {}
        r = pipe.generate(h, generation_config=_config(lib), **kw)
        out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        h.append({"role": "assistant", "content": r.texts[0]})
    pipe.start_chat()
    for i, q in enumerate(["Describe the video.", "What moves?"]):
        r = pipe.generate(q, generation_config=_config(lib), **({"videos": [_video(60, 60, 3)]} if i == 0 else {}))
        out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
    pipe.finish_chat()
    meta = lib.VideoMetadata()
    meta.frames_indices = [0, 2, 4]
    r = pipe.generate(PROMPT, videos=[_video(70, 90, 6)], videos_metadata=[meta], generation_config=_config(lib))
    out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
    return out


def test_llava_next_video_chats_match_real(video_pair: tuple[Any, Any]) -> None:
    shim, real = video_pair
    assert _video_chats(shim, genai_shim) == _video_chats(real, og)


def test_videos_need_a_video_family(cpu_pair: tuple[Any, Any], family: str) -> None:
    if family in ("llava_next_video-fp32", "qwen2_5vl-fp32"):
        pytest.skip("this family takes videos")
    shim, _ = cpu_pair
    with pytest.raises(ConfigError, match="videos"):
        shim.generate(PROMPT, videos=[_video(70, 90, 2)], max_new_tokens=2)


def test_llava_next_video_on_npu_matches_real() -> None:
    """A video on "NPU" (NPUW_DEVICES=CPU, f32 sub-configs) and with the language model on the
    emulated NPU: the real NPU's text."""
    folder = FIXTURES / "llava_next_video-fp32"
    real = og.VLMPipeline(str(folder), "NPU", **NPU_PROPS)
    kw = {"videos": [_video(70, 90, 4)]}
    theirs = real.generate(PROMPT, generation_config=_config(og), **kw).texts
    for props in (NPU_PROPS, EMULATED):
        ours = genai_shim.VLMPipeline(folder, "NPU", **props)
        assert ours.generate(PROMPT, generation_config=_config(genai_shim), **kw).texts == theirs


@pytest.fixture(scope="module")
def vlm_lora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PEFT-style LoRA (rank 4) on the fixtures' 2-layer language model: q, v and down
    projections, B not zero (tools/make_lora_fixture.py's writer)."""
    from make_lora_fixture import write_vlm_lora

    return write_vlm_lora(tmp_path_factory.mktemp("vlm_lora") / "lora.safetensors")


@pytest.mark.parametrize("setup", ["CPU", "NPU", "emulated"])
def test_lora_adapters_match_real(vlm_lora: Path, setup: str) -> None:
    """adapters=AdapterConfig at construction (the visual_language_lora sample's way): the real's
    text on CPU, on NPU (NPUW_DEVICES=CPU) and with the language model on the emulated NPU; an
    empty AdapterConfig in generate() gives the plain model's text (the real's, on a fresh
    pipeline; after a LoRA generate the real gives a third text: docs/genai_shim.md)."""
    folder = FIXTURES / "llava_next-fp32"
    device, props = {"CPU": ("CPU", CPU_PROPS), "NPU": ("NPU", NPU_PROPS), "emulated": ("NPU", EMULATED)}[setup]

    def adapters(lib: Any) -> Any:
        config = lib.AdapterConfig()
        config.add(lib.Adapter(str(vlm_lora)), 0.7)
        return config

    kw = {"images": [_image()]}
    theirs = og.VLMPipeline(str(folder), "NPU" if setup == "emulated" else device,
                            adapters=adapters(og), **(NPU_PROPS if setup == "emulated" else props))
    ours = genai_shim.VLMPipeline(folder, device, adapters=adapters(genai_shim), **props)
    with_lora = ours.generate(PROMPT, generation_config=_config(genai_shim), **kw).texts
    assert with_lora == theirs.generate(PROMPT, generation_config=_config(og), **kw).texts
    plain = ours.generate(PROMPT, generation_config=_config(genai_shim), adapters=genai_shim.AdapterConfig(), **kw)
    assert plain.texts[0] == _golden("llava_next-fp32")["cpu"]["image"]["text"][:len(plain.texts[0])]
    assert plain.texts != with_lora


def test_adapters_in_generate_need_them_at_construction(cpu_pair: tuple[Any, Any], vlm_lora: Path) -> None:
    shim, _ = cpu_pair
    config = genai_shim.AdapterConfig()
    config.add(genai_shim.Adapter(str(vlm_lora)), 1.0)
    with pytest.raises(ConfigError, match="adapters"):
        shim.generate(PROMPT, adapters=config, max_new_tokens=2)


def _recorded_call(pipe: Any, lib: Any, out: list[Any], prompt: Any, images: list[Any]) -> str:
    """generate() with the module's config; appends (text, input tokens) or the error's last line
    to ``out`` (the real raises RuntimeError, ours typed errors: their texts are compared)."""
    try:
        r = pipe.generate(prompt, images=images, generation_config=_config(lib))
    except Exception as e:  # noqa: BLE001
        out.append(str(e).strip().splitlines()[-1])
        return ""
    out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
    return str(r.texts[0])


def _universal_tags(pipe: Any, lib: Any, native_tag: str) -> list[Any]:
    """Universal <ov_genai_image_i> tags: images named out of order, twice, one of two; mixed with
    the native tag, an index past the images; in a start_chat chat and a ChatHistory (ids count
    the chat's earlier images; an older one is the real's error)."""
    a, b = _image(), _image(64, 96)
    out: list[Any] = []
    call = functools.partial(_recorded_call, pipe, lib, out)

    for prompt, images in (("<ov_genai_image_1> first, then <ov_genai_image_0>. " + PROMPT, [a, b]),
                           ("Twice: <ov_genai_image_0> and <ov_genai_image_0>", [a]),
                           ("Only <ov_genai_image_1>", [a, b]), (native_tag + " and <ov_genai_image_0>", [a]),
                           ("<ov_genai_image_3>", [a])):
        call(prompt, images)
    pipe.start_chat()
    for prompt, images in (("<ov_genai_image_0> " + PROMPT, [a]), ("Now <ov_genai_image_1>", [b]),
                           ("Again <ov_genai_image_0>", [])):
        call(prompt, images)
    pipe.finish_chat()
    h = lib.ChatHistory()
    for prompt, images in (("<ov_genai_image_0> " + PROMPT, [a]), ("Now <ov_genai_image_1>", [b])):
        h.append({"role": "user", "content": prompt})
        h.append({"role": "assistant", "content": call(h, images)})
    return out


def test_universal_image_tags_match_real(family: str) -> None:
    """Fresh pipelines: the module's real one, after the earlier tests, refuses the first call's
    <ov_genai_image_1> ("Referring to older images/videos is not supported.": its image ids keep
    state from earlier calls; no single earlier call reproduced it, docs/genai_shim.md)."""
    folder = FIXTURES / family
    shim, real = genai_shim.VLMPipeline(folder, "CPU", **CPU_PROPS), og.VLMPipeline(str(folder), "CPU", **CPU_PROPS)
    tag = shim._embedder.native_tag
    assert _universal_tags(shim, genai_shim, tag) == _universal_tags(real, og, tag)


def _multipart_chat(pipe: Any, lib: Any) -> list[Any]:
    """A ChatHistory of multipart user messages (text and image parts; an image part is the next
    image given with the message), then the real's format errors."""
    a, b = _image(), _image(64, 96)
    out: list[Any] = []
    call = functools.partial(_recorded_call, pipe, lib, out)

    h = lib.ChatHistory()
    for content, images in (
        ([{"type": "text", "text": "Look: "}, {"type": "image"}, {"type": "text", "text": " and "}, {"type": "image"},
          {"type": "text", "text": " " + PROMPT}], [a, b]),
        ([{"type": "text", "text": "Now this one "}, {"type": "image"}], [b]),
        ([{"type": "text", "text": "Thanks."}], []),
    ):
        h.append({"role": "user", "content": content})
        h.append({"role": "assistant", "content": call(h, images)})
    for bad, images in (([{"type": "audio"}], []), ([{"type": "image"}, {"type": "image"}], [a])):
        h2 = lib.ChatHistory()
        h2.append({"role": "user", "content": bad})
        call(h2, images)
    h.append({"role": "user", "content": PROMPT})  # a string after multipart messages
    call(h, [])
    return out


def test_multipart_chat_history_matches_real(family: str) -> None:
    folder = FIXTURES / family
    shim, real = genai_shim.VLMPipeline(folder, "CPU", **CPU_PROPS), og.VLMPipeline(str(folder), "CPU", **CPU_PROPS)
    assert _multipart_chat(shim, genai_shim) == _multipart_chat(real, og)
