"""``ov-npu-emu kv-plan``: KV cache bytes by the formula 2 × layers × batch × seq × kv_heads × head_dim × bytes.

Two ways in:

* from flags (``--layers --kv-heads --head-dim --batch --seq --dtype``): the formula itself;
* from a model folder plus NPUW keys: the KV tensors of the model (heads and head size per
  tensor, read from the IR), the generate variants and capacity NPUW derives from the keys,
  batch 1 — and the total is exactly what our NPUW allocates for one infer request
  (``LLMInferRequest.kv.nbytes``; tests/npuw/test_kv_plan.py compares them).

int8 / int4 (NPUW's ``KV_CACHE_PRECISION=u8`` / ``u4``) add f16 scales and zero points (values:
per group of ``G`` values of a token's row; keys: per channel per block of ``G`` tokens) and the
exact rows of the key block being filled (``G`` = head_dim unless ``--group-size``), reported
separately from the data bytes (scheme: ov_npu_emu_npuw/kvquant.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ov_npu_emu.errors import ConfigError, UserInputError
from ov_npu_emu_npuw.kvquant import BITS, storage_bytes

__all__ = ["plan_from_dims", "plan_from_model", "register", "run"]

#: --dtype spelling → NPUW KV_CACHE_PRECISION spelling
DTYPES = {"f32": "f32", "f16": "f16", "int8": "u8", "int4": "u4", "u8": "u8", "u4": "u4"}
_ELEM_BYTES = {"f32": 4.0, "f16": 2.0, "u8": 1.0, "u4": 0.5}


def _group(head_dim: int, group: int) -> int:
    g = group or head_dim
    if g <= 0 or head_dim % g:
        raise ConfigError(f"group size {g} must divide head_dim {head_dim}")
    return g


def _tensor_bytes(
    precision: str, heads: int, slots: int, head_dim: int, group: int, key: bool
) -> tuple[int, int, int]:
    """(data, scale+zero-point, residual) bytes of one KV tensor [batch·heads, slots, head_dim]."""
    if precision == "u4" and head_dim % 2:
        raise ConfigError(f"int4 KV packs two values per byte: head_dim {head_dim} must be even")
    if precision in BITS:
        _group(head_dim, group)
    return storage_bytes(precision, heads, slots, head_dim, group, key)


def _byte_totals(precision: str, data: int, scales: int, residual: int, head_dim: int, group: int) -> dict[str, Any]:
    """A plan's byte fields: data, scales + zero points, the keys' residual and their sum; for
    int8/int4 also the group size and the overhead over the data."""
    out: dict[str, Any] = {
        "data_bytes": data,
        "scale_bytes": scales,
        "residual_bytes": residual,
        "bytes": data + scales + residual,
    }
    if precision in BITS:
        out["group_size"] = _group(head_dim, group)
        out["scale_overhead"] = (scales + residual) / data if data else 0.0
    return out


def plan_from_dims(
    layers: int, kv_heads: int, head_dim: int, batch: int, seq: int, dtype: str, group: int = 0
) -> dict[str, Any]:
    """The seed's formula; ``bytes`` = data + scales."""
    precision = DTYPES[dtype]
    for name, v in (("layers", layers), ("kv-heads", kv_heads), ("head-dim", head_dim),
                    ("batch", batch), ("seq", seq)):
        if v is None or v <= 0:
            raise UserInputError(f"--{name} must be a positive integer, got {v}")
    parts = [_tensor_bytes(precision, batch * kv_heads, seq, head_dim, group, key) for key in (True, False)]
    data, scales, residual = (layers * (k + v) for k, v in zip(*parts, strict=False))
    out: dict[str, Any] = {
        "terms": {
            "kv": 2, "layers": layers, "batch": batch, "seq": seq, "kv_heads": kv_heads,
            "head_dim": head_dim, "bytes_per_element": _ELEM_BYTES[precision],
        },
        "dtype": dtype,
        "kv_cache_precision": precision,
        **_byte_totals(precision, data, scales, residual, head_dim, group),
    }
    return out


def plan_from_model(path: str | Path, config: Mapping[str, Any], group: int = 0) -> dict[str, Any]:
    """Per generate variant and in total, for one NPUW infer request (batch 1) on ``path``."""
    import openvino as ov

    from ov_npu_emu_npuw.config import parse_config
    from ov_npu_emu_npuw.transform import to_stateless

    p = Path(path)
    xml = p / "openvino_model.xml" if p.is_dir() else p
    if not xml.is_file():
        raise UserInputError(f"{xml} not found: pass an IR .xml or a folder holding openvino_model.xml")
    cfg = parse_config(config)
    _, kv = to_stateless(ov.Core().read_model(str(xml)))
    precision = cfg.kv_precision
    group = group or int(cfg.kv_group_size)
    M = cfg.max_gen_len

    def at(slots: int) -> tuple[int, int, int]:
        d = s = r = 0
        for name, h, hd in zip(kv.past_names, kv.num_heads, kv.head_dims, strict=False):
            a, b, c = _tensor_bytes(precision, h, slots, hd, group, name.endswith(".key"))
            d, s, r = d + a, s + b, r + c
        return d, s, r

    variants = []
    for k in cfg.variants:
        d, s, r = at(k - M)
        variants.append({"kv_size": k, "past_slots": k - M, "data_bytes": d, "scale_bytes": s,
                         "residual_bytes": r, "bytes": d + s + r})
    capacity = cfg.total_size - M
    data, scales, residual = at(capacity)
    uniform = len(set(kv.num_heads)) == 1 and len(set(kv.head_dims)) == 1 and len(kv.past_names) % 2 == 0
    out: dict[str, Any] = {
        "model": str(xml),
        "kv_cache_precision": precision,
        "kv_tensors": len(kv.past_names),
        "terms": {
            "kv": 2, "layers": len(kv.past_names) // 2, "batch": 1, "seq": capacity,
            "kv_heads": kv.num_heads[0], "head_dim": kv.head_dims[0],
            "bytes_per_element": _ELEM_BYTES[precision],
        } if uniform else None,
        "max_prompt_len": cfg.max_prompt_len,
        "min_response_len": cfg.min_response_len,
        "max_generation_token_len": M,
        "capacity_tokens": capacity,
        "variants": variants,
        **_byte_totals(precision, data, scales, residual, kv.head_dims[0], group),
    }
    if cfg.prefix_block:
        d1, s1, _ = at(1)
        per_token = d1 + s1
        out["prefix_cache"] = {
            "block_size": cfg.prefix_block,
            "max_blocks": cfg.prefix_max_blocks,
            "max_bytes": per_token * cfg.prefix_block * cfg.prefix_max_blocks,
        }
    if cfg.block_kv:
        out["block_kv"] = _block_plan(cfg, kv, at)
    return out


def _block_plan(cfg: Any, kv: Any, at: Any) -> dict[str, int]:
    """NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE (blockkv.py): blocks of chunk-size tokens on demand,
    plus what is held whatever the conversation: one tail copy per generate variant and one zero
    dummy block per distinct block shape."""
    C, M = cfg.chunk_size, cfg.max_gen_len
    per_block = at(C)[0]
    tails = sum(at((k - M) % C)[0] for k in cfg.variants)
    itemsize = 4 if cfg.kv_precision == "f32" else 2
    shapes = {
        (h, d, cfg.optimize_v and name.endswith(".value"))
        for name, h, d in zip(kv.past_names, kv.num_heads, kv.head_dims, strict=True)
    }
    dummy = sum(h * C * d * itemsize for h, d, _ in shapes)
    max_blocks = -(-cfg.total_size // C)
    return {
        "block_tokens": C,
        "max_blocks": max_blocks,
        "bytes_per_block": per_block,
        "fixed_bytes": tails + dummy,
        "max_bytes": max_blocks * per_block + tails + dummy,
    }


# -- CLI ---------------------------------------------------------------------------------
_EPILOG = """\
examples:
  # the seed's 7B example: 2×32×8×2048×32×128×2 = 8,589,934,592 bytes
  ov-npu-emu kv-plan --layers 32 --kv-heads 32 --head-dim 128 --batch 8 --seq 2048 --dtype f16
  # the same in int8 (half, plus f16 scales / zero points and the key residual)
  ov-npu-emu kv-plan --layers 32 --kv-heads 32 --head-dim 128 --batch 8 --seq 2048 --dtype int8
  # what NPUW allocates for a model folder, per generate variant
  ov-npu-emu kv-plan path/to/model --max-prompt 1024 --min-response 128 --dtype int4 --json

With a model folder the batch is 1 (NPUW serves one conversation per infer request) and seq is
the KV capacity: MAX_PROMPT_LEN + MIN_RESPONSE_LEN − MAX_GENERATION_TOKEN_LEN (after NPUW's
alignment to 64). Every generate variant is a view of the one buffer of that capacity, so the
total is the largest, not the sum. `bytes` = data + scales + residual.
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "kv-plan",
        help="KV cache bytes: 2 × layers × batch × seq × kv_heads × head_dim × bytes (f32/f16/int8/int4)",
        description=(
            "Plan KV cache memory with the formula 2 × layers × batch × seq × kv_heads × head_dim "
            "× bytes, from the dimensions given as flags or from a model folder plus NPUW keys "
            "(then per generate variant and in total, equal to what NPUW allocates)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="?", help="openvino_model.xml or its folder (else give the dimension flags)")
    dims = p.add_argument_group("dimensions (without a model)")
    dims.add_argument("--layers", type=int, help="decoder layers")
    dims.add_argument("--kv-heads", type=int, help="KV heads (fewer than query heads with GQA/MQA)")
    dims.add_argument("--head-dim", type=int, help="size of one attention head")
    dims.add_argument("--batch", type=int, default=1, help="parallel sequences (default 1)")
    dims.add_argument("--seq", type=int, help="tokens held per sequence (prompt + generated)")
    p.add_argument("--dtype", choices=["f32", "f16", "int8", "int4"],
                   help="KV element type (default f16; with a model: KV_CACHE_PRECISION f16/f32/u8/u4)")
    p.add_argument("--group-size", type=int, default=0,
                   help="int8/int4 group G (NPUW_EMU_KV_GROUP_SIZE): values per scale of a value row, "
                        "tokens per scale of a key channel (default head_dim)")
    npuw = p.add_argument_group("NPUW keys (with a model)")
    npuw.add_argument("--max-prompt", type=int, help="NPUW_LLM_MAX_PROMPT_LEN (default 1024)")
    npuw.add_argument("--min-response", type=int, help="NPUW_LLM_MIN_RESPONSE_LEN (default 128)")
    npuw.add_argument("--variants", help="NPUW_LLM_GENERATE_VARIANTS, e.g. 256,512")
    npuw.add_argument("--chunk", type=int, help="NPUW_LLM_PREFILL_CHUNK_SIZE (aligns the prompt)")
    npuw.add_argument("--max-gen", type=int, help="NPUW_LLM_MAX_GENERATION_TOKEN_LEN (default 1)")
    npuw.add_argument("--block-size", type=int,
                      help="enable prefix caching with this NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE and "
                           "report its worst-case extra memory")
    npuw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any other NPUW key")
    p.add_argument("--json", action="store_true", help="print JSON (at least {\"bytes\": N})")
    p.set_defaults(func=run)


def _model_config(args: argparse.Namespace) -> dict[str, Any]:
    cfg: dict[str, Any] = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES"}
    for key, value in (
        ("NPUW_LLM_MAX_PROMPT_LEN", args.max_prompt),
        ("NPUW_LLM_MIN_RESPONSE_LEN", args.min_response),
        ("NPUW_LLM_GENERATE_VARIANTS", args.variants),
        ("NPUW_LLM_PREFILL_CHUNK_SIZE", args.chunk),
        ("NPUW_LLM_MAX_GENERATION_TOKEN_LEN", args.max_gen),
        ("KV_CACHE_PRECISION", DTYPES[args.dtype] if args.dtype else None),
        ("NPUW_EMU_KV_GROUP_SIZE", args.group_size or None),
    ):
        if value is not None:
            cfg[key] = value
    if args.block_size:
        cfg["NPUW_LLM_ENABLE_PREFIX_CACHING"] = "YES"
        cfg["NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE"] = args.block_size
        cfg.setdefault("NPUW_LLM_PREFILL_CHUNK_SIZE", 256)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        cfg[key.strip()] = value.strip()
    return cfg


def _fmt(n: int) -> str:
    return f"{n:,} B ({n / 2**20:,.2f} MiB)"


def run(args: argparse.Namespace) -> int:
    dim_flags = [args.layers, args.kv_heads, args.head_dim, args.seq]
    if args.model:
        if any(v is not None for v in dim_flags):
            raise UserInputError("give either a model or --layers/--kv-heads/--head-dim/--seq, not both")
        plan = plan_from_model(args.model, _model_config(args), args.group_size)
    else:
        missing = [
            f"--{n}" for n, v in zip(("layers", "kv-heads", "head-dim", "seq"), dim_flags, strict=False) if v is None
        ]
        if missing:
            raise UserInputError(
                f"missing {', '.join(missing)}: give all dimensions, or a model folder "
                "(see `ov-npu-emu kv-plan --help`)"
            )
        plan = plan_from_dims(
            args.layers, args.kv_heads, args.head_dim, args.batch, args.seq, args.dtype or "f16", args.group_size
        )
    if args.json:
        print(json.dumps(plan, indent=2))
        return 0
    t = plan["terms"]
    if t:
        be = t["bytes_per_element"]
        print(
            f"KV = 2 × {t['layers']} layers × {t['batch']} batch × {t['seq']} seq × "
            f"{t['kv_heads']} kv_heads × {t['head_dim']} head_dim × {be:g} bytes"
        )
    else:
        print(
            f"KV = sum over {plan['kv_tensors']} KV tensors of heads × seq × head_dim × bytes "
            "(heads/head_dim differ per layer)"
        )
    if "model" in plan:
        print(
            f"model {plan['model']}: {plan['kv_tensors']} KV tensors, {plan['kv_cache_precision']}, "
            f"prompt ≤ {plan['max_prompt_len']}, min response {plan['min_response_len']}, "
            f"capacity {plan['capacity_tokens']} tokens"
        )
        for v in plan["variants"]:
            extra = f" + scales {v['scale_bytes']:,} + residual {v['residual_bytes']:,}" if v["scale_bytes"] else ""
            print(f"  variant kv{v['kv_size']:<6d} past {v['past_slots']:6d} slots: {v['data_bytes']:,} B{extra}")
        print("  (variants are views of one buffer: the total is the largest)")
    print(f"data:   {_fmt(plan['data_bytes'])}")
    if "scale_overhead" in plan:
        g = plan["group_size"]
        print(
            f"scales: {_fmt(plan['scale_bytes'])}  (f16 scale + zero point: values per {g} "
            f"values of a row, keys per channel per {g} tokens)"
        )
        print(
            f"residual: {_fmt(plan['residual_bytes'])}  (exact f16 key rows of the block of {g} "
            f"tokens being filled)  overhead +{100 * plan['scale_overhead']:.2f}% of data"
        )
    print(f"total:  {_fmt(plan['bytes'])}")
    if "prefix_cache" in plan:
        pc = plan["prefix_cache"]
        print(
            f"prefix cache (on demand, at most): {pc['max_blocks']} blocks × {pc['block_size']} "
            f"tokens = {_fmt(pc['max_bytes'])}"
        )
    if "block_kv" in plan:
        b = plan["block_kv"]
        print(
            f"block KV (on demand): {b['block_tokens']}-token blocks of {_fmt(b['bytes_per_block'])}, "
            f"at most {b['max_blocks']}; fixed (tail copies + dummy block) {_fmt(b['fixed_bytes'])}; "
            f"a conversation of n tokens holds ⌈n/{b['block_tokens']}⌉ blocks + fixed"
        )
    return 0
