"""Side by side: genai_shim's VLMPipeline vs the real openvino_genai's on one export - prints ratios.

Usage: python bench/bench_vlm.py [FOLDER] [--tokens N] [--iters K] [--size HxW] [--setups ...]

Setups (default: all): "real CPU" (the real at default properties, what a user runs instead),
"ours CPU", "ours NPU" (the language model on the emulated NPU, the vision models on CPU, as the
real places them), "real NPU" (the real NPUW with NPUW_DEVICES=CPU: a correctness oracle, not a
speed anchor).  Every pipeline is loaded first, then one generate() per setup per iteration, the
order rotated each iteration (this machine is shared and noisy); medians of TTFT (which includes
the vision encoding), TPOT, the vision encoding and the whole call, and each setup's ratio to the
real CPU.  Default properties everywhere (the NPU setups add MAX_PROMPT_LEN / MIN_RESPONSE_LEN).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

DEFAULT = ROOT / "tests" / "fixtures" / "vlm" / "qwen2_5vl-fp32"
NPU_LENS = {"MAX_PROMPT_LEN": 512, "MIN_RESPONSE_LEN": 128}
REAL_NPU = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}
SETUPS = ("real CPU", "ours CPU", "ours NPU", "real NPU")
PROMPT = "Describe the image in detail."


def _pipeline(name: str, folder: Path) -> tuple[Any, Any, float]:
    import openvino_genai as real

    import genai_shim as ours

    mod = real if name.startswith("real") else ours
    device = "NPU" if name.endswith("NPU") else "CPU"
    props: dict[str, Any] = {}
    if device == "NPU":
        props.update(NPU_LENS)
        if mod is real:
            props.update(REAL_NPU)
    t0 = time.perf_counter()
    pipe = mod.VLMPipeline(str(folder), device, **props)
    return pipe, mod, (time.perf_counter() - t0) * 1000


def _image(size: tuple[int, int]) -> Any:
    rng = np.random.default_rng(0)
    return ov.Tensor(rng.integers(0, 256, (1, *size, 3), dtype=np.uint8))


def _one(pipe: Any, mod: Any, image: Any, tokens: int) -> dict[str, float]:
    cfg = mod.GenerationConfig()
    cfg.max_new_tokens = tokens
    cfg.ignore_eos = True
    t0 = time.perf_counter()
    pm = pipe.generate(PROMPT, images=[image], generation_config=cfg).perf_metrics
    return {
        "ttft_ms": pm.get_ttft().mean,
        "tpot_ms": pm.get_tpot().mean,
        "vision_ms": pm.get_vision_encoding_duration().mean,
        "call_ms": (time.perf_counter() - t0) * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--size", default="224x224", help="image HxW (default 224x224)")
    ap.add_argument("--setups", nargs="+", choices=SETUPS, default=list(SETUPS))
    args = ap.parse_args()
    h, w = (int(v) for v in args.size.split("x"))
    image = _image((h, w))
    names = list(args.setups)
    loaded = {name: _pipeline(name, args.folder) for name in names}
    for name in names:  # warm-up (first-call compiles and caches)
        pipe, mod, _ = loaded[name]
        _one(pipe, mod, image, 2)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for i in range(args.iters):
        order = names[i % len(names):] + names[: i % len(names)]
        for name in order:
            pipe, mod, _ = loaded[name]
            runs[name].append(_one(pipe, mod, image, args.tokens))
    med = {name: {k: statistics.median(r[k] for r in runs[name]) for k in runs[name][0]} for name in names}
    anchor = "real CPU" if "real CPU" in med else names[0]
    print(f"{args.folder.name}: image {h}x{w}, {args.tokens} new tokens, {args.iters} iterations, medians "
          f"(ratio to {anchor})")
    print("| setup | load ms | TTFT ms | TPOT ms | vision ms | call ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        m, base = med[name], med[anchor]
        cells = [f"{m[k]:.1f} ({m[k] / base[k]:.2f}x)" if base[k] > 0 else f"{m[k]:.1f}"
                 for k in ("ttft_ms", "tpot_ms", "vision_ms", "call_ms")]
        print(f"| {name} | {loaded[name][2]:.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
