"""genai_shim.TextEmbeddingPipeline side by side with the real openvino_genai.TextEmbeddingPipeline
on the tiny BERT export (tests/fixtures/rag/bert-embed-fp32) on CPU under f32 hints: every case of
tools/rag_goldens.py (pooling, normalisation, instructions, truncation, padding, static batch),
the async calls, the Config and the real's errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, IRReadError, UnsupportedFeatureError, UserInputError, UserTypeError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "rag" / "bert-embed-fp32"
sys.path.insert(0, str(ROOT / "tools"))
from rag_goldens import (  # noqa: E402
    CPU_PROPS,
    DOCUMENTS,
    EMBED_CASES,
    QUERY,
    config_kwargs,
    embed_pipeline,
    run_embed_case,
)

og = pytest.importorskip("openvino_genai")
GOLDEN = json.loads((FOLDER / "golden.json").read_text(encoding="utf-8"))
RTOL = 1e-5


def assert_close(ours: Any, ref: Any) -> None:
    """Within 1e-5 relative: element-wise, with the vector's largest magnitude as the scale."""
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert a.shape == b.shape
    scale = np.abs(b).max(axis=-1, keepdims=True)
    assert (np.abs(a - b) <= RTOL * scale).all(), float((np.abs(a - b) / scale).max())


_cache: dict[tuple[str, str], Any] = {}


def _pipe(lib: Any, case: str) -> Any:
    key = (lib.__name__, case)
    if key not in _cache:
        _cache[key] = embed_pipeline(lib, FOLDER, case)
    return _cache[key]


@pytest.mark.parametrize("case", list(EMBED_CASES))
def test_cpu_matches_real(case: str) -> None:
    ours = run_embed_case(_pipe(genai_shim, case), case)
    real = run_embed_case(_pipe(og, case), case)
    assert_close(ours, real)
    assert_close(ours, GOLDEN["cases"][case]["embeddings"])
    # the result types of the real binding: a list of lists of Python floats
    assert type(ours) is list and type(ours[0]) is list and type(ours[0][0]) is float


def test_cases_differ() -> None:
    """The knobs matter on this fixture (a test that cannot fail on a knob ignored)."""
    cases = GOLDEN["cases"]
    first = {c: np.asarray(cases[c]["embeddings"][0]) for c in cases}
    for a, b in [("cls", "mean"), ("cls", "cls_raw"), ("mean", "mean_left"), ("mean", "truncate_8"),
                 ("mean", "embed_instruction"), ("query", "query_plain"), ("last_token", "last_token_left")]:
        assert np.abs(first[a] - first[b]).max() > 1e-3, (a, b)
    assert np.allclose(np.linalg.norm(first["cls"]), 1.0, atol=1e-6)
    # padding on the right to a fixed length leaves MEAN pooling as it is (the mask holds)
    assert_close(cases["pad_to_32"]["embeddings"], cases["mean"]["embeddings"])


def test_query_returns_one_vector() -> None:
    ours = _pipe(genai_shim, "query").embed_query(QUERY)
    assert type(ours) is list and type(ours[0]) is float and len(ours) == 64
    assert_close(ours, _pipe(og, "query").embed_query(QUERY))


def test_async_forms() -> None:
    for lib in (genai_shim, og):
        pipe = _pipe(lib, "mean")
        pipe.start_embed_documents_async(list(DOCUMENTS))
        docs = pipe.wait_embed_documents()
        pipe.start_embed_query_async(QUERY)
        query = pipe.wait_embed_query()
        # the request keeps its last output: waiting again returns it again, as a batch of one
        again = pipe.wait_embed_documents()
        assert len(docs) == 3 and len(again) == 1
        assert_close(again[0], query)
        assert_close(docs, pipe.embed_documents(list(DOCUMENTS)))


def test_config_matches_real_binding() -> None:
    ours, real = genai_shim.TextEmbeddingPipeline.Config(), og.TextEmbeddingPipeline.Config()
    fields = ("max_length", "pad_to_max_length", "batch_size", "normalize", "query_instruction",
              "embed_instruction", "padding_side")
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(real, f) for f in fields}
    assert ours.pooling_type.name == real.pooling_type.name == "CLS"
    P, RP = genai_shim.TextEmbeddingPipeline.PoolingType, og.TextEmbeddingPipeline.PoolingType
    assert {n: int(v) for n, v in P.__members__.items()} == {n: int(v) for n, v in RP.__members__.items()}
    assert str(P.MEAN) == str(RP.MEAN) == "PoolingType.MEAN"
    kw = dict(max_length=8, pad_to_max_length=True, batch_size=2, normalize=False,
              query_instruction="q: ", embed_instruction="d: ", padding_side="left")
    ours = genai_shim.TextEmbeddingPipeline.Config(**kw, pooling_type=P.MEAN)
    real = og.TextEmbeddingPipeline.Config(**kw, pooling_type=RP.MEAN)
    assert {f: getattr(ours, f) for f in fields} == {f: getattr(real, f) for f in fields}
    ours.max_length = None
    assert ours.max_length is None
    ours.pooling_type = P.LAST_TOKEN
    assert ours.pooling_type is P.LAST_TOKEN


@pytest.mark.parametrize(("field", "value"), [("max_length", -1), ("pooling_type", 2), ("normalize", "yes"),
                                              ("query_instruction", 3)])
def test_config_attribute_types(field: str, value: Any) -> None:
    """A field set to a value of the wrong type: TypeError, as the real binding's."""
    with pytest.raises(TypeError):
        setattr(og.TextEmbeddingPipeline.Config(), field, value)
    with pytest.raises(UserTypeError):
        setattr(genai_shim.TextEmbeddingPipeline.Config(), field, value)


def test_config_kwargs_errors() -> None:
    # pooling_type as an int: the real's RuntimeError "Bad as from"; ours names the enum
    with pytest.raises(RuntimeError):
        og.TextEmbeddingPipeline.Config(pooling_type=1)
    with pytest.raises(ConfigError, match="PoolingType"):
        genai_shim.TextEmbeddingPipeline.Config(pooling_type=1)
    # an unknown key: the real ignores it, ours refuses it
    with pytest.raises(ConfigError, match="normalise"):
        genai_shim.TextEmbeddingPipeline.Config(normalise=False)
    # a negative size: the real wraps it to 2**64 - 1, ours refuses it
    assert og.TextEmbeddingPipeline.Config(max_length=-1).max_length == 2**64 - 1
    with pytest.raises(ConfigError, match="non-negative"):
        genai_shim.TextEmbeddingPipeline.Config(max_length=-1)


@pytest.mark.parametrize(("key", "message"), [("max_length", "max_length should be greater than 0"),
                                              ("batch_size", "batch_size should be greater than 0")])
def test_validate_errors(key: str, message: str) -> None:
    for lib in (og, genai_shim):
        with pytest.raises(RuntimeError, match=message):
            lib.TextEmbeddingPipeline.Config(**{key: 0}).validate()
        with pytest.raises(RuntimeError, match=message):
            lib.TextEmbeddingPipeline(str(FOLDER), "CPU", **{key: 0})
        with pytest.raises(RuntimeError, match=message):
            lib.TextEmbeddingPipeline(str(FOLDER), "CPU", lib.TextEmbeddingPipeline.Config(**{key: 0}))


def test_batch_size_mismatch() -> None:
    message = r"Number of texts passed to pipeline should be equal to batch_size\(3\)"
    for lib in (og, genai_shim):
        pipe = _pipe(lib, "static_batch")
        with pytest.raises(RuntimeError, match=message):
            pipe.embed_documents(list(DOCUMENTS[:2]))
        with pytest.raises(RuntimeError, match=message):
            pipe.embed_query(QUERY)
    with pytest.raises(UserInputError):
        _pipe(genai_shim, "static_batch").embed_query(QUERY)


def test_bad_padding_side() -> None:
    message = "padding_side should be either 'left' or 'right', but got: '?middle"
    for lib in (og, genai_shim):
        pipe = lib.TextEmbeddingPipeline(str(FOLDER), "CPU", padding_side="middle")
        with pytest.raises(RuntimeError, match=message):
            pipe.embed_query(QUERY)


def test_config_object_and_properties() -> None:
    """With config=, every property goes to the device: a config key there is refused as the
    real CPU plugin refuses it; without, the keys are read as the config."""
    for lib in (og, genai_shim):
        with pytest.raises(RuntimeError, match="Unsupported property normalize by CPU plugin"):
            lib.TextEmbeddingPipeline(str(FOLDER), "CPU", lib.TextEmbeddingPipeline.Config(), normalize=False)
        with pytest.raises(RuntimeError, match="Unsupported property FOO_BAR by CPU plugin"):
            lib.TextEmbeddingPipeline(str(FOLDER), "CPU", FOO_BAR=1)
    cfg = genai_shim.TextEmbeddingPipeline.Config(**config_kwargs(genai_shim, EMBED_CASES["mean_raw"][0]))
    ours = genai_shim.TextEmbeddingPipeline(FOLDER, "CPU", cfg, **CPU_PROPS)
    assert_close(ours.embed_documents(list(DOCUMENTS)), GOLDEN["cases"]["mean_raw"]["embeddings"])


def test_input_errors() -> None:
    pipe = _pipe(genai_shim, "cls")
    for lib_pipe in (pipe, _pipe(og, "cls")):
        with pytest.raises(TypeError):
            lib_pipe.embed_documents("one string")
        with pytest.raises(TypeError):
            lib_pipe.embed_query(3)
    with pytest.raises(UserTypeError):
        pipe.embed_documents("one string")
    # the real crashes the process on an empty list (SIGSEGV, 2026.4.1): ours is a typed error
    with pytest.raises(UserInputError, match="at least one text"):
        pipe.embed_documents([])


def test_over_long_input_fails_in_the_model() -> None:
    """max_length past max_position_embeddings: the model's own shape error, in both."""
    long = "the keeper lit every lamp " * 40
    for lib in (og, genai_shim):
        pipe = lib.TextEmbeddingPipeline(str(FOLDER), "CPU", max_length=200, **CPU_PROPS)
        with pytest.raises(RuntimeError, match="Add"):
            pipe.embed_query(long)
    # without max_length the tokenizer's own limit (model_max_length 128) truncates
    ours = genai_shim.TextEmbeddingPipeline(FOLDER, "CPU", **CPU_PROPS).embed_query(long)
    assert_close(ours, og.TextEmbeddingPipeline(str(FOLDER), "CPU", **CPU_PROPS).embed_query(long))


def test_missing_folder_and_devices(tmp_path: Path) -> None:
    for lib in (og, genai_shim):
        with pytest.raises(RuntimeError, match="openvino_model.xml"):
            lib.TextEmbeddingPipeline(str(tmp_path), "CPU")
    with pytest.raises(IRReadError, match="feature-extraction"):
        genai_shim.TextEmbeddingPipeline(tmp_path, "CPU")


#: the real NPU plugin on this machine (no NPU, no compiler): its static path compiles the fixed
#: model through NPUW on CPU; f32 as for the CPU cases
REAL_NPU = {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE",
            "INFERENCE_PRECISION_HINT": "f32"}
STATIC = {"batch_size": 3, "max_length": 24, "pad_to_max_length": True}


#: the emulated NPU in its exact mode (its default is f16, as the real NPU's)
EMULATED_F32 = {"INFERENCE_PRECISION_HINT": "f32"}


@pytest.mark.parametrize("pooling", ["CLS", "MEAN", "LAST_TOKEN"])
@pytest.mark.parametrize("ours_props", [EMULATED_F32, REAL_NPU], ids=["emulated_npu", "npuw_cpu"])
def test_npu_static_path_matches_real(pooling: str, ours_props: dict[str, Any]) -> None:
    """batch_size, max_length and pad_to_max_length set: the real's static NPU path (a fixed
    3 x 24 model, pooling fused), ours on the emulated NPU and with the real's NPUW keys."""
    def make(lib: Any, props: dict[str, Any]) -> Any:
        pooling_type = getattr(lib.TextEmbeddingPipeline.PoolingType, pooling)
        return lib.TextEmbeddingPipeline(str(FOLDER), "NPU", pooling_type=pooling_type, **STATIC, **props)

    real = make(og, REAL_NPU).embed_documents(list(DOCUMENTS))
    ours_pipe = make(genai_shim, ours_props)
    assert_close(ours_pipe.embed_documents(list(DOCUMENTS)), real)
    if pooling == "MEAN":  # the CPU pipeline's static case: the same numbers
        assert_close(real, GOLDEN["cases"]["static_batch"]["embeddings"])
    with pytest.raises(UserInputError, match=r"equal to batch_size\(3\)"):
        ours_pipe.embed_query(QUERY)


#: the real's dynamic NPU path (NPUW's text-embedding mode), with and without a max_length,
#: with chunking asked for, with a fixed length but no batch_size
DYNAMIC = {"default": {}, "max_length_16": {"max_length": 16},
           "chunk_16": {"NPUW_LLM_PREFILL_CHUNK_SIZE": 16},
           "pad_to_40": {"max_length": 40, "pad_to_max_length": True}}


_real_npu: dict[tuple[str, str], Any] = {}


@pytest.mark.parametrize(("case", "pooling"), [("default", "CLS"), ("default", "LAST_TOKEN")]
                         + [(case, "MEAN") for case in DYNAMIC])  # lengths with one pooling: compiles cost
@pytest.mark.parametrize("ours_props", [{"INFERENCE_PRECISION_HINT": "f32"}, REAL_NPU],
                         ids=["emulated_npu", "npuw_cpu"])
def test_npu_dynamic_path_matches_real(case: str, pooling: str, ours_props: dict[str, Any]) -> None:
    """No fixed batch and length: the real compiles the model with NPUW's text-embedding mode and
    pools on CPU; ours the same, on the real's NPUW keys and on the emulated NPU (f32)."""
    def make(lib: Any, props: dict[str, Any]) -> Any:
        pooling_type = getattr(lib.TextEmbeddingPipeline.PoolingType, pooling)
        return lib.TextEmbeddingPipeline(str(FOLDER), "NPU", pooling_type=pooling_type, **DYNAMIC[case], **props)

    if (case, pooling) not in _real_npu:  # one real run serves both of ours' setups
        _real_npu[case, pooling] = make(og, REAL_NPU).embed_query(DOCUMENTS[2])
    real = _real_npu[case, pooling]
    ours = make(genai_shim, ours_props).embed_query(DOCUMENTS[2])
    assert_close(ours, real)
    if case == "default" and pooling == "MEAN":  # the CPU pipeline's numbers (one text, no padding)
        cpu = og.TextEmbeddingPipeline(str(FOLDER), "CPU", pooling_type=og.TextEmbeddingPipeline.PoolingType.MEAN,
                                       **CPU_PROPS)
        assert_close(ours, cpu.embed_query(DOCUMENTS[2]))


def test_npu_dynamic_path_one_text_per_call() -> None:
    """The real's NPUW encoder path takes one text per call: more is its error, ours the same text
    (a typed error that says what to do); docs/genai_shim.md discusses the choice."""
    for lib, props in ((og, REAL_NPU), (genai_shim, {})):
        pipe = lib.TextEmbeddingPipeline(str(FOLDER), "NPU", **props)
        with pytest.raises(RuntimeError, match="Encoder embedding model expects batch size 1"):
            pipe.embed_documents(list(DOCUMENTS[:2]))
    with pytest.raises(UserInputError, match="one text per call"):
        genai_shim.TextEmbeddingPipeline(FOLDER, "NPU", NPUW_DEVICES="CPU").embed_documents(list(DOCUMENTS[:2]))


@pytest.mark.parametrize("key", ["BLOB_PATH", "EXPORT_BLOB"])
def test_npu_dynamic_blob_keys_not_built(key: str, tmp_path: Path) -> None:
    """The real imports / exports its NPUW text-embedding blob with these keys; ours says it
    does not (rather than ignoring them)."""
    value = str(tmp_path / "model.blob") if key == "BLOB_PATH" else True
    with pytest.raises(UnsupportedFeatureError, match=f"{key}: importing or exporting"):
        genai_shim.TextEmbeddingPipeline(FOLDER, "NPU", NPUW_DEVICES="CPU", **{key: value})


def test_npu_dynamic_left_padding_refused() -> None:
    """The real's own refusal before the dynamic path: left padding of a fixed length with CLS."""
    message = "Padding on left is only supported for the MEAN pooling type for dynamic inputs models"
    for lib in (og, genai_shim):
        with pytest.raises(RuntimeError, match=message):
            lib.TextEmbeddingPipeline(str(FOLDER), "NPU", NPUW_DEVICES="CPU", max_length=16,
                                      pad_to_max_length=True, padding_side="left")
