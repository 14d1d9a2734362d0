"""Decode attention over an f16 KV cache on the emulated NPU: fused ``sdpa_kv`` vs the unfused tasks.

Usage: python bench/bench_fused_kv.py [--repeat 200] [--used 38,70,300,1000] [--layout llama-3.2-1b]

One decode step's attention of one layer as the compiler lowers it with NPU_EMU_FUSE_KV=NO
(``convert`` of the f16 past K and V, the two Concat copies, ``sdpa``) and with YES (one
``sdpa_kv`` task: ``kernels/attention.py``), for the head layouts of llama-3.2-1b (32/8 heads)
and qwen2.5-0.5b (14/2) at the real defaults' window (MAX_PROMPT_LEN 1024 + MIN_RESPONSE_LEN 128
= 1152 slots), head size 64, f32 compute, the additive mask NPUW feeds (finfo.min on the closed
slots) with ``--used`` slots open plus the new token's.  Calls alternate so that load from other
jobs on this shared host hits both alike.  Printed per layout and open length: wall and CPU
microseconds per layer (medians over ``--repeat`` pairs; the CPU time counts every thread), the
ratio fused / unfused and whether the outputs are bit-identical.  Not a test.
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

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1] / "plugins")]

from ov_npu_emu_npu.blob.kernel_params import NO_PARAMS, SdpaKvParams, SdpaParams  # noqa: E402
from ov_npu_emu_npu.device.kernels import make_kernel  # noqa: E402

#: name -> (query heads, K/V heads, KV slots)
LAYOUTS = {"llama-3.2-1b": (32, 8, 1152), "qwen2.5-0.5b": (14, 2, 1152)}


def _unfused(q, kp, vp, new, m, o, groups: int):
    """The tasks NPU_EMU_FUSE_KV=NO lowers: the two converts, the Concats' copies, sdpa."""
    past, slots = kp.shape[-2], m.shape[-1]
    k32, v32 = np.empty(kp.shape, np.float32), np.empty(vp.shape, np.float32)
    kc = np.empty((*kp.shape[:-2], slots, kp.shape[-1]), np.float32)
    vc = np.empty((*vp.shape[:-2], slots, vp.shape[-1]), np.float32)
    conv_k = make_kernel("convert", [kp], [k32], NO_PARAMS)
    conv_v = make_kernel("convert", [vp], [v32], NO_PARAMS)
    sdpa = make_kernel("sdpa", [q, kc, vc, m], [o], SdpaParams(False, True, 0.0, groups))

    def run() -> None:
        conv_k()
        conv_v()
        kc[..., :past, :] = k32
        kc[..., past:, :] = new[0]
        vc[..., :past, :] = v32
        vc[..., past:, :] = new[1]
        sdpa()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--used", default="38,70,300,1000")
    ap.add_argument("--layout", default=",".join(LAYOUTS))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; f32 compute, f16 KV, head size 64")
    print("| layout | open slots | unfused us (wall / CPU) | fused us (wall / CPU) | fused / unfused (wall / CPU) "
          "| same bits |")
    print("|---|---|---|---|---|---|")
    for name in args.layout.split(","):
        heads, hkv, slots = LAYOUTS[name]
        past = slots - 1
        for used in (int(u) for u in args.used.split(",")):
            q = rng.standard_normal((1, heads, 1, 64)).astype(np.float32)
            kp = rng.standard_normal((1, hkv, past, 64)).astype(np.float16)
            vp = rng.standard_normal((1, hkv, past, 64)).astype(np.float16)
            new = rng.standard_normal((2, 1, hkv, 1, 64)).astype(np.float32)
            m = np.full((1, 1, 1, slots), np.finfo(np.float32).min, np.float32)
            m[..., :used] = 0.0
            m[..., -1] = 0.0
            o_plain, o_fused = (np.empty((1, heads, 1, 64), np.float32) for _ in range(2))
            unfused = _unfused(q, kp, vp, new, m, o_plain, heads // hkv)
            fused = make_kernel("sdpa_kv", [q, kp, vp, new, m], [o_fused],
                                SdpaKvParams(False, True, 0.0, heads // hkv, past))
            times: dict[str, list[tuple[float, float]]] = {"unfused": [], "fused": []}
            for _ in range(3):
                unfused()
                fused()
            for _ in range(args.repeat):
                for label, fn in (("unfused", unfused), ("fused", fused)):
                    w, c = time.perf_counter(), time.process_time()
                    fn()
                    times[label].append((time.perf_counter() - w, time.process_time() - c))
            med = {k: (statistics.median(t[0] for t in v) * 1e6, statistics.median(t[1] for t in v) * 1e6)
                   for k, v in times.items()}
            u, f = med["unfused"], med["fused"]
            print(f"| {name} ({heads}/{hkv}) | {used + 1} | {u[0]:.0f} / {u[1]:.0f} | {f[0]:.0f} / {f[1]:.0f} | "
                  f"{f[0] / u[0]:.2f} / {f[1] / max(u[1], 1e-9):.2f} | {np.array_equal(o_plain, o_fused)} |")


if __name__ == "__main__":
    main()
