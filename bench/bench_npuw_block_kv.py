"""KV memory and TPOT of our NPUW with NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE=YES vs the contiguous KV.

Usage: python bench/bench_npuw_block_kv.py [--models stories260K,bench-small] [--max-prompt 4096]
                                           [--min-response 128] [--chunk 1024] [--device CPU]
                                           [--short 64,64] [--long 3000,200] [--repeat 3]

For each model, our NPUW (NPUW_DEVICES=--device, f16 KV: the real default) is compiled twice with
the same MAX_PROMPT_LEN / MIN_RESPONSE_LEN / chunk (= block size): contiguous and block-based.
A short and a long conversation (prompt tokens, new tokens; greedy) run on both, alternating, and
the script prints per conversation

* KV bytes: contiguous = the one pre-allocated buffer (sized for the largest variant); block =
  the blocks the conversation uses, plus the fixed part (tail copies per generate variant and the
  shared zero dummy block), and the peak block memory seen,
* median TPOT (ms per generate step) of each and the block / contiguous ratio, measured side by
  side in this one process, the two requests taking turns step by step (the machine is shared:
  read ratios, not absolute times),
* whether the greedy ids are identical (they must be).
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
sys.path[:0] = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "bench")]

from bench_prefill import model_folder  # noqa: E402

from ov_npu_emu import Core  # noqa: E402

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def steps(req, prompt: list[int], new: int, ids: list[int], times: list[float]):
    """Greedy ``new`` tokens after ``prompt`` into ``ids``, one call per ``next()``; each generate
    step's ms goes to ``times`` (a generator, so two requests can alternate step by step)."""
    req.reset_state()
    L = len(prompt)
    req.infer(
        {
            "input_ids": np.array([prompt], np.int64),
            "attention_mask": np.ones((1, L), np.int64),
            "position_ids": np.arange(L, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    ids.append(int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax()))
    yield
    while len(ids) < new:
        cur = L + len(ids)
        t = time.perf_counter()
        req.infer(
            {
                "input_ids": np.array([[ids[-1]]], np.int64),
                "attention_mask": np.ones((1, cur), np.int64),
                "position_ids": np.array([[cur - 1]], np.int64),
                "beam_idx": np.zeros(1, np.int32),
            }
        )
        ids.append(int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax()))
        times.append((time.perf_counter() - t) * 1e3)
        yield


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="stories260K,bench-small")
    ap.add_argument("--max-prompt", type=int, default=4096)
    ap.add_argument("--min-response", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=1024, help="NPUW_LLM_PREFILL_CHUNK_SIZE = block size")
    ap.add_argument("--device", default="CPU", help="our NPUW_DEVICES")
    ap.add_argument("--short", default="64,64", help="prompt,new tokens of the short conversation")
    ap.add_argument("--long", default="3000,200", help="prompt,new tokens of the long conversation")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    convs = {k: tuple(int(x) for x in getattr(args, k).split(",")) for k in ("short", "long")}
    core = Core()
    for name in args.models.split(","):
        folder = Path(model_folder(name))
        model = ov.Core().read_model(folder / "openvino_model.xml")
        vocab = model.output("logits").get_partial_shape()[2].get_length()
        base = {
            "NPU_USE_NPUW": "YES",
            "NPUW_LLM": "YES",
            "NPUW_DEVICES": args.device,
            "NPUW_LLM_MAX_PROMPT_LEN": args.max_prompt,
            "NPUW_LLM_MIN_RESPONSE_LEN": args.min_response,
            "NPUW_LLM_PREFILL_CHUNK_SIZE": args.chunk,
            "NPUW_LLM_SHARED_HEAD": "NO",
            "++NPUW_LLM_PREFILL_CONFIG": F32,
            "++NPUW_LLM_GENERATE_CONFIG": F32,
        }
        reqs = {
            "contiguous": core.compile_model(model, "NPU", base).create_infer_request(),
            "block": core.compile_model(
                model, "NPU", {**base, "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE": "YES"}
            ).create_infer_request(),
        }
        print(
            f"\n{name}: MAX_PROMPT_LEN {args.max_prompt}, MIN_RESPONSE_LEN {args.min_response}, "
            f"chunk = block {args.chunk}, NPUW_DEVICES={args.device}, KV f16"
        )
        rng = np.random.default_rng(0)
        for label, (n_prompt, n_new) in convs.items():
            prompt = [1] + rng.integers(3, vocab, size=n_prompt - 1).tolist()
            tpot: dict[str, list[float]] = {k: [] for k in reqs}
            ids: dict[str, list[int]] = {}
            for r in range(args.repeat):
                # both conversations advance one call at a time, alternating who goes first
                ids = {k: [] for k in reqs}
                order = list(reqs) if r % 2 == 0 else list(reversed(reqs))
                gens = [steps(reqs[k], prompt, n_new, ids[k], tpot[k]) for k in order]
                for _ in zip(*gens, strict=True):
                    pass
            flat, blk = reqs["contiguous"].impl.kv, reqs["block"].impl.kv
            t_flat, t_blk = statistics.median(tpot["contiguous"]), statistics.median(tpot["block"])
            print(
                f"  {label} ({n_prompt} prompt + {n_new} new, {len(blk.blocks.table)} blocks): "
                f"contiguous {mib(flat.nbytes)}; block {mib(blk.used_block_bytes)} in blocks + "
                f"{mib(blk.fixed_bytes)} fixed = {mib(blk.used_block_bytes + blk.fixed_bytes)} "
                f"({(blk.used_block_bytes + blk.fixed_bytes) / flat.nbytes:.3f}x), peak blocks "
                f"{mib(blk.peak_block_bytes)}; TPOT contiguous {t_flat:.3f} ms, block "
                f"{t_blk:.3f} ms ({t_blk / t_flat:.2f}x); ids identical: {ids['block'] == ids['contiguous']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
