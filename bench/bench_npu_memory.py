"""Peak RSS of genai_shim.LLMPipeline on the emulated NPU against the weights file size.

Usage: python bench/bench_npu_memory.py DIR [DIR ...] [--max-prompt 256] [--min-response 64]
                                        [--new 8] [--config KEY=VALUE ...] [--stages]

Each folder runs in its own child process (peak RSS, ru_maxrss, is per process):
``LLMPipeline(dir, "NPU", MAX_PROMPT_LEN=..., MIN_RESPONSE_LEN=...)`` and one short greedy
generate. The table gives load time, TTFT / TPOT (the generate's perf metrics), the weights
file (openvino_model.bin), the KV bytes of the NPUW KV
buffer (f32: 2 · layers · Hkv · D · 4 · (MAX_PROMPT_LEN + MIN_RESPONSE_LEN)), RSS after the
pipeline is built and after the generate, the peak, and the target 1.5 × file + KV + 300 MB.
``--stages`` also prints the RSS reported by the child at each stage.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from procstat import rss_mb  # bench/procstat.py (the script's own folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]

PROMPT = "Once upon a time there was a little girl who lived in a village near"




def _child(args: argparse.Namespace) -> None:
    stages: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    import genai_shim

    stages.append(("import", rss_mb()))
    cfg = dict(kv.split("=", 1) for kv in args.config)
    pipe = genai_shim.LLMPipeline(
        args.dirs[0], "NPU", MAX_PROMPT_LEN=args.max_prompt, MIN_RESPONSE_LEN=args.min_response, **cfg
    )
    t_load = time.perf_counter() - t0
    stages.append(("pipeline", rss_mb()))
    t1 = time.perf_counter()
    res = pipe.generate([PROMPT], max_new_tokens=args.new)
    t_gen = time.perf_counter() - t1
    stages.append(("generate", rss_mb()))
    ids = [list(map(int, t)) for t in getattr(res, "tokens", [])]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    pm = res.perf_metrics
    print(json.dumps({"stages": stages, "peak": peak, "load_s": t_load, "gen_s": t_gen,
                      "ttft_ms": pm.get_ttft().mean, "tpot_ms": pm.get_tpot().mean,
                      "text": str(res), "ids": ids}))


def _kv_mb(folder: Path, total_len: int) -> float:
    c = json.loads((folder / "config.json").read_text())
    heads = int(c["num_attention_heads"])
    kv = int(c.get("num_key_value_heads") or heads)
    d = int(c.get("head_dim") or int(c["hidden_size"]) // heads)
    return 2 * int(c["num_hidden_layers"]) * kv * d * 4 * total_len / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--max-prompt", type=int, default=256)
    ap.add_argument("--min-response", type=int, default=64)
    ap.add_argument("--new", type=int, default=8)
    ap.add_argument("--config", action="append", default=[], help="extra LLMPipeline KEY=VALUE")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")])
    print(
        "| folder | weights file | KV | RSS built | RSS after generate | peak RSS | target | peak / target "
        "| load | generate | TTFT | TPOT |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in args.dirs:
        folder = Path(d)
        extra = [f"--config={c}" for c in args.config]
        cmd = [
            sys.executable,
            __file__,
            str(folder),
            "--child",
            f"--max-prompt={args.max_prompt}",
            f"--min-response={args.min_response}",
            f"--new={args.new}",
            *extra,
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode:
            print(f"| {folder.name} | failed: {out.stderr.strip().splitlines()[-1:]} |")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        wmb = (folder / "openvino_model.bin").stat().st_size / 2**20
        kv = _kv_mb(folder, args.max_prompt + args.min_response)
        target = 1.5 * wmb + kv + 300
        st = dict(r["stages"])
        print(
            f"| {folder.name} | {wmb:.0f} MB | {kv:.0f} MB | {st['pipeline']:.0f} MB | {st['generate']:.0f} MB "
            f"| {r['peak']:.0f} MB | {target:.0f} MB | {r['peak'] / target:.2f} | {r['load_s']:.1f} s "
            f"| {r['gen_s']:.1f} s | {r['ttft_ms']:.0f} ms | {r['tpot_ms']:.0f} ms |"
        )
        if args.stages:
            print(f"|   stages: {[(k, round(v)) for k, v in r['stages']]}, text {r['text']!r} |")


if __name__ == "__main__":
    main()
