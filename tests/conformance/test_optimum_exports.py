"""Real optimum-cli exports (tests/fixtures/optimum): 32 greedy ids equal the real openvino_genai's
golden on CPU, on NPU with NPUW_DEVICES=CPU and on the emulated NPU (f32 hints)."""

from __future__ import annotations

import pytest

from tools.conformance import SETUPS, fixtures, generate, golden

FIXTURES = fixtures()


def test_fixtures_cover_the_architectures():
    """The matrix is not empty: at least 12 architectures, compressed weights on at least 3."""
    archs = {golden(p)["arch"] for p in FIXTURES}
    compressed = {golden(p)["arch"] for p in FIXTURES if golden(p)["weight_format"] != "fp32"}
    assert len(archs) >= 12, sorted(archs)
    assert len(compressed) >= 3, sorted(compressed)


@pytest.mark.oracle
@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_greedy_ids_equal_the_real_golden(path, setup):
    want = golden(path)["cpu"]["ids"]
    assert generate(path, setup) == want


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_tokenizer_encodes_the_golden_prompt(path):
    """genai_shim's Tokenizer over the export's tokenizer IR gives the real one's prompt ids."""
    import genai_shim

    g = golden(path)
    ids = genai_shim.Tokenizer(str(path)).encode(g["prompt"]).input_ids
    assert [int(t) for t in ids.data[0]] == g["prompt_ids"]
