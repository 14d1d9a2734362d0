"""The builder's stateful LLM through ov_npu_emu's CPU device vs openvino's CPU plugin and numpy."""

from __future__ import annotations

import numpy as np
import openvino as real_ov
import pytest

import ov_npu_emu as ov
from ov_npu_emu.modelbuilder import load_reference
from ov_npu_emu.testing import CPU_EXACT_CONFIG, run_stateful_greedy

PROMPT = [1, 72, 101, 108, 108, 111, 44, 32, 119]
STEPS = 24


@pytest.mark.parametrize("fixture", ["tiny_model_dir", "tiny_model_dir_int8"], ids=["f32", "int8"])
def test_token_by_token_matches_openvino_and_reference(fixture, request):
    folder = request.getfixturevalue(fixture)
    xml = folder / "openvino_model.xml"
    ours_cm = ov.Core().compile_model(str(xml), "CPU", CPU_EXACT_CONFIG)
    ref_cm = real_ov.Core().compile_model(str(xml), "CPU", CPU_EXACT_CONFIG)

    ours_tokens, ours_logits = run_stateful_greedy(ours_cm, PROMPT, STEPS)
    ref_tokens, ref_logits = run_stateful_greedy(ref_cm, PROMPT, STEPS)
    assert ours_tokens == ref_tokens
    for a, b in zip(ours_logits, ref_logits, strict=False):
        np.testing.assert_array_equal(a, b)  # same plugin underneath: bit-exact

    numpy_tokens = load_reference(folder).greedy_generate(PROMPT, STEPS)
    assert ours_tokens == numpy_tokens[: len(ours_tokens)]
    assert len(set(ours_tokens)) > 3, "degenerate model: the comparison would prove little"


def test_llm_states_are_the_kv_variables(tiny_model_dir):
    cm = ov.Core().compile_model(str(tiny_model_dir / "openvino_model.xml"), "CPU", CPU_EXACT_CONFIG)
    req = cm.create_infer_request()
    run = dict(
        input_ids=np.array([PROMPT], np.int64),
        attention_mask=np.ones((1, len(PROMPT)), np.int64),
        position_ids=np.arange(len(PROMPT))[None],
        beam_idx=np.zeros(1, np.int32),
    )
    req.infer(run)
    states = {s.name: s.state.shape for s in req.query_state()}
    assert any(n.startswith("past_key_values.0.key") for n in states)
    assert all(shape[2] == len(PROMPT) for shape in states.values())
    req.reset_state()
    assert all(s.state.shape[2] == 0 for s in req.query_state())
