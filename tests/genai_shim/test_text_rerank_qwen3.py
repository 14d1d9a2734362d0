"""genai_shim.TextRerankPipeline on a Qwen3-Reranker-style decoder (tests/fixtures/rag/qwen3-rerank-fp32:
a stateful Qwen3ForCausalLM scored by the "no"/"yes" logits of the last column) against the real
openvino_genai 2026.4.1's goldens (tools/rag_goldens.py RERANK_CASES, f32 hints): on CPU for
every case, and on NPU, where the real has no path for the stateful export (dynamic shapes) and
a stateless copy reshaped to [4, 112] runs on the emulated NPU and through NPUW on CPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, DynamicShapeError, UnsupportedFeatureError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "rag" / "qwen3-rerank-fp32"
sys.path.insert(0, str(ROOT / "tools"))
from rag_goldens import (  # noqa: E402
    CPU_PROPS,
    NPUW_CPU,
    RERANK_CASES,
    RERANK_DOCUMENTS,
    RERANK_QUERY,
    RERANK_STATIC,
    RERANK_STATIC_SHAPE,
    stateless_static_copy,
)

GOLDEN = json.loads((FOLDER / "golden.json").read_text(encoding="utf-8"))


def check(ours: list[tuple[int, float]], case: str) -> None:
    """Same documents in the same order, scores within 1e-5 of the real's."""
    real = GOLDEN["cases"][case]["results"]
    assert [i for i, _ in ours] == [i for i, _ in real], case
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in real], rtol=0, atol=1e-5, err_msg=case)
    assert all(type(i) is int and type(s) is float for i, s in ours)


def rerank(pipe: Any) -> list[tuple[int, float]]:
    return pipe.rerank(RERANK_QUERY, list(RERANK_DOCUMENTS))


@pytest.mark.parametrize("case", list(RERANK_CASES))
def test_cpu_matches_real_goldens(case: str) -> None:
    pipe = genai_shim.TextRerankPipeline(FOLDER, "CPU", **RERANK_CASES[case], **CPU_PROPS)
    check(rerank(pipe), case)
    if case == "all":  # the state is reset after a call (a stateful export): the next one is the same
        pipe.start_rerank_async(RERANK_QUERY, list(RERANK_DOCUMENTS))
        check(pipe.wait_rerank(), case)


def test_goldens_show_the_knobs() -> None:
    """The cases differ where they should (a golden that cannot tell the knobs apart proves
    nothing): right padding scores the shorter texts at a pad token (the real reads the last
    column), truncation keeps the end of each text; padding further on the left changes little."""
    scores = {c: dict(map(tuple, v["results"])) for c, v in GOLDEN["cases"].items()}
    assert len(scores["top_n_default"]) == 3 and len(scores["all"]) == 4
    for case in ("right", "truncate_64"):
        assert max(abs(scores[case][i] - scores["all"][i]) for i in range(4)) > 1e-2, case
    # the longest text has no padding on either side: the same score
    assert scores["right"][2] == pytest.approx(scores["all"][2], abs=1e-6)


@pytest.fixture(scope="module")
def static_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stateless_static_copy(FOLDER, tmp_path_factory.mktemp("qwen3-rerank-static"), *RERANK_STATIC_SHAPE)


@pytest.mark.parametrize("props", [CPU_PROPS, NPUW_CPU], ids=["emulated_f32", "npuw_cpu"])
def test_npu_static_copy_matches_real(static_folder: Path, props: dict[str, str]) -> None:
    """The stateless [4, 112] copy on the emulated NPU (exact mode), and through our NPUW on CPU
    at default properties (a plain model: the CPU plugin runs it, as in the real): the real NPU
    plugin's (NPUW on CPU) order and scores within 1e-5."""
    pipe = genai_shim.TextRerankPipeline(static_folder, "NPU", **RERANK_STATIC, **props)
    check(rerank(pipe), "static_npuw_cpu")


def test_npu_refuses_the_stateful_export() -> None:
    """The real has no NPU path for rerank: the stateful export compiles through NPUW but its
    dynamic shapes fail at the first rerank (on this machine "to_shape was called on a dynamic
    shape"); ours is a DynamicShapeError at construction, which says to reshape (the emulated
    NPU's, and NPUW's with NPUW_DEVICES=CPU)."""
    og = pytest.importorskip("openvino_genai")
    real = og.TextRerankPipeline(str(FOLDER), "NPU", **NPUW_CPU)
    with pytest.raises(RuntimeError, match="dynamic shape"):
        rerank(real)
    for props in (CPU_PROPS, NPUW_CPU):
        with pytest.raises(DynamicShapeError, match="static shapes"):
            genai_shim.TextRerankPipeline(FOLDER, "NPU", **props)


def _with_model_type(src: Path, dst: Path, model_type: str) -> Path:
    for f in src.iterdir():
        if f.name != "config.json":
            (dst / f.name).symlink_to(f)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    (dst / "config.json").write_text(json.dumps({**config, "model_type": model_type}), encoding="utf-8")
    return dst


def test_errors(tmp_path: Path) -> None:
    """A causal LM that is not a Qwen3 model: the real softmaxes its logits over the sequence axis
    and returns numbers that are no scores; ours refuses.  A "qwen3" model whose tokenizer has no
    "yes": the real's IndexError ("unordered_map::at"); ours says what is missing."""
    (tmp_path / "llama").mkdir()
    with pytest.raises(UnsupportedFeatureError, match="Qwen3 reranker"):
        genai_shim.TextRerankPipeline(_with_model_type(FOLDER, tmp_path / "llama", "llama"), "CPU")
    (tmp_path / "bert").mkdir()
    bert = _with_model_type(ROOT / "tests" / "fixtures" / "rag" / "bert-rerank-fp32", tmp_path / "bert", "qwen3")
    with pytest.raises(ConfigError, match="no 'yes' and no 'no' token"):
        genai_shim.TextRerankPipeline(bert, "CPU")
