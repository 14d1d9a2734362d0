"""Visual-token pruning (CDPruner: GenerationConfig.pruning_ratio / relevance_weight) in
genai_shim.VLMPipeline, against the goldens the real openvino_genai.VLMPipeline 2026.4.1 recorded
(golden.json ``pruning``: tools/vlm_goldens.py PRUNING_CASES) on "CPU" (f32) and on "NPU"
(NPUW_DEVICES=CPU), for Qwen2-VL and Qwen2.5-VL (the families the real prunes in); the other
families ignore the ratio; and side by side with the real where openvino_genai is installed."""

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
from genai_shim.vlm.pruning import _positions_3d, dpp_select, keep_count, text_features
from ov_npu_emu.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vlm"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import (  # noqa: E402  # noqa: E402
    CPU_PROPS,
    NPU_PROPS,
    PROMPT,
    PRUNING_CASES,
    PRUNING_CHAT_CASES,
    QWEN3_SKIPPED_PRUNING_CHAT_TURNS,
    npu_extra,
    pruning_case_inputs,
    pruning_chat_turns,
)
from vlm_goldens import test_image as make_image  # noqa: E402
from vlm_goldens import test_video as make_video  # noqa: E402

FAMILIES = ("qwen2vl-fp32", "qwen2_5vl-fp32")
#: the language model on the emulated NPU, exact (f32 said explicitly)
EMULATED = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_LLM_SHARED_HEAD": "NO"}


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "golden.json").read_text(encoding="utf-8"))["pruning"]
    return data


def _run(pipe: Any, case: str) -> tuple[str, int]:
    r = pipe.generate(PROMPT, **pruning_case_inputs(case, genai_shim))
    return r.texts[0], r.perf_metrics.get_num_input_tokens()


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def cpu(family: str) -> Any:
    return genai_shim.VLMPipeline(FIXTURES / family, "CPU", **CPU_PROPS)


@pytest.mark.parametrize("case", list(PRUNING_CASES))
def test_cpu_pruning_gives_the_real_goldens(cpu: Any, family: str, case: str) -> None:
    """25 .. 75 % of one or two images' tokens pruned at several relevance weights, and 100 %
    (which the real leaves unpruned): the real's texts and input token counts."""
    golden = _golden(family)["cpu"][case]
    assert _run(cpu, case) == (golden["text"], golden["num_input_tokens"])


def test_pruning_changes_the_prompt(cpu: Any, family: str) -> None:
    """The goldens are not the unpruned run's: fewer input tokens, and the kept tokens matter."""
    golden = _golden(family)["cpu"]
    full = cpu.generate(PROMPT, images=[ov.Tensor(make_image(300, 420))], max_new_tokens=20)
    assert full.perf_metrics.get_num_input_tokens() > golden["r25_w0.5"]["num_input_tokens"]
    assert golden["r100"]["num_input_tokens"] == cpu.generate(
        PROMPT, images=[ov.Tensor(make_image(140, 140))], max_new_tokens=1).perf_metrics.get_num_input_tokens()
    assert len({golden[c]["text"] for c in ("r25_w0.5", "r50_w0.5", "r75_w0.5")}) == 3


@pytest.mark.parametrize("case", ["r50_w0.5", "two_images_r60_w1.0"])
def test_emulated_npu_gives_the_real_goldens(family: str, case: str) -> None:
    """The language model on the emulated NPU: the real's NPU goldens (equal to its CPU ones)."""
    pipe = genai_shim.VLMPipeline(FIXTURES / family, "NPU", **EMULATED)
    golden = _golden(family)
    assert golden["npuw_cpu"][case] == golden["cpu"][case]
    assert _run(pipe, case) == (golden["npuw_cpu"][case]["text"], golden["npuw_cpu"][case]["num_input_tokens"])


def test_goldens_have_margins(family: str) -> None:
    margins = _golden(family)["margins"]
    assert all(margins[c]["min"] >= 0.1 and margins[c]["text_equals_golden"] for c in PRUNING_CASES)


def test_keep_count_rounds_half_away_from_zero() -> None:
    assert [keep_count(9, r) for r in (25, 50, 75, 99, 100)] == [7, 5, 2, 0, 0]
    assert keep_count(12, 50) == 6 and keep_count(3, 50) == 2


def test_dpp_picks_relevant_then_diverse_tokens() -> None:
    """The greedy DPP takes the largest diagonal first, then what is least like it; ties go to
    the first index; the result is sorted."""
    k = np.array([[4.0, 1.9, 0.0], [1.9, 1.0, 0.0], [0.0, 0.0, 2.0]], np.float32)
    assert dpp_select(k, 1) == [0]
    assert dpp_select(k, 2) == [0, 2]  # 1 is nearly parallel to 0: gain 1 - 1.9²/4 < 2
    assert dpp_select(np.eye(3, dtype=np.float32), 2) == [0, 1]


def test_text_features_average_the_instruction() -> None:
    """The mean of the tokens outside <|vision_start|> .. <|vision_end|> and not image pads."""
    emb = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = np.array([5, 1, 9, 9, 2, 6])  # text, start, pad, pad, end, text
    np.testing.assert_array_equal(text_features(ids, emb, 1, 2, (9,)), [[(0 + 10) / 2, (1 + 11) / 2]])


def test_positions_of_kept_tokens() -> None:
    """Each kept token keeps its grid (row, col); the text after the image continues one past the
    largest position inside it (not the unpruned grid's)."""
    ids = np.array([7, 1] + [9] * 4 + [2, 8])  # 2x2 merged grid (4x4 before the merge)
    keep = [np.array([True, False, False, False])]
    pos = _positions_3d(ids, keep, [(1, 4, 4)], 2, 1, (9,))
    assert pos[:, 0].tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    keep = [np.array([False, False, False, True])]
    pos = _positions_3d(ids, keep, [(1, 4, 4)], 2, 1, (9,))
    assert pos[:, 0].tolist() == [[0, 1, 2, 4, 5], [0, 1, 3, 4, 5], [0, 1, 3, 4, 5]]


def test_generation_config_fields() -> None:
    cfg = genai_shim.GenerationConfig()
    assert (cfg.pruning_ratio, cfg.relevance_weight) == (0, 0.5)
    with pytest.raises(ConfigError):
        cfg.pruning_ratio = 1.5


@pytest.mark.parametrize("kw, text", [
    ({"pruning_ratio": 150}, "pruning ratio must be between 0 and 100"),
    ({"pruning_ratio": 50, "relevance_weight": 1.5}, "relevance weight must be between 0.0 and 1.0"),
    ({"pruning_ratio": 50, "relevance_weight": -0.5}, "relevance weight must be between 0.0 and 1.0"),
    ({"pruning_ratio": 99}, "Percentage is too small, would result in zero tokens"),
])
def test_real_errors(kw: dict[str, Any], text: str) -> None:
    pipe = genai_shim.VLMPipeline(FIXTURES / "qwen2vl-fp32", "CPU", **CPU_PROPS)
    with pytest.raises(ConfigError, match=text):
        pipe.generate(PROMPT, images=[ov.Tensor(make_image())], max_new_tokens=2, **kw)
    # a weight out of range is not checked while pruning is off (the real's)
    assert pipe.generate(PROMPT, images=[ov.Tensor(make_image())], max_new_tokens=2, relevance_weight=7.0).texts


def test_videos_refuse_pruning_on_qwen2vl() -> None:
    pipe = genai_shim.VLMPipeline(FIXTURES / "qwen2vl-fp32", "CPU", **CPU_PROPS)
    with pytest.raises(ConfigError, match="CDPruner video pruning is not yet supported for Qwen2-VL"):
        pipe.generate("Describe the video.", videos=[ov.Tensor(make_video(2, 56, 56))], max_new_tokens=2,
                      pruning_ratio=10)


def _chat_golden(family: str, case: str) -> list[tuple[str, int]]:
    data = json.loads((FIXTURES / family / "golden.json").read_text(encoding="utf-8"))["pruning_chat"]["cpu"]
    return [(t["text"], t["num_input_tokens"]) for t in data[case]]


@pytest.mark.parametrize("family", ["qwen2vl-fp32", "qwen2_5vl-fp32", "qwen3vl-fp32"])
@pytest.mark.parametrize("history", [False, True], ids=["start_chat", "chat_history"])
def test_chat_pruning_gives_the_real_goldens(family: str, history: bool) -> None:
    """Pruning in a chat (issue 31), as the real's CPU default (continuous batching): every turn
    re-templates the whole unpruned history and prunes every image in it against the whole
    history's text (an image of an earlier turn is pruned again with the turn's ratio; ratio 0
    leaves all unpruned). Each turn's text and input token count equal the real's (golden.json
    ``pruning_chat``, recorded with start_chat(); a ChatHistory grown turn by turn gives the same),
    except the real's Qwen3-VL turns its chat bug changes (QWEN3_SKIPPED_PRUNING_CHAT_TURNS)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for case in PRUNING_CHAT_CASES:
            pipe = genai_shim.VLMPipeline(FIXTURES / family, "CPU", **CPU_PROPS)
            got = pruning_chat_turns(pipe, genai_shim, case, history=history)
            for k, (turn, want) in enumerate(zip(got, _chat_golden(family, case), strict=True)):
                if family.startswith("qwen3") and (case, k) in QWEN3_SKIPPED_PRUNING_CHAT_TURNS:
                    assert turn[1] == want[1]  # the same history: the same (pruned) token count
                    continue
                assert turn == want, (case, k)


def test_failed_chat_turn_is_forgotten() -> None:
    """A pruned chat turn that fails (the real's zero-token error) leaves the chat as it was."""
    pipe = genai_shim.VLMPipeline(FIXTURES / "qwen2vl-fp32", "CPU", **CPU_PROPS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pipe.start_chat()
        with pytest.raises(ConfigError, match="Percentage is too small"):
            pipe.generate(PROMPT, images=[ov.Tensor(make_image(28, 28))], max_new_tokens=2, pruning_ratio=99)
        assert pipe._chat == []
        assert pipe.generate(PROMPT, images=[ov.Tensor(make_image())], max_new_tokens=2, pruning_ratio=50).texts
        pipe.finish_chat()


@pytest.mark.parametrize("fixture", ["llava-fp32", "gemma3-fp32"])
def test_other_families_ignore_the_ratio(fixture: str) -> None:
    """LLaVA, LLaVA-NeXT(-Video) and Gemma 3: the real's embedders never prune (same text, same
    token count); the real's validation still runs."""
    pipe = genai_shim.VLMPipeline(FIXTURES / fixture, "CPU", **CPU_PROPS)
    image = ov.Tensor(make_image())
    a = pipe.generate(PROMPT, images=[image], max_new_tokens=6)
    b = pipe.generate(PROMPT, images=[image], max_new_tokens=6, pruning_ratio=75, relevance_weight=0.2)
    assert (a.texts, a.perf_metrics.get_num_input_tokens()) == (b.texts, b.perf_metrics.get_num_input_tokens())
    with pytest.raises(ConfigError, match="pruning ratio must be between 0 and 100"):
        pipe.generate(PROMPT, images=[image], max_new_tokens=2, pruning_ratio=101)


def test_real_side_by_side(family: str) -> None:
    """An image size and ratio not among the goldens, against a fresh real pipeline."""
    og = pytest.importorskip("openvino_genai")
    image = make_image(252, 196)
    kw = {"max_new_tokens": 12, "pruning_ratio": 50, "relevance_weight": 0.7}
    real = og.VLMPipeline(str(FIXTURES / family), "CPU", **CPU_PROPS).generate(
        PROMPT, images=[ov.Tensor(image)], **kw)
    ours = genai_shim.VLMPipeline(FIXTURES / family, "CPU", **CPU_PROPS).generate(
        PROMPT, images=[ov.Tensor(image)], **kw)
    assert (ours.texts, ours.perf_metrics.get_num_input_tokens()) == (
        real.texts, real.perf_metrics.get_num_input_tokens())


def test_npu_props_are_the_goldens_device() -> None:
    """The goldens' NPU entry used the NPUW oracle's properties (tools/vlm_goldens.py)."""
    assert NPU_PROPS["NPUW_DEVICES"] == "CPU" and npu_extra(FIXTURES / "qwen2vl-fp32") == {}
