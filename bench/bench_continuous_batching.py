"""Continuous batching: ours (genai_shim.ContinuousBatchingPipeline, paged attention on the CPU
plugin) vs the real openvino_genai.ContinuousBatchingPipeline, side by side in one process.

Usage: python bench/bench_continuous_batching.py [MODEL_DIR] [--small] [--tokens N] [--repeat N]
       [--concurrency 1 4 8] [--f32] [--blocks N] [--beams N | --samples N]
--small builds the model builder's "small" preset into a temporary folder and uses it.
Prints, per number of concurrent requests: TPOT (ms, mean over the requests' perf metrics) and
throughput (generated tokens / wall time of generate()), medians of --repeat runs that alternate
ours and real (order flipped every round), and the ratio ours/real; then the KV memory per request
of the paged cache vs the stateful pipeline's
contiguous buffer. Default properties unless --f32 (both sides get the same properties).
--beams N runs beam search (N beams, all returned) and --samples N parallel sampling (top_k 1,
so both sides produce the same texts) instead of greedy: the forked sequences share the
prompt's blocks copy-on-write; throughput then counts requests x --tokens (nominal) and the
peak cache usage (PipelineMetrics.max_cache_usage) of both sides is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu.models import find_model

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
PROMPTS = [
    "Once upon a time",
    "The little dog",
    "Tom and Lily went to the park and",
    "A big red ball",
    "One day, a girl named Sue",
    "The sun was shining",
    "There was a cat who",
    "Ben had a toy car",
    "In the forest lived",
    "Mom said to Lily",
    "The bird sang",
    "A boy found a box",
    "It was a rainy day",
    "The old man",
    "Sara and her friend",
    "Max liked to run",
]


def make(mod: Any, folder: Path, props: dict[str, Any], blocks: int) -> Any:
    sc = mod.SchedulerConfig()
    sc.num_kv_blocks = blocks
    return mod.ContinuousBatchingPipeline(str(folder), sc, "CPU", props)


def once(mod: Any, pipe: Any, n: int, tokens: int, beams: int = 1, samples: int = 1) -> tuple[float, float, list[str]]:
    """(mean TPOT ms of the requests, tokens/s over the generate() wall time, texts)."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
    cfgs = []
    for _ in range(n):
        c = mod.GenerationConfig()
        c.max_new_tokens = tokens
        c.ignore_eos = True
        if beams > 1:
            c.num_beams = c.num_return_sequences = beams
        elif samples > 1:
            c.do_sample, c.top_k, c.num_return_sequences = True, 1, samples
        cfgs.append(c)
    t0 = time.perf_counter()
    res = pipe.generate(prompts, cfgs)
    wall = time.perf_counter() - t0
    tpot = sum(r.perf_metrics.get_tpot().mean for r in res) / len(res)
    return tpot, n * tokens / wall, [t for r in res for t in r.m_generation_ids]  # ignore_eos: n × tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--small", action="store_true", help="use the model builder's 'small' preset")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--f32", action="store_true")
    ap.add_argument("--blocks", type=int, default=256, help="SchedulerConfig.num_kv_blocks (both)")
    ap.add_argument("--beams", type=int, default=1, help="beam search with N beams (all returned)")
    ap.add_argument("--samples", type=int, default=1, help="parallel sampling: N sequences per request")
    a = ap.parse_args()

    import openvino_genai as real

    import genai_shim as ours

    tmp = None
    if a.small:
        from ov_npu_emu.modelbuilder.folder import make_model_folder

        tmp = tempfile.TemporaryDirectory()
        folder = make_model_folder(Path(tmp.name) / "small", preset="small")
    else:
        folder = Path(a.model) if a.model else find_model("stories260K")
    props = dict(F32) if a.f32 else {}
    print(f"model {folder.name}, {a.tokens} new tokens per request, num_kv_blocks {a.blocks}, "
          f"{'f32' if a.f32 else 'default properties'}, median of {a.repeat} alternated runs")
    print(f"{'requests':>8} | {'TPOT ours':>10} {'TPOT real':>10} {'ratio':>6} | "
          f"{'tok/s ours':>10} {'tok/s real':>10} {'ratio':>6} | same texts")
    pipes = {"ours": make(ours, folder, props, a.blocks), "real": make(real, folder, props, a.blocks)}
    mods = {"ours": ours, "real": real}
    for n in a.concurrency:
        got: dict[str, list[tuple[float, float]]] = {"ours": [], "real": []}
        texts: dict[str, list[str]] = {}
        for it in range(a.repeat + 1):  # the first round warms up; order flips every round
            for k in (("ours", "real") if it % 2 else ("real", "ours")):
                tpot, tps, texts[k] = once(mods[k], pipes[k], n, a.tokens, a.beams, a.samples)
                if it:
                    got[k].append((tpot, tps))
        to, tr = (statistics.median(x[0] for x in got[k]) for k in ("ours", "real"))
        po, pr = (statistics.median(x[1] for x in got[k]) for k in ("ours", "real"))
        print(f"{n:>8} | {to:>8.3f}ms {tr:>8.3f}ms {to / tr:>6.2f} | {po:>10.0f} {pr:>10.0f} "
              f"{po / pr:>6.2f} | {texts['ours'] == texts['real']}")
        if a.beams > 1 or a.samples > 1:
            use = [pipes[k].get_metrics().max_cache_usage for k in ("ours", "real")]
            print(f"{'':>8}   peak cache usage so far: ours {use[0]:.1f} %, real {use[1]:.1f} % "
                  f"of {a.blocks} blocks")
    # KV memory per request: paged blocks actually used vs the contiguous stateful buffer
    m = pipes["ours"]._impl._model  # the engine's paged model (genai_shim/paged/engine.py)
    prompt_len = 8
    used = -(-(prompt_len + a.tokens) // m.block_size) * m.block_bytes
    per_token = m.block_bytes / m.block_size
    print(f"KV per request ({prompt_len}+{a.tokens} tokens): paged {used / 1024:.1f} KiB in "
          f"{-(-(prompt_len + a.tokens) // m.block_size)} block(s) of {m.block_size} tokens "
          f"({m.block_bytes} B/block, {m.key_ports[0][1]}); a contiguous buffer sized for "
          f"2048 tokens would hold {per_token * 2048 / 1024:.1f} KiB")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
