"""genai_shim.TextEmbeddingPipeline on a decoder embedding model (the tiny Qwen3-Embedding-style
export tests/fixtures/rag/qwen3-embed-fp32) side by side with the real openvino_genai: every case
of tools/rag_goldens.py on CPU against the real's goldens; on "NPU" the real's dynamic path
(NPUW's text-embedding mode: whole or chunked prefill, pooling on CPU) on NPUW_DEVICES=CPU and on
the emulated NPU (f32), the static path, and where the real fails or is wrong on NPU (two texts
per call; LAST_TOKEN with left padding) what ours does beside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genai_shim
from ov_npu_emu.errors import UserInputError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "rag" / "qwen3-embed-fp32"
sys.path.insert(0, str(ROOT / "tools"))
from rag_goldens import CPU_PROPS, DOCUMENTS, EMBED_CASES, embed_pipeline, run_embed_case  # noqa: E402

og = pytest.importorskip("openvino_genai")
GOLDEN = json.loads((FOLDER / "golden.json").read_text(encoding="utf-8"))
RTOL = 1e-5
REAL_NPU = {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE",
            "INFERENCE_PRECISION_HINT": "f32"}
EMULATED = {"INFERENCE_PRECISION_HINT": "f32"}


def rel_error(ours: Any, ref: Any) -> float:
    """Largest element-wise difference over the vector's largest magnitude."""
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert a.shape == b.shape
    return float((np.abs(a - b) / np.abs(b).max(axis=-1, keepdims=True)).max())


@pytest.mark.parametrize("case", list(EMBED_CASES))
def test_cpu_matches_real_goldens(case: str) -> None:
    assert rel_error(run_embed_case(embed_pipeline(genai_shim, FOLDER, case), case),
                     GOLDEN["cases"][case]["embeddings"]) <= RTOL


def _make(lib: Any, device_props: dict[str, Any], pooling: str, **config: Any) -> Any:
    pooling_type = getattr(lib.TextEmbeddingPipeline.PoolingType, pooling)
    return lib.TextEmbeddingPipeline(str(FOLDER), "NPU", pooling_type=pooling_type, **config, **device_props)


#: the dynamic NPU path: (pooling, config, NPUW keys); DOCUMENTS[2] is 42 tokens, so chunk 16 runs
#: three chunks (the last partly filled) and MAX_PROMPT_LEN 64 has a padded tail
DYNAMIC = {
    "last_token_default": ("LAST_TOKEN", {}, {}),
    "mean_chunk_16": ("MEAN", {"max_length": 64}, {"NPUW_LLM_PREFILL_CHUNK_SIZE": 16}),
    "last_token_chunk_16_raw": ("LAST_TOKEN", {"max_length": 64, "normalize": False},
                                {"NPUW_LLM_PREFILL_CHUNK_SIZE": 16}),
    "mean_left_pad_40_chunk_16": ("MEAN", {"max_length": 40, "pad_to_max_length": True, "padding_side": "left"},
                                  {"NPUW_LLM_PREFILL_CHUNK_SIZE": 16}),
}


@pytest.mark.parametrize("case", list(DYNAMIC))
def test_npu_dynamic_path_matches_real(case: str) -> None:
    """Ours on the real's keys and on the emulated NPU within 1e-5 of the real NPU plugin (NPUW
    on CPU, f32). Chunked, the real moves away from its CPU pipeline (its f16 past KV): ours too."""
    pooling, config, npuw = DYNAMIC[case]
    text = DOCUMENTS[0] if "pad" in case else DOCUMENTS[2]
    real = _make(og, {**REAL_NPU, **npuw}, pooling, **config).embed_query(text)
    for props in (REAL_NPU, EMULATED):
        ours = _make(genai_shim, {**props, **npuw}, pooling, **config).embed_query(text)
        assert rel_error(ours, real) <= RTOL, props
    cpu = og.TextEmbeddingPipeline(str(FOLDER), "CPU", pooling_type=getattr(og.TextEmbeddingPipeline.PoolingType,
                                                                           pooling), **config, **CPU_PROPS)
    off = rel_error(real, cpu.embed_query(text))
    assert (off > RTOL) if npuw else (off < 1e-6), off


def test_npu_static_path_matches_real() -> None:
    """batch_size, max_length and pad_to_max_length: the fixed model with pooling fused,
    compiled on "NPU" as given (the emulated NPU, or NPUW with the real's keys)."""
    config = {"batch_size": 3, "max_length": 48, "pad_to_max_length": True}
    real = _make(og, REAL_NPU, "LAST_TOKEN", **config).embed_documents(list(DOCUMENTS))
    for props in (REAL_NPU, EMULATED):
        assert rel_error(_make(genai_shim, props, "LAST_TOKEN", **config).embed_documents(list(DOCUMENTS)),
                         real) <= RTOL


@pytest.mark.parametrize("npuw", [{}, {"NPUW_LLM_PREFILL_CHUNK_SIZE": 16}], ids=["whole", "chunk_16"])
def test_npu_dynamic_path_one_text_per_call(npuw: dict[str, Any]) -> None:
    """Two texts in one call: the real fails inside NPUW (an internal check, not a message for
    users); ours is a UserInputError that says to embed them one by one."""
    real_text = "padded_shape.* == position_shape" if not npuw else r"Cannot set new shape: \[2,"
    with pytest.raises(RuntimeError, match=real_text):
        _make(og, {**REAL_NPU, **npuw}, "MEAN").embed_documents(list(DOCUMENTS[:2]))
    with pytest.raises(UserInputError, match=r"expects batch size 1, got shape \[2,19\].*one by one"):
        _make(genai_shim, {**REAL_NPU, **npuw}, "MEAN").embed_documents(list(DOCUMENTS[:2]))


def test_npu_dynamic_last_token_left_padding_wrong_as_the_real() -> None:
    """LAST_TOKEN with padding_side="left" (the Qwen3-Embedding recipe) on the dynamic path: the
    post model reads the last of the P rows, a zero padding row, so the real returns a zero
    vector (its test_rag.py xfails Qwen3 on NPU). Ours returns the same zeros; docs/genai_shim.md."""
    real = _make(og, REAL_NPU, "LAST_TOKEN", padding_side="left").embed_query(DOCUMENTS[2])
    ours = _make(genai_shim, EMULATED, "LAST_TOKEN", padding_side="left").embed_query(DOCUMENTS[2])
    assert not np.any(real) and not np.any(ours)
    cpu = og.TextEmbeddingPipeline(str(FOLDER), "CPU", pooling_type=og.TextEmbeddingPipeline.PoolingType.LAST_TOKEN,
                                   padding_side="left", **CPU_PROPS).embed_query(DOCUMENTS[2])
    assert np.abs(np.asarray(cpu)).max() > 0.3  # the right answer, far from zero
