"""genai_shim.VLMPipeline side by side with the real openvino_genai.VLMPipeline on the tiny
Qwen2-VL export (tests/fixtures/vlm/qwen2vl-fp32), under f32 hints: an image, text only, a
3-turn chat with the image in the first turn, and the NPU's over-long prompt error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from genai_shim.vlm.qwen2vl import smart_resize
from ov_npu_emu.errors import ConfigError, PromptTooLongError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "vlm" / "qwen2vl-fp32"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import CHAT, CPU_PROPS, MAX_NEW_TOKENS, NPU_PROPS, PROMPT, chat_turns  # noqa: E402
from vlm_goldens import test_image as make_image  # noqa: E402

GOLDEN = json.loads((FOLDER / "golden.json").read_text(encoding="utf-8"))

og = pytest.importorskip("openvino_genai")


def _config(lib: Any) -> Any:
    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    return cfg


def _image() -> ov.Tensor:
    return ov.Tensor(make_image())


@pytest.fixture(scope="module")
def shim_cpu() -> Any:
    return genai_shim.VLMPipeline(FOLDER, "CPU", **CPU_PROPS)


@pytest.fixture
def real_cpu() -> Any:
    """A fresh real pipeline per test: a long-lived one's texts change with what it ran before
    (the real's state across calls, docs/genai_shim.md), which made the comparisons depend on
    the test order."""
    return og.VLMPipeline(str(FOLDER), "CPU", **CPU_PROPS)


def test_smart_resize_matches_the_real_rules() -> None:
    assert smart_resize(64, 96, 28, 3136, 12544) == (56, 84)
    assert smart_resize(300, 200, 28, 3136, 12544) == (112, 84)  # over max_pixels: scaled down
    assert smart_resize(20, 20, 28, 3136, 12544) == (56, 56)  # under min_pixels: scaled up
    with pytest.raises(UserInputError, match="aspect ratio"):
        smart_resize(1, 300, 28, 3136, 12544)


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_cpu_matches_real(shim_cpu: Any, real_cpu: Any, with_image: bool) -> None:
    kw = {"images": [_image()]} if with_image else {}
    ours = shim_cpu.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    real = real_cpu.generate(PROMPT, generation_config=_config(og), **kw)
    assert isinstance(ours, genai_shim.VLMDecodedResults)
    assert ours.texts == real.texts
    assert ours.perf_metrics.get_num_input_tokens() == real.perf_metrics.get_num_input_tokens()
    assert ours.perf_metrics.get_num_generated_tokens() == real.perf_metrics.get_num_generated_tokens()
    assert ours.texts[0] == GOLDEN["cpu"]["image" if with_image else "text_only"]["text"]


def test_image_changes_the_answer(shim_cpu: Any) -> None:
    """The vision path matters: the image and a different image give different answers."""
    cfg = _config(genai_shim)
    a = shim_cpu.generate(PROMPT, image=_image(), generation_config=cfg).texts[0]
    other = ov.Tensor(np.ascontiguousarray(make_image()[:, ::-1]))
    b = shim_cpu.generate(PROMPT, images=[other], generation_config=cfg).texts[0]
    assert a != b


def test_cpu_chat_matches_real(shim_cpu: Any, real_cpu: Any) -> None:
    shim_cpu.start_chat()
    real_cpu.start_chat()
    try:
        for i, prompt in enumerate(CHAT):
            kw = {"images": [_image()]} if i == 0 else {}
            ours = shim_cpu.generate(prompt, generation_config=_config(genai_shim), **kw)
            real = real_cpu.generate(prompt, generation_config=_config(og), **kw)
            assert ours.texts == real.texts, i
            assert ours.perf_metrics.get_num_input_tokens() == real.perf_metrics.get_num_input_tokens()
    finally:
        shim_cpu.finish_chat()
        real_cpu.finish_chat()


def _history_chat(pipe: Any, lib: Any) -> list[tuple[str, int]]:
    """The upstream chat sample's way: one ChatHistory the caller extends with each answer;
    images with turns 1 and 3 only (later turns still see them); then the history edited back
    to its first answer and asked again; then a turn the streamer cancels, which is forgotten."""
    h = lib.ChatHistory()
    out = []
    for i, prompt in enumerate((*CHAT, "And now?")):
        h.append({"role": "user", "content": prompt})
        kw = {"images": [_image()]} if i in (0, 2) else {}
        r = pipe.generate(h, generation_config=_config(lib), **kw)
        out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        h.append({"role": "assistant", "content": r.texts[0]})
    h.set_messages([*h.get_messages()[:2], {"role": "user", "content": CHAT[2]}])
    r = pipe.generate(h, generation_config=_config(lib))
    out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
    h.append({"role": "assistant", "content": r.texts[0]})
    h.append({"role": "user", "content": CHAT[1]})
    pipe.generate(h, images=[_image()], generation_config=_config(lib),
                  streamer=lambda s: lib.StreamingStatus.CANCEL)
    r = pipe.generate(h, generation_config=_config(lib))  # the cancelled turn's image is gone
    out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
    return out


def test_cpu_chat_history_matches_real(shim_cpu: Any, real_cpu: Any) -> None:
    ours, real = _history_chat(shim_cpu, genai_shim), _history_chat(real_cpu, og)
    assert ours == real
    # the first two turns are the start_chat() chat's (same template, same image)
    assert [t for t, _ in ours[:2]] == [c["text"] for c in GOLDEN["cpu"]["chat"][:2]]
    assert ours[4][1] < ours[2][1]  # the edited history asks turn 3 again, without its image


def test_chat_history_errors(shim_cpu: Any) -> None:
    with pytest.raises(UserInputError, match="cannot be empty"):
        shim_cpu.generate(genai_shim.ChatHistory(), max_new_tokens=2)
    with pytest.raises(UserInputError, match="Unknown chat history format"):  # the real's text
        shim_cpu.generate(genai_shim.ChatHistory([{"role": "user", "content": [{"type": "audio"}]}]),
                          max_new_tokens=2)


def test_prompt_lookup_property(tmp_path: Path) -> None:
    """The upstream chat sample passes prompt_lookup=False on every device (True: test_vlm_prompt_lookup.py;
    on NPU not implemented)."""
    with pytest.raises(ConfigError, match="prompt_lookup on NPU"):
        genai_shim.VLMPipeline(FOLDER, "NPU", prompt_lookup=True)
    pipe = genai_shim.VLMPipeline(FOLDER, "CPU", prompt_lookup=False, **CPU_PROPS)
    assert pipe.generate(PROMPT, generation_config=_config(genai_shim)).texts[0] == GOLDEN["cpu"]["text_only"]["text"]


def test_streamer_sees_the_text(shim_cpu: Any) -> None:
    chunks: list[str] = []
    res = shim_cpu.generate(PROMPT, images=[_image()], generation_config=_config(genai_shim),
                            streamer=lambda s: chunks.append(s) or False)
    assert "".join(chunks) == res.texts[0]


def test_generation_config_and_tokenizer(shim_cpu: Any, real_cpu: Any) -> None:
    assert shim_cpu.get_generation_config().eos_token_id == real_cpu.get_generation_config().eos_token_id
    ids = shim_cpu.get_tokenizer().encode(PROMPT).input_ids.data
    assert np.array_equal(ids, real_cpu.get_tokenizer().encode(PROMPT).input_ids.data)


def test_bad_inputs_get_typed_errors(shim_cpu: Any) -> None:
    with pytest.raises(UserInputError, match="uint8"):
        shim_cpu.generate(PROMPT, images=[ov.Tensor(np.zeros((1, 32, 32, 3), np.float32))], max_new_tokens=2)
    with pytest.raises(UserInputError, match="NHWC"):
        shim_cpu.generate(PROMPT, images=[ov.Tensor(np.zeros((32, 3), np.uint8))], max_new_tokens=2)
    with pytest.raises(UserInputError, match="native vision tags"):
        shim_cpu.generate("<|vision_start|><|image_pad|><|vision_end|>" * 2 + PROMPT, images=[_image()],
                          max_new_tokens=2)
    with pytest.raises(ConfigError, match="must be greater equal than 'num_return_sequences'"):  # the real's text
        shim_cpu.generate(PROMPT, max_new_tokens=2, num_beams=2, num_return_sequences=3)
    with pytest.raises(UserInputError, match="can't be None"):
        shim_cpu.generate(PROMPT, images=None, max_new_tokens=2)
    with pytest.raises(UserInputError, match="at least one frame"):  # Qwen2-VL takes videos (the real's text)
        shim_cpu.generate(PROMPT, videos=[ov.Tensor(np.zeros((0, 56, 56, 3), np.uint8))], max_new_tokens=2)


def test_gray_and_rgba_images_as_the_real(shim_cpu: Any, real_cpu: Any) -> None:
    """The real Qwen-VL preprocessing takes one channel as gray and drops an alpha channel
    (measured: RGBA gives the RGB text, [H, W, 1] the repeated-gray text); a 0-pixel image is a
    typed error here (the real's Qwen2-VL dies of SIGFPE on it)."""
    rgba = np.random.default_rng(0).integers(0, 256, (48, 40, 4), dtype=np.uint8)
    views = {"rgba": rgba, "rgb": rgba[..., :3], "gray": rgba[..., :1], "gray3": np.repeat(rgba[..., :1], 3, -1)}

    def texts(pipe: Any) -> dict[str, str]:
        return {k: pipe.generate(PROMPT, image=ov.Tensor(np.ascontiguousarray(v)), max_new_tokens=8).texts[0]
                for k, v in views.items()}

    ours, real = texts(shim_cpu), texts(real_cpu)
    assert ours == real
    assert ours["rgba"] == ours["rgb"] and ours["gray"] == ours["gray3"] and ours["rgb"] != ours["gray"]
    with pytest.raises(UserInputError, match="at least 1x1"):
        shim_cpu.generate(PROMPT, image=ov.Tensor(np.zeros((0, 32, 3), np.uint8)), max_new_tokens=2)
    with pytest.raises(UserInputError, match="channels"):
        shim_cpu.generate(PROMPT, image=ov.Tensor(np.zeros((8, 8, 2), np.uint8)), max_new_tokens=2)


def test_not_a_vlm_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="image-text-to-text"):
        genai_shim.VLMPipeline(tmp_path, "CPU")
    llm = ROOT / "tests" / "fixtures" / "optimum" / "qwen2-fp32"
    with pytest.raises(ConfigError):
        genai_shim.VLMPipeline(llm, "CPU")


# -- NPU ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shim_npu() -> Any:
    return genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_PROPS)


@pytest.fixture(scope="module")
def real_npu() -> Any:
    return og.VLMPipeline(str(FOLDER), "NPU", **NPU_PROPS)


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_npu_matches_real(shim_npu: Any, real_npu: Any, with_image: bool) -> None:
    kw = {"images": [_image()]} if with_image else {}
    ours = shim_npu.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    real = real_npu.generate(PROMPT, generation_config=_config(og), **kw)
    assert ours.texts == real.texts
    assert ours.perf_metrics.get_num_input_tokens() == real.perf_metrics.get_num_input_tokens()


_chat = chat_turns


def test_npu_chat_history_matches_real(shim_npu: Any, real_npu: Any) -> None:
    assert _history_chat(shim_npu, genai_shim) == _history_chat(real_npu, og)


def test_npu_chat_matches_real(shim_npu: Any, real_npu: Any) -> None:
    """The vision side of the NPU pipeline runs at the CPU plugin's default precision (bf16
    here): the real NPU's 2nd and 3rd turns differ from its CPU pipeline's on this fixture, and
    ours follow the real NPU's (the golden records both)."""
    ours, real = _chat(shim_npu, genai_shim), _chat(real_npu, og)
    assert ours == real
    assert [t for t, _ in ours] == _npu_chat_golden()
    if _cpu_default_is_bf16():
        assert [t for t, _ in ours][1:] != [c["text"] for c in GOLDEN["cpu"]["chat"]][1:]


def _cpu_default_is_bf16() -> bool:
    """The golden was recorded on an AVX-512 BF16/AMX host, where the CPU plugin's default
    precision (the real's vision side on NPU) is bf16; on a host without bf16 it is f32 and the
    real NPU pipeline gives the CPU pipeline's chat."""
    return "bf16" in str(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")).lower()


def _npu_chat_golden() -> list[str]:
    key = "npuw_cpu" if _cpu_default_is_bf16() else "cpu"
    return [c["text"] for c in GOLDEN[key]["chat"]]


@pytest.mark.parametrize("image_hw", [(80, 80), (64, 96)], ids=["80x80", "64x96"])
def test_npu_vision_precision_follows_auto_properties(image_hw: tuple[int, int]) -> None:
    """DEVICE_PROPERTIES={"AUTO": {...}} sets the vision side's properties on NPU, as the real's
    AUTO; with f32 the NPU pipeline gives the CPU pipeline's answers.  (64x96: a 0.03 top-1
    margin at step 16, where the preprocessing in bf16 instead of the real's f32 If bodies flips
    the token.)"""
    image = ov.Tensor(make_image(*image_hw))
    for dp in ({}, {"DEVICE_PROPERTIES": {"AUTO": {"INFERENCE_PRECISION_HINT": "f32"}}}):
        ours = genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_PROPS, **dp)
        real = og.VLMPipeline(str(FOLDER), "NPU", **NPU_PROPS, **dp)
        a = ours.generate(PROMPT, images=[image], generation_config=_config(genai_shim)).texts
        b = real.generate(PROMPT, images=[image], generation_config=_config(og)).texts
        assert a == b, dp
    if image_hw == (80, 80):
        assert _chat(ours, genai_shim) == _chat(real, og)
        assert [t for t, _ in _chat(ours, genai_shim)] == [c["text"] for c in GOLDEN["cpu"]["chat"]]


def test_npu_refuses_beam_search_with_the_real_text(shim_npu: Any, real_npu: Any) -> None:
    with pytest.raises(RuntimeError, match="only greedy and multinomial") as real:
        real_npu.generate(PROMPT, max_new_tokens=2, num_beams=2)
    with pytest.raises(UserInputError) as ours:
        shim_npu.generate(PROMPT, max_new_tokens=2, num_beams=2)
    assert str(ours.value) in str(real.value)


def test_npu_prompt_over_max_prompt_len() -> None:
    expected = GOLDEN["npu_too_long"]
    real = og.VLMPipeline(str(FOLDER), "NPU", **NPU_PROPS, MAX_PROMPT_LEN=expected["MAX_PROMPT_LEN"])
    with pytest.raises(RuntimeError) as real_err:
        real.generate(PROMPT, images=[_image()], max_new_tokens=4)
    ours = genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_PROPS, MAX_PROMPT_LEN=expected["MAX_PROMPT_LEN"])
    with pytest.raises(PromptTooLongError) as our_err:
        ours.generate(PROMPT, images=[_image()], max_new_tokens=4)
    assert str(our_err.value) in str(real_err.value)


# -- the language model on the emulated NPU (vision at the AUTO/CPU default, as the real) ---------
@pytest.fixture(scope="module")
def shim_emulated_npu() -> Any:
    return genai_shim.VLMPipeline(FOLDER, "NPU", INFERENCE_PRECISION_HINT="f32", NPUW_LLM_SHARED_HEAD="NO")


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_emulated_npu_gives_the_real_npus_text(shim_emulated_npu: Any, with_image: bool) -> None:
    kw = {"images": [_image()]} if with_image else {}
    ours = shim_emulated_npu.generate(PROMPT, generation_config=_config(genai_shim), **kw)
    key = "image" if with_image else "text_only"
    assert ours.texts[0] == GOLDEN["npuw_cpu"][key]["text"] == GOLDEN["cpu"][key]["text"]
    assert ours.perf_metrics.get_num_input_tokens() == GOLDEN["npuw_cpu"][key]["num_input_tokens"]


def test_emulated_npu_chat_gives_the_real_npus_text(shim_emulated_npu: Any) -> None:
    ours = _chat(shim_emulated_npu, genai_shim)
    assert [t for t, _ in ours] == _npu_chat_golden()


def test_readme_vlm_quickstart_runs(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's VLMPipeline snippet, as written, from the repository root: it prints a text."""
    import re

    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(encoding="utf-8"), flags=re.S)
    snippet = next(b for b in blocks if "VLMPipeline(" in b)
    monkeypatch.chdir(root)
    exec(compile(snippet, "README.md", "exec"), {})  # noqa: S102 - the README's own code
    assert capsys.readouterr().out.strip()
