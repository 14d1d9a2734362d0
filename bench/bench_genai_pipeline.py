"""Side-by-side: genai_shim vs real openvino_genai (same folder, same config) — prints ratios.

Usage: python bench/bench_genai_pipeline.py [MODEL_DIR] [--tokens N] [--iters K] [--devices CPU,NPU]
On "NPU" the real pipeline runs NPUW on CPU; genai_shim runs our NPUW plugin (with NPUW_DEVICES=CPU).
Both pipelines are loaded first, then generate() alternates between them (order flipped every
iteration, so load from other jobs hits both alike); the metrics are medians over the iterations.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu.models import find_model

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
NPU = {
    "NPUW_DEVICES": "CPU",
    "NPUW_ONLINE_PIPELINE": "NONE",
    "MAX_PROMPT_LEN": 128,
    "MIN_RESPONSE_LEN": 128,
}
PROMPT = "Once upon a time, in a small village near the sea, there lived a girl named Lily who"


def load(mod: Any, folder: str, device: str, tokens: int) -> tuple[Any, Any, float]:
    """(pipeline, generation config, load wall ms) for one implementation."""
    props = dict(F32, **(NPU if device == "NPU" else {}))
    if mod.__name__ == "openvino_genai" and device != "NPU":
        props["ATTENTION_BACKEND"] = "SDPA"  # the real stateful pipeline, like ours
    t0 = time.perf_counter()
    pipe = mod.LLMPipeline(folder, device, **props)
    wall_load = (time.perf_counter() - t0) * 1000
    cfg = mod.GenerationConfig()
    cfg.max_new_tokens = tokens
    cfg.ignore_eos = True
    pipe.generate([PROMPT], cfg)  # warm-up
    return pipe, cfg, wall_load


def measure(setups: dict[str, tuple[Any, Any, float]], iters: int) -> dict[str, dict[str, float]]:
    """Alternate one generate() per implementation (order flipped every iteration); medians."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in setups}
    names = list(setups)
    for i in range(iters):
        for name in names if i % 2 == 0 else names[::-1]:
            pipe, cfg, _ = setups[name]
            pm = pipe.generate([PROMPT], cfg).perf_metrics
            runs[name].append(
                {
                    "ttft_ms": pm.get_ttft().mean,
                    "tpot_ms": pm.get_tpot().mean,
                    "tok_per_s": pm.get_throughput().mean,
                    "generate_ms": pm.get_generate_duration().mean,
                }
            )
    return {
        name: {"load_ms": setups[name][2]}
        | {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        for name, rs in runs.items()
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", nargs="?", default=str(find_model("stories260K")))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--devices", default="CPU,NPU")
    args = ap.parse_args()
    import openvino_genai

    import genai_shim

    print(f"model: {args.model_dir}   new tokens: {args.tokens}   iterations: {args.iters}")
    print(
        f"{'device':6} {'metric':12} {'genai_shim':>12} {'openvino_genai':>15} {'ratio shim/real':>16}"
    )
    for device in args.devices.split(","):
        try:
            ours = load(genai_shim, args.model_dir, device, args.tokens)
        except Exception as e:  # e.g. NPUW not merged yet
            print(f"{device:6} genai_shim failed: {e}")
            continue
        real = load(openvino_genai, args.model_dir, device, args.tokens)
        res = measure({"ours": ours, "real": real}, args.iters)
        for k in res["ours"]:
            a, b = res["ours"][k], res["real"][k]
            ratio = a / b if b else float("nan")
            print(f"{device:6} {k:12} {a:12.2f} {b:15.2f} {ratio:16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
