"""VLMPipeline(prompt_lookup=True) (issue 31): prompt-lookup decoding on CPU as the real's
continuous-batching adapter runs it - the same tokens as plain decoding, in fewer model calls -
and the real's errors (an SDPA backend, a config without max_ngram_size / num_assistant_tokens)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vlm"
PROMPT = "Describe the image in detail please"


def _image() -> ov.Tensor:
    return ov.Tensor(np.random.default_rng(0).integers(0, 256, (1, 70, 90, 3), dtype=np.uint8))


@pytest.mark.parametrize("family", ["qwen2vl-fp32", "qwen3vl-fp32"])  # Qwen3-VL: per-token DeepStack inputs
def test_prompt_lookup_gives_plain_decodings_tokens(family: str) -> None:
    plain = genai_shim.VLMPipeline(str(FIXTURES / family), "CPU")
    lookup = genai_shim.VLMPipeline(str(FIXTURES / family), "CPU", prompt_lookup=True)
    config = plain.get_generation_config()
    config.max_new_tokens, config.ignore_eos = 40, True
    want = plain.generate(PROMPT, images=[_image()], generation_config=config)
    config.num_assistant_tokens, config.max_ngram_size = 5, 3
    chunks: list[str] = []
    got = lookup.generate(PROMPT, images=[_image()], generation_config=config,
                          streamer=lambda word: chunks.append(word) and False)
    assert got.texts == want.texts
    assert "".join(chunks) == got.texts[0]
    calls = got.perf_metrics.raw_metrics.m_batch_sizes
    assert sum(calls) == 40 and len(calls) < 40  # candidates were accepted: fewer calls than tokens


def test_prompt_lookup_errors() -> None:
    folder = str(FIXTURES / "qwen2vl-fp32")
    with pytest.raises(ConfigError, match="User properties are conflicting: some of them requires PagedAttention"):
        genai_shim.VLMPipeline(folder, "CPU", prompt_lookup=True, ATTENTION_BACKEND="SDPA")
    pipe = genai_shim.VLMPipeline(folder, "CPU", prompt_lookup=True)
    with pytest.raises(ConfigError, match="`max_ngram_size` && `num_assistant_tokens` should be specified"):
        pipe.generate(PROMPT, max_new_tokens=3)
    assert pipe.generate(PROMPT, max_new_tokens=3, num_assistant_tokens=2, max_ngram_size=2).texts[0]
