"""``ov-npu-emu estimate``: cost-model TTFT/TPOT from NPUW sub-models, layer extrapolation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ov_npu_emu import Core
from ov_npu_emu.cli import main
from ov_npu_emu.cli.model_args import example_inputs
from ov_npu_emu.modelbuilder import get_preset
from ov_npu_emu_npu.platforms import get_platform
from ov_npu_emu_npuw.estimate import _hw_properties, estimate, shape_model

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "optimum" / "llama-int4-sym-g128"


def _run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_equals_the_timelines_of_the_executed_submodels(capsys):
    """TTFT/TPOT are sums of the sub-models' cost-model makespans (plus the fixed step cost);
    those makespans must equal the timelines of the same sub-models after a real inference."""
    res = _run_json(capsys, ["estimate", "--preset", "tiny", "--npu", "NPU4000", "--full", "--prompt", "40",
                             "--max-prompt-len", "128", "--min-response-len", "64", "--json"])
    plat = get_platform("NPU4000")
    core = Core()
    core.set_property("NPU", _hw_properties(plat))
    model, keep = shape_model(get_preset("tiny"), 2)
    cm = core.compile_model(model, "NPU", {
        "NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "NPU", "NPUW_LLM_MAX_PROMPT_LEN": 128,
        "NPUW_LLM_MIN_RESPONSE_LEN": 64, "INFERENCE_PRECISION_HINT": "f16",
        "NPUW_LLM_GENERATE_VARIANTS": str(res["generate_variant"])})
    subs = cm.impl.subs
    ran = {}
    for key, sub in (("prefill_us", subs.prefill), ("generate_us", subs.generate[res["generate_variant"]]),
                     ("head_us", subs.lm_head)):
        req = sub.create_infer_request()
        req.infer(example_inputs(sub))  # a real run on the emulated NPU
        tl = req.impl.timeline()
        ran[key] = tl.makespan / tl.clock_mhz
    for key, us in ran.items():
        assert res[key] == pytest.approx(us, rel=1e-12), key
    assert res["prefill_len"] == 128 and res["prefill_calls"] == 1
    assert res["ttft_ms"] == pytest.approx((ran["prefill_us"] + ran["head_us"]) / 1e3 + plat.step_overhead_ms)
    assert res["tpot_ms"] == pytest.approx((ran["generate_us"] + ran["head_us"]) / 1e3 + plat.step_overhead_ms)
    assert res["total_ms"] == pytest.approx(res["ttft_ms"] + 127 * res["tpot_ms"])
    del keep


def test_layer_extrapolation_matches_a_three_layer_compile():
    cfg = get_preset("small", num_hidden_layers=3, vocab_size=512)
    plat = get_platform("NPU3720")
    kw = dict(prompt=100, max_prompt_len=256, min_response_len=64)
    extrapolated = estimate(cfg, plat, **kw)
    full_model, keep = shape_model(cfg, 3)
    full = estimate(cfg, plat, full_model=full_model, **kw)
    assert "extrapolated" in extrapolated["method"] and "all 3" in full["method"]
    for key in ("prefill_us", "head_us", "ttft_ms"):
        assert extrapolated[key] == pytest.approx(full[key], rel=1e-9), key  # exact: identical layers
    # the generate graph with Power kept in f32 (NPUW's default higher-precision compiler key, as
    # the real's) costs 0.3% more per layer extrapolated from 1 and 2 layers than compiled with 3
    # (measured: 49.204 against 49.056 us; exact without Power in the key); cause not traced yet
    for key in ("generate_us", "tpot_ms"):
        assert extrapolated[key] == pytest.approx(full[key], rel=5e-3), key
    # the per-layer increment is real work, and a faster generation is faster
    assert extrapolated["per_layer_us"]["prefill_us"] > 0 and extrapolated["per_layer_us"]["generate_us"] > 0
    del keep


def test_estimate_reads_a_real_model_folder(capsys):
    res = _run_json(capsys, ["estimate", str(FIXTURE), "--npu", "NPU3720", "--prompt", "16",
                             "--max-prompt-len", "64", "--min-response-len", "64", "--json"])
    cfg = json.loads((FIXTURE / "config.json").read_text())
    assert res["layers"] == cfg["num_hidden_layers"] and "extrapolated" in res["method"]
    full = _run_json(capsys, ["estimate", str(FIXTURE), "--npu", "NPU3720", "--prompt", "16", "--full",
                              "--max-prompt-len", "64", "--min-response-len", "64", "--json"])
    assert "all 2 layers" in full["method"] and np.isfinite(full["ttft_ms"]) and full["tpot_ms"] > 0
    # a decoder the builder has no structure for is synthesised llama-structured, and says so
    qwen3 = _run_json(capsys, ["estimate", str(FIXTURE.parent / "qwen3-fp32"), "--npu", "NPU4000", "--prompt", "8",
                               "--max-prompt-len", "64", "--min-response-len", "64", "--json"])
    assert "qwen3 synthesised as a llama-structured model" in qwen3["model"] and qwen3["tpot_ms"] > 0


def test_estimate_cli_errors(capsys):
    assert main(["estimate", "--npu", "NPU4000"]) == 1
    assert "--preset" in capsys.readouterr().err
    assert main(["estimate", "--preset", "tiny", "--npu", "NPU4000", "--prompt", "2000"]) == 1
    assert "--max-prompt-len" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["estimate", "--preset", "tiny", "--npu", "NPU1234"])


def test_chunked_prefill_is_charged_per_chunk(capsys):
    res = _run_json(capsys, ["estimate", "--preset", "tiny", "--npu", "NPU3720", "--prompt", "70", "--chunk", "32",
                             "--max-prompt-len", "128", "--min-response-len", "64", "--json"])
    assert (res["prefill_calls"], res["prefill_len"], res["max_prompt_len"]) == (3, 32, 128)
    fixed = get_platform("NPU3720").step_overhead_ms
    assert res["ttft_ms"] == pytest.approx((3 * res["prefill_us"] + res["head_us"]) / 1e3 + fixed)


def test_estimate_reads_the_device_through_properties_only():
    """The NPU device lists its presets (NPU_EMU_PLATFORMS); NPUW answers an NPU_EMU_* query per
    sub-model role, which is how estimate reads the cost-model times (no import of the plugin)."""
    core = Core()
    presets = core.get_property("NPU", "NPU_EMU_PLATFORMS")
    assert {"NPU3720", "NPU4000"} <= set(presets)
    assert presets["NPU3720"]["step_overhead_ms"] == get_platform("NPU3720").step_overhead_ms
    core.set_property("NPU", {"NPU_EMU_PLATFORM": "NPU3720"})
    model, keep = shape_model(get_preset("tiny"), 1)
    cm = core.compile_model(model, "NPU", {
        "NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "NPU", "NPUW_LLM_MAX_PROMPT_LEN": 64,
        "NPUW_LLM_MIN_RESPONSE_LEN": 64, "NPUW_LLM_GENERATE_VARIANTS": "128"})
    us = cm.get_property("NPU_EMU_COST_MODEL_US")
    assert set(us) >= {"kv128", "prefill"} and all(v > 0 for v in us.values())
    assert cm.get_property("NPU_EMU_CMX_SIZE")["prefill"] == 2 * 1_982_464
    del keep
