"""Prefill MatMul on int4 weights (kernels/gemm.py): time per product of a llama-3.2-1B shape's
weights, against BLAS on the same weight already decompressed to f32 (what the product would
cost with a free decompression), side by side in one process.

Usage: python bench/bench_prefill_gemm.py [--rows 25,48,102,256] [--repeat 5] [--tiles]
                                          [--baseline /path/to/other/kernels/gemm.py]

Per row count, the four projection shapes of a 1B layer ([N, K] = q/o 2048x2048, k/v 512x2048,
gate/up 8192x2048, down 2048x8192, each weighted by its count per layer) run on both cores as
the prefill runs them (under ``taskset -c 0``, on one: the CPU time is then the kernel's own);
times are the best of ``--repeat`` alternating rounds, wall clock and CPU time of the
process's threads (which a busy host distorts less). ``--tiles`` runs each row count as a
token-row window over a 1024-row prefill's row tiles, as the device does.
``--baseline`` loads another version of kernels/gemm.py (e.g. a ``git worktree`` of main) and
times its ``gemm_runner`` beside this one.  ``GFLOP/s`` counts 2*M*N*K per product.  The load
average is printed: the host is shared, read the ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

#: (N, K, count per layer) of a llama-3.2-1B layer's projections
SHAPES = [(2048, 2048, 2), (512, 2048, 2), (8192, 2048, 2), (2048, 8192, 1)]
GS = 128


def _u4(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    q = rng.integers(0, 256, (n, k // GS, GS // 2), dtype=np.uint8)
    scale = (rng.random((n, k // GS, 1)) * 0.02 + 1e-3).astype(np.float16)
    return q, scale


def _timed(fn) -> tuple[float, float]:
    """(wall, CPU time of this process's threads) of one call."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def _tiled(make, x: np.ndarray, q: np.ndarray, s: np.ndarray, out: np.ndarray, k: int):
    """The window of the last ``len(x)`` rows of a 1024-row prefill as the device runs it: the
    compiler's row tiles (half of a 2 MiB CMX holds a tile's activation and output rows; tiles
    end on the last row), each tile the window reaches running its window rows."""
    length, m, n = 1024, x.shape[0], out.shape[1]
    tile = (1 << 20) // (4 * (k + n))
    xs = np.zeros((length, k), np.float32)
    xs[length - m:] = x
    full = np.empty((length, n), np.float32)
    runs = []
    for end in range(length, length - m, -tile):
        r0 = max(0, end - tile)
        run = make("i4", xs[r0:end], q, s, None, full[r0:end], k)
        start = length - m - r0
        runs.append(run.window_from(start) if start > 0 else run)
    return lambda: [r() for r in runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="25,48,102,256")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", help="another kernels/gemm.py to time beside this tree's")
    ap.add_argument("--tiles", action="store_true",
                    help="each row count as a token-row window over a 1024-row prefill's row tiles")
    args = ap.parse_args()
    from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS
    from ov_npu_emu_npu.device.kernels import gemm
    from ov_npu_emu_npu.device.kernels.dequant import dequantize

    runners = {"this tree": gemm.gemm_runner}
    if args.baseline:
        spec = importlib.util.spec_from_file_location("baseline_gemm", args.baseline)
        assert spec is not None and spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = old  # numba's cache finds its module by name
        spec.loader.exec_module(old)
        runners["baseline"] = old.gemm_runner
    rng = np.random.default_rng(0)
    weights = [(n, k, c, *_u4(rng, n, k)) for n, k, c in SHAPES]
    f32 = [dequantize(WEIGHT_FORMATS["i4"], q, s, None, False, k) for n, k, _, q, s in weights]
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; one 1B layer's int4 projections")
    cols = list(runners) + ["BLAS on f32"]
    print("| rows | " + " | ".join(f"{c} ms wall / CPU" for c in cols) + " | "
          + " | ".join(f"{c} GFLOP/s per CPU s" for c in cols)
          + (" | this / baseline wall / CPU |" if args.baseline else " |"))
    print("|---" * (2 * len(cols) + 1 + bool(args.baseline)) + "|")
    for m in (int(r) for r in args.rows.split(",")):
        x = rng.standard_normal((m, 2048)).astype(np.float32)
        xd = rng.standard_normal((m, 8192)).astype(np.float32)
        calls = {name: [] for name in cols}
        for (n, k, c, q, s), w in zip(weights, f32, strict=True):
            xa = x if k == 2048 else xd
            out = np.empty((m, n), np.float32)
            for name, make in runners.items():
                run = _tiled(make, xa, q, s, out, k) if args.tiles else make("i4", xa, q, s, None, out, k)
                calls[name] += [run] * c
            calls["BLAS on f32"] += [lambda xa=xa, w=w, out=out: np.matmul(xa, w.T, out=out)] * c
        for fns in calls.values():  # warm-up (numba loads, BLAS threads)
            for f in fns:
                f()
        best = {name: float("inf") for name in cols}
        cpu = {name: float("inf") for name in cols}
        for _ in range(args.repeat):  # alternating rounds: a load swing hits every column alike
            for name, fns in calls.items():
                wall, used = _timed(lambda fns=fns: [f() for f in fns])
                best[name], cpu[name] = min(best[name], wall), min(cpu[name], used)
        flop = 2 * m * sum(n * k * c for n, k, c in SHAPES)
        line = f"| {m} | " + " | ".join(f"{best[c] * 1e3:.0f} / {cpu[c] * 1e3:.0f}" for c in cols) + " | "
        line += " | ".join(f"{flop / cpu[c] / 1e9:.0f}" for c in cols)
        if args.baseline:
            line += f" | {best['this tree'] / best['baseline']:.2f} / {cpu['this tree'] / cpu['baseline']:.2f}"
        print(line + " |")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
