"""``ov-npu-emu kv-plan``: the seed formula, and for a model folder exactly what NPUW allocates."""

from __future__ import annotations

import json

from ov_npu_emu.cli import main

SEED = ["--layers", "32", "--kv-heads", "32", "--head-dim", "128", "--batch", "8", "--seq", "2048"]


def _plan(capsys, argv: list[str]) -> dict:
    assert main(["kv-plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_seed_example_f16_and_int8_int4(capsys):
    f16 = _plan(capsys, [*SEED, "--dtype", "f16"])
    assert f16["bytes"] == 8_589_934_592 == 2 * 32 * 8 * 2048 * 32 * 128 * 2
    assert f16["scale_bytes"] == 0
    i8 = _plan(capsys, [*SEED, "--dtype", "int8"])
    assert i8["data_bytes"] == f16["bytes"] // 2
    overhead = i8["scale_bytes"] + i8["residual_bytes"]
    assert 0 < overhead <= 0.10 * i8["data_bytes"]
    assert i8["bytes"] == i8["data_bytes"] + overhead
    # values: one scale + zero point (2 × f16) per 128-value row; keys: per channel per 128 tokens
    assert i8["scale_bytes"] == 2 * (32 * 8 * 2048 * 32 * 1 * 4)
    assert i8["residual_bytes"] == 32 * 8 * 32 * 128 * 128 * 2  # one f16 key block per layer
    i4 = _plan(capsys, [*SEED, "--dtype", "int4"])
    assert i4["data_bytes"] == f16["bytes"] // 4
    assert i4["scale_bytes"] == i8["scale_bytes"]  # one scale + zero point per head row either way
    f32 = _plan(capsys, [*SEED, "--dtype", "f32"])
    assert f32["bytes"] == 2 * f16["bytes"]
    # smaller groups: more scales
    g32 = _plan(capsys, [*SEED, "--dtype", "int8", "--group-size", "32"])
    assert g32["scale_bytes"] == 4 * i8["scale_bytes"]
    assert g32["residual_bytes"] == i8["residual_bytes"] // 4


def test_text_output_shows_the_terms(capsys):
    assert main(["kv-plan", *SEED, "--dtype", "int8"]) == 0
    out = capsys.readouterr().out
    assert "2 × 32 layers × 8 batch × 2048 seq × 32 kv_heads × 128 head_dim × 1 bytes" in out
    assert "4,294,967,296" in out and "scales:" in out and "residual:" in out


def test_missing_dimensions_and_bad_group_are_errors(capsys):
    assert main(["kv-plan", "--layers", "2"]) == 1
    assert "missing --kv-heads, --head-dim, --seq" in capsys.readouterr().err
    assert main(["kv-plan", *SEED, "--dtype", "int8", "--group-size", "48"]) == 1
    assert "must divide head_dim 128" in capsys.readouterr().err

# The model-folder plan is checked against the buffers NPUW really allocated in
# tests/npuw/test_npuw_kv_quant.py (it reuses those compiled requests).
