"""TTFT / TPOT of our NPUW (CPU passthrough, emulated NPU) side by side with the real NPUW on CPU.

Usage: python bench/bench_npuw_latency.py [--model DIR_OR_XML | --preset NAME [--layers N] [--vocab V]]
                                          [--new 32] [--repeat 5] [--prompts 20,400,1000]
                                          [--devices CPU,NPU] [--interleave step|run] [--auto-threads]

Every configuration runs the same model in the same process, driven through the stateful
interface the way openvino.genai drives it.  All setups decode the *same* generation: the real
NPUW's greedy tokens (from a first pass) are fed to every setup, so each step has the same
position and history everywhere.  The setups alternate every decode step (``--interleave
step``, the default) or every whole generation (``--interleave run``), the order rotating every
repeat, so that load from other jobs on this shared machine hits them alike.  TTFT is the median
over the repeats, TPOT the median over all decode steps of all repeats; ratios are ours / real.
Our generate variant is chosen by the real rule (smallest ≥ prompt + MIN_RESPONSE_LEN) and
printed.  "greedy agrees" counts how many of a setup's own argmax tokens equal the real one's
before the first difference (the real NPUW's shared LM head keeps f16 numerics, docs/npuw.md, so
random-weight models can flip near-ties).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu import Core
from ov_npu_emu.testing import find_shared_model

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
MAX_PROMPT, MIN_RESPONSE = 1024, 128
REAL_BASE = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_DEVICES": "CPU",
    "NPUW_ONLINE_PIPELINE": "NONE",
    "NPUW_LLM_MAX_PROMPT_LEN": MAX_PROMPT,
    "NPUW_LLM_MIN_RESPONSE_LEN": MIN_RESPONSE,
    "++NPUW_LLM_PREFILL_CONFIG": F32,
    "++NPUW_LLM_GENERATE_CONFIG": F32,
}
#: our recommended LLM settings: chunked prefill with small chunks and the seed's generate pyramid
OURS_EXTRA = {"NPUW_LLM_PREFILL_CHUNK_SIZE": 64, "NPUW_LLM_GENERATE_VARIANTS": "256,512,1024"}


def generation(
    req, prompt: list[int], n_new: int, out: dict, feed: list[int] | None = None
) -> Iterator[None]:
    """One generation, yielding after the prefill and after every decode step.

    Step ``i`` feeds ``feed[i]`` (greedy: its own previous argmax when ``feed`` is None).
    Fills ``out``: ``ttft`` (ms), ``steps`` (ms each), ``tokens`` (its own argmax per step).
    """
    req.reset_state()
    L = len(prompt)
    t0 = time.perf_counter()
    req.infer(
        {
            "input_ids": np.array([prompt], np.int64),
            "attention_mask": np.ones((1, L), np.int64),
            "position_ids": np.arange(L, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    tok = int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax())
    out["ttft"] = (time.perf_counter() - t0) * 1e3
    out["tokens"] = [tok]
    out["steps"] = []
    yield
    for i in range(n_new - 1):
        cur = L + i + 1
        if feed is not None:
            tok = feed[i]
        t = time.perf_counter()
        req.infer(
            {
                "input_ids": np.array([[tok]], np.int64),
                "attention_mask": np.ones((1, cur), np.int64),
                "position_ids": np.array([[cur - 1]], np.int64),
                "beam_idx": np.zeros(1, np.int32),
            }
        )
        tok = int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax())
        out["steps"].append((time.perf_counter() - t) * 1e3)
        out["tokens"].append(tok)
        yield


def interleaved(
    reqs: dict[str, object],
    prompt: list[int],
    n_new: int,
    rotate: int,
    feed: list[int],
    per_step: bool = True,
) -> dict:
    """Run one generation per setup, one step of each in turn (or one whole run of each in turn
    when not ``per_step``); the start order rotates with ``rotate``."""
    names = list(reqs)
    names = names[rotate % len(names) :] + names[: rotate % len(names)]
    outs = {n: {} for n in names}
    gens = [generation(reqs[n], prompt, n_new, outs[n], feed) for n in names]
    if not per_step:
        for g in gens:
            for _ in g:
                pass
        return outs
    live = list(gens)
    while live:
        for g in list(live):
            try:
                next(g)
            except StopIteration:
                live.remove(g)
    return outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(find_shared_model("stories260K") or "../shared/models/stories260K"))
    ap.add_argument(
        "--preset", help="build a model-builder preset instead (e.g. small, qwen2.5-0.5b-shape)"
    )
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--vocab", type=int, help="override the preset's vocabulary size")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--prompts", default="20,400,1000")
    ap.add_argument("--devices", default="CPU,NPU", help="our NPUW_DEVICES to compare")
    ap.add_argument(
        "--interleave",
        choices=("step", "run"),
        default="step",
        help="alternate the setups every decode step (default) or every whole generation",
    )
    ap.add_argument(
        "--auto-threads",
        action="store_true",
        help="also run ours on CPU without NPUW's single-thread generate default "
        "(++NPUW_LLM_GENERATE_CONFIG INFERENCE_NUM_THREADS=0: the CPU plugin's own choice)",
    )
    args = ap.parse_args()
    path = Path(args.model)
    if args.preset:
        import tempfile

        from ov_npu_emu.modelbuilder import make_model_folder

        over = {
            k: v for k, v in (("num_hidden_layers", args.layers), ("vocab_size", args.vocab)) if v
        }
        path = make_model_folder(
            Path(tempfile.mkdtemp(prefix="npuw_bench_")), preset=args.preset, **over
        )
    xml = path / "openvino_model.xml" if path.is_dir() else path
    model = ov.Core().read_model(xml)
    lengths = [int(x) for x in args.prompts.split(",")]
    rng = np.random.default_rng(0)
    vocab = model.output("logits").get_partial_shape()[2].get_length()
    prompts = {n: [1] + rng.integers(3, vocab, size=n - 1).tolist() for n in lengths}

    core = Core()
    reqs: dict[str, object] = {}
    compile_s: dict[str, float] = {}
    t = time.perf_counter()
    reqs["real NPUW/CPU"] = ov.Core().compile_model(model, "NPU", REAL_BASE).create_infer_request()
    compile_s["real NPUW/CPU"] = time.perf_counter() - t
    for dev in args.devices.split(","):
        if dev == "NPU" and "NPU" not in core.registry:
            print("(emulated NPU device not registered: skipping ours on NPU)")
            continue
        cfg = {**REAL_BASE, "NPUW_DEVICES": dev, **OURS_EXTRA}
        t = time.perf_counter()
        reqs[f"ours NPUW/{dev}"] = core.compile_model(model, "NPU", cfg).create_infer_request()
        compile_s[f"ours NPUW/{dev}"] = time.perf_counter() - t
        if dev == "CPU" and args.auto_threads:
            auto = {**F32, "INFERENCE_NUM_THREADS": 0}
            t = time.perf_counter()
            reqs["ours CPU autothr"] = core.compile_model(
                model, "NPU", {**cfg, "++NPUW_LLM_GENERATE_CONFIG": auto}
            ).create_infer_request()
            compile_s["ours CPU autothr"] = time.perf_counter() - t

    print(
        f"model {xml} | MAX_PROMPT_LEN {MAX_PROMPT}, MIN_RESPONSE_LEN {MIN_RESPONSE} | ours: "
        f"{OURS_EXTRA} | {args.new} new tokens × {args.repeat} repeats, setups alternated per {args.interleave}"
    )
    ttft: dict[tuple[str, int], list[float]] = {}
    steps: dict[tuple[str, int], list[float]] = {}
    variant: dict[tuple[str, int], str] = {}
    agree: dict[tuple[str, int], int] = {}
    for n in lengths:
        ref: dict = {}
        for _ in generation(reqs["real NPUW/CPU"], prompts[n], args.new, ref):  # also a warm-up
            pass
        feed = ref["tokens"]
        for r in range(args.repeat):
            outs = interleaved(reqs, prompts[n], args.new, r, feed, args.interleave == "step")
            for name, o in outs.items():
                ttft.setdefault((name, n), []).append(o["ttft"])
                steps.setdefault((name, n), []).extend(o["steps"])
                impl = getattr(reqs[name], "impl", None)
                variant[name, n] = (
                    f"kv{impl.variant}" if impl is not None else f"kv{MAX_PROMPT + MIN_RESPONSE}"
                )
                same = [a == b for a, b in zip(o["tokens"], feed)] + [False]
                agree[name, n] = same.index(False)
    med = {k: (statistics.median(ttft[k]), statistics.median(steps[k])) for k in ttft}
    hdr = f"{'setup':18s} {'compile s':>9s} " + " ".join(
        f"{'TTFT@' + str(n):>9s} {'TPOT@' + str(n):>9s} {'KV':>6s}" for n in lengths
    )
    print(hdr)
    for name in reqs:
        print(
            f"{name:18s} {compile_s[name]:9.2f} "
            + " ".join(
                f"{med[name, n][0]:9.2f} {med[name, n][1]:9.3f} {variant[name, n]:>6s}"
                for n in lengths
            )
        )
    print("ratios ours / real (targets: TTFT ≤ 0.1 at 20 tokens, TPOT ≤ 0.5 with a smaller variant):")
    for name in reqs:
        if name.startswith("ours"):
            base = "real NPUW/CPU"
            print(
                f"  {name:16s} "
                + "  ".join(
                    f"TTFT@{n} {med[name, n][0] / med[base, n][0]:.3f} "
                    f"TPOT@{n} {med[name, n][1] / med[base, n][1]:.3f}"
                    for n in lengths
                )
            )
    print(
        "greedy agrees with the real NPUW for the first N of the fed tokens: "
        + ", ".join(
            f"{name} @{n}: {agree[name, n]}/{args.new}"
            for name in reqs
            if name.startswith("ours")
            for n in lengths
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
