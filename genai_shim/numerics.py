"""``ov-npu-emu numerics``: where a model's f16 run on the emulated NPU drifts or overflows
against f32, op by op and layer by layer, and what that does to its tokens.

The model runs twice on the emulated NPU, with ``INFERENCE_PRECISION_HINT`` set explicitly: f16
(NPU numerics: float activations and in-graph KV stored f16, weights as stored, f32
accumulation) and f32 (the reference, within 1e-6 of the OpenVINO CPU plugin).  Every float op
output that depends on the inputs is exposed as an extra model output before compiling, so the
captured values are the ones the device stored in its f16 scratch (an extra Result is a convert
task f16 -> f32 reading that buffer; the op's own task is unchanged).  An LLM folder is turned
into a stateless static prefill of each prompt (past length 0); greedy tokens come from a second
static model of ``len(prompt) + steps`` tokens (causal: a position never reads the ones after it,
so the tail is filled with the tokens chosen so far and the padding is never read).
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UserInputError

__all__ = ["DEFAULT_SCALE", "F16_MAX", "PROTECTIONS", "NumericsError", "format_text", "html_report",
           "protection_config", "run_numerics", "to_json"]

#: the largest finite f16 value
F16_MAX = 65504.0
#: an f32 reference value this large is a mask sentinel (finfo(f32).min as "minus infinity"),
#: meant to be infinite: f16 stores it as inf on every runtime, which is harmless there
_SENTINEL = 1e30
#: --protect NAME -> the compile properties that turn it on (on the f16 run only)
PROTECTIONS: dict[str, dict[str, str]] = {
    "clamp": {"NPU_EMU_F16_CLAMP": "YES"},
    # what NPUW passes to the real NPU compiler for LLMs (llm_compiled_model.cpp)
    "higher-precision": {"NPU_COMPILATION_MODE_PARAMS":
                         "compute-layers-with-higher-precision=Sqrt,Power,ReduceMean,Add_RMSNorm"},
    # ov::hint::activations_scale_factor; `scale=S` picks the factor (protection_config)
    "scale": {"ACTIVATIONS_SCALE_FACTOR": "8"},
}
#: the factor of a bare ``--protect scale``: what openvino.genai's GGUF reader writes into a
#: model's ``runtime_options`` rt_info for ACTIVATIONS_SCALE_FACTOR
DEFAULT_SCALE = 8.0
_LAYER = re.compile(r"(?:^|[./_])(?:layers|layer|h|blocks|block)[._](\d+)(?=[./_]|$)")


class NumericsError(UserInputError):
    """The numerics report cannot run on this input (what to pass instead is in the message)."""


@dataclasses.dataclass
class _Run:
    """One compiled variant of the capture model and its outputs."""

    outputs: dict[str, np.ndarray]  # capture name -> value


def protection_config(name: str) -> dict[str, str]:
    """The compile properties of one ``--protect`` value: a name from :data:`PROTECTIONS`, or
    ``scale=S`` (ACTIVATIONS_SCALE_FACTOR=S, S a positive number; a power of two keeps it exact)."""
    key, eq, value = name.partition("=")
    if key == "scale" and eq:
        try:
            s = float(value)
        except ValueError:
            s = math.nan
        if not (math.isfinite(s) and s > 0):
            raise NumericsError(f"--protect {name}: the scale factor must be a positive number, e.g. scale=8")
        return {"ACTIVATIONS_SCALE_FACTOR": value}
    if eq or key not in PROTECTIONS:
        raise NumericsError(f"unknown protection {name!r}; choose from {', '.join(PROTECTIONS)} (or scale=S)")
    return PROTECTIONS[key]


def layer_of(name: str) -> str:
    """The transformer layer a node belongs to by its name (``model.layers.17.mlp`` -> "17"), or "-"."""
    m = _LAYER.search(name)
    return m.group(1) if m else "-"


def _is_float(t: ov.Type) -> bool:
    return t in (ov.Type.f32, ov.Type.f16, ov.Type.bf16)


_KV_INPUT = re.compile(r"^past_key_values\.(\d+)\.|^past\.(\d+)\.")


def _capture_nodes(model: ov.Model) -> list[tuple[ov.Output, str]]:
    """Float outputs of ops that depend on an input (folded constant subgraphs are left out),
    each with its layer: from the node's name, else (names without a layer index, as in
    stories260K) "kvN", the last layer whose past-KV input the op reads through the graph."""
    live: dict[str, int] = {}  # node name -> highest past-KV layer upstream (-1: none)
    outs: list[tuple[ov.Output, str]] = []
    for n in model.get_ordered_ops():
        t = n.get_type_name()
        if t == "Parameter":
            m = _KV_INPUT.match(n.output(0).get_any_name()) if n.output(0).get_names() else None
            live[n.get_name()] = int(m.group(1) or m.group(2)) if m else -1
            continue
        if t in ("Constant", "Result", "Assign", "ShapeOf"):
            continue
        ups = [live[x] for x in (n.input_value(i).get_node().get_name() for i in range(n.get_input_size()))
               if x in live]
        if not ups:
            continue
        live[n.get_name()] = max(ups)
        kv = f"kv{max(ups)}" if max(ups) >= 0 else "-"
        for o in n.outputs():
            if _is_float(o.get_element_type()) and o.get_partial_shape().is_static:
                outs.append((o, kv))
    named = [layer_of(o.get_node().get_friendly_name()) for o, _ in outs]
    if any(x != "-" for x in named):  # the names say it: no kvN groups mixed in
        return [(o, x) for (o, _), x in zip(outs, named, strict=True)]
    return outs


def _with_captures(model: ov.Model) -> tuple[ov.Model, list[tuple[str, str, str, str]]]:
    """``model`` plus one Result per captured output; (output name, node name, op type, layer) each."""
    caps = _capture_nodes(model)
    names: list[tuple[str, str, str, str]] = []
    results = []
    for i, (o, layer) in enumerate(caps):
        node = o.get_node()
        label = f"numerics.capture.{i}"
        r = ov.opset13.result(o)
        r.output(0).get_tensor().set_names({label})
        results.append(r)
        suffix = f":{o.get_index()}" if node.get_output_size() > 1 else ""
        names.append((label, node.get_friendly_name() + suffix, node.get_type_name(), layer))
    model.add_results(results)
    return model, names


def _compile_run(core: Any, model: ov.Model, config: Mapping[str, Any], feeds: Sequence[Mapping[str, np.ndarray]],
                 names: Sequence[str]) -> list[dict[str, np.ndarray]]:
    cm = core.compile_model(model, "NPU", dict(config))
    req = cm.create_infer_request()
    out: list[dict[str, np.ndarray]] = []
    for feed in feeds:
        with np.errstate(all="ignore"):  # an f16 overflow is what the report is looking for
            req.infer(dict(feed))
        out.append({n: np.array(req.get_tensor(n).data, dtype=np.float64) for n in names})
    return out


def _err_stats(ref: np.ndarray, val: np.ndarray) -> dict[str, Any]:
    """Errors of ``val`` (f16 run) against ``ref`` (f32 run) over the elements the reference
    holds finite and below the mask-sentinel size."""
    keep = np.isfinite(ref) & (np.abs(ref) < _SENTINEL)
    r, v = ref[keep], val[keep]
    if r.size == 0:
        return {"max_abs_err": 0.0, "max_rel_err": 0.0, "peak_f32": 0.0, "peak_f16": 0.0, "nonfinite": 0,
                "sentinels": int(ref.size)}
    bad = ~np.isfinite(v)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(r - v)
    max_abs = math.inf if bad.any() else float(diff.max())
    scale = float(np.abs(r).max())
    return {
        "max_abs_err": max_abs,
        # relative to the tensor's scale (max |f32|): elementwise ratios explode near zero
        "max_rel_err": math.inf if bad.any() else (max_abs / scale if scale > 0 else float(max_abs > 0)),
        "peak_f32": scale,
        "peak_f16": float(np.abs(v[~bad]).max()) if (~bad).any() else math.inf,
        "nonfinite": int(bad.sum()),
        "sentinels": int(ref.size - r.size),
    }


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x - np.max(x, axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def _output_metrics(ref: np.ndarray, val: np.ndarray, top_k: int) -> tuple[float, float]:
    """(mean top-k overlap, mean cosine similarity of the next-token distributions) over the rows."""
    ref = ref.reshape(-1, ref.shape[-1])
    val = val.reshape(-1, val.shape[-1])
    overlaps, sims = [], []
    for r, v in zip(ref, val, strict=True):
        if not np.isfinite(v).all():  # NaN logits: no usable distribution
            overlaps.append(0.0)
            sims.append(0.0)
            continue
        k = min(top_k, r.size)
        overlaps.append(len(set(np.argsort(-r)[:k]) & set(np.argsort(-v)[:k])) / k)
        p, q = _softmax(r), _softmax(v)
        sims.append(float(p @ q / (np.linalg.norm(p) * np.linalg.norm(q))))
    return float(np.mean(overlaps)), float(np.mean(sims))


def _llm_inputs(model: ov.Model, ids: Sequence[int]) -> dict[str, np.ndarray]:
    n = len(ids)
    feed: dict[str, np.ndarray] = {}
    for p in model.inputs:
        name, shape = p.get_any_name(), list(p.get_shape())
        if name == "input_ids":
            feed[name] = np.array([ids], np.int64)
        elif name == "attention_mask":
            feed[name] = np.ones((1, n), np.int64)
        elif name == "position_ids":
            feed[name] = np.arange(n, dtype=np.int64)[None]
        elif name == "beam_idx":
            feed[name] = np.zeros(shape, np.int32)
        else:  # the past KV: [1, H, 0, D]
            feed[name] = np.zeros(shape, p.get_element_type().to_dtype())
    return feed


def _logits_name(model: ov.Model) -> str:
    for o in model.outputs:
        if "logits" in o.get_names():
            return "logits"
    return model.outputs[0].get_any_name()


def _greedy(core: Any, xml: Path, ids: list[int], steps: int, config: Mapping[str, Any]) -> list[int]:
    """``steps`` greedy tokens after ``ids``, by one static causal model of len(ids) + steps."""
    from ov_npu_emu.cli.model_args import static_llm

    total = len(ids) + steps
    model = static_llm(core.read_model(str(xml)), total, 0)
    logits = _logits_name(model)
    cm = core.compile_model(model, "NPU", dict(config))
    req = cm.create_infer_request()
    seq = list(ids) + [ids[-1]] * steps  # the tail is never read by an earlier position (causal)
    out: list[int] = []
    for s in range(steps):
        with np.errstate(all="ignore"):
            req.infer(_llm_inputs(model, seq))
        row = np.array(req.get_tensor(logits).data, dtype=np.float64)[0, len(ids) + s - 1]
        tok = int(np.argmax(np.nan_to_num(row, nan=-np.inf))) if np.isfinite(row).any() else 0
        out.append(tok)
        if len(ids) + s < total:
            seq[len(ids) + s] = tok
    return out


def _summarize_ops(names: Sequence[tuple[str, str, str, str]], ref: Sequence[dict[str, np.ndarray]],
                   val: Sequence[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Per captured op: the worst over the prompts."""
    ops: list[dict[str, Any]] = []
    for label, node, op, layer in names:
        worst: dict[str, Any] = {}
        for r, v in zip(ref, val, strict=True):
            s = _err_stats(r[label], v[label])
            for k, x in s.items():
                worst[k] = max(worst.get(k, x), x)
        ops.append({"node": node, "op": op, "layer": layer, **worst,
                    "overflow": worst["peak_f32"] > F16_MAX})
    return ops


def _summarize_layers(ops: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    layers: dict[str, dict[str, Any]] = {}
    for o in ops:
        d = layers.setdefault(o["layer"], {"layer": o["layer"], "ops": 0, "max_abs_err": 0.0, "max_rel_err": 0.0,
                                           "peak_f32": 0.0, "overflowing_ops": 0, "nonfinite_ops": 0,
                                           "largest_drift": None, "first_nonfinite": None})
        d["ops"] += 1
        d["max_abs_err"] = max(d["max_abs_err"], o["max_abs_err"])
        if d["largest_drift"] is None or o["max_rel_err"] > d["max_rel_err"]:
            d["largest_drift"] = o["node"]
        d["max_rel_err"] = max(d["max_rel_err"], o["max_rel_err"])
        d["peak_f32"] = max(d["peak_f32"], o["peak_f32"])
        d["overflowing_ops"] += int(o["overflow"])
        if o["nonfinite"]:
            d["nonfinite_ops"] += 1
            d["first_nonfinite"] = d["first_nonfinite"] or o["node"]
    return list(layers.values())


def run_numerics(model: str | Path, prompts: Sequence[str] = (), *, protect: Sequence[str] = (), steps: int = 4,
                 top_k: int = 5, config: Mapping[str, Any] | None = None, core: Any = None) -> dict[str, Any]:
    """Run ``model`` on the emulated NPU in f16 and in f32 side by side and compare them.

    :param model: an LLM folder (``openvino_model.xml`` + ``openvino_tokenizer.xml``), or an IR
        ``.xml`` with static non-token inputs (per-op comparison on seeded random inputs)
    :param prompts: the prompts (LLM only; at least one)
    :param protect: names from :data:`PROTECTIONS` (or ``scale=S``) turned on in the f16 run
    :param steps: greedy tokens generated per prompt for the token agreement
    :param top_k: k of the top-k overlap
    :param config: extra NPU compile properties for both runs
    :returns: a JSON-able dict: ``ops`` (per captured op, in graph order), ``layers``,
        ``first_nonfinite`` / ``first_overflow`` (node, layer), ``outputs`` (token metrics)
    :raises NumericsError: a missing model, no prompt, an unknown protection
    """
    from ov_npu_emu import Core

    core = core or Core()
    path = Path(model)
    protections = [protection_config(p) for p in protect]
    if steps < 1 or top_k < 1:
        raise NumericsError("--steps and --top-k must be at least 1")
    f16: dict[str, Any] = {**dict(config or {}), "INFERENCE_PRECISION_HINT": "f16"}
    for props in protections:
        f16.update(props)
    f32: dict[str, Any] = {**dict(config or {}), "INFERENCE_PRECISION_HINT": "f32"}
    report: dict[str, Any] = {"model": str(path), "protect": list(protect),
                              # the compile properties the protections set on the f16 run
                              "protect_properties": {k: str(v) for props in protections for k, v in props.items()},
                              "precision": {"npu": "f16", "ref": "f32"}, "f16_max": F16_MAX}
    if path.is_dir():
        xml = path / "openvino_model.xml"
        if not xml.is_file():
            raise NumericsError(f"{path} has no openvino_model.xml; pass an LLM export folder or an IR .xml")
        if not prompts:
            raise NumericsError("pass at least one --prompt (or --prompts FILE) for an LLM folder")
        return _run_llm(core, xml, list(prompts), f16, f32, steps, top_k, report)
    if path.suffix == ".xml" and path.is_file():
        return _run_ir(core, path, f16, f32, report)
    raise NumericsError(f"{path}: not a model folder nor an IR .xml")


def _run_llm(core: Any, xml: Path, prompts: list[str], f16: dict[str, Any], f32: dict[str, Any], steps: int,
             top_k: int, report: dict[str, Any]) -> dict[str, Any]:
    from genai_shim.tokenizer import Tokenizer
    from ov_npu_emu.cli.model_args import static_llm

    tok = Tokenizer(str(xml.parent))
    all_ops: list[list[dict[str, Any]]] = []
    per_prompt: list[dict[str, Any]] = []
    for text in prompts:
        ids = [int(x) for x in np.asarray(tok.encode(text).input_ids.data).reshape(-1)]
        if not ids:
            raise NumericsError(f"prompt {text!r} encodes to no tokens")
        base = static_llm(core.read_model(str(xml)), len(ids), 0)
        logits = _logits_name(base)
        model, names = _with_captures(base)
        feed = _llm_inputs(model, ids)
        labels = [n for n, *_ in names] + [logits]
        ref = _compile_run(core, model, f32, [feed], labels)
        val = _compile_run(core, model, f16, [feed], labels)
        all_ops.append(_summarize_ops(names, ref, val))
        overlap, sim = _output_metrics(ref[0][logits][0], val[0][logits][0], top_k)
        g32 = _greedy(core, xml, ids, steps, f32)
        g16 = _greedy(core, xml, ids, steps, f16)
        agree = sum(a == b for a, b in zip(g32, g16, strict=True))
        first = next((i for i, (a, b) in enumerate(zip(g32, g16, strict=True)) if a != b), None)
        per_prompt.append({"prompt": text, "tokens": len(ids), "greedy_f32": g32, "greedy_f16": g16,
                           "greedy_agreement": agree / steps, "first_divergence": first,
                           "top_k_overlap": overlap, "similarity": sim,
                           "text_f32": tok.decode(g32), "text_f16": tok.decode(g16)})
    ops = _merge(all_ops)
    report["outputs"] = {
        "prompts": per_prompt,
        "greedy_agreement": float(np.mean([p["greedy_agreement"] for p in per_prompt])),
        "top_k": top_k,
        "top_k_overlap": float(np.mean([p["top_k_overlap"] for p in per_prompt])),
        "similarity": float(np.mean([p["similarity"] for p in per_prompt])),
        "similarity_metric": "cosine similarity of the next-token probability distributions (softmax of the "
                             "logits) at every prompt position, f16 vs f32, mean over positions and prompts",
        "steps": steps,
    }
    return _finish(report, ops)


def _run_ir(core: Any, xml: Path, f16: dict[str, Any], f32: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    from ov_npu_emu.cli.model_args import example_inputs

    base = core.read_model(str(xml))
    if any(p.get_partial_shape().is_dynamic for p in base.inputs):
        raise NumericsError(f"{xml} has dynamic inputs; reshape it to static shapes first (or pass the LLM's folder)")
    if any(p.get_any_name() == "input_ids" for p in base.inputs):
        raise NumericsError(f"{xml} takes input_ids: pass its folder (with the tokenizer) and --prompt")
    feed = example_inputs(base)
    outs = [o.get_any_name() for o in base.outputs]
    model, names = _with_captures(base)
    labels = [n for n, *_ in names] + outs
    ref = _compile_run(core, model, f32, [feed], labels)
    val = _compile_run(core, model, f16, [feed], labels)
    report["outputs"] = {"tensors": [{"name": o, **_err_stats(ref[0][o], val[0][o])} for o in outs]}
    return _finish(report, _summarize_ops(names, ref, val))


def _merge(per_prompt: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The worst per op over prompts (each prompt compiles its own length; the graph is the same)."""
    merged: dict[str, dict[str, Any]] = {}
    for ops in per_prompt:
        for o in ops:
            m = merged.get(o["node"])
            if m is None:
                merged[o["node"]] = dict(o)
                continue
            for k in ("max_abs_err", "max_rel_err", "peak_f32", "peak_f16", "nonfinite", "sentinels"):
                m[k] = max(m[k], o[k])
            m["overflow"] = m["overflow"] or o["overflow"]
    return list(merged.values())


def _finish(report: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    report["ops"] = ops
    report["layers"] = _summarize_layers(ops)
    first_nf = next((o for o in ops if o["nonfinite"]), None)
    first_of = next((o for o in ops if o["overflow"]), None)
    report["first_nonfinite"] = None if first_nf is None else {"node": first_nf["node"], "layer": first_nf["layer"],
                                                               "op": first_nf["op"]}
    report["first_overflow"] = None if first_of is None else {"node": first_of["node"], "layer": first_of["layer"],
                                                              "op": first_of["op"], "peak_f32": first_of["peak_f32"]}
    return report


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else ("nan" if math.isnan(x) else f"{x:.3g}")


def format_text(report: Mapping[str, Any], *, top: int = 10) -> str:
    """The report as text: outputs, per layer, the ops with the largest drift, first overflow/inf."""
    out = [f"model {report['model']}: emulated NPU f16 vs f32"
           + (f", protections: {', '.join(report['protect'])}" if report["protect"] else ", no protection")]
    o = report.get("outputs", {})
    if "prompts" in o:
        out.append(f"greedy agreement {o['greedy_agreement']:.0%} over {o['steps']} steps, top-{o['top_k']} overlap "
                   f"{o['top_k_overlap']:.2f}, similarity {o['similarity']:.4f} ({o['similarity_metric']})")
        for p in o["prompts"]:
            div = "none" if p["first_divergence"] is None else f"step {p['first_divergence']}"
            out.append(f"  {p['prompt']!r} ({p['tokens']} tokens): f32 {p['greedy_f32']} f16 {p['greedy_f16']}, "
                       f"first divergence {div}")
    for t in o.get("tensors", []):
        out.append(f"  output {t['name']}: max abs err {_fmt(t['max_abs_err'])}, rel {_fmt(t['max_rel_err'])}")
    fo, fn = report["first_overflow"], report["first_nonfinite"]
    past = "none" if fo is None else f"{fo['node']} ({fo['op']}, layer {fo['layer']}, peak {_fmt(fo['peak_f32'])})"
    out.append(f"first op past the f16 range (65504 in f32): {past}")
    out.append("first inf/NaN in the f16 run: "
               + ("none" if fn is None else f"{fn['node']} ({fn['op']}, layer {fn['layer']})"))
    out += ["", f"{'layer':>6} {'ops':>4} {'max abs err':>12} {'max rel err':>12} {'peak |x|':>10} {'>f16':>5} "
                f"{'inf/NaN':>7}  largest drift"]
    for d in report["layers"]:
        out.append(f"{d['layer']:>6} {d['ops']:4d} {_fmt(d['max_abs_err']):>12} {_fmt(d['max_rel_err']):>12} "
                   f"{_fmt(d['peak_f32']):>10} {d['overflowing_ops']:5d} {d['nonfinite_ops']:7d}  {d['largest_drift']}")
    ranked = sorted(report["ops"], key=lambda x: -x["max_rel_err"])[:top]
    out += ["", f"top {len(ranked)} ops by relative error:"]
    for x in ranked:
        out.append(f"  {_fmt(x['max_rel_err']):>8} {_fmt(x['max_abs_err']):>8} peak {_fmt(x['peak_f32']):>8}  "
                   f"{x['op']:12s} {x['node']}")
    return "\n".join(out)


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def to_json(report: Mapping[str, Any]) -> str:
    """Strict JSON (an infinite error is the string "inf")."""
    return json.dumps(_json_safe(dict(report)), indent=2, allow_nan=False)


def html_report(report: Mapping[str, Any]) -> str:
    """One self-contained page (no network): the summary, a bar per layer (log relative error,
    red past the f16 range or with inf/NaN) and the per-op table."""
    e = html.escape
    rows = []
    for d in report["layers"]:
        rel = d["max_rel_err"]
        width = 100 if math.isinf(rel) else max(1, min(100, int(100 + 12.5 * math.log10(max(rel, 1e-8)))))
        bad = d["overflowing_ops"] or d["nonfinite_ops"]
        rows.append(f"<tr><td>{e(d['layer'])}</td><td>{d['ops']}</td><td>{_fmt(d['max_abs_err'])}</td>"
                    f"<td>{_fmt(rel)}</td><td>{_fmt(d['peak_f32'])}</td><td>{d['overflowing_ops']}</td>"
                    f"<td>{d['nonfinite_ops']}</td><td><div class='bar {'bad' if bad else 'ok'}' "
                    f"style='width:{width}%'></div></td><td>{e(str(d['largest_drift']))}</td></tr>")
    op_rows = []
    for x in report["ops"]:
        cls = " class='bad'" if x["overflow"] or x["nonfinite"] else ""
        op_rows.append(f"<tr{cls}><td>{e(x['layer'])}</td><td>{e(x['op'])}</td><td>{e(x['node'])}</td>"
                       f"<td>{_fmt(x['max_abs_err'])}</td><td>{_fmt(x['max_rel_err'])}</td>"
                       f"<td>{_fmt(x['peak_f32'])}</td><td>{x['nonfinite']}</td></tr>")
    summary = e(format_text(report, top=0).split("\n\n")[0])
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>NPU numerics: {e(str(report['model']))}</title>
<style>
body {{ font: 13px sans-serif; margin: 16px; background: #fff; color: #222; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: left; }}
.bar {{ height: 12px; }} .bar.ok {{ background: #2a7; }} .bar.bad {{ background: #d22; }}
tr.bad td {{ background: #fdd; }} td:nth-child(8) {{ width: 240px; }}
pre {{ background: #f4f4f4; padding: 8px; white-space: pre-wrap; }}
</style></head><body>
<h1>NPU numerics: f16 vs f32 on the emulated NPU</h1>
<pre id="summary">{summary}</pre>
<h2>Per layer</h2>
<table id="layers"><tr><th>layer</th><th>ops</th><th>max abs err</th><th>max rel err</th><th>peak |x| (f32)</th>
<th>ops &gt; 65504</th><th>ops with inf/NaN</th><th>max rel err (log scale 1e-8 &hellip; 1)</th>
<th>largest drift</th></tr>
{''.join(rows)}</table>
<h2>Per op (graph order)</h2>
<table id="ops"><tr><th>layer</th><th>op</th><th>node</th><th>max abs err</th><th>max rel err</th><th>peak |x|</th>
<th>inf/NaN</th></tr>
{''.join(op_rows)}</table>
</body></html>
"""
