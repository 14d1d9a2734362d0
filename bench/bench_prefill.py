"""TTFT / TPOT of a short prompt through the LLM pipeline: the real NPUW on CPU vs ours, side by side.

Usage: python bench/bench_prefill.py [--models stories260K,bench-small] [--repeat 5] [--new 16]
                                     [--setups real,cpu,cpu-off,npu,npu-off] [--prompt TEXT]

Every setup runs ``LLMPipeline(folder, "NPU", ...)`` with the real defaults (MAX_PROMPT_LEN 1024,
MIN_RESPONSE_LEN 128) and f32 hints on a 12-word prompt, each in its own worker process (one
load, one warm-up generate, then ``--repeat`` generates; medians of the pipeline's own
TTFT / TPOT metrics; peak RSS of the worker).  Setups:

* ``real``    — the real openvino_genai, NPUW on CPU (NPUW_DEVICES=CPU, NPUW_ONLINE_PIPELINE=NONE)
* ``cpu``     — genai_shim, our NPUW with NPUW_DEVICES=CPU (prefill ladder on: the default)
* ``cpu-off`` — the same with NPUW_LLM_PREFILL_LADDER=NO (the full 1024-row prefill)
* ``npu``     — genai_shim on our emulated NPU (NPU_EMU_SKIP_PADDED_ROWS on the prefill: the default)
* ``npu-off`` — the same with NPUW_LLM_PREFILL_LADDER=NO

Ratios are ours / real (the issue's target: TTFT <= 0.1x on ``cpu`` and ``npu``).  The workers
run one after another, so load from other jobs on this shared machine shifts them unevenly:
re-run, or look at the off/on pairs.  "same text" says whether a setup's generated text equals
the real one's.  ``bench-small`` is the builder's small preset at 8 layers, hidden 512 (built
once under the system temp dir).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

PROMPT = "Once upon a time there was a little girl who loved cats"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
SETUPS = {
    "real": ("openvino_genai", {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}),
    "cpu": ("genai_shim", {"NPUW_DEVICES": "CPU"}),
    "cpu-off": ("genai_shim", {"NPUW_DEVICES": "CPU", "NPUW_LLM_PREFILL_LADDER": "NO"}),
    "npu": ("genai_shim", {"NPUW_DEVICES": "NPU"}),
    "npu-off": ("genai_shim", {"NPUW_DEVICES": "NPU", "NPUW_LLM_PREFILL_LADDER": "NO"}),
}
BENCH_SMALL = {
    "num_hidden_layers": 8,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "intermediate_size": 1376,
}


def model_folder(name: str) -> str:
    if name == "bench-small":
        from ov_npu_emu.modelbuilder import make_model_folder

        path = Path(tempfile.gettempdir()) / "ov_npu_emu_bench" / "bench-small"
        return str(make_model_folder(path, "small", **BENCH_SMALL))
    from ov_npu_emu.models import find_model

    p = Path(name)
    return str(p if p.is_dir() else find_model(name))


def worker(setup: str, folder: str, repeat: int, new: int, prompt: str) -> dict:
    import importlib
    import resource

    module, extra = SETUPS[setup]
    g = importlib.import_module(module)
    t0 = time.perf_counter()
    pipe = g.LLMPipeline(folder, "NPU", **F32, **extra)
    load = time.perf_counter() - t0
    cfg = g.GenerationConfig()
    cfg.max_new_tokens = new
    cfg.ignore_eos = True
    ttft, tpot, text, _ = timed_generations(pipe, prompt, cfg, repeat)
    return {
        "load_s": load,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "text": text,
    }


def prompt_variant(prompt: str, i: int) -> str:
    """The ``i``-th of a prompt's word rotations (0: the prompt itself): prompts of the same words,
    so of about the same token count, that share no prefix beyond the chat template's."""
    words = prompt.split()
    k = i % len(words)
    return " ".join(words[k:] + words[:k])


def timed_generations(pipe, prompt: str, cfg, repeat: int, warmup: int = 1,  # type: ignore[no-untyped-def]
                      fresh: bool = False) -> tuple[float, float, str, int]:
    """``warmup`` untimed generates (our ladder compiles its rung in the first), then ``repeat``
    timed ones: (median TTFT ms, median TPOT ms, the last text, its prompt's token count).

    ``fresh``: every generate gets another rotation of the prompt's words. The real
    openvino_genai on CPU caches prefixes by default (its LLMPipeline runs the paged-attention
    backend with prefix caching on), so the same prompt again is mostly a cache hit there and
    its TTFT no longer measures a prefill."""
    for i in range(warmup):
        pipe.generate([prompt_variant(prompt, i + 1) if fresh else prompt], cfg)
    ttft, tpot = [], []
    for i in range(repeat):
        res = pipe.generate([prompt_variant(prompt, warmup + i + 1) if fresh else prompt], cfg)
        ttft.append(res.perf_metrics.get_ttft().mean)
        tpot.append(res.perf_metrics.get_tpot().mean)
    return (statistics.median(ttft), statistics.median(tpot), res.texts[0],
            int(res.perf_metrics.get_num_input_tokens()))


def run_worker(setup: str, folder: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", setup, "--folder", folder, "--repeat",
           str(args.repeat), "--new", str(args.new), "--prompt", args.prompt]
    out = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env={**os.environ, "OV_NPU_EMU_PROGRESS": "0"}
    )
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="stories260K,bench-small")
    ap.add_argument("--setups", default=",".join(SETUPS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--worker")
    ap.add_argument("--folder")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.folder, args.repeat, args.new, args.prompt)))
        return
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    for name in args.models.split(","):
        folder = model_folder(name.strip())
        rows = {s: run_worker(s, folder, args) for s in setups}
        real = rows.get("real", {})
        print(
            f"\n{name}: {len(args.prompt.split())}-word prompt, MAX_PROMPT_LEN 1024, "
            f"MIN_RESPONSE_LEN 128, f32, {args.new} new tokens, median of {args.repeat}"
        )
        print(
            f"{'setup':8s} {'load s':>7s} {'TTFT ms':>9s} {'xTTFT':>7s} {'TPOT ms':>8s} {'xTPOT':>7s} "
            f"{'RSS MB':>7s}  same text"
        )
        for s, r in rows.items():
            if "error" in r:
                print(f"{s:8s} error: {r['error']}")
                continue
            rt = f"{r['ttft_ms'] / real['ttft_ms']:7.3f}" if "ttft_ms" in real else "      –"
            rp = f"{r['tpot_ms'] / real['tpot_ms']:7.3f}" if "tpot_ms" in real else "      –"
            same = "–" if "text" not in real else ("yes" if r["text"] == real["text"] else "NO")
            print(
                f"{s:8s} {r['load_s']:7.2f} {r['ttft_ms']:9.2f} {rt} {r['tpot_ms']:8.2f} {rp} "
                f"{r['rss_mb']:7.0f}  {same}"
            )


if __name__ == "__main__":
    main()
