"""Hook specifications: the only door through which plugins (built-in or third-party) enter.

Plugins are modules or objects with functions decorated by ``ov_npu_emu.hookimpl``; they are
registered with the plugin manager built by :func:`ov_npu_emu.plugin_manager.get_plugin_manager`
(built-ins by module name, third-party ones through the entry-point group ``ov_npu_emu``).
Every hook is documented in docs/plugin_authoring.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # upward references only for typing
    import openvino as ov

    from ov_npu_emu.api.core import Core
    from ov_npu_emu.registry import DeviceRegistry
    from ov_npu_emu.runtime.device import DeviceCompiledModel

PROJECT_NAME = "ov_npu_emu"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def ovnpu_register_devices(registry: DeviceRegistry) -> None:
    """Add device classes to the registry.

    Called once per Core, the first time the Core needs its device list.

    :param registry: call ``registry.add(MyDevice)``; ``MyDevice.NAME`` is the device name.
    """


@hookspec(firstresult=True)
def ovnpu_compile_model(
    core: Core, model: ov.Model, device_name: str, config: Mapping[str, Any]
) -> DeviceCompiledModel | None:
    """Claim a ``Core.compile_model`` call before it reaches the device.

    Called for every ``compile_model``.  Return a compiled model to take the call over (the first
    non-None result wins), or None to let the device compile it.  The NPUW plugin claims calls on
    "NPU" whose config has ``NPU_USE_NPUW=YES`` and ``NPUW_LLM=YES``.

    :param core: the calling Core; use it to compile sub-models on other devices.
    :param model: the ``openvino.Model`` to compile (do not modify it; clone first).
    :param device_name: canonical device name ("NPU", "CPU", ...).
    :param config: the per-call config merged over the Core's properties for that device.
    :returns: a ``DeviceCompiledModel`` or None.
    """


@hookspec(firstresult=True)
def ovnpu_import_model(
    core: Core, blob: bytes, device_name: str, config: Mapping[str, Any]
) -> DeviceCompiledModel | None:
    """Claim a ``Core.import_model`` call (e.g. an artefact whose magic bytes the plugin owns).

    :param blob: the whole exported artefact.
    :returns: a ``DeviceCompiledModel`` or None to let the device import it.
    """


@hookspec
def ovnpu_add_cli_commands(subparsers: Any) -> None:
    """Add subcommands to the ``ov-npu-emu`` command line.

    :param subparsers: the ``argparse`` sub-parser action; call ``subparsers.add_parser(...)``
        and ``set_defaults(func=run)`` where ``run(args) -> int``.
    """


@hookspec(firstresult=True)
def ovnpu_kv_plan(model_path: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The KV-cache plan of an LLM IR, for ``ov-npu-emu profile --html`` (the first result wins).

    The NPUW plugin answers with its ``kv-plan`` for the model and keys (per generate variant
    and in total, what NPUW would allocate); None when no plugin plans KV caches.

    :param model_path: the ``openvino_model.xml`` (or its folder) being profiled.
    :param config: the profile's ``--config`` keys (NPUW's among them).
    :returns: a JSON-able dict with at least ``bytes`` and ``variants`` (each with ``kv_size``,
        ``past_slots`` and ``bytes``), or None.
    """
