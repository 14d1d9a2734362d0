"""Decode-step time: emulated NPU vs the OpenVINO CPU plugin vs the real NPUW on CPU, one run.

Usage: python bench/bench_npu_decode.py [--presets tiny,small,qwen2.5-0.5b-shape] [--steps 20]
                                       [--dtypes f32,int8,int4] [--group-size 128] [--npu-precision f32]

Each device runs the same builder model with KV capacity ``--kv`` (default 128):
* NPU (emulated): the static one-token decode model (past KV = kv-1 rows) compiled by our compiler,
  executed through the blob/driver/engines; host time of ``infer()`` with inputs bound once.
  ``--npu-precision`` is its INFERENCE_PRECISION_HINT: f32 by default, like the other two columns
  (the device's own default is f16; bench/bench_npu_precision.py compares the two).
* CPU: openvino's CPU plugin on the stateful model, f32, one token per ``infer()`` after a prompt.
* NPUW-on-CPU: openvino's real NPUW LLM pipeline (NPU_USE_NPUW, NPUW_LLM, NPUW_DEVICES=CPU), same loop.
Ratios are printed side by side (NPU / NPUW, NPU / CPU); lower is better.
For int8/int4 models the emulated NPU keeps the weights compressed in its blob (the blob size is
printed) and decompresses them through the driver's weights cache; CPU and NPUW run with
DYNAMIC_QUANTIZATION_GROUP_SIZE=0 (the CPU plugin; NPUW does not take the key).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The emulator's kernels run on numpy's OpenBLAS.  On a small shared host, OpenBLAS worker threads
# that busy-wait on each other lose whole time slices whenever another process holds a core, so
# matmul time swings 3-10x; one BLAS thread is far steadier.  Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

import ov_npu_emu  # noqa: E402
from ov_npu_emu.cli.model_args import example_inputs, static_llm  # noqa: E402
from ov_npu_emu.modelbuilder import make_model_folder  # noqa: E402

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
#: the CPU plugin would otherwise quantize activations of int8/int4 MatMuls (NPUW rejects this key)
CPU_F32 = {**F32, "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


def _median_ms(fn, steps: int) -> float:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_stateful(xml: Path, device: str, config: dict, prompt: int, steps: int) -> float:
    core = ov.Core()
    req = core.compile_model(core.read_model(xml), device, config).create_infer_request()
    ids = np.ones((1, prompt), np.int64)
    req.infer({"input_ids": ids, "attention_mask": np.ones((1, prompt), np.int64),
               "position_ids": np.arange(prompt, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)})
    pos = [prompt]

    def step() -> None:
        p = pos[0]
        req.infer({"input_ids": np.ones((1, 1), np.int64), "attention_mask": np.ones((1, p + 1), np.int64),
                   "position_ids": np.array([[p]], np.int64), "beam_idx": np.zeros(1, np.int32)})
        pos[0] += 1

    return _median_ms(step, steps)


def bench_npu(xml: Path, kv: int, steps: int, precision: str = "f32") -> tuple[float, float, int]:
    model = static_llm(ov.Core().read_model(xml), 1, kv - 1)
    t0 = time.perf_counter()
    cm = ov_npu_emu.Core().compile_model(model, "NPU", {"INFERENCE_PRECISION_HINT": precision})
    compile_s = time.perf_counter() - t0
    blob_bytes = len(cm.impl.parsed.blob)
    req = cm.create_infer_request()
    req.infer(example_inputs(model))  # binds inputs, builds the command list (fills the weights cache)
    return _median_ms(req.infer, steps), compile_s, blob_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="tiny,small,qwen2.5-0.5b-shape")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--kv", type=int, default=128)
    ap.add_argument("--dtypes", default="f32", help="comma list of builder dtypes (f32, f16, int8, int4)")
    ap.add_argument("--group-size", type=int, default=128, help="int4 group size (-1: channel-wise)")
    ap.add_argument("--npu-precision", default="f32", choices=["f32", "f16"],
                    help="the emulated NPU's INFERENCE_PRECISION_HINT (f32: as the CPU and NPUW columns)")
    args = ap.parse_args()
    prompt = 16
    rows = []
    for preset, dtype in [(p, d) for p in args.presets.split(",") for d in args.dtypes.split(",")]:
        d = make_model_folder(Path(tempfile.mkdtemp()) / preset, preset, dtype, seed=0, group_size=args.group_size)
        xml = d / "openvino_model.xml"
        npu_ms, compile_s, blob_bytes = bench_npu(xml, args.kv, args.steps, args.npu_precision)
        cpu_ms = bench_stateful(xml, "CPU", CPU_F32, prompt, args.steps)
        npuw_cfg = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE",
                    "NPUW_LLM_MAX_PROMPT_LEN": 64, "NPUW_LLM_MIN_RESPONSE_LEN": args.kv - 64, **F32}
        try:
            npuw_ms = bench_stateful(xml, "NPU", npuw_cfg, prompt, args.steps)
        except RuntimeError as e:  # real NPUW unavailable in this openvino build
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            print(f"{preset}/{dtype}: real NPUW-on-CPU failed: {lines[-1] if lines else e}")
            npuw_ms = float("nan")
        rows.append((f"{preset}/{dtype}", npu_ms, cpu_ms, npuw_ms, compile_s, blob_bytes))
    print(f"\ndecode step, KV capacity {args.kv}, median of {args.steps} steps (host wall time, "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, load average {os.getloadavg()[0]:.1f})")
    print(f"{'preset/dtype':28s} {'NPU-emu ms':>11s} {'CPU ms':>9s} {'NPUW-CPU ms':>12s} {'NPU/NPUW':>9s} "
          f"{'NPU/CPU':>8s} {'compile s':>10s} {'blob MB':>9s}")
    for preset, n, c, w, cs, bb in rows:
        print(f"{preset:28s} {n:11.2f} {c:9.2f} {w:12.2f} {n / w:9.2f} {n / c:8.2f} {cs:10.2f} {bb / 1e6:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
