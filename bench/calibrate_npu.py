"""Fit the NPU presets' efficiency terms on published measurements; print predicted vs published.

    .venv/bin/python bench/calibrate_npu.py            # fit, then the table (a few minutes)
    .venv/bin/python bench/calibrate_npu.py --check    # only the table, with the committed presets

Data: docs/npu_calibration_sources.md (row numbers below).  Model: plugins/ov_npu_emu_npu/platforms.py.
Fit (per generation, in this order; every step is a 1-D solve on the cost-model timeline):

1. NPU3720: ``ddr_efficiency`` and ``step_overhead_ms`` together from the decode time of
   Qwen3-8B on a 185H (rows 1-2, TPOT 104.1 ms) and of Qwen3-0.6B on a 285K (row 7, 33.03 ms;
   Arrow Lake's NPU is NPU3720-class, its DRAM is DDR5-5600 = 89.6 GB/s);
2. NPU3720: ``mac_efficiency`` from Qwen3-8B's TTFT (rows 1-2, 4.93 s; 512-token prompt padded to
   NPUW_LLM_MAX_PROMPT_LEN = 1024, the default);
3. NPU4000: ``step_overhead_ms`` is NOT refitted (the NPU3720 value: a software-stack cost), then
   ``ddr_efficiency`` from Llama-2-7B's TPOT (row 4, 53.9 ms) and ``mac_efficiency`` from its
   TTFT (row 4, 1.09 s; prompt length unknown, taken as a 1024-token static prefill).

Held out: Qwen3-0.6B TPOT on a 258V (row 6, 34.3 ms: tests the shared per-step overhead; not
independent: the fitted row 7's model, quoted in the same thread) and Llama-3.2-1B INT4-CW TPOT on
a 258V (row 5, 19.8 ms; ExecuTorch, not NPUW).  NPU3720 has no usable held-out point.  Efficiencies are
clamped to (0, 1]: a fit that would need more than the published peak is reported, not hidden.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from ov_npu_emu.modelbuilder import LlamaConfig, get_preset  # noqa: E402
from ov_npu_emu_npu.platforms import PLATFORMS, Platform  # noqa: E402
from ov_npu_emu_npuw.estimate import estimate  # noqa: E402  (plugins/ is on sys.path above)

QWEN3_8B = LlamaConfig(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False)
QWEN3_06B = LlamaConfig(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                        num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
LLAMA2_7B = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=32, head_dim=128, tie_word_embeddings=False)
LLAMA32_1B = get_preset("llama-3.2-1b-shape")
TINYLLAMA = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                        num_attention_heads=32, num_key_value_heads=4, head_dim=64, tie_word_embeddings=False)
MODELS = {"Qwen3-8B": QWEN3_8B, "Qwen3-0.6B": QWEN3_06B, "Llama-2-7B": LLAMA2_7B, "Llama-3.2-1B": LLAMA32_1B,
          "TinyLlama-1.1B": TINYLLAMA}


@dataclasses.dataclass(frozen=True)
class Point:
    pid: str
    npu: str
    soc: str
    model: str
    prompt: int
    metric: str  # ttft | tpot
    published_ms: float
    rows: str
    role: str  # fit | held-out
    dram_gbps: float | None = None  # the SoC's DRAM when it differs from the preset's reference SoC
    fmt: str = "int4"  # weight format of the synthesised model


POINTS = [
    Point("mtl-8b-tpot", "NPU3720", "185H", "Qwen3-8B", 512, "tpot", 104.1, "1-2", "fit"),
    Point("arl-0.6b-tpot", "NPU3720", "285K", "Qwen3-0.6B", 32, "tpot", 33.03, "7", "fit", dram_gbps=89.6),
    Point("mtl-8b-ttft", "NPU3720", "185H", "Qwen3-8B", 512, "ttft", 4930.0, "1-2", "fit"),
    Point("lnl-7b-tpot", "NPU4000", "258V/288V", "Llama-2-7B", 1024, "tpot", 53.9, "4", "fit"),
    Point("lnl-7b-ttft", "NPU4000", "258V/288V", "Llama-2-7B", 1024, "ttft", 1090.0, "4", "fit"),
    Point("lnl-0.6b-tpot", "NPU4000", "258V", "Qwen3-0.6B", 32, "tpot", 34.3, "6", "held-out"),
    Point("lnl-1b-tpot", "NPU4000", "258V", "Llama-3.2-1B", 32, "tpot", 19.8, "5 (ExecuTorch)", "held-out"),
    # row 3: 2024 nightly NPUW, one run without warm-up, TPOT 268 ± 317 ms; weight format not stated
    # (optimum-intel's default for > 1B parameters is int8). Shown, not part of the acceptance.
    Point("mtl-tinyllama-ttft", "NPU3720", "125H", "TinyLlama-1.1B", 10, "ttft", 4742.0, "3 (outlier)",
          "held-out, outlier", fmt="int8"),
    Point("mtl-tinyllama-tpot", "NPU3720", "125H", "TinyLlama-1.1B", 10, "tpot", 268.0, "3 (outlier)",
          "held-out, outlier", fmt="int8"),
]

_cache: dict[tuple, dict] = {}


def run_point(p: Point, plat: Platform) -> dict:
    if p.dram_gbps is not None:
        plat = dataclasses.replace(plat, dram_gbps=p.dram_gbps)
    key = (p.model, p.prompt, p.fmt, plat)
    if key not in _cache:
        _cache[key] = estimate(MODELS[p.model], plat, prompt=p.prompt, fmt=p.fmt)
    return _cache[key]


def predicted(p: Point, plat: Platform) -> float:
    return run_point(p, plat)[f"{p.metric}_ms"]


def _point(pid: str) -> Point:
    return next(p for p in POINTS if p.pid == pid)


def _clamp(x: float) -> float:
    return min(1.0, max(1e-3, x))


def fit_decode(plat: Platform, big: Point, small: Point | None, iters: int = 4) -> Platform:
    """ddr_efficiency (and the step overhead when ``small`` is given) from decode times."""
    for _ in range(iters):
        if small is not None:
            dev_small = predicted(small, plat) - plat.step_overhead_ms
            plat = plat.with_terms(step_overhead_ms=max(0.0, small.published_ms - dev_small))
        dev_big = predicted(big, plat) - plat.step_overhead_ms
        want = big.published_ms - plat.step_overhead_ms
        # decode is weight-streaming bound: device time ~ 1 / ddr_efficiency
        plat = plat.with_terms(ddr_efficiency=_clamp(plat.ddr_efficiency * dev_big / max(want, 1e-3)))
    return plat


def fit_prefill(plat: Platform, p: Point, iters: int = 4) -> Platform:
    """mac_efficiency from a TTFT: multiplicative steps on the device part (clamped to <= 1)."""
    for _ in range(iters):
        dev = predicted(p, plat) - plat.step_overhead_ms
        want = p.published_ms - plat.step_overhead_ms
        new = _clamp(plat.mac_efficiency * dev / max(want, 1e-3))
        if abs(new - plat.mac_efficiency) < 1e-3:
            break
        plat = plat.with_terms(mac_efficiency=new)
    return plat


NEUTRAL = {"ddr_efficiency": 1.0, "mac_efficiency": 1.0, "step_overhead_ms": 0.0, "fitted_on": ()}


def fit() -> dict[str, Platform]:
    # start from neutral terms, not the committed ones: the TTFT barely depends on mac_efficiency
    # (see the docs), so its fixed point depends on the start (before the issue-29 re-fit: 0.9789
    # from 1.0, 0.9734 from 0.9789)
    mtl = PLATFORMS["NPU3720"].with_terms(**NEUTRAL)
    mtl = fit_decode(mtl, _point("mtl-8b-tpot"), _point("arl-0.6b-tpot"))
    mtl = fit_prefill(mtl, _point("mtl-8b-ttft"))
    # re-solve: mac_efficiency barely touches decode, but the fit order should not matter
    mtl = fit_decode(mtl, _point("mtl-8b-tpot"), _point("arl-0.6b-tpot"), iters=2)
    lnl = PLATFORMS["NPU4000"].with_terms(**{**NEUTRAL, "step_overhead_ms": mtl.step_overhead_ms})
    lnl = fit_decode(lnl, _point("lnl-7b-tpot"), None)
    lnl = fit_prefill(lnl, _point("lnl-7b-ttft"))
    return {"NPU3720": mtl, "NPU4000": lnl}


def table(plats: dict[str, Platform]) -> list[str]:
    lines = ["| point | NPU (SoC) | model | metric | sources row | role | published ms | predicted ms "
             "(device + fixed) | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in POINTS:
        pred = predicted(p, plats[p.npu])
        err = (pred - p.published_ms) / p.published_ms
        lines.append(
            f"| {p.pid} | {p.npu} ({p.soc}) | {p.model} {p.fmt.upper()}{'-CW' if p.fmt == 'int4' else ''} "
            f"| {p.metric.upper()} | {p.rows} | {p.role} "
            f"| {p.published_ms:g} | {pred:.1f} ({pred - plats[p.npu].step_overhead_ms:.1f} + "
            f"{plats[p.npu].step_overhead_ms:.1f}) | {err:+.1%} |"
        )
    return lines


def breakdown(p: Point, plat: Platform) -> str:
    """Where a TTFT point's prefill time goes: busy ms per (engine, kernel) of one decoder layer
    (the 2-layer minus the 1-layer prefill timeline)."""
    from collections import Counter

    from ov_npu_emu import Core
    from ov_npu_emu_npuw.estimate import _hw_properties, shape_model

    per: list[Counter] = []
    for n in (1, 2):
        model, keep = shape_model(MODELS[p.model], n)
        core = Core()
        core.set_property("NPU", _hw_properties(plat))
        cm = core.compile_model(
            model,
            "NPU",
            {
                "NPU_USE_NPUW": "YES",
                "NPUW_LLM": "YES",
                "NPUW_DEVICES": "NPU",
                "INFERENCE_PRECISION_HINT": "f16",
                "NPUW_LLM_GENERATE_PYRAMID": "NO",
            },
        )
        tl = cm.impl.subs.prefill.create_infer_request().impl.timeline()
        c: Counter = Counter()
        for tid, t in tl.tasks.items():
            c[f"{tl.lane_names[t.lane][:3]}:{t.kernel}"] += (tl.end[tid] - tl.start[tid]) / tl.clock_mhz / 1e3
        per.append(c)
        del model, keep
    layer = {k: per[1][k] - per[0][k] for k in per[1]}
    top = sorted(layer.items(), key=lambda kv: -kv[1])[:4]
    return f"{p.pid}: one layer's prefill busy time: " + ", ".join(f"{k} {v:.1f} ms" for k, v in top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="no fit: evaluate the committed presets")
    ap.add_argument("--breakdown", action="store_true", help="also show where the TTFT points' prefill time goes")
    args = ap.parse_args()
    t0 = time.perf_counter()
    plats = dict(PLATFORMS) if args.check else fit()
    for name, pl in plats.items():
        print(
            f"{name}: ddr_efficiency={pl.ddr_efficiency:.4f} mac_efficiency={pl.mac_efficiency:.4f} "
            f"step_overhead_ms={pl.step_overhead_ms:.3f}  (effective DDR {pl.dram_gbps * pl.ddr_efficiency:.1f} GB/s, "
            f"effective {pl.peak_tops * pl.mac_efficiency:.2f} of {pl.peak_tops:.1f} INT8 TOPS)"
        )
    print()
    print("\n".join(table(plats)))
    if not args.check:
        print("\nCross-generation check (NPU4000 constants with NPU3720's fitted efficiency terms):")
        mtl = plats["NPU3720"]
        cross = {
            "NPU3720": mtl,
            "NPU4000": PLATFORMS["NPU4000"].with_terms(
                ddr_efficiency=mtl.ddr_efficiency,
                mac_efficiency=mtl.mac_efficiency,
                step_overhead_ms=mtl.step_overhead_ms,
            ),
        }
        print("\n".join(line for line in table(cross) if "NPU3720" not in line))
    if args.breakdown:
        print()
        for p in POINTS:
            if p.metric == "ttft":
                print(breakdown(p, plats[p.npu]))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
