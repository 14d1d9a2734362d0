"""Runs the compiler stages in order: front end -> lower -> memory -> schedule -> verify -> emit."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import openvino as ov

from ov_npu_emu.errors import MemoryPlanError
from ov_npu_emu_npu.arch import HardwareConfig
from ov_npu_emu_npu.blob.reader import SplitBlob
from ov_npu_emu_npu.blob.validate import DEVICE_MEMORY_LIMIT
from ov_npu_emu_npu.compiler.emit import emit_blob, in_symbol, out_symbol
from ov_npu_emu_npu.compiler.frontend import Prepared, prepare
from ov_npu_emu_npu.compiler.graph import dims
from ov_npu_emu_npu.compiler.lower import lower
from ov_npu_emu_npu.compiler.memory import plan_memory
from ov_npu_emu_npu.compiler.schedule import schedule
from ov_npu_emu_npu.compiler.tokens import mark_token_rows, prefill_length
from ov_npu_emu_npu.compiler.verify import verify_memory, verify_schedule
from ov_npu_emu_npu.options import NPU_OPTIONS, higher_precision_ops

__all__ = ["COMPILER_VERSION", "compile_to_blob", "precision_of"]

logger = logging.getLogger(__name__)

COMPILER_VERSION = "0.1.0"


def precision_of(config: Mapping[str, Any]) -> str:
    """INFERENCE_PRECISION_HINT: f16 (default, the real NPU's) or f32 (exact comparisons)."""
    return str(NPU_OPTIONS.get(config, "INFERENCE_PRECISION_HINT"))


def _flag(config: Mapping[str, Any], key: str) -> bool:
    """A compile-time YES/NO key, through NPU_OPTIONS (ov_npu_emu_npu/options.py: default and spellings)."""
    return bool(NPU_OPTIONS.get(config, key))


def _port(port: ov.Output, shape: tuple[int, ...], symbol: str, state: str | None) -> dict[str, Any]:
    names = sorted(port.get_names(), key=lambda n: (n != port.get_any_name(), n)) if port.get_names() else []
    if state is not None:
        names = [state]
    return {"names": names, "shape": list(shape), "element_type": port.get_element_type().get_type_name(),
            "symbol": symbol, "state": state}


def _weights_format(lw: Any) -> dict[str, Any]:
    """Metadata: which weights stay compressed in .npu.weights and in which format."""
    records = [v.comp.info for v in lw.compressed]
    counts: dict[str, int] = {}
    for r in records:
        counts[str(r["format"])] = counts.get(str(r["format"]), 0) + 1
    return {"compressed": records, "counts": counts,
            "compressed_bytes": sum(int(r["bytes"]) for r in records),
            "f32_equivalent_bytes": sum(int(r["f32_bytes"]) for r in records)}


def _token_prefill(prep: Prepared) -> bool:
    """An LLM prefill, which token-row windows serve (tokens.prefill_length)."""
    for p in prep.model.get_parameters():
        if "input_ids" in p.output(0).get_names():
            shape = p.get_output_partial_shape(0)
            return shape.is_static and prefill_length(dims(shape.to_shape()), bool(prep.variables)) > 0
    return False


def compile_to_blob(model: ov.Model, config: Mapping[str, Any] | None = None, *,
                    split: bool = False) -> bytes | SplitBlob:
    """Compile a static ``openvino.Model`` into an NPU ELF blob.

    ``split``: return it as a :class:`SplitBlob` whose ``.npu.weights`` are views of the model's
    constants (no copy), for a driver in the same process to bank them; ``.join()`` gives the
    bytes ``split=False`` returns.
    """
    config = dict(config or {})
    t0 = time.perf_counter()
    hw = HardwareConfig.from_config(config)
    precision = precision_of(config)
    # NPU_EMU_WEIGHT_COMPRESSION=NO folds decompression subgraphs to f32 constants (the old
    # behaviour; blobs several times larger) - kept for comparisons
    # (docs/performance.md, "Knobs that change speed or memory")
    # ACTIVATIONS_SCALE_FACTOR: residual streams carried divided by it, f16 only (act_scale.py)
    scale = float(NPU_OPTIONS.get(config, "ACTIVATIONS_SCALE_FACTOR")) if precision == "f16" else 0.0
    prep = prepare(model, compress=_flag(config, "NPU_EMU_WEIGHT_COMPRESSION"), activations_scale=scale)
    # NPU_EMU_PING_PONG=NO: one CMX slot per tiled-MatMul stream (no DMA/compute overlap), for A/B.
    # A multi-token prefill keeps the row-tiled MatMul staging: its token-row windows (tokens.py)
    # skip whole row tiles, and do not yet follow the K/N tiles of the ping-pong lowering.
    lw = lower(prep, hw, f16=precision == "f16", stage=_flag(config, "NPU_EMU_STAGING"),
               ping_pong=_flag(config, "NPU_EMU_PING_PONG"), tile_weights=not _token_prefill(prep),
               fuse_kv=_flag(config, "NPU_EMU_FUSE_KV"), clamp_residual=_flag(config, "NPU_EMU_F16_CLAMP"),
               higher_precision=higher_precision_ops(str(NPU_OPTIONS.get(config, "NPU_COMPILATION_MODE_PARAMS"))),
               dynamic_quantization=precision == "f16" and _flag(config, "NPU_COMPILER_DYNAMIC_QUANTIZATION"))
    mark_token_rows(lw.tasks, lw.inputs, [p.output(0).get_names() for p in prep.model.get_parameters()],
                    bool(prep.variables))
    plan = plan_memory(lw, hw.cmx_size)
    if plan.scratch_size > DEVICE_MEMORY_LIMIT:  # the request would allocate it on creation
        raise MemoryPlanError(f"activations need {plan.scratch_size} bytes of DDR scratch, more than the emulated "
                              f"device memory ({DEVICE_MEMORY_LIMIT} bytes); reshape the model smaller",
                              stage="memory")
    sched = schedule(lw, plan.reuse_deps)
    if _flag(config, "NPU_EMU_VERIFY"):
        verify_memory(lw)
        verify_schedule(lw, sched)
    m = prep.model
    n_var = len(prep.variables)
    params, results = m.get_parameters(), m.get_results()
    inputs = []
    for i, p in enumerate(params):
        var = prep.variables[i - prep.n_user_inputs].variable_id if i >= prep.n_user_inputs else None
        inputs.append(_port(p.output(0), lw.inputs[i].shape, in_symbol(i), var))
    outputs = []
    for j, r in enumerate(results):
        var = prep.variables[j - prep.n_user_outputs].variable_id if j >= prep.n_user_outputs else None
        outputs.append(_port(r.output(0), lw.outputs[j].shape, out_symbol(j), var))
    variables = []
    for k, v in enumerate(prep.variables):
        variables.append({"id": v.variable_id, "shape": list(v.shape), "element_type": v.element_type.get_type_name(),
                          "input": prep.n_user_inputs + k, "output": prep.n_user_outputs + k,
                          "init": None if v.init is None else v.init.reshape(-1).tolist()})
    cfg_json = json.dumps({k: str(v) for k, v in sorted(config.items())}, sort_keys=True)
    meta = {
        "compiler": {"name": "ov-npu-emu", "version": COMPILER_VERSION},
        "config_hash": hashlib.sha256(cfg_json.encode()).hexdigest()[:16],
        "model_name": model.get_friendly_name(),
        "precision": precision,
        "hw": hw.to_dict(),
        "inputs": inputs,
        "outputs": outputs,
        "variables": variables,
        "dma_channels": hw.dma_channels,
        "weights_format": _weights_format(lw),
    }
    blob = emit_blob(lw, plan, sched, meta, split=split)
    logger.debug("compiled %r: %d tasks, %d barriers, %d variables, %d bytes in %.2fs", model.get_friendly_name(),
                len(lw.tasks), len(sched.barriers), n_var, len(blob), time.perf_counter() - t0)
    return blob
