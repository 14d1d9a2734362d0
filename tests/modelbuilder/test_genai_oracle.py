"""Builder folders in real openvino_genai: CPU and NPUW-on-CPU give the reference's greedy ids."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino_genai as ov_genai
import pytest

from ov_npu_emu.modelbuilder import load_reference

pytestmark = pytest.mark.oracle

PROMPT = "Once upon a time, there was a little girl"
NEW_TOKENS = 32

# NPUW with small static sizes keeps compile fast; KV capacity = 64 + 64 - 1.
NPUW_CONFIG = {
    "NPUW_DEVICES": "CPU",
    "NPUW_ONLINE_PIPELINE": "NONE",
    "INFERENCE_PRECISION_HINT": "f32",
    "MAX_PROMPT_LEN": 64,
    "MIN_RESPONSE_LEN": 64,
}
DEVICES = {
    # DYNAMIC_QUANTIZATION_GROUP_SIZE=0: otherwise the CPU plugin quantizes activations of int4
    # MatMuls to int8 and greedy ids drift from the exact reference
    "CPU": (
        "CPU",
        {
            "INFERENCE_PRECISION_HINT": "f32",
            "KV_CACHE_PRECISION": "f32",
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
        },
    ),
    # NPUW keeps the KV cache in f16 unless told otherwise; ask for f32 so ids are exact.
    "NPUW-f32kv": ("NPU", NPUW_CONFIG | {"KV_CACHE_PRECISION": "f32"}),
    # Default NPUW KV storage (f16): on these models it still matches (see docs/model_builder.md).
    "NPUW-f16kv": ("NPU", NPUW_CONFIG),
}


def _generate_ids(folder, device: str, config: dict, ids: list[int]) -> list[int]:
    pipe = ov_genai.LLMPipeline(str(folder), device, **config)
    gen = ov_genai.GenerationConfig(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    result = pipe.generate(ov.Tensor(np.array([ids], dtype=np.int64)), gen)
    return list(result.tokens[0])


@pytest.mark.parametrize("device_id", list(DEVICES), ids=list(DEVICES))
@pytest.mark.parametrize(
    "folder_fixture", ["tiny_model_dir", "tiny_model_dir_int8", "tiny_model_dir_int4"]
)
def test_genai_greedy_ids_match_reference(device_id, folder_fixture, request):
    if folder_fixture == "tiny_model_dir_int4" and device_id.startswith("NPUW"):
        pytest.skip("real NPUW rejects int4 group size 16: see test_npuw_int4_group_size_rule")
    folder = request.getfixturevalue(folder_fixture)
    tokenizer = ov_genai.Tokenizer(str(folder))
    ids = tokenizer.encode(PROMPT).input_ids.data[0].tolist()
    assert ids[0] == 1  # <s>
    expected = load_reference(folder).greedy_generate(ids, NEW_TOKENS)
    device, config = DEVICES[device_id]
    assert _generate_ids(folder, device, config, ids) == expected


def test_genai_text_generation_and_chat_work(tiny_model_dir):
    """String in, string out, and the chat template path: no errors, text decodes."""
    pipe = ov_genai.LLMPipeline(str(tiny_model_dir), "CPU", INFERENCE_PRECISION_HINT="f32")
    gen = ov_genai.GenerationConfig(max_new_tokens=8, ignore_eos=True)
    text = pipe.generate(PROMPT, gen)
    assert isinstance(text, str) and text
    history = ov_genai.ChatHistory()
    history.append({"role": "user", "content": "Hello!"})
    reply = pipe.generate(history, gen)
    assert reply.texts and isinstance(reply.texts[0], str)


@pytest.mark.parametrize(
    ("group_size", "wide", "accepted"),
    [
        (16, False, False),
        (32, False, False),
        (-1, False, False),
        (128, True, True),
        (-1, True, True),
    ],
)
def test_npuw_int4_group_size_rule(group_size, wide, accepted, tmp_path):
    """Real NPUW on CPU needs the last i4 dim (group size, or K channel-wise) % 64 == 0.

    tiny's down_proj has K=176, so even channel-wise tiny fails; hidden 128 / intermediate 256
    passes with gs 128 and channel-wise and then gives the reference's greedy ids.
    """
    from ov_npu_emu.modelbuilder import make_model_folder

    wide_kw = {"hidden_size": 128, "intermediate_size": 256, "head_dim": 32} if wide else {}
    folder = make_model_folder(tmp_path, "tiny", "int4", group_size=group_size, **wide_kw)
    ids = [1, 82, 113, 102, 104]
    config = NPUW_CONFIG | {"KV_CACHE_PRECISION": "f32"}
    if not accepted:
        with pytest.raises(RuntimeError, match=r"from_shape.back\(\) % 64 == 0"):
            _generate_ids(folder, "NPU", config, ids)
        return
    expected = load_reference(folder).greedy_generate(ids, NEW_TOKENS)
    assert _generate_ids(folder, "NPU", config, ids) == expected
