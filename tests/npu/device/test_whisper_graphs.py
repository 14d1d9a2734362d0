"""The Whisper fixture's graphs on the emulated NPU against the OpenVINO CPU plugin (f32 and f16).

What the real's NPU paths compile on the NPU (openvino.genai whisper/pipeline.cpp and
pipeline_static.cpp): the encoder reshaped to [1, 80, 3000] (both paths); on STATIC_PIPELINE the
decoder at [1, 4] and the decoder-with-past at [1, 1] over a static KV cache (here from the
stateless export).  The
cross-attention SDPAs of these graphs carry a rank-0 float mask constant and a scale input (the
"cannot bind operands" gap, fixed with timm's edgenext in lower.py's attention).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from tests.npu.conftest import cpu_reference, rel_err

ROOT = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "whisper"
STATEFUL = ROOT / "whisper-tiny-random-fp32"
STATELESS = ROOT / "whisper-tiny-random-stateless-fp32"

F32_TOL = 1e-4
#: f16 storage of activations, a few roundings deep (test_numerics.py's bound)
F16_TOL = 2e-2
#: the real's static KV cache (max_target_positions 448) less the token of the step
KV = 447
PRECISIONS = [("f32", F32_TOL), ("f16", F16_TOL)]


def _run(core, model: ov.Model, feed: dict[str, np.ndarray], hint: str) -> list[np.ndarray]:
    req = core.compile_model(model, "NPU", {"INFERENCE_PRECISION_HINT": hint}).create_infer_request()
    res = req.infer(feed)
    return [np.array(res[i]) for i in range(len(model.outputs))]


def _check(core, model: ov.Model, feed: dict[str, np.ndarray], hint: str, tol: float) -> None:
    ours, ref = _run(core, model, feed, hint), cpu_reference(model, feed)
    assert len(ours) == len(ref) == len(model.outputs)
    for out, a, b in zip(model.outputs, ours, ref, strict=True):
        assert a.shape == b.shape, out.get_any_name()
        assert rel_err(a, b) <= tol, (out.get_any_name(), rel_err(a, b))
    if hint == "f32":
        logits = [i for i, o in enumerate(model.outputs) if "logits" in o.get_names()]
        for i in logits:  # the greedy token of every position agrees too
            assert np.array_equal(ours[i].argmax(-1), ref[i].argmax(-1))


def _has_scalar_mask_sdpa(model: ov.Model) -> bool:
    for node in model.get_ordered_ops():
        if node.get_type_name() == "ScaledDotProductAttention" and node.get_input_size() > 3:
            if node.input_value(3).get_partial_shape().rank.get_length() == 0:
                return True
    return False


def _decoder_feed(model: ov.Model, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feed: dict[str, np.ndarray] = {}
    for p in model.inputs:
        name, shape = p.get_any_name(), list(p.get_shape())
        if name == "input_ids":
            # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>, then text tokens
            feed[name] = np.array([401, 402, 502, 506][:shape[1]], np.int64).reshape(shape)
        elif name == "beam_idx":
            feed[name] = np.zeros(shape, np.int32)
        else:
            feed[name] = rng.standard_normal(shape).astype(np.float32)
    return feed


@pytest.mark.parametrize(("hint", "tol"), PRECISIONS, ids=["f32", "f16"])
def test_encoder_matches_cpu(npu_core, hint, tol):
    """The encoder as both real NPU paths compile it: [1, 80, 3000] log-mel frames."""
    model = npu_core.read_model(STATEFUL / "openvino_encoder_model.xml")
    model.reshape({"input_features": [1, 80, 3000]})
    feed = {"input_features": np.random.default_rng(0).standard_normal((1, 80, 3000)).astype(np.float32)}
    _check(npu_core, model, feed, hint, tol)


def _stateless(name: str, ids: int, kv: int) -> ov.Model:
    model = ov.Core().read_model(STATELESS / name)
    shapes: dict[str, list[int]] = {}
    for p in model.inputs:
        n = p.get_any_name()
        if n == "input_ids":
            shapes[n] = [1, ids]
        elif n == "encoder_hidden_states":
            shapes[n] = [1, 1500, 32]
        elif ".encoder." in n:
            shapes[n] = [1, 4, 1500, 8]
        else:
            shapes[n] = [1, 4, kv, 8]
    model.reshape(shapes)
    return model


GRAPHS = {
    "decoder_1x4": lambda: _stateless("openvino_decoder_model.xml", 4, 0),
    "decoder_with_past_1x1": lambda: _stateless("openvino_decoder_with_past_model.xml", 1, KV),
}


@pytest.mark.parametrize(("hint", "tol"), PRECISIONS, ids=["f32", "f16"])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_static_decoders_match_cpu(npu_core, graph, hint, tol):
    model = GRAPHS[graph]()
    assert _has_scalar_mask_sdpa(model), "the fixture's cross-attention SDPAs should carry a rank-0 mask"
    _check(npu_core, model, _decoder_feed(model, np.random.default_rng(1)), hint, tol)
