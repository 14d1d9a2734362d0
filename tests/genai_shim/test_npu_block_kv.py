"""LLMPipeline on "NPU" with NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE=YES: the texts of the contiguous
KV cache and of the real openvino_genai on NPU (real NPUW on CPU, contiguous: its block path returns
NaN logits on CPU, see docs/npuw.md)."""

from __future__ import annotations

import pytest

import genai_shim
from tests.genai_shim.conftest import F32, REAL_NPU

pytestmark = [pytest.mark.oracle, pytest.mark.filterwarnings("ignore:start_chat:DeprecationWarning")]

BLOCK = {"NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE": "YES"}
LENS = {"MAX_PROMPT_LEN": 256, "MIN_RESPONSE_LEN": 64, "NPUW_LLM_PREFILL_CHUNK_SIZE": 32}
#: ours only: generate variants 64/128/192/320, so answers switch variants as they grow
VARIANTS = {"NPUW_LLM_GENERATE_VARIANTS": "64,128,192"}
QUESTIONS = ["Who is Lily?", "What did she find?", "Where did they go?"]


def _chat(pipe, mod) -> list[str]:
    history = mod.ChatHistory([{"role": "system", "content": "Tell a story."}])
    texts = []
    for q in QUESTIONS:
        history.append({"role": "user", "content": q})
        text = pipe.generate(history, max_new_tokens=40).texts[0]
        texts.append(text)
        history.append({"role": "assistant", "content": text})
    return texts


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_chat_turns_match_contiguous_and_real(device, chat_dir, real_genai):
    props = {**F32, **REAL_NPU, **LENS, "NPUW_DEVICES": device}
    block = genai_shim.LLMPipeline(str(chat_dir), "NPU", **props, **BLOCK, **VARIANTS)
    texts = _chat(block, genai_shim)
    npuw = block._impl.request.impl  # the NPUW infer request under the pipeline
    assert npuw.kv.paged and npuw.prefill_calls >= 3  # the last turn's history took 3+ chunks
    assert texts == _chat(genai_shim.LLMPipeline(str(chat_dir), "NPU", **props, **VARIANTS), genai_shim)
    if device == "CPU":
        real = real_genai.LLMPipeline(str(chat_dir), "NPU", **F32, **REAL_NPU, **LENS)
        assert texts == _chat(real, real_genai)


def test_long_answer_switches_variants_and_stops_at_kv_capacity(stories_dir, real_genai):
    props = {**F32, **REAL_NPU, **LENS}
    block = genai_shim.LLMPipeline(str(stories_dir), "NPU", **props, **BLOCK, **VARIANTS)
    real = real_genai.LLMPipeline(str(stories_dir), "NPU", **props)
    prompt = "Once upon a time there was a little girl named Lily who loved to play in the park"
    kw = {"max_new_tokens": 1000, "ignore_eos": True}
    a = block.generate(block.get_tokenizer().encode(prompt), **kw)
    b = real.generate(real.get_tokenizer().encode(prompt), **kw)
    assert a.tokens == b.tokens  # ends at the KV capacity (MAX_PROMPT_LEN + MIN_RESPONSE_LEN − 1)
    npuw = block._impl.request.impl
    assert npuw.switches == 2 and npuw.variant == 320  # kv128 → kv192 → kv320
    assert len(npuw.kv.blocks.table) == 10  # 319 tokens in blocks of 32
