"""Memory and latency of NPUW on the emulated NPU with and without the weights bank, beside the real NPUW on CPU.

Usage: python bench/bench_npu_bank.py [--preset qwen2.5-0.5b-shape] [--dtype int8] [--max-prompt 256]
                                      [--min-response 256] [--variants 384] [--prompt 100] [--new 16]
                                      [--fill-all] [--tracemalloc] [--layers N] [--skip-real] [--skip-nobank]

Each configuration runs in its own child process (peak RSS, ru_maxrss, is per process), one after
the other on the same model folder; the parent prints them side by side:
  * ours NPUW/NPU, NPU_EMU_WEIGHTS_BANK=NO  (before: every sub-model holds its blob and its f32 cache)
  * ours NPUW/NPU, NPU_EMU_WEIGHTS_BANK=YES (after: one bank entry per weight, one f32 cache)
  * real NPUW on CPU (openvino 2026.4.1), the TTFT/TPOT reference
Device bytes are the emulated device's weights (banked + private images), decompressed weights and
request arenas. ``--fill-all`` also runs every generate variant once, the footprint after a long chat.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from procstat import rss_mb  # bench/procstat.py (the script's own folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def _npuw_config(args: argparse.Namespace, devices: str) -> dict:
    cfg = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": devices, "NPUW_ONLINE_PIPELINE": "NONE",
           "NPUW_LLM_MAX_PROMPT_LEN": args.max_prompt, "NPUW_LLM_MIN_RESPONSE_LEN": args.min_response,
           "++NPUW_LLM_PREFILL_CONFIG": F32, "++NPUW_LLM_GENERATE_CONFIG": F32}
    if devices == "NPU" and args.variants:
        cfg["NPUW_LLM_GENERATE_VARIANTS"] = args.variants
    return cfg


def _feed(ids: list[int], start: int) -> dict:
    n = len(ids)
    return {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, start + n), np.int64),
            "position_ids": np.arange(start, start + n, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)}


def _generate(req, prompt: list[int], n_new: int) -> tuple[float, float, list[int]]:
    """(TTFT ms, median TPOT ms, greedy ids) of one generation through the stateful interface."""
    req.reset_state()
    t0 = time.perf_counter()
    req.infer(_feed(prompt, 0))
    tok = int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax())
    ttft = (time.perf_counter() - t0) * 1e3
    ids, steps = [tok], []
    for i in range(n_new - 1):
        t = time.perf_counter()
        req.infer(_feed([tok], len(prompt) + i))
        tok = int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax())
        steps.append((time.perf_counter() - t) * 1e3)
        ids.append(tok)
    return ttft, statistics.median(steps) if steps else float("nan"), ids




def _device_bytes(cm) -> dict[str, int]:
    subs = cm.impl.subs
    models = [subs.prefill, *subs.generate.values(), *([subs.lm_head] if subs.lm_head is not None else [])]
    out = {"weights": 0, "dq": 0}
    bank = None
    for m in models:
        p = m.impl.parsed
        if p.banked is None:
            out["weights"] += int(p.weights.nbytes)
            out["dq"] += p.weights_cache.nbytes if p.weights_cache is not None else 0
        else:
            bank = p.banked.bank
            out["weights"] += p.banked.private_nbytes
            # decompressed weights of private (small) constants stay with their blob
            out["dq"] += sum(int(a.nbytes) for a in p.weights_cache._private.values()) if p.weights_cache else 0
    if bank is not None:
        st = bank.stats()
        out["weights"] += st["weights_bytes"]
        out["dq"] += st["dq_bytes"]
    return out


def child(args: argparse.Namespace) -> dict:
    prompt = [1] + np.random.default_rng(0).integers(3, 1000, size=args.prompt - 1).tolist()
    res: dict = {}
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start()
    t = time.perf_counter()
    if args.child == "real":
        import openvino as ov

        req = ov.Core().compile_model(args.xml, "NPU", _npuw_config(args, "CPU")).create_infer_request()
        res["compile_s"] = time.perf_counter() - t
    else:
        from ov_npu_emu import Core

        core = Core()
        core.set_property("NPU", {"NPU_EMU_WEIGHTS_BANK": args.child})
        cm = core.compile_model(args.xml, "NPU", _npuw_config(args, "NPU"))
        res["compile_s"] = time.perf_counter() - t
        req = cm.create_infer_request()
    res["rss_after_compile_mb"] = rss_mb()
    _generate(req, prompt[:8], 3)  # warm-up: command lists and decompressed weights
    runs = [_generate(req, prompt, args.new) for _ in range(args.repeat)]
    res["ttft_ms"] = min(r[0] for r in runs)
    res["tpot_ms"] = min(r[1] for r in runs)
    res["ids"] = runs[0][2]
    if args.child != "real":
        if args.fill_all:  # run every variant once, as a long chat would
            for sub in cm.impl.subs.generate.values():
                sub.create_infer_request().infer()
        res["device"] = _device_bytes(cm)
        impl = req.impl
        res["device"]["kv"] = int(impl.kv.nbytes)
        res["device"]["arenas"] = sum(int(r.impl.hpi.arena.buf.nbytes)
                                      for r in [impl._prefill, *impl._gen.values()] if hasattr(r.impl, "hpi"))
    if args.tracemalloc:
        import gc

        gc.collect()
        res["traced_mb"], res["traced_peak_mb"] = (x / 2**20 for x in tracemalloc.get_traced_memory())
    res["rss_mb"] = rss_mb()
    res["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen2.5-0.5b-shape")
    ap.add_argument("--dtype", default="int8")
    ap.add_argument("--layers", type=int, help="override the preset's layer count (quick runs)")
    ap.add_argument("--max-prompt", type=int, default=256)
    ap.add_argument("--min-response", type=int, default=256)
    ap.add_argument("--variants", default="384", help="extra generate variants (the total is always added)")
    ap.add_argument("--prompt", type=int, default=100)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--fill-all", action="store_true")
    ap.add_argument("--tracemalloc", action="store_true",
                    help="also report Python-traced bytes held at the end / at peak (RSS hides frees of small blobs)")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-nobank", action="store_true", help="skip the (large) before configuration")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--xml", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0

    from ov_npu_emu.modelbuilder import make_model_folder

    over = {"num_hidden_layers": args.layers} if args.layers else {}
    t = time.perf_counter()
    folder = make_model_folder(Path(tempfile.mkdtemp(prefix="npu_bank_")), preset=args.preset,
                               dtype=args.dtype, **over)
    xml = str(folder / "openvino_model.xml")
    print(f"model {args.preset} {args.dtype}{' layers=' + str(args.layers) if args.layers else ''} built in "
          f"{time.perf_counter() - t:.1f} s | MAX_PROMPT_LEN {args.max_prompt}, MIN_RESPONSE_LEN "
          f"{args.min_response}, variants {args.variants}+total | prompt {args.prompt}, {args.new} new, "
          f"best of {args.repeat}{' | every variant run once' if args.fill_all else ''}", flush=True)
    setups = [(n, c) for n, c in (("ours NPU bank=NO", "NO"), ("ours NPU bank=YES", "YES"), ("real NPUW/CPU", "real"))
              if not (c == "NO" and args.skip_nobank) and not (c == "real" and args.skip_real)]
    results: dict[str, dict] = {}
    passthrough = [a for a in sys.argv[1:]]
    for name, c in setups:
        cmd = [sys.executable, __file__, *passthrough, "--child", c, "--xml", xml]
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])})
        if p.returncode != 0:
            print(f"{name}: failed (rc {p.returncode}):\n{p.stderr[-2000:]}", flush=True)
            continue
        results[name] = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"  {name} done in {time.perf_counter() - t:.0f} s", flush=True)

    mb = 1 / 2**20
    print(f"{'setup':18s} {'compile s':>9s} {'TTFT ms':>8s} {'TPOT ms':>8s} {'peak RSS MB':>11s} {'RSS MB':>7s} "
          f"{'dev weights MB':>14s} {'dev f32 cache MB':>16s} {'KV+arenas MB':>12s}")
    for name, r in results.items():
        d = r.get("device")
        dev = (f"{d['weights'] * mb:14.1f} {d['dq'] * mb:16.1f} {(d['kv'] + d['arenas']) * mb:12.1f}" if d
               else f"{'-':>14s} {'-':>16s} {'-':>12s}")
        print(f"{name:18s} {r['compile_s']:9.1f} {r['ttft_ms']:8.1f} {r['tpot_ms']:8.1f} {r['maxrss_mb']:11.0f} "
              f"{r['rss_mb']:7.0f} {dev}")
    if args.tracemalloc:
        for name, r in results.items():
            if "traced_mb" in r:
                print(f"  {name:18s} tracemalloc: held {r['traced_mb']:.1f} MB, peak {r['traced_peak_mb']:.1f} MB")
    before, after, real = (results.get(k) for k in ("ours NPU bank=NO", "ours NPU bank=YES", "real NPUW/CPU"))
    if before and after:
        print(
            f"bank after/before: peak RSS {after['maxrss_mb'] / before['maxrss_mb']:.2f}, device weights "
            f"{after['device']['weights'] / before['device']['weights']:.2f}, f32 cache "
            f"{after['device']['dq'] / max(before['device']['dq'], 1):.2f}; same ids: {after['ids'] == before['ids']}"
        )
    if after and real:
        print(
            f"ours(bank)/real: TTFT {after['ttft_ms'] / real['ttft_ms']:.2f}, "
            f"TPOT {after['tpot_ms'] / real['tpot_ms']:.2f}, "
            f"peak RSS {after['maxrss_mb'] / real['maxrss_mb']:.2f}; same ids: {after['ids'] == real['ids']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
