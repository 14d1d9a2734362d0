"""NPUW_LLM_CACHE_ROPE: sin/cos from precomputed tables instead of computed per call."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import UserInputError
from ov_npu_emu_npuw.attention_rewrites import CALL_POSITIONS, cache_rope, read_call_range, rotate_half_as_matmul
from ov_npu_emu_npuw.transform import make_generate_model, make_prefill_model, to_stateless
from tests.npuw._oracle import decode_step


@pytest.fixture(scope="module", params=["stories260K", "tiny"])
def stateless(request):
    if request.param == "stories260K":
        model = request.getfixturevalue("stories_model")
    else:
        folder = request.getfixturevalue("tiny_model_dir")
        model = ov.Core().read_model(Path(folder) / "openvino_model.xml")
    return to_stateless(model)


def _trig(model: ov.Model) -> int:
    counts = Counter(op.get_type_name() for op in model.get_ordered_ops())
    return counts["Sin"] + counts["Cos"]


def test_generate_reads_the_table_and_computes_the_same(stateless):
    sl, kv = stateless
    plain = make_generate_model(sl, kv, 256, ov.Type.f32, shared_head=True)
    cached = make_generate_model(sl, kv, 256, ov.Type.f32, shared_head=True, rope_positions=1152)
    assert _trig(plain) > 0 and _trig(cached) == 0
    for position in (0, 37, 255):
        np.testing.assert_allclose(
            decode_step(cached, position)[0], decode_step(plain, position)[0], rtol=1e-6, atol=1e-6
        )


def test_prefill_tables_and_a_position_free_model(stateless):
    sl, kv = stateless
    prefill = make_prefill_model(sl, kv, 128, 64, ov.Type.f16, shared_head=True, rope_positions=256)
    assert _trig(prefill) == 0
    # nothing to cache when the model has no position-only sin/cos
    from ov_npu_emu.testing import make_add_model

    add = make_add_model()
    add.add_parameters([ov.opset13.parameter([1, 1], ov.Type.i64, name="position_ids")])
    add.get_parameters()[-1].output(0).get_tensor().set_names({"position_ids"})
    assert cache_rope(add, 64) == 0



def _rope_model(original: int | None) -> ov.Model:
    """x * cos + x * sin of position_ids [1, 1] (a generate step), HF style.  ``original`` set:
    longrope's switch (Phi-3): the long factors once the call's largest position + 1 exceeds it."""
    ops = ov.opset13
    pos = ops.parameter([1, 1], ov.Type.i64, name="position_ids")
    pos.output(0).get_tensor().set_names({"position_ids"})
    x = ops.parameter([1, 1, 8], ov.Type.f32, name="x")
    short = (1.0 / 10000 ** (np.arange(0, 8, 2) / 8)).astype(np.float32)
    inv = ops.constant(np.concatenate([short, short])[None, None])
    if original is not None:
        longf = ops.constant(np.concatenate([short, short])[None, None] / np.float32(4.0))
        seq = ops.add(ops.reduce_max(pos, ops.constant([0, 1]), False), ops.constant(np.int64(1)))
        inv = ops.select(ops.greater(seq, ops.constant(np.int64(original))), longf, inv)
    angle = ops.multiply(ops.unsqueeze(ops.convert(pos, ov.Type.f32), ops.constant([-1])), inv)
    out = ops.add(ops.multiply(x, ops.cos(angle)), ops.multiply(x, ops.sin(angle)))
    return ov.Model([out], [pos, x], "rope")


def _run(model: ov.Model, position: int) -> np.ndarray:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None, None]
    return compiled({"position_ids": np.array([[position]]), "x": x})[0]


@pytest.mark.parametrize("original", [None, 32, 512])
def test_a_rope_that_reads_the_position_range_is_not_cached_past_it(original):
    """longrope over 128 cached positions with its switch at 32: a table would hold the long form
    for position 5 too; cache_rope leaves it computed per call.  With the switch past the cache
    (512) every position of the table is the short form, right for every step: cached.  A plain
    RoPE is cached.  Either way each step computes what the model computes."""
    cached = _rope_model(original)
    n = cache_rope(cached, 128)
    assert n == (0 if original == 32 else 2)
    for position in (1, 5, 31, 32, 100, 127):
        np.testing.assert_allclose(_run(cached, position), _run(_rope_model(original), position),
                                   rtol=1e-6, atol=1e-6)

def _expected(position: int, long: bool) -> np.ndarray:
    """``_rope_model``'s output in numpy with the short or the long factors."""
    short = 1.0 / 10000 ** (np.arange(0, 8, 2) / 8)
    inv = np.concatenate([short, short]) / (4.0 if long else 1.0)
    x = np.linspace(-1, 1, 8)
    return (x * np.cos(position * inv) + x * np.sin(position * inv))[None, None]


def test_a_chunk_reads_the_whole_calls_position_range():
    """Chunked prefill: the longrope switch reads the prompt call's smallest and largest position
    (CALL_POSITIONS), not the chunk's, so a chunk before position 32 of a 40-token prompt takes the
    long factors as the whole prompt does."""
    m = _rope_model(32)
    assert read_call_range(m) == 1
    assert read_call_range(_rope_model(None)) == 0  # nothing reads the range
    compiled = ov.Core().compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None, None]
    for call, long in (([0, 39], True), ([0, 31], False), ([0, 32], True)):
        out = compiled({"position_ids": np.array([[5]]), "x": x, CALL_POSITIONS: np.array([call])})[0]
        np.testing.assert_allclose(out, _expected(5, long), rtol=1e-5, atol=1e-6)


BASE = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_DEVICES": "CPU",
    "NPUW_LLM_MAX_PROMPT_LEN": 64,
    "NPUW_LLM_MIN_RESPONSE_LEN": 64,
    "INFERENCE_PRECISION_HINT": "f32",
}


def _prefill(req, start: int, n: int = 4) -> None:
    req.reset_state()
    req.infer(
        {
            "input_ids": np.full((1, n), 5, np.int64),
            "attention_mask": np.ones((1, n), np.int64),
            "position_ids": np.arange(start, start + n, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )


def test_positions_past_the_table_are_a_typed_error(emu_core, stories_model, npuw_compiled):
    cm = npuw_compiled(stories_model, BASE)
    assert cm.get_property("NPUW_LLM_CACHE_ROPE") is True
    req = cm.create_infer_request()
    with pytest.raises(
        UserInputError, match=r"beyond the RoPE cache of 128 positions.*NPUW_LLM_CACHE_ROPE=NO"
    ):
        _prefill(req, 126)
    _prefill(req, 0)  # the request is still usable
    off = emu_core.compile_model(stories_model, "NPU", {**BASE, "NPUW_LLM_CACHE_ROPE": "NO"})
    assert off.get_property("NPUW_LLM_CACHE_ROPE") is False
    _prefill(off.create_infer_request(), 126)  # computed sin/cos: any position works


def test_rotate_half_becomes_one_exact_matmul(stateless, monkeypatch):
    """HF rotate_half (Split, Negative, Concat) → x·R with a ±1 permutation: bit-identical."""
    import ov_npu_emu_npuw.transform as T

    sl, kv = stateless
    rotated = make_generate_model(sl, kv, 128, ov.Type.f32, shared_head=True)
    monkeypatch.setattr(T, "rotate_half_as_matmul", lambda m: 0)
    plain = make_generate_model(sl, kv, 128, ov.Type.f32, shared_head=True)
    layers = len(kv.past_names) // 2
    assert Counter(op.get_type_name() for op in plain.get_ordered_ops())["Negative"] == 2 * layers
    assert Counter(op.get_type_name() for op in rotated.get_ordered_ops())["Negative"] == 0
    for position in (0, 77):
        np.testing.assert_array_equal(
            decode_step(rotated, position)[0], decode_step(plain, position)[0]
        )


def test_rotate_half_leaves_other_concats_alone():
    x = ov.opset13.parameter([1, 2, 1, 8], ov.Type.f32)
    halves = ov.opset13.split(x, -1, 2)
    swapped = ov.opset13.concat([halves.output(1), halves.output(0)], -1)  # no Negative
    model = ov.Model([ov.opset13.result(swapped)], [x])
    assert rotate_half_as_matmul(model) == 0


def test_one_token_calls_are_checked_too(stories_model, npuw_compiled):
    """A decode step's [1, 1] ids and position are read as scalars: same typed errors."""
    req = npuw_compiled(stories_model, BASE).create_infer_request()
    _prefill(req, 0)

    def step(token: int, pos: int) -> None:
        req.infer(
            {
                "input_ids": np.array([[token]], np.int64),
                "attention_mask": np.ones((1, pos + 1), np.int64),
                "position_ids": np.array([[pos]], np.int64),
                "beam_idx": np.zeros(1, np.int32),
            }
        )

    with pytest.raises(UserInputError, match=r"token ids in \[0, 512\), got values 512..512"):
        step(512, 4)
    with pytest.raises(UserInputError, match=r"token ids in \[0, 512\), got values -1..-1"):
        step(-1, 4)
    with pytest.raises(UserInputError, match=r"position_ids reach 128, beyond the RoPE cache"):
        step(5, 128)
    step(5, 4)  # still usable
