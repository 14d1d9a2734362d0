"""Before/after TTFT and TPOT of our NPUW on the emulated NPU: this tree against a baseline checkout.

Usage: python bench/bench_npu_npuw_ab.py --baseline DIR [--prompts 20,400,1000] [--new 32] [--repeat 3]
                                         [--also KEY=VALUE ...]

``DIR`` is another checkout of this repository (e.g. ``git archive main | tar -x -C DIR``).  Both
trees serve the same setup ("ours NPUW/NPU" of bench_npuw_latency.py) from their own worker
process; the two generations alternate every decode step, the order rotating every repeat, so load
from other jobs on the shared host hits both alike.  Both decode the same fed tokens (the baseline's
own greedy tokens from a warm-up pass).  Both workers get OPENBLAS_NUM_THREADS=1 unless it is set:
two numpy processes with spinning BLAS threads would slow each other down by 3-30x.  Ratios are
this tree / baseline; lower is better.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "plugins"), str(HERE)]

import bench_npuw_latency as lat  # noqa: E402

from ov_npu_emu.models import find_model  # noqa: E402

SETUP = "ours NPUW/NPU"


class TreeWorker(lat.Worker):
    """bench_npuw_latency's worker, started from the given tree's copy of the script."""

    def __init__(self, name: str, script: Path, argv: list[str]) -> None:
        self.name = name
        # two numpy workers: idle OpenBLAS threads of one spin on the cores the other one needs
        env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *argv, "--worker", SETUP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.compile_s = self._ask(None)["compile_s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="root of the baseline checkout")
    ap.add_argument("--model", default=str(find_model("stories260K")))
    ap.add_argument("--prompts", default="20,400,1000")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra NPUW config for both trees (bench_npuw_latency --also)",
    )
    args = ap.parse_args()
    path = Path(args.model)
    xml = path / "openvino_model.xml" if path.is_dir() else path
    argv = ["--devices", "NPU", "--model-xml", str(xml)] + [x for a in args.also for x in ("--also", a)]
    trees = {
        "baseline": Path(args.baseline).resolve() / "bench" / "bench_npuw_latency.py",
        "this tree": HERE / "bench_npuw_latency.py",
    }
    workers = {name: TreeWorker(name, script, argv) for name, script in trees.items()}
    lengths = [int(x) for x in args.prompts.split(",")]
    rng = np.random.default_rng(0)
    vocab = ov.Core().read_model(xml).output("logits").get_partial_shape()[2].get_length()
    prompts = {n: [1] + rng.integers(3, vocab, size=n - 1).tolist() for n in lengths}
    ttft: dict[tuple[str, int], list[float]] = {}
    steps: dict[tuple[str, int], list[float]] = {}
    for n in lengths:
        ref: dict = {}
        for _ in workers["baseline"].generation(prompts[n], args.new, ref, None):  # warm-up + fed tokens
            pass
        for r in range(args.repeat):
            names = list(workers)[r % 2 :] + list(workers)[: r % 2]
            outs: dict[str, dict] = {name: {} for name in names}
            lat.interleaved_gens(
                [workers[m].generation(prompts[n], args.new, outs[m], ref["tokens"]) for m in names], True
            )
            for name, o in outs.items():
                ttft.setdefault((name, n), []).append(o["ttft"])
                steps.setdefault((name, n), []).extend(o["steps"])
    print(
        f"model {xml} | {SETUP} | --also {args.also or '-'} | {args.new} new tokens x {args.repeat} repeats, "
        "trees alternated per step"
    )
    print(f"{'tree':10s} " + " ".join(f"{'TTFT@' + str(n):>10s} {'TPOT@' + str(n):>10s}" for n in lengths))
    med = {k: (statistics.median(ttft[k]), statistics.median(steps[k])) for k in ttft}
    for name in workers:
        print(f"{name:10s} " + " ".join(f"{med[name, n][0]:10.2f} {med[name, n][1]:10.3f}" for n in lengths))
    print(
        "ratio      "
        + " ".join(
            f"{med['this tree', n][0] / med['baseline', n][0]:10.3f} "
            f"{med['this tree', n][1] / med['baseline', n][1]:10.3f}"
            for n in lengths
        )
    )
    for w in workers.values():
        w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
