"""genai_shim.TextRerankPipeline side by side with the real openvino_genai.TextRerankPipeline on
the tiny BERT cross-encoder (tests/fixtures/rag/bert-rerank-fp32) on CPU under f32 hints: the
order and scores for top_n, truncation, padding to a length and left padding; paired
tokenization with token type ids; the Config; NPU's dynamic-shape refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genai_shim
from genai_shim.tokenizer import token_type_ids
from ov_npu_emu.errors import ConfigError, DynamicShapeError, UserTypeError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "rag" / "bert-rerank-fp32"
CPU_PROPS = {"INFERENCE_PRECISION_HINT": "f32"}
QUERY = "Who rowed out to the ship?"
DOCUMENTS = [
    "The keeper lit every lamp and watched the small ship on the water.",
    "Two fishermen rowed out in the strongest boat they owned.",
    "Bread.",
    "The children watched the waves break white against the rocks.",
    "Seven sailors climbed down, tired and wet.",
]

og = pytest.importorskip("openvino_genai")

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "top_2_truncate_10": {"top_n": 2, "max_length": 10},
    "all_left": {"top_n": 10, "padding_side": "left"},
    "pad_to_32": {"top_n": 5, "max_length": 32, "pad_to_max_length": True},
}


@pytest.mark.parametrize("case", list(CASES))
def test_cpu_matches_real(case: str) -> None:
    kw = CASES[case]
    ours = genai_shim.TextRerankPipeline(FOLDER, "CPU", **kw, **CPU_PROPS).rerank(QUERY, DOCUMENTS)
    real = og.TextRerankPipeline(str(FOLDER), "CPU", **kw, **CPU_PROPS).rerank(QUERY, DOCUMENTS)
    assert [i for i, _ in ours] == [i for i, _ in real]
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in real], rtol=1e-5, atol=0)
    assert all(type(i) is int and type(s) is float for i, s in ours)
    assert len(ours) == min(kw.get("top_n", 3), len(DOCUMENTS))


def test_knobs_matter() -> None:
    """Left padding moves BERT's absolute positions, truncation cuts the documents: the scores
    change (a test that cannot fail on a knob ignored)."""
    def scores(**kw: Any) -> dict[int, float]:
        return dict(genai_shim.TextRerankPipeline(FOLDER, "CPU", top_n=10, **kw, **CPU_PROPS).rerank(QUERY, DOCUMENTS))

    base = scores()
    for kw in ({"padding_side": "left"}, {"max_length": 10}):
        other = scores(**kw)
        assert max(abs(base[i] - other[i]) for i in base) > 1e-3, kw


def test_async_and_config_object() -> None:
    cfg = genai_shim.TextRerankPipeline.Config()
    real_cfg = og.TextRerankPipeline.Config()
    fields = ("top_n", "max_length", "pad_to_max_length", "padding_side")
    assert {f: getattr(cfg, f) for f in fields} == {f: getattr(real_cfg, f) for f in fields}
    cfg.top_n = 4
    pipe = genai_shim.TextRerankPipeline(FOLDER, "CPU", cfg, **CPU_PROPS)
    pipe.start_rerank_async(QUERY, DOCUMENTS)
    ours = pipe.wait_rerank()
    real_cfg.top_n = 4
    real = og.TextRerankPipeline(str(FOLDER), "CPU", real_cfg, **CPU_PROPS).rerank(QUERY, DOCUMENTS)
    assert [i for i, _ in ours] == [i for i, _ in real] and len(ours) == 4


def test_paired_tokenization_matches_real() -> None:
    """One query against N documents, as the real's encode({query}, texts): the same ids and
    mask; the token type ids mark the second text (the real passes them to the model)."""
    ours_tok = genai_shim.Tokenizer(FOLDER, add_second_input=True)
    real_tok = og.Tokenizer(str(FOLDER), add_second_input=True)
    assert ours_tok.supports_paired_input() and real_tok.supports_paired_input()
    for kw in ({}, {"padding_side": "left"}, {"max_length": 12, "pad_to_max_length": True, "truncation": True}):
        ours = ours_tok.encode([QUERY], DOCUMENTS[:3], **kw)
        real = real_tok.encode([QUERY], DOCUMENTS[:3], **kw)
        assert ours.input_ids.data.tolist() == real.input_ids.data.tolist()
        assert ours.attention_mask.data.tolist() == real.attention_mask.data.tolist()
        types, mask = token_type_ids(ours).data, ours.attention_mask.data
        assert ((types == 0) | (types == 1)).all() and (types[mask == 0] == 0).all() and types.sum() > 0


def test_errors() -> None:
    with pytest.raises(ConfigError, match="topn"):
        genai_shim.TextRerankPipeline.Config(topn=2)
    with pytest.raises(UserTypeError):
        genai_shim.TextRerankPipeline.Config().top_n = None
    for lib in (og, genai_shim):
        with pytest.raises(RuntimeError, match="Unsupported property FOO_BAR by CPU plugin"):
            lib.TextRerankPipeline(str(FOLDER), "CPU", FOO_BAR=1)
        with pytest.raises(TypeError):
            lib.TextRerankPipeline(str(FOLDER), "CPU").rerank(QUERY, "one string")


def test_npu_refuses_the_dynamic_model() -> None:
    """The real has no NPU path for rerank: the dynamic model fails to compile there (on this
    machine "to_shape was called on a dynamic shape" through NPUW); ours is the emulated NPU's
    DynamicShapeError, which says to reshape."""
    with pytest.raises(RuntimeError, match="dynamic shape"):
        og.TextRerankPipeline(str(FOLDER), "NPU", NPU_USE_NPUW="YES", NPUW_DEVICES="CPU")
    with pytest.raises(DynamicShapeError, match="static shapes"):
        genai_shim.TextRerankPipeline(FOLDER, "NPU")


def test_npu_pre_reshaped_model_matches_real(tmp_path: Path) -> None:
    """A user's way onto NPU: the IR reshaped to [4, 24] beforehand and the pipeline padding to
    24. Ours on the emulated NPU, the real NPU plugin through NPUW on CPU (f32): same order,
    scores within 1e-5, and the CPU pipeline's numbers."""
    import openvino as ov

    for f in FOLDER.iterdir():
        if not f.name.startswith("openvino_model."):
            (tmp_path / f.name).symlink_to(f)
    model = ov.Core().read_model(FOLDER / "openvino_model.xml")
    model.reshape({name: [4, 24] for name in ("input_ids", "attention_mask", "token_type_ids")})
    ov.save_model(model, tmp_path / "openvino_model.xml", compress_to_fp16=False)
    kw = {"max_length": 24, "pad_to_max_length": True, "top_n": 4}
    docs = DOCUMENTS[:4]
    # the emulated NPU in its exact mode (its default is f16, as the real NPU's)
    ours = genai_shim.TextRerankPipeline(tmp_path, "NPU", **kw, INFERENCE_PRECISION_HINT="f32").rerank(QUERY, docs)
    real = og.TextRerankPipeline(str(tmp_path), "NPU", NPU_USE_NPUW="YES", NPUW_DEVICES="CPU",
                                 NPUW_ONLINE_PIPELINE="NONE", **kw, **CPU_PROPS).rerank(QUERY, docs)
    cpu = og.TextRerankPipeline(str(FOLDER), "CPU", **kw, **CPU_PROPS).rerank(QUERY, docs)
    assert [i for i, _ in ours] == [i for i, _ in real] == [i for i, _ in cpu]
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in real], rtol=1e-5, atol=0)
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in cpu], rtol=1e-5, atol=0)
