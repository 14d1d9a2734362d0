"""LLMCompiledModel: the stateful-looking LLM built from a static prefill model and generate variants."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import ConfigError, DeviceNotFoundError, NpuEmuError, PluginError
from ov_npu_emu.options import check_known
from ov_npu_emu.runtime.collector import collector_paused
from ov_npu_emu.runtime.device import DeviceCompiledModel, PortInfo, ir_weights_path
from ov_npu_emu.runtime.model_cache import digest_scope
from ov_npu_emu_npuw.blockkv import split_kv_into_blocks
from ov_npu_emu_npuw.config import (
    EMU_DEVICE_PREFIX,
    LLMConfig,
    for_device,
    generate_rung_sizes,
    parse_config,
    skip_padded_rows,
)
from ov_npu_emu_npuw.lora import lift_lora_states
from ov_npu_emu_npuw.model_io import KVLayout
from ov_npu_emu_npuw.position_masks import position_masks
from ov_npu_emu_npuw.serialize import ImportedLLM, cache_key, export_llm, load_cached, read_llm, store_cached
from ov_npu_emu_npuw.transform import make_generate_model, make_lm_head_model, make_prefill_model, to_stateless

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel
    from ov_npu_emu.api.core import Core
    from ov_npu_emu_npuw.infer_request import LLMInferRequest

__all__ = [
    "CPU_SINGLE_THREAD_STEP_BYTES",
    "GENERATE_LADDER_MIN_KV_SHARE",
    "LLMCompiledModel",
    "compile_llm",
    "configure_logging",
    "import_llm",
    "generate_default_config",
    "generate_ladder_on",
    "pick_device",
]

logger = logging.getLogger("ov_npu_emu_npuw")

#: verbosity of this plugin's log (ERROR/WARNING/INFO/DEBUG); the real NPUW reads OPENVINO_NPUW_LOG_LEVEL
LOG_ENV = "OV_NPU_EMU_NPUW_LOG_LEVEL"
_logging_configured = False

#: NPUW's default generate sub-config on the CPU device: a generate-side sub-model whose per-step
#: work (constant bytes + its KV window in f32) is at most this runs single-threaded.  Measured
#: on 2 cores (docs/performance_log.md "Default generate sub-config on CPU"): below ~1.5 MiB the CPU
#: plugin's per-node 2-thread synchronisation costs more than the second thread saves.
CPU_SINGLE_THREAD_STEP_BYTES = 3 << 19

#: the generate ladder is on by default (CPU device, emulated NPU) when the largest variant's KV window (f32)
#: is at least this share of the model's constant bytes: a step saves at most its KV share, and
#: each rung compiled on CPU holds its own copy of the weights unless the CPU device's weights
#: bank shares them (f32 precision; docs/npuw.md "Generate ladder", "One weights copy")
GENERATE_LADDER_MIN_KV_SHARE = 0.1
#: devices whose sub-blobs can be exported weightless (each writes them itself)
WEIGHTLESS_DEVICES = ("NPU", "CPU")


def configure_logging() -> None:
    """Honour the log-level env vars once (library code never prints; this only attaches a handler)."""
    global _logging_configured
    if _logging_configured:
        return
    _logging_configured = True
    level = os.environ.get(LOG_ENV) or os.environ.get("OPENVINO_NPUW_LOG_LEVEL")
    if level:
        logger.setLevel(getattr(logging, level.upper(), logging.INFO))
        if not logger.handlers:
            h = logging.StreamHandler(sys.stderr)
            h.setFormatter(logging.Formatter("[NPUW] %(message)s"))
            logger.addHandler(h)


def pick_device(core: Core, devices: tuple[str, ...]) -> str:
    """First device of NPUW_DEVICES that is registered (the fallback-list semantics)."""
    names = core.registry.names()
    for d in devices:
        if d in names:
            return d
    if "NPU" in devices:
        raise PluginError(
            f"NPUW_DEVICES={','.join(devices)}: the emulated NPU device plugin (ov_npu_emu_npu) is not available "
            f"in this installation; set NPUW_DEVICES to one of {sorted(names)}, e.g. NPUW_DEVICES=CPU"
        )
    raise DeviceNotFoundError(",".join(devices), sorted(names))


@dataclasses.dataclass
class SubModels:
    """The compiled static models of one LLM (facade CompiledModels on the chosen device)."""

    prefill: CompiledModel
    generate: dict[int, CompiledModel]  # KV size -> variant
    lm_head: CompiledModel | None = None  # shared LM head (NPUW_LLM_SHARED_HEAD)
    # PYRAMID prefill attention: mask length -> chunk-prefill model with a shorter past
    prefill_pyramid: dict[int, CompiledModel] = dataclasses.field(default_factory=dict)
    # prefill ladder (NPUW_LLM_PREFILL_LADDER, CPU device): prompt size -> whole-prompt prefill,
    # filled on first use by LLMCompiledModel.ladder_rung
    prefill_ladder: dict[int, CompiledModel] = dataclasses.field(default_factory=dict)
    # generate ladder (NPUW_LLM_GENERATE_LADDER): KV size -> variant, filled on first use by
    # LLMCompiledModel.generate_rung
    generate_ladder: dict[int, CompiledModel] = dataclasses.field(default_factory=dict)


class LLMCompiledModel(DeviceCompiledModel):
    """Stateful interface (input_ids, attention_mask, position_ids, beam_idx → logits) over static models."""

    def __init__(
        self,
        name: str,
        cfg: LLMConfig,
        kv: KVLayout,
        device: str,
        subs: SubModels,
        inputs: list[PortInfo],
        outputs: list[PortInfo],
        compile_seconds: dict[str, float] | None = None,
        sub_defaults: dict[str, dict[str, Any]] | None = None,
        ladder_factory: Callable[[int], CompiledModel] | None = None,
        rung_factory: Callable[[int], tuple[CompiledModel, dict[str, Any]]] | None = None,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.kv = kv
        self.device = device
        self.subs = subs
        self.inputs = inputs
        self.outputs = outputs
        self.compile_seconds = compile_seconds or {}
        #: NPUW's per-device defaults added to each generate-side sub-config, by role ("kv256", "lm_head")
        self.sub_defaults = sub_defaults or {}
        # the present outputs' type; u8/u4 KV is quantised from f16 rows when written
        self.kv_dtype = np.float32 if cfg.kv_precision == "f32" else np.float16
        self.loaded_from_cache = False
        #: the IR .bin a weightless export (CACHE_MODE=OPTIMIZE_SIZE) refers to
        self.weights_path = ""
        # builds a ladder rung (a static whole-prompt prefill of that size); None after import
        self._ladder_factory = ladder_factory
        self._ladder_lock = threading.Lock()
        # builds a generate-ladder rung (variant, its NPUW default sub-config); None after import
        self._rung_factory = rung_factory
        #: KV sizes a conversation can be bound to, ascending: generate-ladder rungs (only while
        #: they can be compiled), then the configured variants
        self.generate_sizes: tuple[int, ...] = (
            (cfg.generate_rungs if rung_factory is not None else ()) + cfg.variants
        )

    def generate_rung(self, size: int) -> CompiledModel:
        """The generate-ladder variant of ``size`` KV slots, compiled on first use."""
        rung = self.subs.generate_ladder.get(size)
        if rung is not None:
            return rung
        if self._rung_factory is None:  # generate_sizes holds no rung then: unreachable
            raise PluginError(f"generate ladder rung kv{size} cannot be compiled (imported model)")
        with self._ladder_lock:
            rung = self.subs.generate_ladder.get(size)
            if rung is None:
                t0 = time.perf_counter()
                rung, extra = self._rung_factory(size)
                self.subs.generate_ladder[size] = rung
                self.sub_defaults[f"kv{size}"] = extra
                seconds = time.perf_counter() - t0
                self.compile_seconds[f"{self.name}_kv{size}"] = seconds
                logger.info("compiled generate ladder rung kv%d on %s in %.2f s", size, self.device, seconds)
        return rung

    def ladder_rung(self, n: int) -> tuple[int, CompiledModel] | None:
        """The smallest prefill-ladder rung holding an ``n``-token prompt, compiled on first use;
        None when the ladder is off, cannot be built (imported model) or no rung is smaller
        than NPUW_LLM_MAX_PROMPT_LEN."""
        size = next((s for s in self.cfg.ladder if s >= n), 0)
        if not size:
            return None
        rung = self.subs.prefill_ladder.get(size)
        if rung is None:
            if self._ladder_factory is None:
                return None
            with self._ladder_lock:
                rung = self.subs.prefill_ladder.get(size)
                if rung is None:
                    t0 = time.perf_counter()
                    rung = self._ladder_factory(size)
                    self.subs.prefill_ladder[size] = rung
                    self.compile_seconds[f"{self.name}_prefill_l{size}"] = time.perf_counter() - t0
                    logger.info(
                        "compiled prefill ladder rung %d on %s in %.2f s",
                        size,
                        self.device,
                        time.perf_counter() - t0,
                    )
        return size, rung

    def create_infer_request(self) -> LLMInferRequest:
        from ov_npu_emu_npuw.infer_request import LLMInferRequest

        with collector_paused():  # sub-requests build command lists: many small objects
            return LLMInferRequest(self)

    def export_model(self) -> bytes:

        return export_llm(self)

    def get_property(self, name: str) -> Any:
        props = self.cfg.properties()
        if name in props:
            return props[name]
        if name in (
            "NPUW_LLM_PREFILL_CONFIG",
            "NPUW_LLM_GENERATE_CONFIG",
            "NPUW_LLM_SHARED_HEAD_CONFIG",
        ):
            raise ConfigError(f"{name} is write-only option!", key=name)  # real text
        if name == "SUPPORTED_PROPERTIES":
            return sorted(
                {
                    *props,
                    "SUPPORTED_PROPERTIES",
                    "NETWORK_NAME",
                    "MODEL_NAME",
                    "OPTIMAL_NUMBER_OF_INFER_REQUESTS",
                }
            )
        if name in ("NETWORK_NAME", "MODEL_NAME"):
            return self.name
        if name == "OPTIMAL_NUMBER_OF_INFER_REQUESTS":
            return 1
        if name == "NPUW_EMU_GENERATE_DEFAULT_CONFIG":
            # ours only (the real one has no read-back): what NPUW added per generate sub-model
            return {role: dict(extra) for role, extra in self.sub_defaults.items()}
        if name == "EXECUTION_DEVICES":
            return [self.device]
        if name.startswith("NPU_EMU_"):
            # an emulator key of the sub-models' device: its value per sub-model, by role
            return {role: sub.get_property(name) for role, sub in self.roles().items()}
        raise ConfigError(f"Unsupported property {name} by NPUW LLM compiled model", key=name)

    def roles(self) -> dict[str, CompiledModel]:
        """The sub-models by role: ``kv<size>``, ``prefill_p<size>``, ``prefill``, ``lm_head``
        (the artefact's order, serialize.py)."""
        out: dict[str, CompiledModel] = {f"kv{k}": sub for k, sub in sorted(self.subs.generate.items())}
        out.update((f"prefill_p{p}", sub) for p, sub in sorted(self.subs.prefill_pyramid.items()))
        out["prefill"] = self.subs.prefill
        if self.subs.lm_head is not None:
            out["lm_head"] = self.subs.lm_head
        return out

    def set_property(self, properties: Mapping[str, Any]) -> None:
        raise ConfigError(
            f"NPUW LLM compiled model properties are read-only; pass {sorted(properties)} to compile_model"
        )


def generate_default_config(
    device: str,
    model: ov.Model,
    user_config: Mapping[str, Any],
    kv: KVLayout | None = None,
    kv_size: int = 0,
) -> dict[str, Any]:
    """NPUW's per-device default for one generate-side sub-model (a variant or the shared head).

    Like the real NPUW's per-device default configs, it only fills what the user left unset:
    any ``INFERENCE_NUM_THREADS`` in NPUW_LLM_GENERATE_CONFIG / ++NPUW_LLM_GENERATE_CONFIG (or
    top-level) wins, ``0`` restoring the CPU plugin's own choice.
    """
    if device != "CPU" or "INFERENCE_NUM_THREADS" in user_config:
        return {}
    work = sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")
    if kv is not None:
        # the step reads (and converts to f32) the whole past window of every KV tensor
        work += 4 * kv_size * sum(h * d for h, d in zip(kv.num_heads, kv.head_dims, strict=False))
    return {"INFERENCE_NUM_THREADS": 1} if work <= CPU_SINGLE_THREAD_STEP_BYTES else {}


def cpu_weights_default(device: str, user_config: Mapping[str, Any]) -> dict[str, Any]:
    """The CPU device's default for every sub-model: no dynamic quantization of activations.

    The real NPUW (NPUW_DCOFF_TYPE=f16 + NPUW_DCOFF_SCALE, its defaults) unpacks int4/int8 weights
    on the host into f16 function closures, so the CPU plugin never sees compressed weights and
    never quantizes activations for them; ours hands the CPU plugin the compressed weights, so
    it turns that quantization off (measured: docs/npuw.md, "Sub-model configs at default
    properties"). A DYNAMIC_QUANTIZATION_GROUP_SIZE the user gave wins.
    """
    if device != "CPU" or "DYNAMIC_QUANTIZATION_GROUP_SIZE" in user_config:
        return {}
    return {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def generate_ladder_on(cfg: LLMConfig, device: str, model: ov.Model, kv: KVLayout) -> bool:
    """NPUW_LLM_GENERATE_LADDER's effective value: as given (NO when the variants are explicit
    and the key unset), else on for the CPU device and the emulated NPU when the largest
    variant's KV window (f32) is at least GENERATE_LADDER_MIN_KV_SHARE of the model's constant
    bytes (on the emulated NPU the rungs share one copy of the weights through the weights
    bank; a bench-small decode step there: 1.29-1.50x the real NPUW's TPOT without, 0.87-1.12x
    with the ladder)."""
    if cfg.generate_ladder is not None:
        return cfg.generate_ladder
    if device not in ("CPU", "NPU") or cfg.block_kv:  # block KV binds its blocks per configured variant
        return False
    weights = sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")
    window = 4 * cfg.total_size * sum(h * d for h, d in zip(kv.num_heads, kv.head_dims, strict=False))
    return window >= GENERATE_LADDER_MIN_KV_SHARE * weights


def import_llm(core: Core, blob: bytes, config: Mapping[str, Any] | None = None) -> LLMCompiledModel:
    """An exported NPUW artefact back as a compiled model (serialize.py reads and checks it)."""
    configure_logging()
    return from_parts(read_llm(core, blob, config))


def from_parts(p: ImportedLLM) -> LLMCompiledModel:
    subs = SubModels(p.prefill, p.generate, p.lm_head, p.prefill_pyramid)
    # generate-ladder rungs are compiled on first use from the source model, which an imported
    # artefact does not have: it runs on its configured variants only
    cfg = dataclasses.replace(p.cfg, generate_rungs=())
    return LLMCompiledModel(p.name, cfg, p.kv, p.device, subs, p.inputs, p.outputs, sub_defaults=p.sub_defaults)


def compile_llm(core: Core, model: ov.Model, config: Mapping[str, Any]) -> LLMCompiledModel:
    """Compile a stateful LLM the NPUW way; with CACHE_DIR, reuse a previous compilation from disk."""
    with collector_paused():  # sub-model builds and compiles make many small objects at once
        return _compile_llm(core, model, config)


def _compile_llm(core: Core, model: ov.Model, config: Mapping[str, Any]) -> LLMCompiledModel:
    configure_logging()
    try:  # the emulated NPU's keys: a misspelt one fails here whichever NPUW_DEVICES runs the
        known = core.get_property("NPU", "SUPPORTED_PROPERTIES")  # sub-models (CPU skips them)
    except DeviceNotFoundError:
        known = None
    if known is not None:
        check_known(config, (EMU_DEVICE_PREFIX,), known, "The NPU device")
    cfg = parse_config(config)
    key = None
    weights_path = ""
    if cfg.weightless:
        from ov_npu_emu_npuw.weightless import weights_path_of

        weights_path = weights_path_of(model, cfg.weights_path)
    elif not cfg.cache_mode and (not cfg.cache_dir or _restores_from_model(core, cfg)):
        # CACHE_DIR entries are weightless (as the real's) where the sub-blobs' device restores
        # them from the model being compiled (the emulated NPU); CPU sub-blobs keep their
        # weights (their restore hashes the whole .bin: slower than compiling)
        weights_path = _default_weights_path(model, cfg)
        cfg = dataclasses.replace(cfg, weightless_by_default=bool(weights_path))
    if cfg.cache_dir:
        # the model's constants are hashed once: for the key, and to find the weightless entry's
        # constants in the model (MODEL_PTR) by the same digests
        with digest_scope(model):
            key = cache_key(model, cfg)
            source: dict[str, Any] = {}
            if weights_path:  # a weightless entry takes its weights back from the model being compiled
                source = {"MODEL_PTR": model} if _restores_from_model(core, cfg) else {"WEIGHTS_PATH": weights_path}
            parts = load_cached(core, cfg.cache_dir, key, {**config, **source})
        if parts is not None:
            cached = from_parts(parts)
            cached.loaded_from_cache = True
            cached.weights_path = weights_path
            return cached
    cm = _build(core, model, cfg, weights_path)
    cm.weights_path = weights_path
    if cfg.weightless and cm.device not in WEIGHTLESS_DEVICES:
        raise ConfigError(
            f"CACHE_MODE=OPTIMIZE_SIZE: weightless NPUW artefacts are implemented for the emulated "
            f"NPU's and the CPU plugin's sub-blobs, not {cm.device} ones "
            f"(NPUW_DEVICES={','.join(cfg.devices)}); use NPUW_DEVICES=NPU or CPU, or "
            "CACHE_MODE=OPTIMIZE_SPEED",
            key="CACHE_MODE",
        )
    if key is not None:
        store_cached(cfg.cache_dir, key, cm)
    return cm


def _restores_from_model(core: Core, cfg: LLMConfig) -> bool:
    """Whether the sub-models' device restores a weightless artefact from the model object
    itself (MODEL_PTR, the constants found by their digests without copying): the emulated NPU."""
    try:
        return pick_device(core, cfg.devices) == "NPU"
    except NpuEmuError:
        return False


def _default_weights_path(model: ov.Model, cfg: LLMConfig) -> str:
    """The .bin a default (CACHE_MODE unset) export can refer to, or "" (the export then keeps
    its weights: a model built in memory has no file to take them back from)."""
    path = cfg.weights_path or ir_weights_path(model)
    if not path or not os.path.isfile(path) or not os.path.isfile(os.path.splitext(path)[0] + ".xml"):
        return ""
    return path


def _build(core: Core, model: ov.Model, cfg: LLMConfig, weights_path: str = "") -> LLMCompiledModel:
    device = pick_device(core, cfg.devices)
    cfg = _device_defaults(cfg, device)
    if cfg.weightless_by_default and device not in WEIGHTLESS_DEVICES:
        cfg = dataclasses.replace(cfg, weightless_by_default=False)  # its sub-blobs keep their weights
    t_all = time.perf_counter()
    stateless, kv = to_stateless(model)
    kv = kv.with_v_transposed(cfg.optimize_v)
    if generate_ladder_on(cfg, device, stateless, kv):
        cfg = dataclasses.replace(
            cfg, generate_rungs=generate_rung_sizes(cfg.variants[0], cfg.max_gen_len)
        )
    masks = position_masks(stateless, kv, cfg.total_size)
    # after the mask probe (it feeds every parameter): LoRA variables -> inputs of static rank
    lift_lora_states(stateless, cfg.max_lora_rank)
    kv_type = ov.Type.f32 if cfg.kv_precision == "f32" else ov.Type.f16
    kv_quant = cfg.kv_precision if cfg.kv_precision in ("u8", "u4") else ""
    name = model.get_friendly_name()
    head_model, cfg = _shared_head(stateless, cfg, name)
    shared = head_model is not None
    # one table size for all sub-models: a conversation never gets past the total KV size
    rope = cfg.total_size if cfg.cache_rope else 0
    jobs = _sub_model_jobs(name, cfg, shared)
    bank = _weights_bank(cfg, name, device, weights_path)
    prefill_config = _prefill_config(cfg, device, bank)
    generate_config = {**for_device(cfg.generate_config, device), **bank,
                       **cpu_weights_default(device, cfg.generate_config)}

    def compile_variant(size: int) -> tuple[CompiledModel, dict[str, Any]]:
        """A generate variant of ``size`` KV slots and the NPUW default sub-config it got."""
        static = make_generate_model(
            stateless,
            kv,
            size,
            kv_type,
            shared,
            cfg.grouped_attention,
            rope,
            cfg.max_gen_len,
            masks=masks,
            kv_quant=kv_quant,
            kv_group=cfg.kv_group_size,
        )
        if cfg.block_kv:
            split_kv_into_blocks(static, kv, cfg.chunk_size)
        extra = generate_default_config(device, static, generate_config, kv, size)
        return core.compile_model(static, device, {**generate_config, **extra}), extra

    seconds: dict[str, float] = {}
    sub_defaults: dict[str, dict[str, Any]] = {}  # role -> NPUW default sub-config added
    generate: dict[int, CompiledModel] = {}
    pyramid: dict[int, CompiledModel] = {}
    prefill = head = None
    progress = _TtyProgress(len(jobs))
    for n, (sub_name, kind, size) in enumerate(jobs, 1):
        progress.step(n, sub_name, device)
        t0 = time.perf_counter()
        if kind == "prefill":
            static = make_prefill_model(
                stateless, kv, size, cfg.chunk_size, kv_type, shared, rope, cfg.max_gen_len,
                masks=masks, kv_quant=kv_quant, kv_group=cfg.kv_group_size,
            )
            if cfg.block_kv:
                split_kv_into_blocks(static, kv, cfg.chunk_size)
            compiled = core.compile_model(static, device, prefill_config)
            if size == cfg.max_prompt_len:
                prefill = compiled
            else:
                pyramid[size] = compiled
        elif kind == "head":
            # No single-thread default here: run inline right after a variant, the head is
            # faster with the plugin's own thread choice (docs/performance_log.md).
            head_config = (
                generate_config
                if cfg.head_config is None
                else {**for_device(cfg.head_config, device), **bank, **cpu_weights_default(device, cfg.head_config)}
            )
            head = core.compile_model(head_model, device, head_config)
            sub_defaults["lm_head"] = {}
        else:
            generate[size], sub_defaults[f"kv{size}"] = compile_variant(size)
        seconds[sub_name] = time.perf_counter() - t0
        logger.info(
            "[%d/%d] compiled %s on %s in %.2f s", n, len(jobs), sub_name, device, seconds[sub_name]
        )
    progress.done(time.perf_counter() - t_all)
    logger.info(
        "NPUW LLM %s ready in %.2f s: prefill %s, generate variants %s, KV %s",
        name,
        time.perf_counter() - t_all,
        f"chunk {cfg.chunk_size} of {cfg.max_prompt_len}"
        if cfg.chunk_size
        else f"static {cfg.max_prompt_len}",
        list(cfg.variants),
        cfg.kv_precision,
    )
    ins, outs = _llm_ports(model)
    if prefill is None:  # unreachable: the job list always ends with the prefill
        raise PluginError("prefill model was not compiled")
    ladder_factory = None
    if cfg.ladder:

        def ladder_factory(size: int) -> CompiledModel:
            static = make_prefill_model(
                stateless, kv, size, 0, kv_type, shared, rope, cfg.max_gen_len, masks=masks
            )
            return core.compile_model(static, device, prefill_config)

    return LLMCompiledModel(
        name,
        cfg,
        kv,
        device,
        SubModels(prefill, generate, head, pyramid),
        ins,
        outs,
        seconds,
        sub_defaults,
        ladder_factory,
        compile_variant if cfg.generate_rungs else None,
    )


def _device_defaults(cfg: LLMConfig, device: str) -> LLMConfig:
    """The keys whose default depends on the device the sub-models compile for."""
    if cfg.grouped_attention is None:
        # Measured (docs/performance_log.md, "Grouped attention and the head's threads"): on the
        # CPU plugin the grouped form saves time per generate step; on the emulated NPU one SDPA
        # SHAVE task beats five tasks.
        cfg = dataclasses.replace(cfg, grouped_attention=device == "CPU")
    if cfg.ladder and device != "CPU":
        # the emulated NPU keeps one static prefill and skips the padded rows on the device
        cfg = dataclasses.replace(cfg, ladder=())
    return cfg


def _shared_head(stateless: ov.Model, cfg: LLMConfig, name: str) -> tuple[ov.Model | None, LLMConfig]:
    """The separate LM head model with NPUW_LLM_SHARED_HEAD (None without it, or when the model
    has no LM head MatMul: then the key is switched off)."""
    head_model = make_lm_head_model(stateless, cfg.max_gen_len) if cfg.shared_head else None
    if cfg.shared_head and head_model is None:
        logger.warning("no LM head MatMul found: NPUW_LLM_SHARED_HEAD ignored for %s", name)
        cfg = dataclasses.replace(cfg, shared_head=False)
    return head_model, cfg


def _sub_model_jobs(name: str, cfg: LLMConfig, shared: bool) -> list[tuple[str, str, int]]:
    """(sub-model name, kind, size) in the real order: generate variants, prefill, LM head;
    size is the KV size of a variant, the mask length of a prefill."""
    jobs: list[tuple[str, str, int]] = [(f"{name}_kv{k}", "kv", k) for k in cfg.variants]
    jobs += [(f"{name}_prefill_p{p}", "prefill", p) for p in cfg.prefill_pyramid]
    jobs.append((f"{name}_prefill", "prefill", cfg.max_prompt_len))
    if shared:
        jobs.append((f"{name}_lm_head", "head", 0))
    return jobs


def _weights_bank(cfg: LLMConfig, name: str, device: str, weights_path: str) -> dict[str, str]:
    """Like LLMCompiledModel: one weights-bank name for prefill, generate variants and LM head,
    so the device keeps one copy of the weights (and of their decompressed form) for all of
    them; with weightless caching, the keys that make each device write weightless sub-blobs."""
    bank = {
        "NPUW_WEIGHTS_BANK": str(
            cfg.raw.get("NPUW_WEIGHTS_BANK") or f"{name}-{uuid.uuid4().hex[:12]}"
        )
    }
    if cfg.weightless:
        # every device writes its weightless sub-blobs itself (the CPU plugin's constants remember
        # their .bin offset; the emulated NPU refers to the IR's constants by hash, weightless.py)
        bank["CACHE_MODE"] = "OPTIMIZE_SIZE"
        if device != "CPU":
            bank["WEIGHTS_PATH"] = weights_path
    return bank


def _prefill_config(cfg: LLMConfig, device: str, bank: dict[str, str]) -> dict[str, Any]:
    prefill_config: dict[str, Any] = {**for_device(cfg.prefill_config, device), **bank,
                                      **cpu_weights_default(device, cfg.prefill_config)}
    if skip_padded_rows(cfg, device):
        # our whole-prompt prefill reads only the real (right-aligned) rows of its outputs: the
        # emulated NPU may skip the padding rows' attention (docs/npu_device.md)
        prefill_config.setdefault("NPU_EMU_SKIP_PADDED_ROWS", "YES")
    return prefill_config


def _llm_ports(model: ov.Model) -> tuple[list[PortInfo], list[PortInfo]]:
    """The stateful model's inputs and outputs; NPUW LLM needs a single 'logits' output."""
    ins = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.inputs)]
    outs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.outputs)]
    if len(outs) != 1 or "logits" not in outs[0].names:
        raise PluginError(
            f"NPUW LLM expects a single 'logits' output, the model has {[p.names for p in outs]}"
        )
    return ins, outs


class _TtyProgress:
    """One self-overwriting status line on an interactive stderr while sub-models compile.

    Compiling a prefill model and several generate variants can take minutes on big models;
    logs at INFO (OV_NPU_EMU_NPUW_LOG_LEVEL) give one line per sub-model, this covers the default
    case.  Silent when stderr is not a terminal, when INFO logging is on, or with
    OV_NPU_EMU_PROGRESS=0.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.enabled = (
            total > 1
            and os.environ.get("OV_NPU_EMU_PROGRESS", "1") != "0"
            and not logger.isEnabledFor(logging.INFO)
            and getattr(sys.stderr, "isatty", lambda: False)()
        )

    def step(self, n: int, name: str, device: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\033[K[NPUW] compiling {name} on {device} ({n}/{self.total})")
            sys.stderr.flush()

    def done(self, seconds: float) -> None:
        if self.enabled:
            sys.stderr.write(
                f"\r\033[K[NPUW] compiled {self.total} sub-models in {seconds:.1f} s\n"
            )
            sys.stderr.flush()
