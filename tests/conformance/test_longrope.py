"""Phi-3 / Phi-4-mini "longrope" exports past their original context (issue 28 item 8).

The exports (tests/fixtures/optimum/*_longrope-fp32) pick short or long RoPE factors by
``max(position_ids) + 1 > original_max_position_embeddings`` (32) of each call.  With the NPU
setups' KV size of 128 a RoPE table over all positions would give every step the long factors;
a chunked prefill would give a chunk before position 32 the short ones where the whole prompt
takes the long ones; a restored prefix block was computed under another call's range.  Every
NPUW path that touches positions must still give the real openvino_genai's ids on CPU (f32),
computed here with the real package, for a prompt before the switch (decode crosses it) and one
past it (the prefill crosses it).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from tools.conformance import F32, FIXTURES, NPU_SHAPES, golden

pytestmark = pytest.mark.oracle

NAMES = ("phi3_longrope-fp32", "phi4mini_longrope-fp32")
#: appended to the golden prompt: the long prompt (56-60 tokens) is past the 32 positions
MORE = "In the morning the baker opened his shop and sold warm bread. The river ran past the old mill."
NPUW_CPU = {**NPU_SHAPES, "NPUW_DEVICES": "CPU"}
CHUNK = {"NPUW_LLM_PREFILL_CHUNK_SIZE": 16}
SETUPS: dict[str, tuple[str, dict]] = {
    "CPU": ("CPU", {}),
    "NPUW on CPU": ("NPU", NPUW_CPU),
    "NPUW on CPU, no RoPE cache": ("NPU", {**NPUW_CPU, "NPUW_LLM_CACHE_ROPE": "NO"}),
    "NPU (emulated)": ("NPU", NPU_SHAPES),
    "NPUW on CPU, chunked": ("NPU", {**NPUW_CPU, **CHUNK}),
    "NPUW on CPU, chunked, no RoPE cache": ("NPU", {**NPUW_CPU, **CHUNK, "NPUW_LLM_CACHE_ROPE": "NO"}),
    "NPU (emulated), chunked": ("NPU", {**NPU_SHAPES, **CHUNK}),
    "NPUW on CPU, pyramid": ("NPU", {**NPUW_CPU, **CHUNK, "NPUW_LLM_PREFILL_ATTENTION_HINT": "PYRAMID"}),
    "NPUW on CPU, block KV": ("NPU", {**NPUW_CPU, **CHUNK, "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE": "YES"}),
}


def _path(name: str) -> Path:
    return FIXTURES / name


@functools.cache
def prompts(name: str) -> dict[str, tuple[int, ...]]:
    import openvino_genai

    g = golden(_path(name))
    more = openvino_genai.Tokenizer(str(_path(name))).encode(MORE, add_special_tokens=False).input_ids
    long = (g["prompt_ids"] + [int(t) for t in more.data[0]])[:60]
    return {"short": tuple(g["prompt_ids"]), "long": tuple(long)}


def _generate(pipe, ids) -> list[int]:
    cfg = pipe.get_generation_config()
    cfg.max_new_tokens = 32
    cfg.ignore_eos = True
    cfg.do_sample = False
    out = pipe.generate(ov.Tensor(np.array([ids], dtype=np.int64)), cfg)
    return [int(t) for t in out.tokens[0]]


@functools.cache
def real_cpu(name: str, which: str) -> tuple[int, ...]:
    """The reference: the real openvino_genai on CPU under f32 hints."""
    import openvino_genai

    pipe = openvino_genai.LLMPipeline(str(_path(name)), "CPU", **F32)
    return tuple(_generate(pipe, list(prompts(name)[which])))


def _ours(name: str, setup: str, **extra):
    import genai_shim

    device, props = SETUPS[setup]
    return genai_shim.LLMPipeline(str(_path(name)), device, **F32, **props, **extra)


def test_the_prompts_cross_the_original_context():
    """The short prompt's generation and the long prompt itself pass position 32; the switch
    changes the tokens (the short and long goldens of one prompt prefix differ)."""
    for name in NAMES:
        p = prompts(name)
        assert len(p["short"]) < 32 < len(p["short"]) + 32
        assert 32 < len(p["long"]) <= NPU_SHAPES["MAX_PROMPT_LEN"]
        assert len(set(real_cpu(name, "short"))) >= 8 and len(set(real_cpu(name, "long"))) >= 8


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("name", NAMES)
def test_greedy_ids_equal_the_real_cpu(name, setup):
    pipe = _ours(name, setup)
    for which in ("short", "long", "short"):  # and a conversation after a long one
        want = list(real_cpu(name, which))
        assert _generate(pipe, list(prompts(name)[which])) == want, which


@pytest.mark.parametrize("name", NAMES)
def test_prefix_caching_restores_no_block_of_another_range(name):
    """The long prompt starts with the short one: a block cached from the short conversation
    holds short-factor keys where the long prompt needs long-factor ones."""
    pipe = _ours(name, "NPUW on CPU, chunked", NPUW_LLM_ENABLE_PREFIX_CACHING="YES",
                 NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE=16)
    for which in ("short", "long", "long"):
        assert _generate(pipe, list(prompts(name)[which])) == list(real_cpu(name, which)), which


@pytest.mark.parametrize("name", NAMES)
def test_cache_dir_round_trip(name, tmp_path):
    """A chunked prefill model with the whole call's positions survives export and import."""
    for _ in range(2):  # compile and store, then import
        pipe = _ours(name, "NPUW on CPU, chunked", CACHE_DIR=str(tmp_path))
        for which in ("long", "short"):
            assert _generate(pipe, list(prompts(name)[which])) == list(real_cpu(name, which)), which
    assert any(tmp_path.iterdir())
