"""The emulated NPU's configuration keys, each declared once (:data:`NPU_OPTIONS`).

The device's properties (``NpuDevice.DEFAULT_PROPERTIES``, ``SUPPORTED_PROPERTIES``), the runtime
options of a compiled model (``plugin.NpuOptions``), the compiler's flags (``compiler.pipeline``)
and the hardware keys (``arch.HardwareConfig.from_config``) are all read through this table, so an
``NPU_EMU_*`` key unknown here is a typo ("did you mean"), whichever layer would have read it.

This module imports neither the compiler nor the driver at import time (the runtime path and the
compiler both read it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.options import Converter, Option, OptionTable, as_bool, as_choice, as_str, as_uint
from ov_npu_emu_npu.blob.validate import DEVICE_MEMORY_LIMIT

__all__ = ["CACHE_MODES", "activations_scale_factor", "compilation_mode_params", "higher_precision_ops",
           "DEFAULT_DEVICE_MEMORY_MB", "DEFAULT_WEIGHTS_CACHE_MB", "NPU_OPTIONS", "device_defaults",
           "device_properties", "precision", "read"]

#: default NPU_EMU_WEIGHTS_CACHE_MB: decompressed (f32) weights the driver may cache per bank
DEFAULT_WEIGHTS_CACHE_MB = 128
#: default NPU_EMU_DEVICE_MEMORY_MB: the emulated device's whole request arena (7936 MiB)
DEFAULT_DEVICE_MEMORY_MB = DEVICE_MEMORY_LIMIT >> 20


def precision(key: str, value: Any) -> str:
    """INFERENCE_PRECISION_HINT: f16 (the default, as the real NPU plugin's: f16 activations and KV)
    or f32 (exact comparisons with the CPU plugin)."""
    p = str(value).lower()
    p = {"float32": "f32", "float16": "f16", "<type: 'float32'>": "f32", "<type: 'float16'>": "f16"}.get(p, p)
    if p not in ("f32", "f16"):
        raise ConfigError(f"{key}={value!r}: NPU supports f32 or f16", key=key)
    return p


def compilation_mode_params(key: str, value: Any) -> str:
    """NPU_COMPILATION_MODE_PARAMS: space-separated ``name=value`` compiler parameters; the
    emulated compiler models ``compute-layers-with-higher-precision`` (op types, comma-separated)."""
    text = as_str(key, value).strip()
    for item in text.split():
        name, eq, val = item.partition("=")
        if name != "compute-layers-with-higher-precision" or not eq or not val:
            raise ConfigError(f"{key}={value!r}: the emulated NPU compiler models only "
                              "'compute-layers-with-higher-precision=OP,OP,...' (e.g. Sqrt,Power,ReduceMean,"
                              "Add_RMSNorm, what NPUW passes for LLMs)", key=key)
    return text


def activations_scale_factor(key: str, value: Any) -> float:
    """ACTIVATIONS_SCALE_FACTOR: a float, as ``ov::hint::activations_scale_factor``; <= 0 turns
    activation scaling off (-1, the default, and 0), as in OpenVINO's ActivationsScaling pass."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}={value!r}: expected a number (e.g. 8; -1 or 0: off)", key=key)
    try:
        s = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r}: expected a number (e.g. 8; -1 or 0: off)", key=key) from None
    if not math.isfinite(s):
        raise ConfigError(f"{key}={value!r}: expected a finite number (e.g. 8; -1 or 0: off)", key=key)
    return s


def higher_precision_ops(params: str) -> frozenset[str]:
    """The op types NPU_COMPILATION_MODE_PARAMS keeps in f32 (``Add_RMSNorm``: an RMSNorm's eps Add)."""
    ops: set[str] = set()
    for item in params.split():
        ops.update(t for t in item.partition("=")[2].split(",") if t)
    return frozenset(ops)


def _fence_mode(key: str, value: Any) -> str:
    from ov_npu_emu_npu.driver.command import FENCE_MODES

    mode = str(value).lower()
    if mode not in FENCE_MODES:
        raise ConfigError(f"{key}={mode!r}: expected one of {FENCE_MODES}", key=key)
    return mode


def _queue_mode(key: str, value: Any) -> str:
    from ov_npu_emu_npu.driver.command import QUEUE_MODES

    return as_choice(key, value, QUEUE_MODES).lower()


def _barrier_walk(key: str, value: Any) -> str:
    return as_choice(key, value, ("ONCE", "EVERY_INFERENCE"))


def _cache_budget(key: str, value: Any) -> int | None:
    """MiB to bytes; a negative value means no limit (None)."""
    try:
        mb = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r}: expected a number of MiB (-1: no limit)", key=key) from None
    return None if mb < 0 else int(mb * 2**20)


def _positive(typ: type) -> Converter:
    """A positive int or float hardware parameter (an arch.HardwareConfig field)."""

    def convert(key: str, value: Any) -> Any:
        try:
            n = typ(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}={value!r} is not a valid {typ.__name__}", key=key) from e
        if n <= 0:
            raise ConfigError(f"{key} must be positive, got {value!r}", key=key)
        return n

    return convert


def _platform(key: str, value: Any) -> str:
    """A calibrated NPU generation ("" = none); an unknown name is a ConfigError listing them."""
    name = as_str(key, value)
    if name:
        from ov_npu_emu_npu.platforms import get_platform

        get_platform(name)
    return name


def _read_only(key: str, value: Any) -> Any:
    return value


#: CACHE_MODE: OPTIMIZE_SIZE exports a weightless blob (weightless.py)
CACHE_MODES = ("OPTIMIZE_SPEED", "OPTIMIZE_SIZE")


def _cache_mode(key: str, value: Any) -> str:
    """One of CACHE_MODES; unset or "" reads as OPTIMIZE_SPEED."""
    return as_choice(key, value or "OPTIMIZE_SPEED", CACHE_MODES)


def _path(key: str, value: Any) -> str | None:
    """A file path; "" reads as unset (None)."""
    return str(value) if value else None


def _model(key: str, value: Any) -> Any:
    """MODEL_PTR: an ``openvino.Model`` (None or "" when unset)."""
    if value is None or isinstance(value, str) and not value:
        return None
    import openvino as ov

    if not isinstance(value, ov.Model):
        raise ConfigError(f"{key} must be an openvino.Model, got {type(value).__name__}", key=key)
    return value


_FLAG = as_bool

#: PERFORMANCE_HINT values (the real's ov::hint::PerformanceMode names)
PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")


def _performance_hint(key: str, value: Any) -> str:
    return as_choice(key, value or "LATENCY", PERFORMANCE_HINTS).upper()


def _requests(key: str, value: Any) -> int:
    return as_uint(key, value)


def optimal_infer_requests(config: Mapping[str, Any]) -> int:
    """OPTIMAL_NUMBER_OF_INFER_REQUESTS as the real NPU plugin computes it: 1, or under the
    THROUGHPUT hint 4 on NPU3720 and 8 on later generations (and on our unnamed hardware)."""
    if NPU_OPTIONS.get(config, "PERFORMANCE_HINT") != "THROUGHPUT":
        return 1
    return 4 if NPU_OPTIONS.get(config, "NPU_EMU_PLATFORM") == "NPU3720" else 8

NPU_OPTIONS = OptionTable(
    "The NPU device",
    [
        Option("INFERENCE_PRECISION_HINT", precision, "f16",
               "f16 (the real NPU's default: float activations and in-graph KV stored f16, weights as "
               "stored, DPU/softmax/SDPA accumulate in f32) or f32 (exact comparisons with the CPU plugin); "
               "`float16`/`float32` accepted. See [Precision](npu_device.md#precision)", scope="device"),
        Option("NPU_COMPILATION_MODE_PARAMS", compilation_mode_params, "",
               "Compile. `compute-layers-with-higher-precision=OP,OP,...`: in f16 mode the outputs of these op "
               "types stay f32 (`Add_RMSNorm`: an Add reading a ReduceMean, an RMSNorm's eps); NPUW passes "
               "`Sqrt,Power,ReduceMean,Add_RMSNorm` for LLMs. Other compiler parameters are refused",
               scope="compile"),
        Option("NPU_COMPILER_DYNAMIC_QUANTIZATION", _FLAG, "NO",
               "Compile. YES: in f16 mode each MatMul on a 4-bit weight quantizes its activation rows to int8 "
               "per block of 32 columns (symmetric, max/127) and multiplies integers, as the real NPU compiler's "
               "dynamic quantization; NPUW's LLM sub-models get YES, as the real NPUW gives them when the NPU lists "
               "the `COMPILER_DYNAMIC_QUANTIZATION` capability. f32 mode keeps float activations. See "
               "[Dynamic quantization](#dynamic-quantization)", scope="compile"),
        Option("PERF_COUNT", _FLAG, "NO", "YES: per-task profiling info (`get_profiling_info`)", scope="device"),
        Option("PERFORMANCE_HINT", _performance_hint, "LATENCY",
               "`LATENCY`, `THROUGHPUT` or `CUMULATIVE_THROUGHPUT`: sets OPTIMAL_NUMBER_OF_INFER_REQUESTS, "
               "the pool `AsyncInferQueue(compiled)` makes", scope="device"),
        Option("PERFORMANCE_HINT_NUM_REQUESTS", _requests, 1,
               "Accepted and reported as the real (the emulated NPU runs one inference at a time)",
               scope="device"),
        Option("OPTIMAL_NUMBER_OF_INFER_REQUESTS", _read_only, None,
               "Read only. 1; under the THROUGHPUT hint 4 on `NPU_EMU_PLATFORM=NPU3720`, else 8 (the real "
               "plugin's numbers)", shown_default="1", scope="device-info", read_only=True),
        Option("NPU_EMU_FENCE_MODE", _fence_mode, "interrupt",
               "How the host waits for a submission: `interrupt` or `polling`", origin="ours", scope="device"),
        Option("NPU_EMU_QUEUE_MODE", _queue_mode, "inline",
               "`inline`: the submitting thread runs the management core (no thread handoff); `thread`: a "
               "device thread runs it while the host waits on the fence", origin="ours", scope="device"),
        Option("NPU_EMU_BARRIER_WALK", _barrier_walk, "ONCE",
               "ONCE: the management core walks the barriers once per command-list build and replays; "
               "EVERY_INFERENCE: re-walks them task by task on every inference", origin="ours", scope="device"),
        Option("NPU_EMU_HOST_FUSION", _FLAG, "YES",
               "Load. YES: a provable tiled MatMul runs as one host product (see "
               "[Host plan](#host-plan-one-product-per-tiled-matmul)); NO: every tile on the host, for A/B",
               origin="ours", scope="device"),
        Option("NPU_EMU_MUTABLE_COMMAND_LIST", _FLAG, "YES",
               "NO emulates a driver without mutable command lists (a new list per binding change)",
               origin="ours", scope="device"),
        Option("NPU_EMU_WEIGHT_COMPRESSION", _FLAG, "YES",
               "Compile. YES keeps decompression subgraphs compressed, NO folds them to f32", origin="ours",
               scope="device"),
        Option("NPU_EMU_WEIGHTS_CACHE", _FLAG, "YES",
               "Load. YES caches decompressed weights in the driver, NO decompresses per tile on every "
               "inference", origin="ours", scope="device"),
        Option("NPU_EMU_WEIGHTS_CACHE_MB", _cache_budget, DEFAULT_WEIGHTS_CACHE_MB,
               "The weights cache's budget in MiB per device bank, -1 = no limit; a blob whose decompressed "
               "weights exceed it caches none", origin="ours", scope="device"),
        Option("NPU_EMU_DEVICE_MEMORY_MB", _cache_budget, DEFAULT_DEVICE_MEMORY_MB,
               "Load. The memory budget in MiB for everything one request of a blob declares (user "
               "ports, states, scratch, CMX, descriptors), checked at import before anything is "
               "allocated: a blob over it is a `MemoryBudgetError` naming its largest item; -1 = no budget "
               "(each tensor and the arena stay within the 7936 MiB address window). See "
               "[Memory budget](#memory-budget)",
               origin="ours", scope="device"),
        Option("NPU_EMU_WEIGHTS_BANK", _FLAG, "YES",
               "YES: constants shared through the device's weights bank; NO: private weights and cache per "
               "compiled model", origin="ours", scope="device"),
        Option("NPU_EMU_SKIP_PADDED_ROWS", _FLAG, "NO",
               "Compile/load. NPUW's whole-prompt prefill sets YES: see \"Padded rows\" below", origin="ours",
               scope="device"),
        Option("DEVICE_ARCHITECTURE", _read_only, "NPU-EMU", "Read only", scope="device"),
        Option("OPTIMIZATION_CAPABILITIES", _read_only,
               ["FP32", "FP16", "INT8", "INT4", "EXPORT_IMPORT", "COMPILER_DYNAMIC_QUANTIZATION"],
               "Read only", shown_default="FP32, FP16, INT8, INT4, EXPORT_IMPORT, COMPILER_DYNAMIC_QUANTIZATION",
               scope="device"),
        # compile-time keys: read from the compile config only, no device-level default (unset:
        # the platform preset or the compiler's own choice); supported all the same (NPUW passes
        # them down to its sub-models)
        Option("NPU_EMU_PLATFORM", _platform, None,
               "Compile. A calibrated preset (`NPU3720`, `NPU4000`) as the base of the six hardware keys "
               "below; see [Calibration](#calibration)", origin="ours", scope="compile"),
        Option("NPU_EMU_CMX_SIZE", _positive(int), None, "Compile. Bytes of on-chip scratchpad", origin="ours",
               shown_default="2 MiB (or the platform's)", scope="compile"),
        Option("NPU_EMU_DDR_BW_GBPS", _positive(float), None, "Compile. DDR <-> CMX bandwidth, GB/s",
               origin="ours", shown_default="64 (or the platform's)", scope="compile"),
        Option("NPU_EMU_DMA_CHANNELS", _positive(int), None, "Compile. Concurrent DMA engines", origin="ours",
               shown_default="2 (or the platform's)", scope="compile"),
        Option("NPU_EMU_DPU_MACS", _positive(int), None, "Compile. MAC array throughput per clock, all tiles",
               origin="ours", shown_default="4096 (or the platform's)", scope="compile"),
        Option("NPU_EMU_SHAVE_FLOPS", _positive(int), None,
               "Compile. Vector FLOPs per clock over all SHAVE cores", origin="ours",
               shown_default="128 (or the platform's)", scope="compile"),
        Option("NPU_EMU_CLOCK_MHZ", _positive(float), None, "Compile. NPU clock, MHz", origin="ours",
               shown_default="1850 (or the platform's)", scope="compile"),
        Option("NPU_EMU_STAGING", _FLAG, True, "Compile. YES: stage DPU activations through CMX", origin="ours",
               scope="compile"),
        Option("NPU_EMU_PING_PONG", _FLAG, True,
               "Compile. YES: two CMX slots per tiled-MatMul stream; NO: one slot, the same tiles in "
               "sequence, for A/B", origin="ours", scope="compile"),
        Option("NPU_EMU_FUSE_KV", _FLAG, True,
               "Compile. YES: an attention reading a past KV input stored as f16 (`Convert` f16 -> f32, "
               "`Concat` with the new rows) runs as one `sdpa_kv` task that converts only the rows its mask "
               "leaves open (the rest provably add exact zeros: same bits as NO, else it takes NO's path "
               "for that run); NO: the `Convert`, `Concat` and `sdpa` tasks, for A/B", origin="ours",
               scope="compile"),
        Option("NPU_EMU_F16_CLAMP", _FLAG, False,
               "Compile, f16 only. YES: every Add of two activations of one shape (a transformer's residual "
               "Add) saturates its inputs and its output to the f16 range (+-65504: an overflowed value "
               "becomes 65504, not inf), as OpenVINO clamps T5's f16 FC output before the residual Add "
               "(openvino#37041); a protection against f16 overflow, see docs/numerics.md", origin="ours",
               scope="compile"),
        Option("ACTIVATIONS_SCALE_FACTOR", activations_scale_factor, -1.0,
               "Compile, f16 only. `ov::hint::activations_scale_factor`, with the GPU plugin's meaning and "
               "default; **the real NPU plugin does not accept it** (no such option in its `options.hpp`): "
               "a config that sets it fails there. A number `s` > 0: the residual stream is carried divided "
               "by `s` (residual writers' MatMul inputs scaled by 1/s, RMSNorms absorb it with eps / s^2, "
               "other readers scaled back up), so a residual Add past 65504 stays in f16 range; <= 0 "
               "(-1, 0): off, as the real. A protection against f16 overflow, see docs/numerics.md",
               scope="compile"),
        Option("NPU_EMU_VERIFY", _FLAG, True,
               "Compile. YES: verify the memory plan and the schedule of every blob", origin="ours", scope="compile"),
        # the real NPU's keys of the weightless export (weightless.py)
        Option("CACHE_MODE", _cache_mode, "OPTIMIZE_SPEED",
               "Compile. OPTIMIZE_SIZE: `export_model` writes a weightless blob that refers to the IR's "
               "`.bin` ([npu_blob_format.md](npu_blob_format.md#weightless-container)); under `CACHE_DIR` "
               "only OPTIMIZE_SPEED", scope="compile"),
        Option("WEIGHTS_PATH", _path, None,
               "Compile/import. The IR `.bin` a weightless blob refers to (compile: else the file the model "
               "was read from) and takes its weights back from (import)", scope="compile"),
        Option("MODEL_PTR", _model, None,
               "Import. The `ov.Model` a weightless blob takes its weights back from, instead of "
               "`WEIGHTS_PATH`", scope="compile"),
        # read-only: answered by get_property, refused in a config
        Option("NPU_EMU_PLATFORMS", _read_only, None,
               "Read only (device). The calibrated presets `NPU_EMU_PLATFORM` selects: name -> hardware fields",
               origin="ours", shown_default="—", scope="device-info", read_only=True),
        Option("NPU_EMU_COST_MODEL_US", _read_only, None,
               "Read only (compiled model). Device time of one inference predicted by the cost model "
               "(barrier-graph replay of the command list, nothing runs): what `ov-npu-emu estimate` adds up",
               origin="ours", shown_default="—", scope="compiled-model", read_only=True),
    ],
    prefixes=("NPU_EMU_",),
)


def device_defaults() -> dict[str, Any]:
    """``NpuDevice.DEFAULT_PROPERTIES``: the device-scope options (stored, with their defaults)."""
    return {o.name: o.default for o in NPU_OPTIONS.scoped("device")}


def device_properties() -> list[str]:
    """What the device lists in SUPPORTED_PROPERTIES: every key but the compiled model's."""
    return [o.name for o in NPU_OPTIONS if o.scope != "compiled-model"]


def read(config: Mapping[str, Any], name: str) -> Any:
    """The typed value of the NPU key ``name`` in ``config`` (its default when unset)."""
    return NPU_OPTIONS.get(config, name)
