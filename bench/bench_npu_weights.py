"""NPU blob size and compile time: weights kept compressed vs folded to f32, one run.

Usage: python bench/bench_npu_weights.py [--presets tiny,small] [--dtypes int8,int4] [--group-size 128]
       [--kv 128]

For each builder model, the static decode model (KV capacity ``--kv``) is compiled twice for the
emulated NPU: with the default NPU_EMU_WEIGHT_COMPRESSION=YES (INT8/INT4/f16 weights stay as
stored, decompressed by the DPU) and with NO (the old behaviour: OpenVINO constant folding turns
them into f32 constants). Printed: blob bytes, the .npu.weights section, compile seconds, the
ratio, and the first decode inference (command-list build incl. weights-cache fill) plus the
median decode step for both blobs, measured side by side, and the decode step of the compressed
blob with NPU_EMU_WEIGHTS_CACHE=NO (per-tile decompression on every inference).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see bench_npu_decode.py

import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

import ov_npu_emu  # noqa: E402
from ov_npu_emu.cli.model_args import example_inputs, static_llm  # noqa: E402
from ov_npu_emu.modelbuilder import make_model_folder  # noqa: E402


def measure(model: ov.Model, config: dict, steps: int) -> dict[str, float]:
    t0 = time.perf_counter()
    cm = ov_npu_emu.Core().compile_model(model, "NPU", config)
    compile_s = time.perf_counter() - t0
    meta = cm.impl.parsed.meta
    req = cm.create_infer_request()
    feed = example_inputs(model)
    t0 = time.perf_counter()
    req.infer(feed)
    first_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        req.infer()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"blob": len(cm.impl.parsed.blob), "weights": meta["memory"]["weights"], "compile_s": compile_s,
            "first_ms": first_ms, "step_ms": statistics.median(times)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--dtypes", default="f16,int8,int4")
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--kv", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    print(f"{'preset/dtype':30s} {'blob MB':>9s} {'f32 blob MB':>12s} {'ratio':>6s} {'weights MB':>11s} "
          f"{'f32 w MB':>9s} {'compile s':>9s} {'f32 cmp s':>9s} {'1st ms':>8s} {'f32 1st':>8s} "
          f"{'step ms':>8s} {'f32 step':>8s} {'no-cache':>8s}")
    for preset in args.presets.split(","):
        for dtype in args.dtypes.split(","):
            d = make_model_folder(Path(tempfile.mkdtemp()) / preset, preset, dtype, seed=0,
                                  group_size=args.group_size)
            model = static_llm(ov.Core().read_model(d / "openvino_model.xml"), 1, args.kv - 1)
            c = measure(model, {}, args.steps)
            f = measure(model, {"NPU_EMU_WEIGHT_COMPRESSION": "NO"}, args.steps)
            n = measure(model, {"NPU_EMU_WEIGHTS_CACHE": "NO"}, args.steps)
            gs = f" gs{args.group_size}" if dtype == "int4" else ""
            print(f"{preset + '/' + dtype + gs:30s} {c['blob'] / 1e6:9.2f} {f['blob'] / 1e6:12.2f} "
                  f"{f['blob'] / c['blob']:6.2f} {c['weights'] / 1e6:11.2f} {f['weights'] / 1e6:9.2f} "
                  f"{c['compile_s']:9.2f} {f['compile_s']:9.2f} {c['first_ms']:8.1f} {f['first_ms']:8.1f} "
                  f"{c['step_ms']:8.2f} {f['step_ms']:8.2f} {n['step_ms']:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
