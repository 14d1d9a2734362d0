"""NPUW plugin: one stateful LLM IR → static prefill + generate variants over one KV buffer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import openvino as ov

from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.runtime.device import DeviceCompiledModel
from ov_npu_emu_npuw.config import (
    check_plain_npuw_keys,
    is_npuw_llm_config,
    is_text_embed_config,
    is_whisper_config,
)

if TYPE_CHECKING:
    from ov_npu_emu.api.core import Core

__all__ = [
    "ovnpu_add_cli_commands",
    "ovnpu_compile_model",
    "ovnpu_import_model",
    "ovnpu_kv_plan",
]


@hookimpl(tryfirst=True)
def ovnpu_compile_model(
    core: Core, model: ov.Model, device_name: str, config: Mapping[str, Any]
) -> DeviceCompiledModel | None:
    """Claim "NPU" compilations with NPU_USE_NPUW=YES and NPUW_LLM=YES (what openvino.genai sets);
    with NPUW_TEXT_EMBED=YES too, the text-embedding mode (text_embed.py); with NPUW_WHISPER=YES,
    the Whisper-decoder mode (whisper.py).  A plain model with NPU_USE_NPUW=YES, once its NPUW_*
    keys are ones the real takes there, goes on to the device, or to the first device of an
    NPUW_DEVICES that names no NPU (compile_plain_off_npu)."""
    if not is_npuw_llm_config(device_name, config):
        check_plain_npuw_keys(device_name, config)
        return compile_plain_off_npu(core, model, device_name, config)
    if is_whisper_config(config):
        from ov_npu_emu_npuw.whisper import compile_whisper

        return compile_whisper(core, model, config)
    if is_text_embed_config(config):
        from ov_npu_emu_npuw.text_embed import compile_text_embed

        return compile_text_embed(core, model, config)
    from ov_npu_emu_npuw.compiled_model import compile_llm

    return compile_llm(core, model, config)


def compile_plain_off_npu(core: Core, model: ov.Model, device_name: str,
                          config: Mapping[str, Any]) -> DeviceCompiledModel | None:
    """A plain (not LLM) model with NPU_USE_NPUW=YES and an NPUW_DEVICES without NPU (e.g. CPU):
    the real NPUW compiles its subgraphs on those devices (one subgraph with
    NPUW_ONLINE_PIPELINE=NONE), so the numbers are that device's; ours compiles the whole model
    there, with the caller's own keys (not the NPU's defaults, not NPU_* / NPUW_* keys).  Dynamic
    shapes: the real fails at its first request ("to_shape was called on a dynamic shape"); ours
    refuses at compile, as the emulated NPU does.  None (the emulated NPU compiles it) otherwise."""
    from ov_npu_emu.errors import DynamicShapeError
    from ov_npu_emu.options import as_flag
    from ov_npu_emu.runtime.device import MergedConfig
    from ov_npu_emu_npuw.compiled_model import pick_device

    if device_name != "NPU" or not as_flag("NPU_USE_NPUW", config.get("NPU_USE_NPUW", "NO")):
        return None
    devices = tuple(d.strip().upper() for d in str(config.get("NPUW_DEVICES", "NPU,CPU")).split(",") if d.strip())
    if not devices or "NPU" in devices:
        return None
    for port in model.inputs:
        if port.get_partial_shape().is_dynamic:
            raise DynamicShapeError(
                f"NPUW (NPU_USE_NPUW=YES, NPUW_DEVICES={','.join(devices)}) compiles static shapes only: input "
                f"{port.get_any_name()!r} has shape {port.get_partial_shape()}. Reshape the model first, e.g. "
                f"model.reshape({{{port.get_any_name()!r}: [1, 128]}})", input_name=port.get_any_name())
    explicit = config.explicit_keys if isinstance(config, MergedConfig) else frozenset(config)
    own = {k: config[k] for k in explicit if k in config and not k.startswith(("NPU_", "NPUW_"))}
    target = core.registry.get(pick_device(core, devices))
    return target.compile_model(model, target.merged_config(own))


@hookimpl(tryfirst=True)
def ovnpu_import_model(
    core: Core, blob: bytes, device_name: str, config: Mapping[str, Any]
) -> DeviceCompiledModel | None:
    """Claim artefacts written by our ``export_model`` (they start with our magic bytes)."""
    from ov_npu_emu_npuw.compiled_model import import_llm
    from ov_npu_emu_npuw.serialize import MAGIC, WHISPER_MAGIC

    if blob.startswith(WHISPER_MAGIC):
        from ov_npu_emu_npuw.whisper import import_whisper

        return import_whisper(core, blob, config)
    if not blob.startswith(MAGIC):
        return None
    return import_llm(core, blob, config)


@hookimpl
def ovnpu_add_cli_commands(subparsers: Any) -> None:
    """``ov-npu-emu npuw`` (compile with NPUW, show the static models and KV plan, export),
    ``kv-plan`` (KV bytes by the formula / per NPUW variant) and ``estimate`` (TTFT/TPOT of an LLM
    on a calibrated NPU generation)."""
    from ov_npu_emu_npuw import cli, estimate, kvplan

    cli.register(subparsers)
    kvplan.register(subparsers)
    estimate.register(subparsers)


@hookimpl
def ovnpu_kv_plan(model_path: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """``kv-plan`` of the profiled model under the NPUW keys in ``config`` (others are not ours)."""
    from ov_npu_emu_npuw.kvplan import plan_from_model

    npuw = {k: v for k, v in config.items() if k.startswith("NPUW_") or k == "KV_CACHE_PRECISION"}
    return plan_from_model(model_path, npuw)
