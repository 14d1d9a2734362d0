"""Decode speed of the emulated NPU at its default precision (f16) vs the exact f32 mode, one run.

Usage: python bench/bench_npu_precision.py [--models stories260k,tiny/f32,small/int8,llama-3.2-1b-shape/int4]
                                           [--tokens 32] [--rounds 3]

Each model runs through the whole stack — ``genai_shim.LLMPipeline(folder, "NPU")`` (NPUW on the
emulated NPU) — once with no precision key (the device's default, f16 activations and KV) and
once with ``INFERENCE_PRECISION_HINT=f32``; both keep NPUW's KV cache at its default (f16), so
the only difference is the device's compute precision.  The two pipelines decode alternately
(``--rounds`` times each, greedy, the same prompt) and the median time per output token (TPOT,
from the pipeline's perf metrics) of each is printed with the ratio f16 / f32 (lower is better;
the goal is <= 1.10).  A model is ``stories260k`` (the packaged one) or ``PRESET/DTYPE`` of the
model builder (``ov-npu-emu make-model``), or a model folder's path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

# one BLAS thread: steadier on a small shared host (see bench_npu_decode.py)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

import genai_shim  # noqa: E402
from ov_npu_emu.modelbuilder import make_model_folder  # noqa: E402

PROMPT = "Once upon a time"
SETUPS = {"f16 (default)": {}, "f32": {"INFERENCE_PRECISION_HINT": "f32"}}


def _folder(spec: str) -> Path:
    if spec == "stories260k":
        from ov_npu_emu.models import find_model

        return Path(find_model("stories260K"))
    if Path(spec).is_dir():  # a model folder (an optimum-cli export, /work/models/llama-1b-int4)
        return Path(spec)
    preset, dtype = spec.split("/")
    return make_model_folder(Path(tempfile.mkdtemp()) / preset, preset, dtype, seed=0, group_size=128)


def bench(folder: Path, tokens: int, rounds: int) -> dict[str, tuple[float, str]]:
    pipes = {name: genai_shim.LLMPipeline(str(folder), "NPU", MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=tokens + 8, **cfg)
             for name, cfg in SETUPS.items()}
    cfg = genai_shim.GenerationConfig(max_new_tokens=tokens, ignore_eos=True)
    times: dict[str, list[float]] = {name: [] for name in pipes}
    texts: dict[str, str] = {}
    for pipe in pipes.values():  # warm up: first requests, weights caches
        pipe.generate(PROMPT, cfg)
    for _ in range(rounds):
        for name, pipe in pipes.items():
            res = pipe.generate([PROMPT], cfg)
            times[name].append(res.perf_metrics.get_tpot().mean)
            texts[name] = res.texts[0]
    return {name: (statistics.median(t), texts[name]) for name, t in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="stories260k,tiny/f32,small/int8")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for spec in args.models.split(","):
        r = bench(_folder(spec), args.tokens, args.rounds)
        (f16_ms, f16_text), (f32_ms, f32_text) = r["f16 (default)"], r["f32"]
        rows.append((spec, f16_ms, f32_ms, f16_text == f32_text))
    print(f"\nTPOT through genai_shim -> NPUW -> emulated NPU, {args.tokens} tokens, median of {args.rounds} "
          f"alternating runs (OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, "
          f"load average {os.getloadavg()[0]:.1f})")
    print(f"{'model':28s} {'f16 ms':>9s} {'f32 ms':>9s} {'f16/f32':>8s} {'same text':>10s}")
    for spec, a, b, same in rows:
        print(f"{spec:28s} {a:9.2f} {b:9.2f} {a / b:8.2f} {'yes' if same else 'no':>10s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
