"""``ov-npu-emu make-model``: write a synthetic Llama-family model folder (IR + tokenizer IR)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# (flag, LlamaConfig field, type, help)
_OVERRIDES: list[tuple[str, str, type, str]] = [
    ("--layers", "num_hidden_layers", int, "number of decoder layers"),
    ("--hidden", "hidden_size", int, "hidden size"),
    ("--intermediate", "intermediate_size", int, "MLP intermediate size"),
    ("--heads", "num_attention_heads", int, "query heads"),
    ("--kv-heads", "num_key_value_heads", int, "KV heads (< heads: GQA)"),
    ("--head-dim", "head_dim", int, "per-head dimension (even)"),
    ("--vocab", "vocab_size", int, "vocabulary size (>= 259: specials + 256 bytes)"),
    ("--rope-theta", "rope_theta", float, "RoPE base"),
    ("--max-position", "max_position_embeddings", int, "context length advertised in config.json"),
    ("--init-scale", "init_scale", float, "multiplier of the random init std"),
]


def _presets_epilog() -> str:
    from ov_npu_emu.modelbuilder import PRESETS

    lines = ["presets (random weights, seeded):"]
    lines.append(
        f"  {'name':20s} {'layers':>6s} {'hidden':>6s} {'heads':>7s} {'vocab':>7s} "
        f"{'params':>9s} {'f32 .bin':>9s}  notes"
    )
    for name, c in PRESETS.items():
        notes = []
        if c.tie_word_embeddings:
            notes.append("tied")
        if c.attention_bias:
            notes.append("qkv bias")
        notes.append(c.model_type)
        params = c.num_parameters()
        lines.append(
            f"  {name:20s} {c.num_hidden_layers:6d} {c.hidden_size:6d} "
            f"{c.num_attention_heads:>3d}/{c.num_key_value_heads:<3d} {c.vocab_size:7d} "
            f"{params / 1e6:8.2f}M {params * 4 / 2**20:7.1f}MB  {', '.join(notes)}"
        )
    lines += [
        "",
        "dtypes: f32 (exact weights), f16 (f16 constants + Convert, ~1/2 size),",
        "        int8 (u8 weights, per-channel u8 zero point and f16 scale, ~1/4 size),",
        "        int4 (sym i4 + f16 scale per --group-size; embeddings/lm_head int8, ~1/7 size).",
        "",
        "examples:",
        "  ov-npu-emu make-model /tmp/tiny",
        "  ov-npu-emu make-model /tmp/q05 --preset qwen2.5-0.5b-shape --dtype int8",
        "  ov-npu-emu make-model /tmp/q4 --preset small --dtype int4 --group-size 64",
        "  ov-npu-emu make-model /tmp/m --preset small --layers 2 --qkv-bias --no-tie",
    ]
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    from ov_npu_emu.modelbuilder import DTYPES, PRESETS

    p = subparsers.add_parser(
        "make-model",
        help="write a synthetic Llama/Qwen2 model folder (stateful IR + tokenizer IR)",
        description=(
            "Write a model folder that openvino_genai.LLMPipeline and ov-npu-emu can load: "
            "openvino_model.xml/.bin (stateful, optimum-intel layout), openvino_tokenizer/"
            "detokenizer.xml/.bin (byte-level BPE, no transformers needed), config.json and "
            "generation_config.json. Weights are random but deterministic for a seed."
        ),
        epilog=_presets_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "output_dir", metavar="OUTPUT_DIR", type=Path, help="folder to write (created if missing)"
    )
    p.add_argument(
        "--preset", default="tiny", choices=list(PRESETS), help="model shape (default: tiny)"
    )
    p.add_argument(
        "--dtype", default="f32", choices=list(DTYPES), help="weight storage (default: f32)"
    )
    p.add_argument(
        "--group-size",
        type=int,
        default=128,
        metavar="N",
        help="int4 group size: 16, 32, 64, 128 (default) or -1 = channel-wise",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the weights (default: 0)")
    for flag, field, typ, text in _OVERRIDES:
        p.add_argument(
            flag, dest=field, type=typ, default=None, metavar="N" if typ is int else "X", help=text
        )
    p.add_argument(
        "--tie",
        dest="tie_word_embeddings",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="tie lm_head to the embedding table",
    )
    p.add_argument(
        "--qkv-bias",
        dest="attention_bias",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="q/k/v projections with bias (Qwen2 style)",
    )
    p.add_argument(
        "--model-type",
        choices=["llama", "qwen2", "phi3", "gemma"],  # modelbuilder.ARCHITECTURES
        default=None,
        help="architecture (config.json model_type); the *-tiny presets set it",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="rebuild even if OUTPUT_DIR holds the same model"
    )
    p.add_argument("--json", action="store_true", help="print the build manifest as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ov_npu_emu.modelbuilder import make_model_folder, read_manifest

    overrides: dict[str, Any] = {}
    for _, field, _, _ in _OVERRIDES:
        if getattr(args, field) is not None:
            overrides[field] = getattr(args, field)
    for field in ("tie_word_embeddings", "attention_bias", "model_type"):
        if getattr(args, field) is not None:
            overrides[field] = getattr(args, field)
    folder = make_model_folder(
        args.output_dir,
        args.preset,
        args.dtype,
        args.seed,
        overwrite=args.overwrite,
        group_size=args.group_size,
        **overrides,
    )
    manifest = read_manifest(folder)
    if args.json:
        print(json.dumps(manifest | {"path": str(folder)}, indent=2))
        return 0
    c = manifest["config"]
    size = (folder / "openvino_model.bin").stat().st_size
    print(
        f"wrote {folder}: {args.preset} ({c['model_type']}), {args.dtype}, seed {args.seed}: "
        f"{c['num_hidden_layers']} layers, hidden {c['hidden_size']}, heads "
        f"{c['num_attention_heads']}/{c['num_key_value_heads']}, vocab {c['vocab_size']}, "
        f"{manifest['num_parameters']:,} params, openvino_model.bin {size / 2**20:.1f} MiB"
    )
    return 0
