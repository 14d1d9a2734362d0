"""The emulated NPU's prefill with this tree's matmul_dq kernels against another checkout's, side
by side in one process: two ``LLMPipeline(dir, "NPU")`` at default properties, one bound to each
tree's ``kernels/gemm.py`` + ``kernels/gemv.py``, alternating one-new-token generates (a prefill:
the TTFT) in rotating order; wall and process CPU time per side, medians and bests, and whether
both write the same greedy text.

Usage: python bench/bench_prefill_ab.py MODEL_DIR --baseline /path/to/other/checkout [--rounds 6]
                                        [--prompt TEXT]

The baseline's two kernel files are copied into a temporary directory and imported under other
names (their numba cache goes there, not into the other checkout); the rest of the stack is this
tree's. The load average is printed: the host is shared, read the ratios (CPU time moves less
with the load than wall time).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
PROMPT = "Once upon a time there was a little girl who lived in a village near"
KERNELS = Path("plugins/ov_npu_emu_npu/device/kernels")


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's cache finds its module by name
    spec.loader.exec_module(mod)
    return mod


def _baseline_runner(checkout: Path, tmp: Path):
    """The other checkout's ``gemm_runner``, on its own ``gemv`` module."""
    (tmp / "ab_baseline_gemv.py").write_text((checkout / KERNELS / "gemv.py").read_text())
    gemm_src = (checkout / KERNELS / "gemm.py").read_text()
    (tmp / "ab_baseline_gemm.py").write_text(
        gemm_src.replace("from ov_npu_emu_npu.device.kernels.gemv import", "from ab_baseline_gemv import"))
    sys.path.insert(0, str(tmp))
    _load("ab_baseline_gemv", tmp / "ab_baseline_gemv.py")
    return _load("ab_baseline_gemm", tmp / "ab_baseline_gemm.py").gemm_runner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--baseline", required=True, help="another checkout of this repository")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--prompt", default=PROMPT)
    args = ap.parse_args()
    import genai_shim as g
    from ov_npu_emu_npu.device.kernels import gemm

    tmp = Path(tempfile.mkdtemp(prefix="bench_prefill_ab_"))
    runners = {"baseline": _baseline_runner(Path(args.baseline), tmp), "this tree": gemm.gemm_runner}
    this = gemm.gemm_runner
    pipes = {}
    for side, runner in runners.items():
        # kernels/dequant.py imports gemm_runner when a command list is built: each pipeline's
        # first generates bind the runner set here
        gemm.gemm_runner = runner
        t = time.perf_counter()
        pipes[side] = g.LLMPipeline(args.model, "NPU")
        print(f"{side}: load {time.perf_counter() - t:.2f} s", flush=True)
        for _ in range(2):
            pipes[side].generate(args.prompt, max_new_tokens=1)
    gemm.gemm_runner = this
    times: dict[str, list[tuple[float, float]]] = {s: [] for s in pipes}
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs", flush=True)
    for r in range(args.rounds):
        for side in list(pipes)[:: 1 if r % 2 == 0 else -1]:
            t, c = time.perf_counter(), time.process_time()
            pipes[side].generate(args.prompt, max_new_tokens=1)
            times[side].append((time.perf_counter() - t, time.process_time() - c))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    print("| side | prefill CPU s, median (best) | wall s, median (best) |")
    print("|---|---|---|")
    med = {s: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for s, v in times.items()}
    best = {s: (min(w for w, _ in v), min(c for _, c in v)) for s, v in times.items()}
    for s in pipes:
        print(f"| {s} | {med[s][1]:.3f} ({best[s][1]:.3f}) | {med[s][0]:.3f} ({best[s][0]:.3f}) |")
    b, a = "baseline", "this tree"
    print(f"| this / baseline | {med[a][1] / med[b][1]:.2f} ({best[a][1] / best[b][1]:.2f}) "
          f"| {med[a][0] / med[b][0]:.2f} ({best[a][0] / best[b][0]:.2f}) |")
    texts = {s: p.generate(args.prompt, max_new_tokens=12) for s, p in pipes.items()}
    print("same text (12 new tokens):", texts[a] == texts[b])


if __name__ == "__main__":
    main()
