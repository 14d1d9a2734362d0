"""TTFT of a follow-up prompt that shares a long prefix, with and without NPUW prefix caching.

Usage: python bench/bench_npuw_prefix.py [--model DIR_OR_XML] [--prefix 896] [--tail 64]
                                         [--chunk 64] [--block 64] [--repeat 7] [--devices CPU,NPU]

The chat case: every turn re-sends the whole history, so turn N's prompt starts with turn N−1's.
Each setup first runs prompt A = prefix + tail A (which fills its prefix cache), then prompt B =
prefix + tail B (fresh random tails every time), whose prefill is timed (TTFT = prefill call +
first token's argmax).  Setups:
the real NPUW on CPU and ours (per device), each with NPUW_LLM_ENABLE_PREFIX_CACHING NO and YES,
same MAX_PROMPT_LEN 1024 / MIN_RESPONSE_LEN 128, chunk and block size; all in this process, the
order rotating every repeat.  Prints median TTFT per setup and the YES / NO ratio per stack.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu import Core
from ov_npu_emu.models import find_model

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def prefill_ms(req, prompt: list[int]) -> float:
    req.reset_state()
    L = len(prompt)
    t = time.perf_counter()
    req.infer(
        {
            "input_ids": np.array([prompt], np.int64),
            "attention_mask": np.ones((1, L), np.int64),
            "position_ids": np.arange(L, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax())
    return (time.perf_counter() - t) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(find_model("stories260K")))
    ap.add_argument("--prefix", type=int, default=896, help="shared prefix length in tokens")
    ap.add_argument("--tail", type=int, default=64, help="new tokens after the prefix")
    ap.add_argument("--chunk", type=int, default=64, help="NPUW_LLM_PREFILL_CHUNK_SIZE")
    ap.add_argument("--block", type=int, default=64, help="NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--devices", default="CPU,NPU", help="our NPUW_DEVICES to compare")
    args = ap.parse_args()
    path = Path(args.model)
    model = ov.Core().read_model(path / "openvino_model.xml" if path.is_dir() else path)
    vocab = model.output("logits").get_partial_shape()[2].get_length()
    rng = np.random.default_rng(0)
    prefix = [1] + rng.integers(3, vocab, size=args.prefix - 1).tolist()
    # fresh tails every round: only the prefix may be found in a cache (a prompt seen before
    # would be a whole-prompt hit, where the real NPUW skips computing: docs/npuw.md)
    tails = [
        (
            rng.integers(3, vocab, size=args.tail).tolist(),
            rng.integers(3, vocab, size=args.tail).tolist(),
        )
        for _ in range((args.repeat + 1) * 16)
    ]

    base = {
        "NPU_USE_NPUW": "YES",
        "NPUW_LLM": "YES",
        "NPUW_DEVICES": "CPU",
        "NPUW_ONLINE_PIPELINE": "NONE",
        "NPUW_LLM_MAX_PROMPT_LEN": 1024,
        "NPUW_LLM_MIN_RESPONSE_LEN": 128,
        "NPUW_LLM_PREFILL_CHUNK_SIZE": args.chunk,
        "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE": args.block,
        "++NPUW_LLM_PREFILL_CONFIG": F32,
        "++NPUW_LLM_GENERATE_CONFIG": F32,
    }
    core = Core()
    reqs = {}
    for on in ("NO", "YES"):
        cfg = {**base, "NPUW_LLM_ENABLE_PREFIX_CACHING": on}
        reqs[f"real NPUW/CPU {on}"] = ov.Core().compile_model(model, "NPU", cfg).create_infer_request()
        for dev in args.devices.split(","):
            if dev not in core.registry.names():
                continue
            reqs[f"ours NPUW/{dev} {on}"] = core.compile_model(
                model, "NPU", {**cfg, "NPUW_DEVICES": dev}
            ).create_infer_request()
    print(
        f"model {path} | prefix {args.prefix} + tail {args.tail} tokens | chunk {args.chunk}, "
        f"block {args.block} | {args.repeat} repeats, setups rotated, one process"
    )
    ttft: dict[str, list[float]] = {n: [] for n in reqs}
    names = list(reqs)
    fresh = iter(tails)
    for r in range(args.repeat + 1):  # the first round is a warm-up
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            tail_a, tail_b = next(fresh)
            prefill_ms(reqs[name], prefix + tail_a)  # fills the cache (when on)
            t = prefill_ms(reqs[name], prefix + tail_b)
            if r:
                ttft[name].append(t)
    med = {n: statistics.median(v) for n, v in ttft.items()}
    print(f"{'setup':22s} {'TTFT of B (ms)':>15s}")
    for name in names:
        print(f"{name:22s} {med[name]:15.2f}")
    print("prefix caching YES / NO:")
    for stack in sorted({n.rsplit(" ", 1)[0] for n in names}):
        print(f"  {stack:18s} {med[stack + ' YES'] / med[stack + ' NO']:.3f}")
    if "ours NPUW/CPU YES" in med:
        print(f"ours/CPU YES vs real YES: {med['ours NPUW/CPU YES'] / med['real NPUW/CPU YES']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
