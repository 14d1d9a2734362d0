"""DMA ping-pong A/B on the emulated NPU: NPU_EMU_PING_PONG=YES (two CMX slots per MatMul operand
stream) vs NO (one slot: the same tiles in sequence), side by side in one run.

Usage: python bench/bench_ping_pong.py [--repeat 20] [--past 127]

Cases: the issue's MatMul ([1,64,256] x [256,256] f32, 32 KiB CMX), and one stories260K decode
step (1 token over ``--past`` KV rows, stateless static, f32) at the default 2 MiB CMX and at
32 KiB. For each: the cost model's makespan, DMA hidden behind compute, task counts, the
host time of one inference (median of ``--repeat``, both setups interleaved) and the largest
difference from the OpenVINO CPU plugin (f32). Ratios are ON / OFF.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

import openvino as ov  # noqa: E402
import openvino.opset13 as ops  # noqa: E402

from ov_npu_emu import Core  # noqa: E402
from ov_npu_emu.cli.model_args import example_inputs, static_llm  # noqa: E402


def issue_matmul() -> ov.Model:
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 64, 256], np.float32, name="x")
    y = ops.matmul(x, ops.constant(rng.standard_normal((256, 256)).astype(np.float32)), False, False)
    return ov.Model([ops.result(y)], [x], "issue_matmul")


def run_case(name: str, model: ov.Model, cmx: int | None, repeat: int) -> None:
    feed = example_inputs(model)
    cpu = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    ref = [np.array(v) for v in cpu.infer(feed).values()]
    reqs, rows = {}, {}
    for setup in ("YES", "NO"):
        cfg = {"PERF_COUNT": "YES", "NPU_EMU_PING_PONG": setup, **({"NPU_EMU_CMX_SIZE": cmx} if cmx else {})}
        req = Core().compile_model(model, "NPU", cfg).create_infer_request()
        out = [np.array(v) for v in req.infer(feed).values()]
        s = req.impl.timeline().summary()
        diff = max(float(np.abs(a - b).max()) for a, b in zip(out, ref, strict=True))
        rows[setup] = {"us": s["makespan_us"], "hidden": s["dma_hidden_fraction"], "tasks": s["tasks"], "diff": diff,
                       "host": []}
        reqs[setup] = Core().compile_model(model, "NPU", {k: v for k, v in cfg.items() if k != "PERF_COUNT"})
        reqs[setup] = reqs[setup].create_infer_request()
        reqs[setup].infer(feed)  # warm-up
    for _ in range(repeat):  # interleaved, so load from other jobs hits both setups alike
        for setup, req in reqs.items():
            t0 = time.perf_counter()
            req.infer(feed)
            rows[setup]["host"].append(time.perf_counter() - t0)
    on, off = rows["YES"], rows["NO"]
    cmx_txt = f"{cmx // 1024} KiB" if cmx else "2 MiB"
    print(f"\n{name} (CMX {cmx_txt})")
    print(f"  {'':10s} {'device us':>10s} {'DMA hidden':>10s} {'DMA/DPU/SHAVE tasks':>20s} {'host ms':>8s} "
          f"{'max |diff| vs CPU':>18s}")
    for label, r in (("ping-pong", on), ("one slot", off)):
        t = r["tasks"]
        print(f"  {label:10s} {r['us']:10.1f} {r['hidden']:10.2f} {t['DMA']:>8d}/{t['DPU']}/{t['SHAVE']:<8d} "
              f"{statistics.median(r['host']) * 1e3:8.3f} {r['diff']:18.3g}")
    print(f"  ratio ON/OFF: device time {on['us'] / off['us']:.2f}, host time "
          f"{statistics.median(on['host']) / statistics.median(off['host']):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--past", type=int, default=127)
    args = ap.parse_args()
    run_case("issue MatMul [1,64,256]x[256,256] f32", issue_matmul(), 32768, args.repeat)
    xml = ROOT / "ov_npu_emu" / "models" / "stories260K" / "openvino_model.xml"
    for cmx in (None, 32768):
        decode = static_llm(ov.Core().read_model(xml), 1, args.past)
        run_case(f"stories260K decode step (past {args.past})", decode, cmx, args.repeat)


if __name__ == "__main__":
    main()
