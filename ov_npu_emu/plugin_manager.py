"""Builds the pluggy plugin manager: hook specs, built-in plugins, entry points, blocklist."""

from __future__ import annotations

import importlib
import logging
import os

import pluggy

import ov_npu_emu.hookspecs as hookspecs
from ov_npu_emu.errors import PluginError

__all__ = ["BUILTIN_PLUGINS", "DISABLE_ENV", "ENTRY_POINT_GROUP", "get_plugin_manager"]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "ov_npu_emu"
#: comma-separated plugin names (entry-point names or module names) that must not load
DISABLE_ENV = "OV_NPU_EMU_DISABLED_PLUGINS"
TRACE_ENV = "OV_NPU_EMU_TRACE_PLUGINS"
#: registered by module name so a source checkout works without `pip install`; the same modules
#: are also declared as entry points, which are skipped when already registered.
BUILTIN_PLUGINS: dict[str, str] = {
    "cpu": "ov_npu_emu_cpu",
    "npu": "ov_npu_emu_npu",
    "npuw": "ov_npu_emu_npuw",
}


def _disabled() -> set[str]:
    return {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}


def get_plugin_manager(*, load_entrypoints: bool = True, builtins: bool = True) -> pluggy.PluginManager:
    """A fresh plugin manager (one per Core; nothing is loaded at import time).

    :param load_entrypoints: also load third-party plugins from the ``ov_npu_emu`` entry-point group.
    :param builtins: register the built-in plugins (CPU, NPU, NPUW).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in _disabled():
        pm.set_blocked(name)
    if builtins:
        for name, module in BUILTIN_PLUGINS.items():
            if pm.is_blocked(name) or pm.is_blocked(module):
                continue
            try:
                mod = importlib.import_module(module)
            except ImportError as e:
                # a missing built-in is a broken install, never a silent fallback to fewer devices;
                # leaving one out on purpose is what OV_NPU_EMU_DISABLED_PLUGINS is for
                raise PluginError(f"built-in plugin {module!r} failed to import: {e}; reinstall ov-npu-emu "
                                  f"(or set {DISABLE_ENV}={name} to run without it)") from e
            pm.register(mod, name=name)
    if load_entrypoints:
        _load_entrypoints(pm)
    pm.check_pending()
    if os.environ.get(TRACE_ENV):
        pm.trace.root.setwriter(lambda s: logger.info("%s", s.rstrip()))
        pm.enable_tracing()
    return pm


def _load_entrypoints(pm: pluggy.PluginManager) -> None:
    from importlib.metadata import entry_points

    blocked = _disabled()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in blocked or ep.value in blocked or pm.is_blocked(ep.name):
            continue
        if pm.get_plugin(ep.name) is not None or pm.has_plugin(ep.name):
            continue  # a built-in already registered under that name
        try:
            plugin = ep.load()
        except Exception as e:  # a broken third-party plugin must not break the Core
            logger.warning("plugin %r from entry point %s failed to load: %s", ep.name, ep.value, e)
            continue
        if pm.is_registered(plugin):
            continue
        pm.register(plugin, name=ep.name)
