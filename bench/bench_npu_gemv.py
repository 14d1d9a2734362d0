"""Decode TPOT with the emulated NPU's f32 gemv path on and off, and the real NPUW, side by side.

Usage: python bench/bench_npu_gemv.py [--models stories260K,bench-small] [--repeat 5] [--new 16]

The matmul / matmul_acc kernels run a few activation rows times an f32 [N, K] weight with the
gemv kernel on both cores (kernels/gemv.py ``"f32"``, and the host fusion binds a whole weight
as one such call); ``off`` builds the same pipeline with that path disabled (BLAS per column
block of CALL_WEIGHT_ELEMS, single-threaded: the previous behaviour). Per model, in one
process: ``real`` (openvino_genai, NPUW on CPU), ``on`` and ``off`` (genai_shim on the emulated
NPU), f32 hints, real defaults (1024/128), a 12-word prompt; generate() calls alternate with
the order rotating per round, so load from other jobs hits all setups alike. Prints median
TPOT / TTFT and the ratios on / off and on / real. Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "bench")]

from bench_scale import F32, PROMPT  # noqa: E402


@contextlib.contextmanager
def gemv_path(on: bool) -> Iterator[None]:
    """The f32 decode path as built (on) or disabled (off) while pipelines compile their kernels."""
    from ov_npu_emu_npu.device import fusion
    from ov_npu_emu_npu.device.kernels import accumulate, linear

    saved = (linear.decode_shaped, accumulate.decode_shaped, fusion.STORED_FORMAT_MAX_ROWS)
    if not on:
        linear.decode_shaped = accumulate.decode_shaped = lambda *a, **kw: None
        fusion.STORED_FORMAT_MAX_ROWS = 0  # no whole-weight block either
    fusion._PROBES.clear()  # probe verdicts are per kernel choice
    try:
        yield
    finally:
        linear.decode_shaped, accumulate.decode_shaped, fusion.STORED_FORMAT_MAX_ROWS = saved
        fusion._PROBES.clear()


def run_model(name: str, repeat: int, new: int) -> None:
    import openvino_genai
    from bench_prefill import model_folder

    import genai_shim

    folder = model_folder(name)
    pipes, cfgs = {}, {}
    for setup in ("real", "on", "off"):
        g = openvino_genai if setup == "real" else genai_shim
        extra = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"} if setup == "real" else {}
        cfg = g.GenerationConfig()
        cfg.max_new_tokens, cfg.ignore_eos = new, True
        with gemv_path(setup != "off"):
            pipes[setup] = g.LLMPipeline(folder, "NPU", **F32, **extra)
            pipes[setup].generate([PROMPT], cfg)  # warm-up: our ladder compiles its rungs here
        cfgs[setup] = cfg
    setups = list(pipes)
    tpot: dict[str, list[float]] = {s: [] for s in setups}
    ttft: dict[str, list[float]] = {s: [] for s in setups}
    text = {}
    for r in range(repeat):
        for s in setups[r % 3:] + setups[:r % 3]:
            res = pipes[s].generate([PROMPT], cfgs[s])
            tpot[s].append(res.perf_metrics.get_tpot().mean)
            ttft[s].append(res.perf_metrics.get_ttft().mean)
            text[s] = res.texts[0]
    med = {s: statistics.median(tpot[s]) for s in setups}
    for s in setups:
        print(f"| {name} | {s} | {statistics.median(ttft[s]):.1f} | {med[s]:.2f} | {med[s] / med['real']:.2f} "
              f"| {text[s] == text['real']} |")
    print(f"| {name} | on / off | | {med['on'] / med['off']:.2f} | | |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="stories260K,bench-small")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--new", type=int, default=16)
    args = ap.parse_args()
    os.environ.setdefault("OV_NPU_EMU_PROGRESS", "0")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")
    print("| model | setup | TTFT ms | TPOT ms | x real TPOT | same text as real |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        run_model(name, args.repeat, args.new)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
