"""Side-by-side: structured output in genai_shim vs the real openvino_genai — prints ratios.

Usage: python bench/bench_structured_output.py [MODEL_DIR] [--tokens N] [--iters K]

Same folder (default: the byte-level BPE fixture gpt2-fp32), f32 hints, CPU stateful pipelines
(the real with ATTENTION_BACKEND=SDPA), greedy with ignore_eos.  For each constraint (none,
JSON schema, regex, EBNF) the median generate() wall time per new token, alternating the two
implementations every iteration; also the constraint's overhead against the unconstrained run
of the same implementation.  Both pipelines are warmed up once per constraint (xgrammar's
tokenizer info and grammar compilation happen on the first call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
SCHEMA = json.dumps(
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
)
CONSTRAINTS = {
    "none": None,
    "json_schema": {"json_schema": SCHEMA},
    "regex": {"regex": r"[0-9]{3}-[a-z]+ (yes|no)"},
    "ebnf": {"grammar": 'root ::= "The " ("cat" | "dog") " is " [a-z]+ "."'},
}


def per_token_ms(mod: Any, pipe: Any, kind: dict[str, str] | None, tokens: int) -> tuple[float, int]:
    cfg = mod.GenerationConfig(max_new_tokens=tokens, ignore_eos=True)
    if kind is not None:
        cfg.structured_output_config = mod.StructuredOutputConfig(**kind)
    t0 = time.perf_counter()
    res = pipe.generate(["The weather today"], cfg)
    wall = (time.perf_counter() - t0) * 1000
    n = res.perf_metrics.get_num_generated_tokens()
    return wall / max(n, 1), n


def main() -> int:
    import openvino_genai

    import genai_shim

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(ROOT / "tests/fixtures/optimum/gpt2-fp32"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    mods = {"real": openvino_genai, "shim": genai_shim}
    pipes = {
        "real": openvino_genai.LLMPipeline(args.model, "CPU", ATTENTION_BACKEND="SDPA", **F32),
        "shim": genai_shim.LLMPipeline(args.model, "CPU", **F32),
    }
    print(f"model {args.model}, {args.tokens} new tokens, median of {args.iters}")
    print("| constraint | real ms/token | genai_shim ms/token | shim/real | real overhead | shim overhead |")
    print("|---|---|---|---|---|---|")
    base: dict[str, float] = {}
    for name, kind in CONSTRAINTS.items():
        times: dict[str, list[float]] = {"real": [], "shim": []}
        for who, mod in mods.items():  # warm-up: grammar compilation
            per_token_ms(mod, pipes[who], kind, args.tokens)
        for i in range(args.iters):
            order = ("real", "shim") if i % 2 == 0 else ("shim", "real")
            for who in order:
                times[who].append(per_token_ms(mods[who], pipes[who], kind, args.tokens)[0])
        med = {who: statistics.median(v) for who, v in times.items()}
        if kind is None:
            base = med
        over = {who: med[who] / base[who] for who in med}
        print(
            f"| {name} | {med['real']:.3f} | {med['shim']:.3f} | {med['shim'] / med['real']:.2f}x "
            f"| {over['real']:.2f}x | {over['shim']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
