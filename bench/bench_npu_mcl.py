"""Host time per inference: command-list rebuild vs mutable update vs unchanged bindings, one run.

Usage: python bench/bench_npu_mcl.py [--preset tiny] [--steps 50]

Every step binds *new* input tensors (zero copy, share_inputs=True), as NPUW does when it rotates
KV buffers.  With mutable command lists (default) only the changed argument pointers are patched
and their descriptors re-fetched; with NPU_EMU_MUTABLE_COMMAND_LIST=NO the driver re-applies the
relocations and re-decodes every descriptor.  "unchanged" rebinds nothing (the lower bound).
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

import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

import ov_npu_emu  # noqa: E402
from ov_npu_emu.cli.model_args import example_inputs, static_llm  # noqa: E402
from ov_npu_emu.modelbuilder import make_model_folder  # noqa: E402


def run(model: ov.Model, mutable: bool, rebind: bool, steps: int) -> tuple[float, dict[str, int]]:
    cm = ov_npu_emu.Core().compile_model(model, "NPU", {"NPU_EMU_MUTABLE_COMMAND_LIST": "YES" if mutable else "NO"})
    req = cm.create_infer_request()
    feeds = [example_inputs(model, seed=i) for i in range(4)]
    req.infer(feeds[0])
    times = []
    for i in range(steps):
        feed = feeds[i % len(feeds)]
        t0 = time.perf_counter()
        req.infer(feed, share_inputs=rebind)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), dict(req.impl.counters)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--kv", type=int, default=128)
    args = ap.parse_args()
    d = make_model_folder(Path(tempfile.mkdtemp()) / args.preset, args.preset, "f32", seed=0)
    model = static_llm(ov.Core().read_model(d / "openvino_model.xml"), 1, args.kv - 1)
    rows = [("rebuild (no MCL)", *run(model, False, True, args.steps)),
            ("mutable update", *run(model, True, True, args.steps)),
            ("unchanged bindings", *run(model, True, False, args.steps))]
    base = rows[1][1]
    print(f"\n{args.preset} decode model (KV {args.kv}), new input tensors every step, median of {args.steps}")
    print(f"{'path':20s} {'ms/infer':>9s} {'vs mutable':>11s} {'builds':>7s} {'updates':>8s} {'patched args':>13s}")
    for name, ms, c in rows:
        print(f"{name:20s} {ms:9.3f} {ms / base:11.2f} {c['command_list_builds']:7d} {c['mutable_updates']:8d} "
              f"{c['patched_args']:13d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
