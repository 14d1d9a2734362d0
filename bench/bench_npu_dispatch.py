"""Per-step host time of the emulated NPU: this tree vs a baseline git revision, side by side.

Usage: python bench/bench_npu_dispatch.py [--baseline REV] [--model DIR] [--kv 256] [--steps 300]
                                          [--modes npu,npuw]

``--baseline`` defaults to where this branch forked from main.

The baseline revision is exported with ``git archive`` into a temporary directory.  Each
(tree, mode) pair runs in its own worker process; the driver asks the workers for one step each
in turn (the order rotating every round), so load from other jobs on this shared host hits them
alike.  Medians over all steps; the ratio is this tree / baseline (lower is better).
* ``npu``: stories260K's static decode model (one token over kv-1 past rows, as
  ``ov-npu-emu profile --decode-kv``) compiled for the emulated NPU, inputs bound once.
* ``npuw``: our NPUW with NPUW_DEVICES=NPU through the stateful interface, one decode step per
  ``infer()`` after a 16-token prompt (the kv``--kv`` generate variant).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r'''
import os, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
root, mode, model_dir, kv = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path[:0] = [root, os.path.join(root, "plugins")]
import numpy as np, openvino as ov
from ov_npu_emu import Core
xml = os.path.join(model_dir, "openvino_model.xml")
if mode == "npu":
    from ov_npu_emu.cli.model_args import example_inputs, static_llm
    m = static_llm(ov.Core().read_model(xml), 1, kv - 1)
    req = Core().compile_model(m, "NPU").create_infer_request()
    req.infer(example_inputs(m))
    step = req.infer
else:
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    cfg = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "NPU", "NPUW_ONLINE_PIPELINE": "NONE",
           "NPUW_LLM_MAX_PROMPT_LEN": 64, "NPUW_LLM_MIN_RESPONSE_LEN": kv - 64,
           "++NPUW_LLM_PREFILL_CONFIG": f32, "++NPUW_LLM_GENERATE_CONFIG": f32}
    req = Core().compile_model(xml, "NPU", cfg).create_infer_request()
    L = 16
    def reset():
        req.reset_state()
        req.infer({"input_ids": np.ones((1, L), np.int64), "attention_mask": np.ones((1, L), np.int64),
                   "position_ids": np.arange(L, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)})
        pos[0] = L
    pos = [L]
    reset()
    def step():
        if pos[0] >= kv - 1:
            reset()
        p = pos[0]
        req.infer({"input_ids": np.ones((1, 1), np.int64), "attention_mask": np.ones((1, p + 1), np.int64),
                   "position_ids": np.array([[p]], np.int64), "beam_idx": np.zeros(1, np.int32)})
        pos[0] += 1
for _ in range(5):
    step()
print("ready", flush=True)
for line in sys.stdin:
    t0 = time.perf_counter()
    step()
    print((time.perf_counter() - t0) * 1e3, flush=True)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=None,
                    help="git revision to compare with (default: where this branch forked from main)")
    ap.add_argument("--model", default=None, help="optimum-intel LLM folder (default: the bundled stories260K)")
    ap.add_argument("--kv", type=int, default=256, help="KV capacity of the decode step")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--modes", default="npu,npuw")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
    from ov_npu_emu.models import find_model

    model = Path(args.model) if args.model else find_model("stories260K")
    base_rev = args.baseline or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
                                               capture_output=True, text=True, check=True).stdout.strip()
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", base_rev],
                         capture_output=True, text=True, check=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
        workers = {}
        for mode in args.modes.split(","):
            for label, tree in ((f"baseline {rev}", base), (f"this tree {head}", ROOT)):
                p = subprocess.Popen([sys.executable, "-c", WORKER, str(tree), mode, str(model), str(args.kv)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp)
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"worker {label}/{mode} failed to start")
                workers[(mode, label)] = p
        times: dict[tuple[str, str], list[float]] = {k: [] for k in workers}
        keys = list(workers)
        for i in range(args.steps):
            for k in keys[i % len(keys):] + keys[:i % len(keys)]:
                p = workers[k]
                p.stdin.write("\n")
                p.stdin.flush()
                times[k].append(float(p.stdout.readline()))
        for p in workers.values():
            p.stdin.close()
            p.wait()
    print(f"model {model.name}, KV {args.kv}, {args.steps} steps each, interleaved; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'mode':6} {'tree':24} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8}")
    for (mode, label), ts in times.items():
        q = statistics.quantiles(ts, n=10)
        print(f"{mode:6} {label:24} {statistics.median(ts):10.3f} {q[0]:8.3f} {q[-1]:8.3f}")
    for mode in args.modes.split(","):
        b, n = (statistics.median(ts) for (m, _), ts in times.items() if m == mode)
        print(f"{mode}: this tree / baseline = {n / b:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
