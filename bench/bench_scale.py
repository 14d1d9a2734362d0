"""Issue 10's scale table: load, TTFT, TPOT and peak RSS per setup, ours and the real side by side.

Usage: python bench/bench_scale.py [--models stories260K,bench-small,bench-0.5b,DIR] [--repeat 3]
                                   [--new 16] [--setups real,npu,npu-cpu,cpu] [--prompt TEXT]
                                   [--q05-dir /work/models/q05-f16] [--load-only] [--interleave]

Every setup runs ``LLMPipeline(folder, device, ...)`` with f32 hints (INFERENCE_PRECISION_HINT
and KV_CACHE_PRECISION f32) on a 12-word prompt, in its own worker process: one load (timed:
the pipeline constructor, so compilation included), one warm-up generate, then ``--repeat``
generates (medians of the pipeline's own TTFT / TPOT); peak RSS is the worker's ru_maxrss, its
current RSS after the load is printed too (bench/procstat.py).  NPU setups keep the real
defaults (MAX_PROMPT_LEN 1024, MIN_RESPONSE_LEN 128).  Setups:

* ``real``    - the real openvino_genai, NPUW on CPU (NPUW_DEVICES=CPU, NPUW_ONLINE_PIPELINE=NONE)
* ``npu``     - genai_shim on our emulated NPU (NPUW_DEVICES=NPU, the default)
* ``npu-cpu`` - genai_shim, our NPUW with NPUW_DEVICES=CPU
* ``npu-cpu-1var`` - the same with NPUW_LLM_GENERATE_LADDER=NO (one generate variant of
  MAX_PROMPT + MIN_RESPONSE slots; not in the default --setups)
* ``npu-cpu-private`` - npu-cpu with CPU_EMU_WEIGHTS_BANK=NO in every sub-config: each CPU
  sub-model holds its own weights, as before the CPU device's weights bank (not in the default)
* ``cpu``     - the real openvino_genai on the OpenVINO CPU plugin (stateful, no NPUW)

Ratios are ours / real.  The workers run one after another on a shared machine: the load
average at the start and end is printed; re-run when it moved.  ``--interleave`` instead loads
every setup in one worker process and alternates their generate() calls (order rotating per
round), so load swings hit all setups alike: TTFT / TPOT only (no per-setup load time or RSS).
With ``cpu`` among the setups, a row per model gives each setup's TPOT against the CPU plugin's
(about the best NPUW_DEVICES=CPU can do: the same plugin reads the same weights per token).
``bench-small`` is the builder's small preset at 8 layers, hidden 512; ``bench-0.5b`` is
``ov-npu-emu make-model DIR --preset qwen2.5-0.5b-shape --dtype f16`` (built into ``--q05-dir``
when missing); a model folder's path (e.g. an optimum-cli export) is taken as it is.  Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "bench")]

PROMPT = "Once upon a time there was a little girl who loved cats"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
#: setup -> (module, device, extra properties)
SETUPS = {
    "real": ("openvino_genai", "NPU", {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}),
    "npu": ("genai_shim", "NPU", {"NPUW_DEVICES": "NPU"}),
    "npu-cpu": ("genai_shim", "NPU", {"NPUW_DEVICES": "CPU"}),
    # the same with one generate variant (K = MAX_PROMPT + MIN_RESPONSE), as before the ladder
    "npu-cpu-1var": ("genai_shim", "NPU", {"NPUW_DEVICES": "CPU", "NPUW_LLM_GENERATE_LADDER": "NO"}),
    # the same without the CPU device's weights bank (each sub-model compiled with its own weights)
    "npu-cpu-private": ("genai_shim", "NPU", {"NPUW_DEVICES": "CPU", **{
        f"++NPUW_LLM_{role}_CONFIG": {"CPU_EMU_WEIGHTS_BANK": "NO"}
        for role in ("PREFILL", "GENERATE", "SHARED_HEAD")}}),
    "cpu": ("openvino_genai", "CPU", {}),
}


def model_folder(name: str, q05_dir: str) -> str:
    if Path(name, "openvino_model.xml").is_file():  # a model folder of the user's (an optimum-cli export)
        return name
    if name == "bench-0.5b":
        from ov_npu_emu.modelbuilder import make_model_folder

        return str(make_model_folder(q05_dir, "qwen2.5-0.5b-shape", "f16"))
    from bench_prefill import model_folder as small_folder

    return small_folder(name)


def worker(setup: str, folder: str, repeat: int, new: int, prompt: str) -> dict:
    import importlib
    import resource

    from procstat import rss_mb

    module, device, extra = SETUPS[setup]
    g = importlib.import_module(module)
    t0 = time.perf_counter()
    props = dict(F32) if device == "NPU" else {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    pipe = g.LLMPipeline(folder, device, **props, **extra)
    load = time.perf_counter() - t0
    rss_load = rss_mb()
    cfg = g.GenerationConfig()
    cfg.max_new_tokens = new
    cfg.ignore_eos = True
    if repeat == 0:  # --load-only
        return {"load_s": load, "ttft_ms": float("nan"), "tpot_ms": float("nan"), "rss_load_mb": rss_load,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "text": ""}
    from bench_prefill import timed_generations

    ttft, tpot, text = timed_generations(pipe, prompt, cfg, repeat)
    return {
        "load_s": load,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "rss_load_mb": rss_load,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "text": text,
    }


def interleaved(setups: list[str], folder: str, repeat: int, new: int, prompt: str) -> dict:
    """--interleave: every setup loaded in this one process, then ``repeat`` rounds of one
    generate() each, the order rotating per round, so a load swing hits all setups alike
    (TTFT / TPOT medians; load and RSS are not per setup here)."""
    import importlib
    import statistics

    pipes, cfgs = {}, {}
    for s in setups:
        module, device, extra = SETUPS[s]
        g = importlib.import_module(module)
        pipes[s] = g.LLMPipeline(folder, device, **F32, **extra)
        cfgs[s] = g.GenerationConfig()
        cfgs[s].max_new_tokens = new
        cfgs[s].ignore_eos = True
        pipes[s].generate([prompt], cfgs[s])  # warm-up (our ladders compile their rungs here)
    ttft: dict[str, list[float]] = {s: [] for s in setups}
    tpot: dict[str, list[float]] = {s: [] for s in setups}
    text = {}
    for r in range(repeat):
        for s in setups[r % len(setups):] + setups[: r % len(setups)]:
            res = pipes[s].generate([prompt], cfgs[s])
            ttft[s].append(res.perf_metrics.get_ttft().mean)
            tpot[s].append(res.perf_metrics.get_tpot().mean)
            text[s] = res.texts[0]
    nan = float("nan")
    return {s: {"load_s": nan, "ttft_ms": statistics.median(ttft[s]), "tpot_ms": statistics.median(tpot[s]),
                "rss_load_mb": nan, "peak_rss_mb": nan, "text": text[s]} for s in setups}


def run_worker(setup: str, folder: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", setup, "--folder", folder, "--repeat", str(args.repeat),
           "--new", str(args.new), "--prompt", args.prompt]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         env={**os.environ, "OV_NPU_EMU_PROGRESS": "0"})
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _weights_mb(folder: str) -> float:
    return (Path(folder) / "openvino_model.bin").stat().st_size / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="stories260K,bench-small,bench-0.5b")
    ap.add_argument("--setups", default="real,npu,npu-cpu,cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--q05-dir", default="/work/models/q05-f16")
    ap.add_argument("--load-only", action="store_true", help="time the pipeline's load only (no generate)")
    ap.add_argument("--interleave", action="store_true",
                    help="all setups in one process, generate() calls alternating (TTFT/TPOT only)")
    ap.add_argument("--worker")
    ap.add_argument("--folder")
    args = ap.parse_args()
    if args.worker:
        if "," in args.worker:
            print(json.dumps(interleaved(args.worker.split(","), args.folder, args.repeat, args.new, args.prompt)))
        else:
            print(json.dumps(worker(args.worker, args.folder, args.repeat, args.new, args.prompt)))
        return
    if args.load_only:
        args.repeat = 0
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = sorted(set(setups) - set(SETUPS))
    if unknown:
        ap.error(f"unknown setups {unknown}; choose from {sorted(SETUPS)}")
    if args.interleave and args.load_only:
        ap.error("--interleave measures TTFT / TPOT; --load-only needs one process per setup")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")
    print(f"{len(args.prompt.split())}-word prompt, f32, {args.new} new tokens, median of {args.repeat}; "
          + ("all setups in one process, generate() calls alternating" if args.interleave else "one process per setup")
          + "; ratios ours / real")
    print("| model | setup | load s | TTFT ms | TPOT ms | peak RSS MB | RSS after load MB | "
          "x load | x TTFT | x TPOT | same text |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        folder = model_folder(name.strip(), args.q05_dir)
        if args.interleave:
            rows = run_worker(",".join(setups), folder, args)
            if "error" in rows:
                rows = {s: rows for s in setups}
        else:
            rows = {s: run_worker(s, folder, args) for s in setups}
        real = rows.get("real", {})
        label = f"{name} ({_weights_mb(folder):.0f} MB weights)"
        for s, r in rows.items():
            if "error" in r:
                print(f"| {label} | {s} | error: {r['error']} |")
                continue

            def ratio(key: str, r: dict = r, real: dict = real) -> str:
                return f"{r[key] / real[key]:.2f}" if key in real and real[key] else "–"

            same = "–" if "text" not in real or args.load_only else ("yes" if r["text"] == real["text"] else "no")
            print(f"| {label} | {s} | {r['load_s']:.2f} | {r['ttft_ms']:.1f} | {r['tpot_ms']:.2f} | "
                  f"{r['peak_rss_mb']:.0f} | {r['rss_load_mb']:.0f} | {ratio('load_s')} | {ratio('ttft_ms')} | "
                  f"{ratio('tpot_ms')} | {same} |")
            label = ""
        cpu = rows.get("cpu", {})
        if cpu.get("tpot_ms"):
            # NPUW_DEVICES=CPU runs its static models on the same CPU plugin: its TPOT is bound
            # below by about the plugin's own stateful TPOT (same weights read per token)
            rel = ", ".join(f"{s} {r['tpot_ms'] / cpu['tpot_ms']:.2f}x" for s, r in rows.items()
                            if s != "cpu" and r.get("tpot_ms"))
            print(f"|   TPOT against the CPU plugin's stateful model ({cpu['tpot_ms']:.2f} ms): {rel} |")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
