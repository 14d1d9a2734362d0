"""Decode attention on the emulated NPU: grouped QK^T as one broadcast call vs one call per group.

Usage: python bench/bench_decode_attention.py [--repeat 1000]

One decode step's SDPA task (one query row per head, f32, additive mask with the used slots
open) for the head layouts of bench-small at its KV-64 rung (8 query / 4 K/V heads),
qwen2.5-0.5b and llama-3.2-1b at the real defaults' KV window (MAX_PROMPT_LEN 1024 +
MIN_RESPONSE_LEN 128 = 1152 slots; 14/2 and 32/8 heads), head size 64.  The same operands run
through the kernel bound both ways (``kernels/attention.py``: the broadcast call is used only
where a probe found it bit-identical), calls alternating so that load from other jobs on this
shared host hits both alike.  Printed: microseconds per SDPA call (median over ``--repeat``
pairs), the ratio one call / per group, and whether the outputs are bit-identical.  Not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as bench_npu_kernels: no BLAS helper thread

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ov_npu_emu_npu.blob.kernel_params import SdpaParams  # noqa: E402
from ov_npu_emu_npu.device.kernels import attention  # noqa: E402

#: name -> (query heads, K/V heads, KV slots, used slots)
LAYOUTS = {"bench-small": (8, 4, 64, 30), "qwen2.5-0.5b": (14, 2, 1152, 30), "llama-3.2-1b": (32, 8, 1152, 30)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; f32, head size 64")
    print("| layout | heads (q/kv) | KV slots | per group us | one call us | one / per group | same bits |")
    print("|---|---|---|---|---|---|---|")
    probe = attention._grouped_gemv_ok
    for name, (heads, hkv, slots, used) in LAYOUTS.items():
        q = rng.standard_normal((1, heads, 1, 64)).astype(np.float32)
        k = rng.standard_normal((1, hkv, slots, 64)).astype(np.float32)
        v = rng.standard_normal((1, hkv, slots, 64)).astype(np.float32)
        m = np.full((1, 1, 1, slots), np.finfo(np.float32).min, np.float32)
        m[..., :used] = 0.0
        m[..., -1] = 0.0
        p = SdpaParams(False, True, 0.0, heads // hkv)
        o_per, o_one = (np.empty((1, heads, 1, 64), np.float32) for _ in range(2))
        try:
            attention._grouped_gemv_ok = lambda *a: False
            per = attention._sdpa([q, k, v, m], [o_per], p)
        finally:
            attention._grouped_gemv_ok = probe
        one = attention._sdpa([q, k, v, m], [o_one], p)
        t_per, t_one = [], []
        clock = time.perf_counter
        for _ in range(args.repeat):
            t0 = clock()
            per()
            t1 = clock()
            one()
            t2 = clock()
            t_per.append(t1 - t0)
            t_one.append(t2 - t1)
        a, b = statistics.median(t_per) * 1e6, statistics.median(t_one) * 1e6
        same = "yes" if np.array_equal(o_per, o_one) else "NO"
        print(f"| {name} | {heads}/{hkv} | {slots} | {a:.1f} | {b:.1f} | {b / a:.2f} | {same} |")
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
