"""genai_shim.VLMPipeline on Gemma 3 (tests/fixtures/vlm/gemma3-fp32), side by side with the real
openvino_genai.VLMPipeline under f32 hints: bilinear resize to the processor's size, the
``<start_of_image>`` expansion with soft tokens, ``token_type_ids`` (bidirectional attention inside
an image, in the export's mask), 1-based positions and the chat template without ``| trim``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from genai_shim.npu_config import translate_npu_config
from genai_shim.vlm.gemma3 import IMAGE_SOFT_TOKEN, START_OF_IMAGE, Gemma3Config, patch_chat_template
from genai_shim.vlm.llava import pillow_bilinear
from ov_npu_emu.errors import PromptTooLongError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "vlm" / "gemma3-fp32"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import CHAT, CPU_PROPS, MAX_NEW_TOKENS, NPU_PROPS, PROMPT, chat_turns, npu_extra  # noqa: E402
from vlm_goldens import test_image as make_image  # noqa: E402

og = pytest.importorskip("openvino_genai")
GOLDEN: dict[str, Any] = json.loads((FOLDER / "golden.json").read_text(encoding="utf-8"))


def _config(lib: Any) -> Any:
    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    return cfg


def _image(h: int = 80, w: int = 80) -> ov.Tensor:
    return ov.Tensor(make_image(h, w))


def _same(shim: Any, real: Any, prompt: Any, **kw: Any) -> str:
    ours = shim.generate(prompt, generation_config=_config(genai_shim), **kw)
    theirs = real.generate(prompt, generation_config=_config(og), **kw)
    assert ours.texts == theirs.texts
    assert ours.perf_metrics.get_num_input_tokens() == theirs.perf_metrics.get_num_input_tokens()
    assert ours.perf_metrics.get_num_generated_tokens() == theirs.perf_metrics.get_num_generated_tokens()
    return str(ours.texts[0])


@pytest.fixture(scope="module")
def cpu_pair() -> tuple[Any, Any]:
    return genai_shim.VLMPipeline(FOLDER, "CPU", **CPU_PROPS), og.VLMPipeline(str(FOLDER), "CPU", **CPU_PROPS)


@pytest.mark.parametrize("hw", [(80, 80), (64, 96), (30, 200), None], ids=["80x80", "64x96", "30x200", "text_only"])
def test_cpu_matches_real(cpu_pair: tuple[Any, Any], hw: tuple[int, int] | None) -> None:
    shim, real = cpu_pair
    text = _same(shim, real, PROMPT, **({"images": [_image(*hw)]} if hw else {}))
    if hw in ((80, 80), None):
        assert text == GOLDEN["cpu"]["image" if hw else "text_only"]["text"]


def test_cpu_image_changes_the_answer(cpu_pair: tuple[Any, Any]) -> None:
    shim, _ = cpu_pair
    a = shim.generate(PROMPT, images=[_image()], generation_config=_config(genai_shim)).texts[0]
    b = shim.generate(PROMPT, images=[ov.Tensor(np.ascontiguousarray(make_image()[:, ::-1]))],
                      generation_config=_config(genai_shim)).texts[0]
    c = shim.generate(PROMPT, generation_config=_config(genai_shim)).texts[0]
    assert len({a, b, c}) == 3


def test_cpu_chat_matches_real(cpu_pair: tuple[Any, Any]) -> None:
    shim, real = cpu_pair
    ours = chat_turns(shim, genai_shim)
    assert ours == chat_turns(real, og)
    assert [t for t, _ in ours] == [c["text"] for c in GOLDEN["cpu"]["chat"]]


def test_cpu_history_chat_and_two_images_match_real(cpu_pair: tuple[Any, Any]) -> None:
    shim, real = cpu_pair
    outs = []
    for pipe, lib in ((shim, genai_shim), (real, og)):
        h = lib.ChatHistory()
        turns = []
        for i, prompt in enumerate(CHAT):
            h.append({"role": "user", "content": prompt})
            kw = {"images": [_image()]} if i == 0 else {"images": [_image(64, 96), _image(30, 200)]} if i == 2 else {}
            r = pipe.generate(h, generation_config=_config(lib), **kw)
            turns.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
            h.append({"role": "assistant", "content": r.texts[0]})
        outs.append(turns)
    assert outs[0] == outs[1]


def test_native_tag_where_the_user_puts_it(cpu_pair: tuple[Any, Any]) -> None:
    shim, real = cpu_pair
    _same(shim, real, f"Look: {START_OF_IMAGE} " + PROMPT, images=[_image()])
    with pytest.raises(UserInputError, match="native vision tags"):
        shim.generate(START_OF_IMAGE * 2 + PROMPT, images=[_image()], max_new_tokens=2)


def test_system_message_chat_matches_real(cpu_pair: tuple[Any, Any]) -> None:
    """start_chat(system): the template folds the system message into the first user turn."""
    shim, real = cpu_pair
    outs = []
    for pipe, lib in ((shim, genai_shim), (real, og)):
        pipe.start_chat("You are terse.")
        try:
            outs.append([pipe.generate(p, generation_config=_config(lib), **({"images": [_image()]} if i == 0 else {}))
                         .texts[0] for i, p in enumerate(CHAT[:2])])
        finally:
            pipe.finish_chat()
    assert outs[0] == outs[1]


# -- the family pieces ------------------------------------------------------------------------------
def test_preprocessing_pieces() -> None:
    cfg = Gemma3Config.read(FOLDER)
    assert (cfg.height, cfg.width, cfg.image_mean, cfg.image_std) == (64, 64, (0.5,) * 3, (0.5,) * 3)
    # Pillow 12's Image.resize(..., BILINEAR) on this image (recorded in a venv with Pillow)
    rows = [[248, 207, 237, 211, 5, 60, 109], [82, 36, 222, 8, 15, 144, 24], [11, 104, 226, 159, 163, 41, 70],
            [40, 0, 63, 255, 8, 25, 146], [219, 100, 72, 21, 16, 107, 61]]
    small = np.repeat(np.array(rows, np.uint8)[:, :, None], 3, axis=2)
    assert pillow_bilinear(small, 3, 4)[..., 0].tolist() == [[194, 138, 68], [94, 110, 75], [57, 141, 70],
                                                             [110, 62, 70]]
    assert pillow_bilinear(small, 10, 8)[0, :, 0].tolist() == [248, 225, 215, 236, 220, 139, 8, 46, 82, 109]
    assert patch_chat_template("{{ a | trim }}{{ b | trim }}") == "{{ a  }}{{ b  }}"


def test_token_types_positions_and_template(cpu_pair: tuple[Any, Any]) -> None:
    shim, real = cpu_pair
    emb = shim._embedder
    assert "| trim" in genai_shim.Tokenizer(FOLDER).chat_template
    # both pipelines' tokenizers carry the patched template
    assert shim.get_tokenizer().chat_template == real.get_tokenizer().chat_template
    assert "| trim" not in shim.get_tokenizer().chat_template
    images = emb.encode_images([_image()])
    assert images[0].features.shape == (16, 64)  # mm_tokens_per_image rows
    unified = emb.normalize_prompt("Hi", images)
    assert unified == "\n\n" + START_OF_IMAGE + IMAGE_SOFT_TOKEN * 16 + "<end_of_image>\n\nHi"
    ids = np.array(shim.get_tokenizer().encode(unified, add_special_tokens=False).input_ids.data, np.int64)
    types = emb.lm_inputs(ids, images)["token_type_ids"]
    assert types.sum() == 16 and np.all(ids[types == 1] == emb.image_token)
    assert not emb.lm_inputs(ids, [])["token_type_ids"].any()  # text only: all 0, as the real
    pos, _ = emb.position_ids(ids, images)
    assert pos[0, 0] == 1 and pos[0, -1] == ids.shape[1]  # 1-based
    assert emb.step_position_ids(ids.shape[1] + 1, 0).tolist() == [[ids.shape[1] + 1]]


# -- NPU: the real NPUW on CPU, and the language model on the emulated NPU -------------------------
#: the real NPUW 2026.4.1 gives its CPU's text on this export only with a KV size inside the
#: sliding window (512) and outside chat (docs/genai_shim.md "Gemma 3 on the real NPUW")
NPU_WITHIN = {**NPU_PROPS, **npu_extra(FOLDER)}
EMULATED = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_LLM_SHARED_HEAD": "NO"}


@pytest.fixture(scope="module")
def npu_pair() -> tuple[Any, Any]:
    return genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_WITHIN), og.VLMPipeline(str(FOLDER), "NPU", **NPU_WITHIN)


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_npu_matches_real(npu_pair: tuple[Any, Any], with_image: bool) -> None:
    shim, real = npu_pair
    text = _same(shim, real, PROMPT, **({"images": [_image()]} if with_image else {}))
    key = "image" if with_image else "text_only"
    assert text == GOLDEN["npuw_cpu"][key]["text"] == GOLDEN["cpu"][key]["text"]


def test_npu_chat_gives_the_cpu_text(npu_pair: tuple[Any, Any]) -> None:
    """Ours on NPUW: the CPU's text every turn (the real NPUW's turns 2-3 differ from its CPU's)."""
    shim, _ = npu_pair
    ours = chat_turns(shim, genai_shim)
    assert ours == [(c["text"], c["num_input_tokens"]) for c in GOLDEN["cpu"]["chat"]]


def test_npu_sets_the_static_prefill_hint() -> None:
    """Gemma 3 on NPU: NPUW_LLM_PREFILL_HINT=STATIC unless the user says otherwise (the real's
    update_npu_properties); at the default KV size ours still gives the CPU's text."""
    ours = genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_PROPS)
    assert ours._request.get_compiled_model().get_property("NPUW_LLM_PREFILL_HINT") == "STATIC"
    text = ours.generate(PROMPT, images=[_image()], generation_config=_config(genai_shim)).texts[0]
    assert text == GOLDEN["cpu"]["image"]["text"]
    # the real's rename_key runs after the insertion: a user's PREFILL_HINT wins
    model = ov.Core().read_model(FOLDER / "openvino_language_model.xml")
    cfg = translate_npu_config(model, {"NPUW_LLM_PREFILL_HINT": "STATIC", "PREFILL_HINT": "DYNAMIC"}).config
    assert cfg["NPUW_LLM_PREFILL_HINT"] == "DYNAMIC"


def test_npu_prompt_over_max_prompt_len() -> None:
    expected = GOLDEN["npu_too_long"]
    ours = genai_shim.VLMPipeline(FOLDER, "NPU", **NPU_PROPS, MAX_PROMPT_LEN=expected["MAX_PROMPT_LEN"])
    with pytest.raises(PromptTooLongError) as err:
        ours.generate(PROMPT, images=[_image()], max_new_tokens=4)
    assert str(err.value) in expected["error"]


@pytest.fixture(scope="module")
def emulated() -> Any:
    return genai_shim.VLMPipeline(FOLDER, "NPU", **EMULATED)


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_emulated_npu_gives_the_real_npus_text(emulated: Any, with_image: bool) -> None:
    key = "image" if with_image else "text_only"
    ours = emulated.generate(PROMPT, generation_config=_config(genai_shim),
                             **({"images": [_image()]} if with_image else {}))
    assert ours.texts[0] == GOLDEN["npuw_cpu"][key]["text"]
    assert ours.perf_metrics.get_num_input_tokens() == GOLDEN["npuw_cpu"][key]["num_input_tokens"]


def test_emulated_npu_chat_gives_the_cpu_text(emulated: Any) -> None:
    ours = chat_turns(emulated, genai_shim)
    assert ours == [(c["text"], c["num_input_tokens"]) for c in GOLDEN["cpu"]["chat"]]
