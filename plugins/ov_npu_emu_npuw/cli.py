"""``ov-npu-emu npuw``: compile an LLM the NPUW way, show its static models and KV plan, export it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "npuw",
        help="compile a stateful LLM with NPUW: list prefill/generate models, KV plan; export a blob",
        description=(
            "Compile MODEL (an IR .xml or an optimum-intel folder) with NPU_USE_NPUW=YES and "
            "NPUW_LLM=YES, print the static sub-models, their compile times and the KV buffer plan, "
            "and optionally export the artefact. Like the real NPUW's, the export is weightless unless "
            "--set CACHE_MODE=OPTIMIZE_SPEED: Core.import_model(blob, 'NPU', {'WEIGHTS_PATH': "
            "'<model>.bin'}) restores it (a model not read from an IR file keeps its weights)."
        ),
    )
    p.add_argument("model", help="openvino_model.xml or a folder holding it")
    p.add_argument("--device", default="CPU", help="NPUW_DEVICES for the sub-models (default CPU)")
    p.add_argument("--max-prompt", type=int, help="NPUW_LLM_MAX_PROMPT_LEN (default 1024)")
    p.add_argument("--min-response", type=int, help="NPUW_LLM_MIN_RESPONSE_LEN (default 128)")
    p.add_argument(
        "--chunk", type=int, help="NPUW_LLM_PREFILL_CHUNK_SIZE (power of two, 0 = static)"
    )
    p.add_argument("--variants", help="NPUW_LLM_GENERATE_VARIANTS, e.g. 256,512,1024")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any other property"
    )
    p.add_argument("--export", metavar="PATH", help="write the compiled artefact here")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=run)


def _config(args: argparse.Namespace) -> dict[str, Any]:
    from ov_npu_emu.errors import ConfigError

    cfg: dict[str, Any] = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": args.device}
    for key, value in (
        ("NPUW_LLM_MAX_PROMPT_LEN", args.max_prompt),
        ("NPUW_LLM_MIN_RESPONSE_LEN", args.min_response),
        ("NPUW_LLM_PREFILL_CHUNK_SIZE", args.chunk),
        ("NPUW_LLM_GENERATE_VARIANTS", args.variants),
    ):
        if value is not None:
            cfg[key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        cfg[key.strip()] = value.strip()
    return cfg


def run(args: argparse.Namespace) -> int:
    from ov_npu_emu import Core
    from ov_npu_emu.runtime.files import write_file

    path = Path(args.model)
    xml = path / "openvino_model.xml" if path.is_dir() else path
    core = Core()
    compiled = core.compile_model(str(xml), "NPU", _config(args))
    cm = compiled.impl
    req = compiled.create_infer_request()
    kv = req.impl.kv
    models = [("prefill", cm.subs.prefill)] + [
        (f"kv{k}", s) for k, s in sorted(cm.subs.generate.items())
    ]
    if cm.subs.lm_head is not None:
        models.append(("lm_head", cm.subs.lm_head))
    rows = []
    for role, sub in models:
        shapes = {
            p.any_name: str(p.partial_shape)
            for p in sub.inputs
            if not p.any_name.startswith("past_")
        }
        past = [p for p in sub.inputs if p.any_name.startswith("past_")]
        rows.append(
            {
                "model": f"{cm.name}_{role}",
                "inputs": shapes,
                "past": str(past[0].partial_shape) if past else "none",
                "compile_s": round(cm.compile_seconds.get(f"{cm.name}_{role}", 0.0), 3),
            }
        )
    summary = {
        "device": cm.device,
        "max_prompt_len": cm.cfg.max_prompt_len,
        "min_response_len": cm.cfg.min_response_len,
        "chunk": cm.cfg.chunk_size,
        "variants": list(cm.cfg.variants),
        "kv_precision": cm.cfg.kv_precision,
        "kv_tensors": len(kv),
        "kv_bytes_per_request": kv.nbytes,
        # u8/u4 KV (ours): of which scales + zero points, and the key residual (kvquant.py)
        "kv_scale_bytes": kv.scale_nbytes,
        "kv_residual_bytes": kv.residual_nbytes,
        "capacity_tokens": req.impl.capacity,
        "features": {
            key: cm.get_property(key)
            for key in (
                "NPUW_LLM_SHARED_HEAD",
                "NPUW_LLM_CACHE_ROPE",
                "NPUW_LLM_GENERATE_GROUPED_ATTENTION",
                "NPUW_LLM_OPTIMIZE_V_TENSORS",
                "NPUW_LLM_ENABLE_PREFIX_CACHING",
                "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE",
                "NPUW_LLM_MAX_GENERATION_TOKEN_LEN",
            )
        },
        "models": rows,
    }
    if args.export:
        write_file(args.export, compiled.export_model().getvalue())
        summary["exported"] = args.export
        # the import needs the .bin back (WEIGHTS_PATH) when the artefact is weightless
        summary["exported_weights_path"] = cm.weights_path if cm.cfg.weightless else None
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(
        f"NPUW LLM {cm.name} on {cm.device}: prompt ≤ {summary['max_prompt_len']}, "
        f"chunk {summary['chunk'] or 'off (static prefill)'}, variants {summary['variants']}, "
        f"KV {summary['kv_precision']}"
    )
    quant = (
        f" (scales {kv.scale_nbytes / 1e6:.2f} MB, key residual {kv.residual_nbytes / 1e6:.2f} MB)"
        if kv.quantized
        else ""
    )
    if kv.paged:  # blocks on demand: only the tails and the dummy are held before a prompt
        print(
            f"KV blocks: {len(kv)} tensors, {kv.blocks.num_blocks} blocks of {kv.block} tokens on "
            f"demand, {kv.nbytes / 1e6:.2f} MB held before the first prompt, "
            f"capacity {summary['capacity_tokens']} tokens"
        )
    else:
        print(
            f"KV buffer: {len(kv)} tensors, {kv.nbytes / 1e6:.2f} MB per request{quant}, "
            f"capacity {summary['capacity_tokens']} tokens"
        )
    print(
        "features: "
        + ", ".join(f"{k.removeprefix('NPUW_LLM_')}={v}" for k, v in summary["features"].items())
    )
    for r in rows:
        print(f"  {r['model']:28s} {r['compile_s']:7.2f} s  {r['inputs']}  past {r['past']}")
    if args.export:
        if summary["exported_weights_path"]:
            print(f"exported to {args.export} (weightless: import it with WEIGHTS_PATH={cm.weights_path})")
        else:
            print(f"exported to {args.export} (with its weights)")
    return 0
