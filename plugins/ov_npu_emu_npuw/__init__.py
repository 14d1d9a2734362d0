"""NPUW plugin: one stateful LLM IR → static prefill + generate variants over one KV buffer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import openvino as ov

from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.runtime.device import DeviceCompiledModel
from ov_npu_emu_npuw.config import is_npuw_llm_config, is_text_embed_config

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
    with NPUW_TEXT_EMBED=YES too, the text-embedding mode (text_embed.py)."""
    if not is_npuw_llm_config(device_name, config):
        return None
    if is_text_embed_config(config):
        from ov_npu_emu_npuw.text_embed import compile_text_embed

        return compile_text_embed(core, model, config)
    from ov_npu_emu_npuw.compiled_model import compile_llm

    return compile_llm(core, model, config)


@hookimpl(tryfirst=True)
def ovnpu_import_model(
    core: Core, blob: bytes, device_name: str, config: Mapping[str, Any]
) -> DeviceCompiledModel | None:
    """Claim artefacts written by our ``export_model`` (they start with our magic bytes)."""
    from ov_npu_emu_npuw.compiled_model import import_llm
    from ov_npu_emu_npuw.serialize import MAGIC

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
