"""Issue 10's scale table and issue 29's native table: load, TTFT, TPOT and peak RSS per setup,
ours and the real side by side.

Usage: python bench/bench_scale.py [--models stories260K,bench-small,bench-0.5b,DIR] [--repeat 3]
                                   [--new 16] [--setups real,npu,npu-cpu,cpu] [--prompt TEXT]
                                   [--q05-dir /work/models/q05-f16] [--load-only] [--interleave]
                                   [--native] [--models-dir /work/models] [--anchor SETUP] [--warmup 1]
                                   [--load-rounds 3]

Every setup runs ``LLMPipeline(folder, device, ...)`` with f32 hints (INFERENCE_PRECISION_HINT
and KV_CACHE_PRECISION f32) on a 12-word prompt, in its own worker process: one load (timed:
the pipeline constructor, so compilation included), one warm-up generate, then ``--repeat``
generates (medians of the pipeline's own TTFT / TPOT); peak RSS is the worker's ru_maxrss, its
current RSS after the load is printed too (bench/procstat.py).  NPU setups keep the real
defaults (MAX_PROMPT_LEN 1024, MIN_RESPONSE_LEN 128).  Setups:

* ``real``    - the real openvino_genai, NPUW on CPU (NPUW_DEVICES=CPU, NPUW_ONLINE_PIPELINE=NONE)
* ``npu``     - genai_shim on our emulated NPU (NPUW_DEVICES=NPU, the default)
* ``npu-cpu`` - genai_shim, our NPUW with NPUW_DEVICES=CPU
* ``npu-cpu-1var`` - the same with NPUW_LLM_GENERATE_LADDER=NO (one generate variant of
  MAX_PROMPT + MIN_RESPONSE slots; not in the default --setups)
* ``npu-cpu-private`` - npu-cpu with CPU_EMU_WEIGHTS_BANK=NO in every sub-config: each CPU
  sub-model holds its own weights, as before the CPU device's weights bank (not in the default)
* ``cpu``     - the real openvino_genai on the OpenVINO CPU plugin (stateful, no NPUW)

Ratios are ours / real.  The workers run one after another on a shared machine: the load
average at the start and end is printed; re-run when it moved.  ``--interleave`` instead loads
every setup in one worker process and alternates their generate() calls (order rotating per
round), so load swings hit all setups alike: TTFT / TPOT only (no per-setup load time or RSS).
With ``cpu`` among the setups, a row per model gives each setup's TPOT against the CPU plugin's
(about the best NPUW_DEVICES=CPU can do: the same plugin reads the same weights per token).
``bench-small`` is the builder's small preset at 8 layers, hidden 512; ``bench-0.5b`` is
``ov-npu-emu make-model DIR --preset qwen2.5-0.5b-shape --dtype f16`` (built into ``--q05-dir``
when missing); a model folder's path (e.g. an optimum-cli export) is taken as it is.

``--native`` prints issue 29's table instead: every setup at *default* properties against the real
openvino_genai on the CPU plugin at default properties (``cpu-default``, the anchor of the ratios:
what a user would run on this machine), on ``llama-1b-int4`` and ``llama-3b-int4``
(``make-model --preset llama-3.2-1b-shape`` / ``llama-3.2-3b-shape --dtype int4`` under
``--models-dir``, built when missing) and bench-0.5b; a 15-word prompt (38 tokens once the chat
template is applied), 32 new tokens, the third generate of the process timed (two warm-ups),
each generate on another rotation of the prompt's words (``--fresh-prompts``, the default here:
the real LLMPipeline on CPU caches prompt prefixes by default, so a repeated prompt's TTFT there
is a cache hit, not a prefill; ``--no-fresh-prompts`` measures that case).
Setups ``npu-default`` (genai_shim, emulated NPU), ``npu-cpu-default`` (NPUW_DEVICES=CPU),
``cpu-default`` and ``cpu-f32`` (the real CPU plugin with INFERENCE_PRECISION_HINT f32 only).  The "floor" column is the
weights file's bytes over the host's two-core read bandwidth measured in this run (numpy reducing
a 1 GiB buffer on two threads, at the start and the end; the faster counts): a decode step reads
every weight once, so no TPOT can be lower.  ``--anchor`` and ``--warmup`` change the anchor
setup and the number of untimed generates in either mode.  ``--load-rounds K`` (3 with
``--native``) times K loads per setup, the extra ones in load-only workers alternating between the
setups, and reports their median.  The workers get the project's bytecode written beforehand and
run without PYTHONDONTWRITEBYTECODE, as an installed package runs.  Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "bench")]

PROMPT = "Once upon a time there was a little girl who loved cats"
NATIVE_PROMPT = "Once upon a time there was a little girl who lived in a village near"
NATIVE_MODELS = "llama-1b-int4,llama-3b-int4,bench-0.5b"
NATIVE_SETUPS = "npu-default,npu-cpu-default,cpu-default,cpu-f32"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
#: setup -> (module, device, properties)
SETUPS = {
    "real": ("openvino_genai", "NPU", {**F32, "NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}),
    "npu": ("genai_shim", "NPU", {**F32, "NPUW_DEVICES": "NPU"}),
    "npu-cpu": ("genai_shim", "NPU", {**F32, "NPUW_DEVICES": "CPU"}),
    # the same with one generate variant (K = MAX_PROMPT + MIN_RESPONSE), as before the ladder
    "npu-cpu-1var": ("genai_shim", "NPU", {**F32, "NPUW_DEVICES": "CPU", "NPUW_LLM_GENERATE_LADDER": "NO"}),
    # the same without the CPU device's weights bank (each sub-model compiled with its own weights)
    "npu-cpu-private": ("genai_shim", "NPU", {**F32, "NPUW_DEVICES": "CPU", **{
        f"++NPUW_LLM_{role}_CONFIG": {"CPU_EMU_WEIGHTS_BANK": "NO"}
        for role in ("PREFILL", "GENERATE", "SHARED_HEAD")}}),
    "cpu": ("openvino_genai", "CPU", dict(F32)),
    # issue 29: default properties, what a user runs
    "npu-default": ("genai_shim", "NPU", {}),
    "npu-cpu-default": ("genai_shim", "NPU", {"NPUW_DEVICES": "CPU"}),
    "cpu-default": ("openvino_genai", "CPU", {}),
    "cpu-f32": ("openvino_genai", "CPU", {"INFERENCE_PRECISION_HINT": "f32"}),  # KV cache at its default
}
#: builder models by name: (preset, dtype)
MADE = {"bench-0.5b": ("qwen2.5-0.5b-shape", "f16"), "llama-1b-int4": ("llama-3.2-1b-shape", "int4"),
        "llama-3b-int4": ("llama-3.2-3b-shape", "int4")}


def model_folder(name: str, q05_dir: str, models_dir: str = "/work/models") -> str:
    if Path(name, "openvino_model.xml").is_file():  # a model folder of the user's (an optimum-cli export)
        return name
    if name in MADE:
        from ov_npu_emu.modelbuilder import make_model_folder

        path = Path(q05_dir if name == "bench-0.5b" else Path(models_dir) / name)
        if (path / "openvino_model.xml").is_file():
            return str(path)  # taken as it is: never rebuilt over a folder someone made
        return str(make_model_folder(path, *MADE[name]))
    from bench_prefill import model_folder as small_folder

    return small_folder(name)


def worker(setup: str, folder: str, repeat: int, new: int, prompt: str, warmup: int = 1,
           fresh: bool = False) -> dict:
    import importlib
    import resource

    from procstat import rss_mb

    module, device, props = SETUPS[setup]
    g = importlib.import_module(module)
    t0 = time.perf_counter()
    pipe = g.LLMPipeline(folder, device, **props)
    load = time.perf_counter() - t0
    rss_load = rss_mb()
    cfg = g.GenerationConfig()
    cfg.max_new_tokens = new
    cfg.ignore_eos = True
    if repeat == 0:  # --load-only
        return {"load_s": load, "ttft_ms": float("nan"), "tpot_ms": float("nan"), "rss_load_mb": rss_load,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "text": "", "tokens": 0}
    from bench_prefill import timed_generations

    ttft, tpot, text, tokens = timed_generations(pipe, prompt, cfg, repeat, warmup, fresh)
    return {
        "load_s": load,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "rss_load_mb": rss_load,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "text": text,
        "tokens": tokens,
    }


def interleaved(setups: list[str], folder: str, repeat: int, new: int, prompt: str, warmup: int = 1,
                fresh: bool = False) -> dict:
    """--interleave: every setup loaded in this one process, then ``repeat`` rounds of one
    generate() each, the order rotating per round, so a load swing hits all setups alike
    (TTFT / TPOT medians; load and RSS are not per setup here)."""
    import importlib
    import statistics

    from bench_prefill import prompt_variant

    pipes, cfgs = {}, {}
    for s in setups:
        module, device, props = SETUPS[s]
        g = importlib.import_module(module)
        pipes[s] = g.LLMPipeline(folder, device, **props)
        cfgs[s] = g.GenerationConfig()
        cfgs[s].max_new_tokens = new
        cfgs[s].ignore_eos = True
        for i in range(warmup):  # our ladders compile their rungs in the first
            pipes[s].generate([prompt_variant(prompt, i + 1) if fresh else prompt], cfgs[s])
    ttft: dict[str, list[float]] = {s: [] for s in setups}
    tpot: dict[str, list[float]] = {s: [] for s in setups}
    text, tokens = {}, {}
    for r in range(repeat):
        round_prompt = prompt_variant(prompt, warmup + r + 1) if fresh else prompt
        for s in setups[r % len(setups):] + setups[: r % len(setups)]:
            res = pipes[s].generate([round_prompt], cfgs[s])
            ttft[s].append(res.perf_metrics.get_ttft().mean)
            tpot[s].append(res.perf_metrics.get_tpot().mean)
            text[s] = res.texts[0]
            tokens[s] = int(res.perf_metrics.get_num_input_tokens())
    nan = float("nan")
    return {s: {"load_s": nan, "ttft_ms": statistics.median(ttft[s]), "tpot_ms": statistics.median(tpot[s]),
                "rss_load_mb": nan, "peak_rss_mb": nan, "text": text[s], "tokens": tokens[s]} for s in setups}


def run_worker(setup: str, folder: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", setup, "--folder", folder, "--repeat", str(args.repeat),
           "--new", str(args.new), "--prompt", args.prompt, "--warmup", str(args.warmup)]
    if args.fresh_prompts:
        cmd.append("--fresh-prompts")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_worker_env())
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def extra_loads(rows: dict[str, dict], setups: list[str], folder: str, args: argparse.Namespace) -> None:
    """``--load-rounds``: ``load_rounds - 1`` more loads per setup, one load-only worker each,
    the setups alternating round by round (a swing of the shared host's load hits them alike);
    each row's ``load_s`` becomes the median of its loads, ``loads`` lists them all."""
    import statistics

    loads = {s: [rows[s]["load_s"]] for s in setups if "error" not in rows[s]}
    load_args = argparse.Namespace(**{**vars(args), "repeat": 0})
    for _ in range(args.load_rounds - 1):
        for s in loads:
            r = run_worker(s, folder, load_args)
            if "error" not in r:
                loads[s].append(r["load_s"])
    for s, values in loads.items():
        rows[s]["loads"] = values
        rows[s]["load_s"] = statistics.median(values)


def _worker_env() -> dict[str, str]:
    """The workers' environment: no progress bar, and bytecode as an installed package has it
    (a session's PYTHONDONTWRITEBYTECODE=1 made every load compile the modules it imports
    lazily from source; ``_compile_sources`` writes the bytecode once beforehand)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "OV_NPU_EMU_PROGRESS": "0"}


def _compile_sources() -> None:
    """Bytecode for this project's packages, as ``pip install`` writes it (quietly; unwritable
    folders are skipped): so no setup's load pays for compiling our modules from source."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for sub in ("ov_npu_emu", "genai_shim", "plugins"):
        if (root / sub).is_dir():
            compileall.compile_dir(str(root / sub), quiet=2)


def _child(*argv: str) -> str:
    """The last stdout line of this script run with ``argv``: large buffers (the bandwidth probe,
    a model build) stay out of this process, whose peak RSS every worker would inherit (Linux
    keeps ru_maxrss across fork and exec)."""
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def _weights_mb(folder: str) -> float:
    return (Path(folder) / "openvino_model.bin").stat().st_size / 2**20


def read_bandwidth_gbs(mb: int = 1024, repeat: int = 5) -> float:
    """The host's read bandwidth on two cores right now (GB/s): numpy reducing the two halves of
    an ``mb`` MiB buffer (more than the caches hold) on two threads, best of ``repeat``."""
    import numpy as np

    buf = np.ones(mb * 2**20 // 8, np.uint64)  # written: every page committed before timing
    halves = np.array_split(buf, 2)
    best = float("inf")
    with ThreadPoolExecutor(2) as pool:  # numpy releases the GIL in the reduction
        for _ in range(repeat):
            t0 = time.perf_counter()
            list(pool.map(np.add.reduce, halves))
            best = min(best, time.perf_counter() - t0)
    return buf.nbytes / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models")
    ap.add_argument("--setups")
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--new", type=int)
    ap.add_argument("--prompt")
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--anchor", help="the setup the ratios divide by (real; cpu-default with --native)")
    ap.add_argument("--q05-dir", default="/work/models/q05-f16")
    ap.add_argument("--models-dir", default="/work/models",
                    help="where llama-1b-int4 / llama-3b-int4 are (built when missing)")
    ap.add_argument("--native", action="store_true",
                    help="issue 29's table: default properties against the real CPU plugin at defaults")
    ap.add_argument("--load-only", action="store_true", help="time the pipeline's load only (no generate)")
    ap.add_argument("--load-rounds", type=int,
                    help="load times as the median of this many loads per setup, the extra ones in "
                         "load-only workers alternating between the setups (default 1; 3 with --native)")
    ap.add_argument("--interleave", action="store_true",
                    help="all setups in one process, generate() calls alternating (TTFT/TPOT only)")
    ap.add_argument("--fresh-prompts", action=argparse.BooleanOptionalAction,
                    help="every generate a new rotation of the prompt's words (default with --native: the "
                         "real CPU's prefix cache would otherwise serve a repeated prompt)")
    ap.add_argument("--worker")
    ap.add_argument("--folder")
    ap.add_argument("--bandwidth", action="store_true")
    ap.add_argument("--folder-of")
    args = ap.parse_args()
    defaults = dict(models="stories260K,bench-small,bench-0.5b", setups="real,npu,npu-cpu,cpu", repeat=3,
                    new=16, prompt=PROMPT, warmup=1, anchor="real", fresh_prompts=False, load_rounds=1)
    if args.native:
        defaults.update(models=NATIVE_MODELS, setups=NATIVE_SETUPS, repeat=1, new=32, prompt=NATIVE_PROMPT,
                        warmup=2, anchor="cpu-default", fresh_prompts=True, load_rounds=3)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.bandwidth:
        print(read_bandwidth_gbs())
        return
    if args.folder_of:
        print(model_folder(args.folder_of, args.q05_dir, args.models_dir))
        return
    if args.worker:
        if "," in args.worker:
            print(json.dumps(interleaved(args.worker.split(","), args.folder, args.repeat, args.new, args.prompt,
                                         args.warmup, args.fresh_prompts)))
        else:
            print(json.dumps(worker(args.worker, args.folder, args.repeat, args.new, args.prompt, args.warmup,
                                    args.fresh_prompts)))
        return
    if args.load_only:
        args.repeat = 0
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = sorted(set(setups) - set(SETUPS))
    if unknown:
        ap.error(f"unknown setups {unknown}; choose from {sorted(SETUPS)}")
    if args.interleave and args.load_only:
        ap.error("--interleave measures TTFT / TPOT; --load-only needs one process per setup")
    _compile_sources()
    bandwidth = [float(_child("--bandwidth"))]
    print(f"load average at start: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs; "
          f"two-core read bandwidth {bandwidth[0]:.1f} GB/s")
    print(f"{len(args.prompt.split())}-word prompt, {'default properties' if args.native else 'f32'}, "
          f"{args.new} new tokens, median of {args.repeat} after {args.warmup} warm-up generate(s); "
          + ("all setups in one process, generate() calls alternating" if args.interleave else "one process per setup")
          + f"; ratios setup / {args.anchor}"
          + ("; a new rotation of the prompt's words per generate" if args.fresh_prompts else "; the same prompt"))
    rows_by_model = {}
    for name in args.models.split(","):
        folder = _child("--folder-of", name.strip(), "--q05-dir", args.q05_dir, "--models-dir", args.models_dir)
        if args.interleave:
            rows = run_worker(",".join(setups), folder, args)
            if "error" in rows:
                rows = {s: rows for s in setups}
        else:
            rows = {s: run_worker(s, folder, args) for s in setups}
            if args.load_rounds > 1:
                extra_loads(rows, setups, folder, args)
        rows_by_model[name] = (folder, rows)
        print(f"{name}: measured ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
    bandwidth.append(float(_child("--bandwidth")))
    print(f"two-core read bandwidth at the end {bandwidth[1]:.1f} GB/s; the floor below uses {max(bandwidth):.1f} GB/s")
    print_table(args, rows_by_model, max(bandwidth))
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


def print_table(args: argparse.Namespace, rows_by_model: dict, gbs: float) -> None:
    """One markdown row per model and setup; ratios against ``args.anchor``'s row of the model."""
    print("| model | setup | load s | TTFT ms | TPOT ms | peak RSS MB | RSS after load MB | "
          "x load | x TTFT | x TPOT | x peak RSS | TPOT / floor | prompt tokens | same text |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, (folder, rows) in rows_by_model.items():
        anchor = rows.get(args.anchor, {})
        weights_mb = _weights_mb(folder)
        floor_ms = weights_mb * 2**20 / (gbs * 1e9) * 1e3  # a decode step reads every weight once
        label = f"{name} ({weights_mb:.0f} MB weights, floor {floor_ms:.1f} ms)"
        for s, r in rows.items():
            if "error" in r:
                print(f"| {label} | {s} | error: {r['error']} |")
                label = ""
                continue

            def ratio(key: str, r: dict = r, anchor: dict = anchor) -> str:
                return f"{r[key] / anchor[key]:.2f}" if key in anchor and anchor[key] else "–"

            same = "–" if "text" not in anchor or args.load_only else ("yes" if r["text"] == anchor["text"] else "no")
            print(f"| {label} | {s} | {r['load_s']:.2f} | {r['ttft_ms']:.1f} | {r['tpot_ms']:.2f} | "
                  f"{r['peak_rss_mb']:.0f} | {r['rss_load_mb']:.0f} | {ratio('load_s')} | {ratio('ttft_ms')} | "
                  f"{ratio('tpot_ms')} | {ratio('peak_rss_mb')} | {r['tpot_ms'] / floor_ms:.2f} | "
                  f"{r.get('tokens', '–')} | {same} |")
            label = ""
        cpu = rows.get("cpu", {})
        if cpu.get("tpot_ms") and not args.native:
            # NPUW_DEVICES=CPU runs its static models on the same CPU plugin: its TPOT is bound
            # below by about the plugin's own stateful TPOT (same weights read per token)
            rel = ", ".join(f"{s} {r['tpot_ms'] / cpu['tpot_ms']:.2f}x" for s, r in rows.items()
                            if s != "cpu" and r.get("tpot_ms"))
            print(f"|   TPOT against the CPU plugin's stateful model ({cpu['tpot_ms']:.2f} ms): {rel} |")
    for name, (_, rows) in rows_by_model.items():
        loads = {s: r["loads"] for s, r in rows.items() if "loads" in r}
        if loads:
            print(f"{name}: loads (s, in order; the table has their medians): "
                  + "; ".join(f"{s} " + " ".join(f"{x:.2f}" for x in xs) for s, xs in loads.items()))


if __name__ == "__main__":
    main()
