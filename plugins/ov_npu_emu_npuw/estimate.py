"""``ov-npu-emu estimate``: predicted TTFT / TPOT of an LLM on a calibrated NPU generation.

The LLM is compiled the NPUW way (static prefill at the padded prompt length, the generate variant
NPUW would pick, the shared LM head) for the emulated NPU configured as the chosen platform
preset; each sub-model's cost-model timeline (the barrier-graph replay of ``profile``) gives its
device time, and the platform's fixed per-step overhead is added.  Nothing runs on the device: the
timelines are replays of the compiled task graphs.

The command talks to the device only through OpenVINO-style properties, like any application: the
NPU device's ``NPU_EMU_PLATFORMS`` (the presets), ``NPU_EMU_PLATFORM`` (set on the device) and
the compiled sub-models' ``NPU_EMU_COST_MODEL_US``, which the NPUW compiled model answers per
sub-model role.  It never imports the NPU plugin (import-linter contract in pyproject.toml).

Large models are not compiled whole: models of the same shape with 1 and 2 decoder layers are,
and every time is extrapolated linearly in the layer count, ``t(L) = t(1) + (L-1)·(t(2)-t(1))``
(exact when the layers are identical, which is what the compiler sees; tests check it against
a 3-layer compile).  Weights of those models are constant-filled (shape and storage format are
all the cost model reads), so building an 8B-shape layer takes seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ov_npu_emu.errors import UserInputError

__all__ = ["PlatformInfo", "estimate", "get_platform", "measure_llm", "platforms", "register", "run",
           "shape_model"]


@dataclasses.dataclass(frozen=True)
class PlatformInfo:
    """What estimate needs of an NPU preset (the NPU device's ``NPU_EMU_PLATFORMS`` entry)."""

    name: str
    description: str
    step_overhead_ms: float

    @classmethod
    def from_property(cls, d: Mapping[str, Any]) -> PlatformInfo:
        return cls(str(d["name"]), str(d.get("description", "")), float(d.get("step_overhead_ms", 0.0)))


def platforms(core: Any = None) -> dict[str, PlatformInfo]:
    """The NPU device's calibrated presets by name (empty when no NPU device is registered)."""
    from ov_npu_emu import Core
    from ov_npu_emu.errors import NpuEmuError

    try:
        table = (core or Core()).get_property("NPU", "NPU_EMU_PLATFORMS")
    except NpuEmuError:
        return {}
    return {str(name): PlatformInfo.from_property(d) for name, d in table.items()}


def get_platform(name: str, core: Any = None) -> PlatformInfo:
    """The preset ``name`` (case-insensitive); an unknown name is a UserInputError."""
    known = platforms(core)
    key = str(name).strip().upper()
    if key not in known:
        raise UserInputError(f"unknown NPU platform {name!r}; known: {', '.join(known) or 'none (no NPU device)'}")
    return known[key]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "estimate", help="predict TTFT/TPOT of an LLM on a calibrated NPU generation (cost model)",
        description="Compile the LLM the NPUW way for the emulated NPU set up as a calibrated NPU "
                    "generation and predict time to first token and time per output token from the "
                    "compiled task graphs (cost-model timeline, nothing is executed). Big models are "
                    "compiled with 1 and 2 decoder layers and extrapolated linearly in layers. "
                    "Calibration and its errors: docs/npu_device.md, section 'Calibration'.")
    p.add_argument("model", nargs="?", help="model folder (config.json [+ openvino_model.xml]) or IR .xml")
    p.add_argument("--preset", help="a model-builder shape preset instead of MODEL (e.g. llama-3.1-8b-shape)")
    p.add_argument("--npu", required=True, type=str.upper, choices=sorted(platforms()), help="NPU generation")
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens (default 512)")
    p.add_argument("--new", type=int, default=128, help="generated tokens (default 128)")
    p.add_argument("--max-prompt-len", type=int, default=1024, help="NPUW_LLM_MAX_PROMPT_LEN (default 1024)")
    p.add_argument("--min-response-len", type=int, default=128, help="NPUW_LLM_MIN_RESPONSE_LEN (default 128)")
    p.add_argument("--chunk", type=int, help="NPUW_LLM_PREFILL_CHUNK_SIZE (power of two; default NPUW's 1024, "
                                              "which means a static prefill up to 1024 tokens)")
    p.add_argument("--weight-format", default="int4", choices=["int4", "int8", "f16"],
                   help="weights of the synthesised shape models (default int4)")
    p.add_argument("--group-size", type=int, default=-1, help="int4 group size (-1 channel-wise, default)")
    p.add_argument("--layers", type=int, help="override the decoder layer count")
    p.add_argument("--full", action="store_true",
                   help="compile all layers (MODEL's own IR when given) instead of extrapolating")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


# -- models ------------------------------------------------------------------------------------
#: model types synthesised with their own structure; other decoder-only models with HF's usual
#: config fields (qwen3, mistral, phi3, ...) become llama-structured models of the same shapes
_OWN_STRUCTURE = ("llama", "qwen2", "gemma")


def _model_config(args: argparse.Namespace) -> tuple[Any, Path | None, int | None, str]:
    """(LlamaConfig or None, IR path or None, layer count, note) from --preset or MODEL."""
    from ov_npu_emu.modelbuilder import LlamaConfig, get_preset

    if args.preset and args.model:
        raise UserInputError("give MODEL or --preset, not both")
    if args.preset:
        config = get_preset(args.preset)
        return config, None, config.num_hidden_layers, f"builder preset {args.preset}"
    if not args.model:
        raise UserInputError("give a model folder / IR .xml, or --preset NAME (see `ov-npu-emu make-model --help`)")
    path = Path(args.model)
    folder = path if path.is_dir() else path.parent
    xml = path if path.suffix == ".xml" else folder / "openvino_model.xml"
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserInputError(f"{folder}: no config.json (needed for the layer count and shapes)")
    data = json.loads(cfg_path.read_text())
    layers = data.get("num_hidden_layers", data.get("n_layer"))
    model_type = str(data.get("model_type", "llama"))
    note = f"shapes from {cfg_path}"
    if model_type not in _OWN_STRUCTURE:
        note += f" ({model_type} synthesised as a llama-structured model of the same shapes)"
        data = {**data, "model_type": "llama"}
    try:
        config = LlamaConfig.from_hf_dict(data)
    except (KeyError, ValueError, TypeError) as e:
        if args.full and xml.is_file() and layers is not None:
            return None, xml, int(layers), f"{xml} ({model_type})"
        raise UserInputError(f"{cfg_path}: cannot read the model shape ({e}); --full compiles the folder's "
                             "own IR instead") from e
    return config, xml if xml.is_file() else None, config.num_hidden_layers, note


class _Keep:
    """Holds the arrays constant-filled IR weights share memory with (kept alive while compiling)."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []

    def __call__(self, a: np.ndarray) -> np.ndarray:
        self.arrays.append(a)
        return a


def _shape_weights(config: Any, fmt: str, group_size: int, keep: _Keep) -> Any:
    """LlamaWeights of ``config``'s shapes, constant-filled (the values do not matter to the cost
    model; drawing 8B-shape random weights would take minutes)."""
    from ov_npu_emu.modelbuilder.weights import LayerWeights, LlamaWeights, StoredWeight

    if config.is_phi3:
        raise UserInputError("estimate synthesises llama/qwen2/gemma-structured models; phi3 is not supported")

    def vec(n: int, value: float) -> StoredWeight:
        return StoredWeight("f32", keep(np.full((n,), value, np.float32)))

    def int8(n: int, k: int) -> StoredWeight:
        return StoredWeight("int8", keep(np.full((n, k), 131, np.uint8)), keep(np.full((n, 1), 128, np.uint8)),
                            keep(np.full((n, 1), 0.01, np.float16)))

    def matrix(n: int, k: int, head: bool = False) -> StoredWeight:
        if fmt == "f16":
            return StoredWeight("f16", keep(np.full((n, k), 0.01, np.float16)))
        if fmt == "int8" or head:  # optimum keeps embeddings / lm_head int8 in int4 exports
            return int8(n, k)
        grouped = group_size > 0 and k % group_size == 0 and k > group_size
        shape = (n, k // group_size, group_size) if grouped else (n, k)
        packed = keep(np.full((n * k + 1) // 2, 0x11, np.uint8))
        scale = keep(np.full((*shape[:-1], 1), 0.01, np.float16))
        return StoredWeight("int4", np.broadcast_to(np.int8(1), shape), None, scale, packed=packed)

    c = config
    layers = []
    for _ in range(c.num_hidden_layers):
        lw = LayerWeights(vec(c.hidden_size, 1.0), matrix(c.q_size, c.hidden_size), matrix(c.kv_size, c.hidden_size),
                          matrix(c.kv_size, c.hidden_size), matrix(c.hidden_size, c.q_size), vec(c.hidden_size, 1.0),
                          matrix(c.intermediate_size, c.hidden_size), matrix(c.intermediate_size, c.hidden_size),
                          matrix(c.hidden_size, c.intermediate_size))
        if c.attention_bias:
            lw.q_bias, lw.k_bias, lw.v_bias = vec(c.q_size, 0.0), vec(c.kv_size, 0.0), vec(c.kv_size, 0.0)
        layers.append(lw)
    embed = matrix(c.vocab_size, c.hidden_size, head=True)
    head = None if c.tie_word_embeddings else matrix(c.vocab_size, c.hidden_size, head=True)
    return LlamaWeights(c, fmt, 0, embed, vec(c.hidden_size, 1.0), layers, head)


def shape_model(config: Any, layers: int, fmt: str = "int4", group_size: int = -1) -> tuple[Any, _Keep]:
    """A stateful optimum-layout ov.Model of ``config``'s shapes with ``layers`` decoder layers
    (constant weights); keep the returned holder alive while the model is compiled."""
    from ov_npu_emu.modelbuilder import build_model

    keep = _Keep()
    weights = _shape_weights(config.replace(num_hidden_layers=layers), fmt, group_size, keep)
    return build_model(weights, name=f"shape_{layers}l"), keep


# -- measuring ---------------------------------------------------------------------------------
def _hw_properties(platform: Any) -> dict[str, str]:
    """The NPU device properties that set it up as ``platform``: a preset's name, or a preset
    object whose own hardware fields (a fit's terms, another SoC's DRAM) are passed as the six
    hardware keys on top of its name — the name alone would give back the committed preset."""
    props = {"NPU_EMU_PLATFORM": str(getattr(platform, "name", platform))}
    hardware = getattr(platform, "hardware", None)
    if callable(hardware):
        hw = hardware()
        props.update({key: str(getattr(hw, field)) for key, field in type(hw).KEYS.items()})
    return props


def measure_llm(model: Any, platform: Any, prompt: int, max_prompt_len: int = 1024,
                min_response_len: int = 128, chunk: int | None = None) -> dict[str, Any]:
    """Compile ``model`` with NPUW for the emulated NPU set up as ``platform``; device time (µs) of
    the prefill, the generate variant NPUW picks for ``prompt`` tokens and the shared LM head."""
    from ov_npu_emu import Core
    from ov_npu_emu_npuw.config import parse_config, pyramid_sizes, select_variant

    if prompt < 1 or prompt > max_prompt_len:
        raise UserInputError(f"--prompt {prompt} must be between 1 and --max-prompt-len {max_prompt_len}")
    core = Core()
    core.set_property("NPU", _hw_properties(platform))
    base = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "NPU",
            "NPUW_LLM_MAX_PROMPT_LEN": max_prompt_len, "NPUW_LLM_MIN_RESPONSE_LEN": min_response_len,
            "INFERENCE_PRECISION_HINT": "f16"}
    if chunk is not None:
        base["NPUW_LLM_PREFILL_CHUNK_SIZE"] = chunk
    # the variant NPUW's default pyramid would pick for this prompt; compile only that (+ the
    # total size, which NPUW always adds)
    probe = parse_config(base)
    variant = select_variant(pyramid_sizes(probe.max_prompt_len, probe.min_response_len), prompt,
                             probe.min_response_len)
    cm = core.compile_model(model, "NPU", {**base, "NPUW_LLM_GENERATE_VARIANTS": str(variant)})
    cfg = cm.impl.cfg
    # the device's cost-model time of each sub-model, by role (NPUW passes NPU_EMU_* queries on)
    us = cm.get_property("NPU_EMU_COST_MODEL_US")
    out = {
        "prefill_us": float(us["prefill"]),
        "generate_us": float(us[f"kv{variant}"]),
        "head_us": float(us.get("lm_head", 0.0)),
        "prefill_calls": math.ceil(prompt / cfg.chunk_size) if cfg.chunk_size else 1,
        "prefill_len": cfg.chunk_size or cfg.max_prompt_len,
        "max_prompt_len": cfg.max_prompt_len,
        "generate_variant": variant,
    }
    return out


def _predict(parts: dict[str, Any], platform: Any) -> tuple[float, float]:
    ttft = (parts["prefill_calls"] * parts["prefill_us"] + parts["head_us"]) / 1e3 + platform.step_overhead_ms
    tpot = (parts["generate_us"] + parts["head_us"]) / 1e3 + platform.step_overhead_ms
    return ttft, tpot


_TIMES = ("prefill_us", "generate_us", "head_us")


def estimate(config: Any, platform: Any, *, prompt: int = 512, max_prompt_len: int = 1024,
             min_response_len: int = 128, fmt: str = "int4", group_size: int = -1,
             full_model: Any = None, layers: int | None = None, chunk: int | None = None) -> dict[str, Any]:
    """Predicted TTFT / TPOT (ms) of ``config``'s shapes on ``platform``.

    ``full_model`` (an ov.Model of ``layers`` layers; ``config`` may then be None) is compiled as
    is; otherwise 1- and 2-layer models of the same shape are and the times are extrapolated to
    ``config.num_hidden_layers``.
    """
    layers = layers if layers is not None else config.num_hidden_layers
    kw = dict(prompt=prompt, max_prompt_len=max_prompt_len, min_response_len=min_response_len, chunk=chunk)
    if full_model is not None:
        parts = measure_llm(full_model, platform, **kw)
        method = f"compiled all {layers} layers"
        per_layer: dict[str, float] | None = None
    else:
        measured = []
        for n in (1, 2):
            model, keep = shape_model(config, n, fmt, group_size)
            measured.append(measure_llm(model, platform, **kw))
            del model, keep
        one, two = measured
        per_layer = {k: two[k] - one[k] for k in _TIMES}
        parts = dict(one)
        for k in _TIMES:
            parts[k] = one[k] + (layers - 1) * per_layer[k]
        method = (f"compiled 1 and 2 layers ({fmt}{f' group {group_size}' if fmt == 'int4' else ''} "
                  f"weights, constant-filled), extrapolated linearly to {layers}: "
                  "t(L) = t(1) + (L-1)*(t(2)-t(1))")
    ttft, tpot = _predict(parts, platform)
    return {"platform": platform.name, "layers": layers, "method": method, "prompt": prompt,
            **parts, "per_layer_us": per_layer, "step_overhead_ms": platform.step_overhead_ms,
            "ttft_ms": ttft, "tpot_ms": tpot}


def run(args: argparse.Namespace) -> int:
    platform = get_platform(args.npu)
    config, xml, layers, note = _model_config(args)
    if args.layers is not None:
        if args.layers < 1:
            raise UserInputError(f"--layers must be >= 1, got {args.layers}")
        if config is None:
            raise UserInputError("--layers needs a model whose config.json the builder can read")
        config, layers = config.replace(num_hidden_layers=args.layers), args.layers
    full = None
    keep = None
    if args.full:
        if xml is not None and args.layers is None:
            from ov_npu_emu import Core

            full, note = Core().read_model(str(xml)), f"{xml} as exported"
        else:
            full, keep = shape_model(config, layers, args.weight_format, args.group_size)
    res = estimate(config, platform, prompt=args.prompt, max_prompt_len=args.max_prompt_len,
                   min_response_len=args.min_response_len, fmt=args.weight_format, group_size=args.group_size,
                   full_model=full, layers=layers, chunk=args.chunk)
    del keep
    res["model"] = note
    res["new_tokens"] = args.new
    res["total_ms"] = res["ttft_ms"] + max(0, args.new - 1) * res["tpot_ms"]
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{platform.name} ({platform.description}); {res['model']}, {res['layers']} layers; {res['method']}")
    print(f"prefill: {res['prefill_calls']} x {res['prefill_len']}-token call(s), "
          f"{res['prefill_us'] / 1e3:.2f} ms device each; generate variant KV {res['generate_variant']}: "
          f"{res['generate_us'] / 1e3:.2f} ms; LM head {res['head_us'] / 1e3:.2f} ms; "
          f"fixed per step {platform.step_overhead_ms:.2f} ms")
    print(f"TTFT {res['ttft_ms']:.1f} ms   TPOT {res['tpot_ms']:.2f} ms ({1e3 / res['tpot_ms']:.1f} tok/s)   "
          f"total for {args.prompt} in / {args.new} out: {res['total_ms'] / 1e3:.2f} s")
    print("cost-model estimate calibrated on few published points; see docs/npu_device.md 'Calibration' "
          "for its errors")
    return 0
