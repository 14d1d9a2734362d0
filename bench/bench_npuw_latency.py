"""TTFT / TPOT of our NPUW (CPU passthrough, emulated NPU) side by side with the real NPUW on CPU.

Usage: python bench/bench_npuw_latency.py [--model DIR_OR_XML | --preset NAME [--layers N] [--vocab V]]
                                          [--new 32] [--repeat 5] [--prompts 20,400,1000]
                                          [--devices CPU,NPU] [--interleave both|run|step] [--auto-threads]
                                          [--also KEY=VALUE [--also KEY=VALUE ...]] [--in-process]

Every configuration runs the same model, driven through the stateful interface the way
openvino.genai drives it, each in its own worker process (as a user would run one of them; with
``--in-process`` all share this process, and then the real NPUW's and our CPU thread pools fight
over the 2 cores and share caches between steps).  All setups decode the *same* generation: the real
NPUW's greedy tokens (from a first pass) are fed to every setup, so each step has the same
position and history everywhere.  The setups alternate every whole generation (``--interleave
run``, the default: the per-token time a generation actually sees) or every decode step
(``--interleave step``; ``both`` prints one table each).  Per-step alternation makes every step
resume cold after another process's step: that adds a fixed ~0.2 ms to every setup's step here,
which compresses the ratios of short steps towards 1.  The order rotates every
repeat, so that load from other jobs on this shared machine hits them alike.  TTFT is the median
over the repeats, TPOT the median over all decode steps of all repeats; ratios are ours / real.
Our generate variant is chosen by the real rule (smallest ≥ prompt + MIN_RESPONSE_LEN) and
printed.  "greedy agrees" counts how many of a setup's own argmax tokens equal the real one's
before the first difference (the real NPUW's shared LM head keeps f16 numerics, docs/npuw.md, so
random-weight models can flip near-ties).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu import Core
from ov_npu_emu.models import find_model

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


def setup_configs(args: argparse.Namespace, also: dict) -> dict[str, dict | None]:
    """Setup name → our NPUW config (None: the real NPUW on CPU), in run order."""
    setups: dict[str, dict | None] = {"real NPUW/CPU": None}
    registered = Core().registry
    for dev in args.devices.split(","):
        if dev == "NPU" and "NPU" not in registered:
            print("(emulated NPU device not registered: skipping ours on NPU)")
            continue
        cfg = {**REAL_BASE, "NPUW_DEVICES": dev, **OURS_EXTRA}
        setups[f"ours NPUW/{dev}"] = cfg
        if dev == "CPU" and args.auto_threads:
            auto = {**F32, "INFERENCE_NUM_THREADS": 0}
            setups["ours CPU autothr"] = {**cfg, "++NPUW_LLM_GENERATE_CONFIG": auto}
        if also:
            setups[f"ours {dev} --also"] = {**cfg, **also}
    return setups


def compile_setup(model: ov.Model, cfg: dict | None) -> tuple[object, float]:
    t = time.perf_counter()
    if cfg is None:
        req = ov.Core().compile_model(model, "NPU", REAL_BASE).create_infer_request()
    else:
        req = Core().compile_model(model, "NPU", cfg).create_infer_request()
    return req, time.perf_counter() - t


def variant_of(req) -> str:
    impl = getattr(req, "impl", None)
    return f"kv{impl.variant}" if impl is not None else f"kv{MAX_PROMPT + MIN_RESPONSE}"


def serve(model: ov.Model, cfg: dict | None) -> int:
    """Worker process: compile one setup, then run generations step by step on request.

    Protocol (JSON lines on stdin/stdout): first reply ``{"compile_s"}``; then
    ``{"prompt", "n_new", "feed"}`` starts a generation and runs its prefill, ``{}`` runs the next
    step (reply ``{"done"}``), ``{"result": 1}`` returns the finished generation's numbers.
    """
    req, seconds = compile_setup(model, cfg)
    out_pipe = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the protocol pipe
    print(json.dumps({"compile_s": seconds}), file=out_pipe, flush=True)
    gen, out = None, {}
    for line in sys.stdin:
        cmd = json.loads(line)
        if "prompt" in cmd:
            out = {}
            gen = generation(req, cmd["prompt"], cmd["n_new"], out, cmd["feed"])
            cmd = {}
        if "result" in cmd:
            reply = {**out, "variant": variant_of(req)}
        else:
            try:
                next(gen)
                reply = {"done": False}
            except StopIteration:
                reply = {"done": True}
        print(json.dumps(reply), file=out_pipe, flush=True)
    return 0


class Worker:
    """A setup in its own process: no thread pool, allocator or cache state shared with others."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        # One BLAS thread per worker unless the caller chose: an idle worker's spinning OpenBLAS
        # threads stole the cores from the running one (ours on the emulated NPU, TTFT@20
        # 79 ms vs 9.5 ms; the real NPUW and our CPU device do not use numpy's BLAS).
        env = {"OPENBLAS_NUM_THREADS": "1", **os.environ}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *argv, "--worker", name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.compile_s = self._ask(None)["compile_s"]

    def _ask(self, cmd: dict | None) -> dict:
        if cmd is not None:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.name!r} died (exit code {self.proc.wait()})")
        return json.loads(line)

    def generation(
        self, prompt: list[int], n_new: int, out: dict, feed: list[int] | None
    ) -> Iterator[None]:
        """Same contract as the in-process ``generation``; each step is one round trip."""
        self._ask({"prompt": prompt, "n_new": n_new, "feed": feed})
        yield
        while not self._ask({})["done"]:
            yield
        out.update(self._ask({"result": 1}))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def interleaved_gens(gens: list[Iterator[None]], per_step: bool) -> None:
    if not per_step:
        for g in gens:
            for _ in g:
                pass
        return
    live = list(gens)
    while live:
        for g in list(live):
            try:
                next(g)
            except StopIteration:
                live.remove(g)


def measure(
    gen_of: dict, names: list[str], prompts: dict, lengths: list[int], args, mode: str
) -> dict:
    """Medians per (setup, prompt length): TTFT, TPOT, the variant used, greedy agreement."""
    ttft: dict[tuple[str, int], list[float]] = {}
    steps: dict[tuple[str, int], list[float]] = {}
    variant: dict[tuple[str, int], str] = {}
    agree: dict[tuple[str, int], int] = {}
    for n in lengths:
        ref: dict = {}
        for _ in gen_of["real NPUW/CPU"](prompts[n], args.new, ref, None):  # also a warm-up
            pass
        feed = ref["tokens"]
        for r in range(args.repeat):
            order = names[r % len(names) :] + names[: r % len(names)]
            outs = {name: {} for name in order}
            interleaved_gens(
                [gen_of[name](prompts[n], args.new, outs[name], feed) for name in order],
                mode == "step",
            )
            for name, o in outs.items():
                ttft.setdefault((name, n), []).append(o["ttft"])
                steps.setdefault((name, n), []).extend(o["steps"])
                variant[name, n] = o["variant"]
                same = [a == b for a, b in zip(o["tokens"], feed, strict=False)] + [False]
                agree[name, n] = same.index(False)
    med = {k: (statistics.median(ttft[k]), statistics.median(steps[k])) for k in ttft}
    return {"med": med, "variant": variant, "agree": agree, "names": names}


def report(m: dict, compile_s: dict, lengths: list[int], args) -> None:
    med, variant, agree, names = m["med"], m["variant"], m["agree"], m["names"]
    hdr = f"{'setup':18s} {'compile s':>9s} " + " ".join(
        f"{'TTFT@' + str(n):>9s} {'TPOT@' + str(n):>9s} {'KV':>6s}" for n in lengths
    )
    print(hdr)
    for name in names:
        print(
            f"{name:18s} {compile_s[name]:9.2f} "
            + " ".join(
                f"{med[name, n][0]:9.2f} {med[name, n][1]:9.3f} {variant[name, n]:>6s}"
                for n in lengths
            )
        )
    print(
        "ratios ours / real (targets: TTFT ≤ 0.1 at 20 tokens, TPOT ≤ 0.5 with a smaller variant):"
    )
    for name in names:
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
            for name in names
            if name.startswith("ours")
            for n in lengths
        )
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(find_model("stories260K")))
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
        choices=("run", "step", "both"),
        default="run",
        help="alternate the setups every whole generation (run, the default: TPOT as a "
        "generation sees it), every decode step (step: every step resumes cold after another "
        "process's step, which adds a fixed ~0.2 ms to every setup's step), or both in turn",
    )
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="run every setup in this one process (the real NPUW's and our CPU thread pools then "
        "compete for the 2 cores and share caches) instead of one worker process per setup",
    )
    ap.add_argument(
        "--auto-threads",
        action="store_true",
        help="also run ours on CPU without NPUW's single-thread generate default "
        "(++NPUW_LLM_GENERATE_CONFIG INFERENCE_NUM_THREADS=0: the CPU plugin's own choice)",
    )
    ap.add_argument(
        "--also",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="also run ours on every device with this extra NPUW key (repeatable; an A/B of one "
        "setting), e.g. NPUW_LLM_GENERATE_GROUPED_ATTENTION=NO; a VALUE starting with { is JSON, "
        "e.g. '++NPUW_LLM_SHARED_HEAD_CONFIG={\"INFERENCE_NUM_THREADS\": 1}'",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: serve one setup
    ap.add_argument("--model-xml", help=argparse.SUPPRESS)  # internal: the parent's model file
    args = ap.parse_args()
    also = {}
    for item in args.also:
        key, _, value = item.partition("=")
        also[key] = json.loads(value) if value.startswith("{") else value
    if args.model_xml:
        xml = Path(args.model_xml)
    else:
        path = Path(args.model)
        if args.preset:
            import tempfile

            from ov_npu_emu.modelbuilder import make_model_folder

            over = {
                k: v
                for k, v in (("num_hidden_layers", args.layers), ("vocab_size", args.vocab))
                if v
            }
            path = make_model_folder(
                Path(tempfile.mkdtemp(prefix="npuw_bench_")), preset=args.preset, **over
            )
        xml = path / "openvino_model.xml" if path.is_dir() else path
    model = ov.Core().read_model(xml)
    if args.worker:
        return serve(model, setup_configs(args, also)[args.worker])
    lengths = [int(x) for x in args.prompts.split(",")]
    rng = np.random.default_rng(0)
    vocab = model.output("logits").get_partial_shape()[2].get_length()
    prompts = {n: [1] + rng.integers(3, vocab, size=n - 1).tolist() for n in lengths}

    configs = setup_configs(args, also)
    reqs: dict[str, object] = {}
    compile_s: dict[str, float] = {}
    if args.in_process:
        for name, cfg in configs.items():
            reqs[name], compile_s[name] = compile_setup(model, cfg)

        def in_process(req):
            def gen(prompt, n_new, out, feed):
                yield from generation(req, prompt, n_new, out, feed)
                out["variant"] = variant_of(req)

            return gen

        gen_of = {n: in_process(r) for n, r in reqs.items()}
    else:
        passthrough = [a for a in sys.argv[1:]]
        for name in configs:
            reqs[name] = Worker(name, [*passthrough, "--model-xml", str(xml)])
            compile_s[name] = reqs[name].compile_s
        gen_of = {n: w.generation for n, w in reqs.items()}

    print(
        f"model {xml} | MAX_PROMPT_LEN {MAX_PROMPT}, MIN_RESPONSE_LEN {MIN_RESPONSE} | ours: "
        f"{OURS_EXTRA} | --also {also or '-'} | {args.new} new tokens × {args.repeat} repeats, "
        f"alternation: {args.interleave}, "
        + ("all in one process" if args.in_process else "one process per setup")
    )
    modes = ["run", "step"] if args.interleave == "both" else [args.interleave]
    for mode in modes:
        if len(modes) > 1:
            print(f"--- setups alternated per {mode} ---")
        report(measure(gen_of, list(reqs), prompts, lengths, args, mode), compile_s, lengths, args)
    for w in reqs.values():
        if isinstance(w, Worker):
            w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
