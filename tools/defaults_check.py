#!/usr/bin/env python3
"""Default properties, side by side: does genai_shim's "NPU" with NPUW_DEVICES=CPU give the real
NPUW's greedy tokens when the user passes no precision key?

For each model folder (an optimum-cli export, or --fixtures: every committed fixture under
tests/fixtures/optimum), one fresh process per setup generates the same token ids greedily:

  real NPUW   openvino_genai.LLMPipeline(folder, "NPU", NPUW_DEVICES=CPU, NPUW_ONLINE_PIPELINE=NONE)
  ours NPUW   genai_shim.LLMPipeline with the same properties (our NPUW plugin, CPU sub-models)
  real CPU    openvino_genai on "CPU" with f32 hints and no dynamic quantization: the reference
              that says whether the real NPUW's own tokens are the model's

Nothing but the two keys above and the static shapes (--max-prompt-len, --min-response-len) is
passed, so each side runs its defaults: the real NPUW's sub-model configs (NPUW_DCOFF_*, NPUW_DQ,
...) and the CPU plugin's default precision on this host (bf16 where the CPU has AVX-512 BF16 or
AMX, f32 elsewhere; docs/npuw.md).  NPUW_ONLINE_PIPELINE=NONE because the real's default
partitioner fails on several small exports ("Model references undeclared parameters").

The prompt is tokenized once by the real openvino_genai.Tokenizer (a fixture's recorded
prompt_ids with --fixtures) and both sides get the ids.  The table gives, per folder: the first
position where ours leaves the real NPUW (or "same"), whether the real NPUW equals the f32
reference, and any side's error.  Exit status 1 when ours and the real NPUW both run and differ.

  python tools/defaults_check.py /path/to/export [...] [--prompt TEXT] [--tokens 32]
  python tools/defaults_check.py --fixtures [--only llama-fp32 qwen2-int8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "optimum"
PROMPT = "The keeper lit every lamp and watched the small ship on the water."
NPUW_CPU = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
#: name -> (implementation, device, properties without the shapes)
SETUPS = {
    "real NPUW": ("real", "NPU", NPUW_CPU),
    "ours NPUW": ("ours", "NPU", NPUW_CPU),
    "real CPU f32": ("real", "CPU", F32),
}


def _worker(impl: str, folder: str, device: str, props_json: str, ids_json: str, tokens: int) -> None:
    """Prints the greedy ids as JSON, or {"error": ...}."""
    import numpy as np
    import openvino as ov

    if impl == "ours":
        import genai_shim as lib
    else:
        import openvino_genai as lib
    ids = json.loads(ids_json)
    try:
        pipe = lib.LLMPipeline(folder, device, **json.loads(props_json))
        cfg = lib.GenerationConfig(max_new_tokens=tokens, ignore_eos=True, do_sample=False)
        inputs = lib.TokenizedInputs(ov.Tensor(np.array([ids], np.int64)), ov.Tensor(np.ones((1, len(ids)), np.int64)))
        res = pipe.generate(inputs, cfg)
        print(json.dumps([int(t) for t in res.tokens[0]]))
    except Exception as e:  # noqa: BLE001 - reported per setup, as a user would see it
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        print(json.dumps({"error": f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]}))


def run_setup(name: str, folder: Path, ids: list[int], tokens: int, shapes: dict[str, int]) -> list[int] | str:
    impl, device, props = SETUPS[name]
    props = {**props, **(shapes if device == "NPU" else {})}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, __file__, "--worker", impl, str(folder), device, json.dumps(props),
                           json.dumps(ids), str(tokens)], capture_output=True, text=True, env=env, timeout=1800)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1][:200]}"
    out = json.loads(lines[-1])
    return out["error"] if isinstance(out, dict) else out


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(*sys.argv[2:7], int(sys.argv[7]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("folders", nargs="*", type=Path, help="model folders (optimum-cli exports)")
    ap.add_argument("--fixtures", action="store_true", help=f"every fixture under {FIXTURES}")
    ap.add_argument("--only", nargs="+", default=[], help="with --fixtures: these fixture names")
    ap.add_argument("--prompt", default=PROMPT, help="prompt text (fixtures use their recorded ids)")
    ap.add_argument("--tokens", type=int, default=32, help="greedy tokens to compare")
    ap.add_argument("--max-prompt-len", type=int, default=64)
    ap.add_argument("--min-response-len", type=int, default=64)
    ap.add_argument("--json", type=Path, help="also write the per-folder results here")
    args = ap.parse_args(argv)
    folders = list(args.folders)
    if args.fixtures:
        folders += sorted(p for p in FIXTURES.iterdir() if (p / "golden.json").is_file()
                          and (not args.only or p.name in args.only))
    if not folders:
        ap.error("give model folders or --fixtures")
    shapes = {"MAX_PROMPT_LEN": args.max_prompt_len, "MIN_RESPONSE_LEN": args.min_response_len}

    import openvino_genai

    rows, results = [], []
    for folder in folders:
        golden = folder / "golden.json"
        if args.fixtures and golden.is_file() and folder.parent == FIXTURES:
            ids = json.loads(golden.read_text())["prompt_ids"]
        else:
            ids = [int(t) for t in openvino_genai.Tokenizer(str(folder)).encode(args.prompt).input_ids.data[0]]
        got = {name: run_setup(name, folder, ids, args.tokens, shapes) for name in SETUPS}
        real, ours, ref = got["real NPUW"], got["ours NPUW"], got["real CPU f32"]
        if isinstance(real, list) and isinstance(ours, list):
            d = first_difference(real, ours)
            verdict = "same" if d is None else f"differs at {d}"
        else:
            verdict = ("real fails" if isinstance(ours, list) else "ours fails" if isinstance(real, list)
                       else "both fail")
        real_ok = "-" if not (isinstance(real, list) and isinstance(ref, list)) else (
            "yes" if real == ref else f"no (at {first_difference(real, ref)})")
        ours_ok = "-" if not (isinstance(ours, list) and isinstance(ref, list)) else (
            "yes" if ours == ref else f"no (at {first_difference(ours, ref)})")
        errors = "; ".join(f"{n}: {v}" for n, v in got.items() if isinstance(v, str))
        rows.append((folder.name, verdict, real_ok, ours_ok, errors))
        results.append({"folder": str(folder), "verdict": verdict, **got})
        print(f"{folder.name}: {verdict}", file=sys.stderr, flush=True)

    print("| folder | ours vs real NPUW | real NPUW = f32 reference | ours = f32 reference | errors |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    both = [r for r in rows if r[1] == "same" or r[1].startswith("differs")]
    same = sum(r[1] == "same" for r in rows)
    right = [r for r in both if r[2] == "yes"]
    print(f"\nours gives the real NPUW's {args.tokens} ids on {same} of {len(both)} folders where both run "
          f"({sum(r[1] == 'same' for r in right)} of the {len(right)} where the real NPUW equals the f32 reference); "
          f"the real fails on {sum(r[1] in ('real fails', 'both fail') for r in rows)}, "
          f"ours on {sum(r[1] in ('ours fails', 'both fail') for r in rows)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if same < len(both) else 0


if __name__ == "__main__":
    sys.exit(main())
