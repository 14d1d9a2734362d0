"""``ov-npu-emu demo``: generate with a small trained LLM through the whole emulated stack.

genai_shim adds this subcommand through the ``ovnpu_add_cli_commands`` hook (registered as the
``genai_shim`` entry point of the ``ov_npu_emu`` group), so the runtime's CLI never imports the
application layer.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ov_npu_emu.hookspecs import hookimpl

__all__ = ["ovnpu_add_cli_commands", "register", "register_numerics", "run", "run_numerics_cli"]

DEFAULT_PROMPT = "Once upon a time"


@hookimpl
def ovnpu_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    register(subparsers)
    register_numerics(subparsers)


def register_numerics(subparsers: argparse._SubParsersAction) -> None:
    from genai_shim.numerics import PROTECTIONS

    p = subparsers.add_parser(
        "numerics",
        help="where a model's f16 run on the emulated NPU drifts or overflows against f32, layer by layer",
        description=(
            "Run the model on the emulated NPU in NPU numerics (INFERENCE_PRECISION_HINT=f16) and in f32 side "
            "by side over each prompt's prefill: per op and per layer the max absolute and relative error, "
            "activation peaks against the f16 maximum 65504, the first inf/NaN; at the output greedy-token "
            "agreement over --steps tokens, top-k overlap and a similarity score. MODEL is an LLM export "
            "folder (openvino_model.xml + tokenizer) or an IR .xml with static non-token inputs."
        ),
    )
    p.add_argument("model", type=Path, help="LLM folder, or an IR .xml with static inputs")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    p.add_argument("--prompts", type=Path, metavar="FILE", help="a file of prompts, one a line")
    p.add_argument("--protect", action="append", default=[], metavar="{" + ",".join(sorted(PROTECTIONS)) + "}",
                   help="turn a protection on in the f16 run (repeatable): clamp = NPU_EMU_F16_CLAMP=YES, "
                        "higher-precision = NPU_COMPILATION_MODE_PARAMS=compute-layers-with-higher-precision="
                        "Sqrt,Power,ReduceMean,Add_RMSNorm, scale[=S] = ACTIVATIONS_SCALE_FACTOR=S (default 8)")
    p.add_argument("--steps", type=int, default=4, help="greedy tokens per prompt (default 4)")
    p.add_argument("--top-k", type=int, default=5, help="k of the top-k overlap (default 5)")
    p.add_argument("--top", type=int, default=10, help="list the N ops with the largest relative error")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="NPU compile config for both runs")
    p.add_argument("--json", metavar="OUT.json", help="write the full report as JSON")
    p.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page")
    p.set_defaults(func=run_numerics_cli)


def run_numerics_cli(args: argparse.Namespace) -> int:
    from genai_shim.numerics import NumericsError, format_text, html_report, run_numerics, to_json
    from ov_npu_emu.cli.model_args import parse_kv
    from ov_npu_emu.runtime.files import write_file

    prompts = list(args.prompt)
    if args.prompts is not None:
        if not args.prompts.is_file():
            raise NumericsError(f"--prompts {args.prompts}: no such file")
        prompts += [line for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
    report = run_numerics(args.model, prompts, protect=args.protect, steps=args.steps, top_k=args.top_k,
                          config=parse_kv(args.config))
    print(format_text(report, top=args.top))
    if args.json:
        write_file(args.json, to_json(report))
        print(f"JSON written to {args.json}")
    if args.html:
        write_file(args.html, html_report(report))
        print(f"report written to {args.html} (open in any browser; no network needed)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="generate text through genai_shim -> NPUW -> emulated NPU (the main job)",
        description=(
            "Generate text the way an application targeting openvino_genai.LLMPipeline(path, 'NPU') "
            "would, on this machine without an NPU: genai_shim tokenizes and samples, the NPUW plugin "
            "splits the stateful LLM into a static prefill model and static generate variants over one "
            "KV buffer, and the emulated NPU compiles each into an ELF blob and runs it. Without "
            "--model it uses stories260K, the trained 260K-parameter TinyStories Llama from Andrej "
            "Karpathy's llama2.c (MIT) that ships inside the package, so the text is English; "
            "--model takes any optimum-intel export or a folder from `ov-npu-emu make-model`."
        ),
    )
    p.add_argument(
        "--model",
        type=Path,
        help="model folder (openvino_model.xml + tokenizer IR); default: the bundled stories260K",
    )
    p.add_argument("--device", default="auto", help="NPU (emulated, via NPUW) or CPU; default: NPU when available")
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help=f"prompt text (default {DEFAULT_PROMPT!r})")
    p.add_argument("--max-new-tokens", type=int, default=40, help="tokens to generate (default 40)")
    p.add_argument("--max-prompt-len", type=int, default=256, help="NPU: MAX_PROMPT_LEN (default 256)")
    p.add_argument("--min-response-len", type=int, default=128, help="NPU: MIN_RESPONSE_LEN (default 128)")
    p.set_defaults(func=run)


def _model_folder(args: argparse.Namespace) -> tuple[Path, str]:
    if args.model is not None:
        if not (args.model / "openvino_model.xml").is_file():
            from ov_npu_emu.errors import UserInputError

            raise UserInputError(f"{args.model} has no openvino_model.xml; pass a model folder")
        return args.model, "given"
    from ov_npu_emu.models import find_model

    return find_model("stories260K"), "stories260K, trained TinyStories Llama (llama2.c, MIT)"


def run(args: argparse.Namespace) -> int:
    import genai_shim as openvino_genai
    from ov_npu_emu import Core

    out = sys.stdout
    folder, origin = _model_folder(args)
    devices = Core().available_devices
    device = ("NPU" if "NPU" in devices else "CPU") if args.device.lower() == "auto" else args.device.upper()
    print(f"model    {folder}  [{origin}]", file=out)
    if device == "NPU":
        print("stack    genai_shim.LLMPipeline -> NPUW plugin -> emulated NPU (ELF blobs, command lists)", file=out)
        props: dict[str, Any] = {"MAX_PROMPT_LEN": args.max_prompt_len, "MIN_RESPONSE_LEN": args.min_response_len}
    else:
        print("stack    genai_shim.LLMPipeline -> CPU passthrough device (OpenVINO CPU plugin)", file=out)
        props = {}
    t0 = time.perf_counter()
    pipe = openvino_genai.LLMPipeline(str(folder), device, **props)
    print(f"compile  {device}: {time.perf_counter() - t0:.2f} s", file=out)
    _describe(pipe, out)

    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = args.max_new_tokens
    print(f"prompt   {args.prompt!r}", file=out)
    print("output   ", end="", file=out, flush=True)

    def stream(text: str) -> bool:
        print(text, end="", file=out, flush=True)
        return False  # keep going

    result = pipe.generate([args.prompt], config, stream)
    print(file=out)
    m = result.perf_metrics
    print(
        f"perf     {m.get_num_input_tokens()} prompt tokens, {m.get_num_generated_tokens()} generated; "
        f"load {m.get_load_time():.0f} ms, TTFT {m.get_ttft().mean:.1f} ms, "
        f"TPOT {m.get_tpot().mean:.2f} ms, {m.get_throughput().mean:.1f} tokens/s",
        file=out,
    )
    return 0


def _describe(pipe: Any, out: Any) -> None:
    """Name the static models NPUW built (best effort: the pipeline does not promise this view)."""
    compiled = getattr(pipe, "_compiled", None)
    impl = getattr(compiled, "impl", None)
    subs = getattr(impl, "subs", None)
    if subs is None:
        return
    try:
        prompt = compiled.get_property("NPUW_LLM_MAX_PROMPT_LEN")
        response = compiled.get_property("NPUW_LLM_MIN_RESPONSE_LEN")
        variants = sorted(subs.generate)
        device = compiled.get_property("EXECUTION_DEVICES")
    except Exception:  # older/newer plugin layouts: the demo still runs
        return
    print(
        f"npuw     MAX_PROMPT_LEN={prompt} MIN_RESPONSE_LEN={response}: 1 prefill model + "
        f"generate variants with KV {', '.join(map(str, variants))} on {device}",
        file=out,
    )
