"""genai_shim.VLMPipeline with its vision models placed on the emulated NPU (issue 31), as a user
of the real places them: on "NPU" the real compiles the embedder's models on AUTO with CPU first,
and ``DEVICE_PROPERTIES={"AUTO": {"MULTI_DEVICE_PRIORITIES": "NPU"}}`` (every embedder model) or
``MODEL_PROPERTIES={"vision_embeddings": {...}}`` (one role) moves them to the NPU. The real
2026.4.1 accepts both and then fails to compile there without NPU hardware; ours compiles them on
the emulated NPU at each call's shapes (a static NPU cannot run ``pixel_values [?,3,?,?]``).

Under f32 the texts are the real NPU pipeline's goldens (tests/fixtures/vlm/*/golden.json, the
real VLMPipeline with NPUW on CPU) for an image and a text-only prompt, and a 3-turn chat with an
image gives the same turns as the same pipeline with its vision on CPU (pinned to the goldens by
test_vlm_families.py, test_vlm_pipeline.py and test_vlm_gemma3.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import openvino as ov
import pytest

import genai_shim
from genai_shim.vlm.common import StaticShapeRequest
from ov_npu_emu.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vlm"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import MAX_NEW_TOKENS, PROMPT, chat_turns  # noqa: E402
from vlm_goldens import test_image as make_image  # noqa: E402

FAMILIES = ("qwen2vl-fp32", "qwen2_5vl-fp32", "llava-fp32", "llava_next-fp32", "llava_next_video-fp32",
            "gemma3-fp32")
#: the language model on the emulated NPU, exact (f32 said explicitly)
EMULATED = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_LLM_SHARED_HEAD": "NO"}
ALL_ON_NPU = {"DEVICE_PROPERTIES": {"AUTO": {"MULTI_DEVICE_PRIORITIES": "NPU"}}}


def _golden(family: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / family / "golden.json").read_text(encoding="utf-8"))
    return data


def _config() -> Any:
    cfg = genai_shim.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    return cfg


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def vision_on_npu(family: str) -> Any:
    pipe = genai_shim.VLMPipeline(FIXTURES / family, "NPU", **EMULATED, **ALL_ON_NPU)
    embedder = pipe._embedder
    assert isinstance(embedder.vision, StaticShapeRequest) and isinstance(embedder.text, StaticShapeRequest)
    return pipe


@pytest.mark.parametrize("with_image", [True, False], ids=["image", "text_only"])
def test_vision_on_the_emulated_npu_gives_the_real_npus_text(vision_on_npu: Any, family: str,
                                                             with_image: bool) -> None:
    key = "image" if with_image else "text_only"
    kw = {"images": [ov.Tensor(make_image(80, 80))]} if with_image else {}
    ours = vision_on_npu.generate(PROMPT, generation_config=_config(), **kw)
    golden = _golden(family)["npuw_cpu"][key]
    assert ours.texts[0] == golden["text"]
    assert ours.perf_metrics.get_num_input_tokens() == golden["num_input_tokens"]


def test_vision_on_the_emulated_npu_chat(vision_on_npu: Any, family: str) -> None:
    on_cpu = genai_shim.VLMPipeline(FIXTURES / family, "NPU", **EMULATED)
    assert chat_turns(vision_on_npu, genai_shim) == chat_turns(on_cpu, genai_shim)


def test_model_properties_place_one_role() -> None:
    """MODEL_PROPERTIES[role] wins over DEVICE_PROPERTIES["AUTO"] for that role only; two image
    sizes compile the vision model for each shape (Qwen2-VL: the patch count follows the size)."""
    family = "qwen2vl-fp32"
    pipe = genai_shim.VLMPipeline(FIXTURES / family, "NPU", **EMULATED,
                                  MODEL_PROPERTIES={"vision_embeddings": {"MULTI_DEVICE_PRIORITIES": "NPU"}})
    embedder = pipe._embedder
    assert isinstance(embedder.vision, StaticShapeRequest)
    assert not isinstance(embedder.text, StaticShapeRequest) and not isinstance(embedder.merger, StaticShapeRequest)
    ours = pipe.generate(PROMPT, images=[ov.Tensor(make_image(80, 80))], generation_config=_config())
    assert ours.texts[0] == _golden(family)["npuw_cpu"]["image"]["text"]
    pipe.generate(PROMPT, images=[ov.Tensor(make_image(64, 96))], generation_config=_config())
    assert len(embedder.vision._requests) == 2


def test_placement_errors() -> None:
    folder = FIXTURES / "llava-fp32"
    # the real's text (utils.cpp validate_vlm_model_properties)
    with pytest.raises(ConfigError, match="Unknown sub-model role 'vision' in MODEL_PROPERTIES. Known roles: "
                                          "vision_embeddings, text_embeddings") as err:
        genai_shim.VLMPipeline(folder, "NPU", **EMULATED, MODEL_PROPERTIES={"vision": {}})
    assert err.value.key == "MODEL_PROPERTIES"
    with pytest.raises(ConfigError, match="on CPU or NPU, not 'GPU'"):
        genai_shim.VLMPipeline(folder, "NPU", **EMULATED,
                               DEVICE_PROPERTIES={"AUTO": {"MULTI_DEVICE_PRIORITIES": "GPU,CPU"}})
