"""TTFT / TPOT of our NPUW (CPU passthrough, emulated NPU) side by side with the real NPUW on CPU.

Usage: python bench/bench_npuw_latency.py [--model DIR_OR_XML | --preset NAME [--layers N] [--vocab V]]
                                          [--new 32] [--repeat 3]

Every configuration runs the same model in the same process, driven through the stateful
interface the way openvino.genai drives it; the printed ratios are ours / real.
"""

from __future__ import annotations

from ov_npu_emu.testing import find_shared_model

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

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
REAL_BASE = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_DEVICES": "CPU",
    "NPUW_ONLINE_PIPELINE": "NONE",
    "++NPUW_LLM_PREFILL_CONFIG": F32,
    "++NPUW_LLM_GENERATE_CONFIG": F32,
}
#: our recommended LLM settings: chunked prefill with small chunks and the seed's generate pyramid
OURS_EXTRA = {"NPUW_LLM_PREFILL_CHUNK_SIZE": 64, "NPUW_LLM_GENERATE_VARIANTS": "256,512,1024"}


def run(req, prompt: list[int], n_new: int) -> tuple[float, float]:
    """(TTFT ms, median TPOT ms) of one greedy generation."""
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
    ttft = time.perf_counter() - t0
    steps = []
    for i in range(n_new - 1):
        cur = L + i + 1
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
        steps.append(time.perf_counter() - t)
    return ttft * 1e3, statistics.median(steps) * 1e3 if steps else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(find_shared_model("stories260K") or "../shared/models/stories260K"))
    ap.add_argument(
        "--preset", help="build a model-builder preset instead (e.g. qwen2.5-0.5b-shape)"
    )
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--vocab", type=int, help="override the preset's vocabulary size")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--prompts", default="20,400,1000")
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
    setups: dict[str, tuple[float, object]] = {}
    t = time.perf_counter()
    setups["real NPUW/CPU"] = (
        0.0,
        ov.Core().compile_model(model, "NPU", REAL_BASE).create_infer_request(),
    )
    setups["real NPUW/CPU"] = (time.perf_counter() - t, setups["real NPUW/CPU"][1])
    for dev in ("CPU", "NPU"):
        if dev == "NPU" and "NPU" not in core.registry:
            print("(emulated NPU device not registered: skipping ours on NPU)")
            continue
        cfg = {**REAL_BASE, "NPUW_DEVICES": dev, **OURS_EXTRA}
        t = time.perf_counter()
        setups[f"ours NPUW/{dev}"] = (
            time.perf_counter() - t,
            core.compile_model(model, "NPU", cfg).create_infer_request(),
        )
        setups[f"ours NPUW/{dev}"] = (time.perf_counter() - t, setups[f"ours NPUW/{dev}"][1])

    print(
        f"model {xml} | MAX_PROMPT_LEN 1024, MIN_RESPONSE_LEN 128 | ours: {OURS_EXTRA} | {args.new} new tokens, best of {args.repeat}"
    )
    results: dict[tuple[str, int], tuple[float, float]] = {}
    for _, req in setups.values():
        run(req, prompts[lengths[0]], 4)  # warm-up
    # Setups alternate inside each repeat so that load from other jobs hits them alike;
    # the best TTFT and the best median TPOT over the repeats are reported.
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        for n in lengths:
            for name, (_, req) in setups.items():
                runs.setdefault((name, n), []).append(run(req, prompts[n], args.new))
    for key, rs in runs.items():
        results[key] = (min(r[0] for r in rs), min(r[1] for r in rs))
    hdr = f"{'setup':18s} {'compile s':>9s} " + " ".join(
        f"{'TTFT@' + str(n):>10s} {'TPOT@' + str(n):>10s}" for n in lengths
    )
    print(hdr)
    for name, (ct, _) in setups.items():
        print(
            f"{name:18s} {ct:9.2f} "
            + " ".join(f"{results[name, n][0]:10.2f} {results[name, n][1]:10.3f}" for n in lengths)
        )
    print("ratios ours / real (TTFT target ≤ 0.1 at 20 tokens, TPOT target ≤ 0.5):")
    for name in setups:
        if name.startswith("ours"):
            print(
                f"  {name:16s} "
                + " ".join(
                    f"TTFT@{n} {results[name, n][0] / results['real NPUW/CPU', n][0]:.3f}  TPOT@{n} {results[name, n][1] / results['real NPUW/CPU', n][1]:.3f}"
                    for n in lengths
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
