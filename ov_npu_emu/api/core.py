"""Core: openvino.Core's API; devices come from plugins, models are openvino.Model objects."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import openvino as ov
import pluggy

from ov_npu_emu.api.compiled_model import CompiledModel
from ov_npu_emu.api.hetero import compile_hetero, hetero_devices, query_hetero
from ov_npu_emu.api.properties import plain_properties, supported_properties
from ov_npu_emu.errors import (
    CompileError,
    ConfigError,
    IRReadError,
    NpuEmuError,
    UnsupportedFeatureError,
    UserInputError,
    UserTypeError,
)
from ov_npu_emu.plugin_manager import get_plugin_manager
from ov_npu_emu.registry import DeviceRegistry, canonical_device_name
from ov_npu_emu.runtime import model_cache
from ov_npu_emu.runtime.device import WEIGHTS_PATH_RT_KEY, Device, DeviceCompiledModel

__all__ = ["Core", "Version"]

logger = logging.getLogger("ov_npu_emu")

#: core-level properties' values until set (openvino's): get_property(name) answers them
_CORE_DEFAULTS: dict[str, Any] = {"CACHE_DIR": "", "ENABLE_MMAP": True, "FORCE_TBB_TERMINATE": False}

_ov_core: ov.Core | None = None


def openvino_core() -> ov.Core:
    """One real openvino.Core per process (model reading, the CPU plugin)."""
    global _ov_core
    if _ov_core is None:
        _ov_core = ov.Core()
    return _ov_core


class Version:
    """Like openvino.Version: ``description`` and ``build_number``."""

    def __init__(self, description: str, build_number: str) -> None:
        self.description = description
        self.build_number = build_number
        nums = [int(x) for x in build_number.split("+")[0].split(".")[:3] if x.isdigit()]
        self.major, self.minor, self.patch = (nums + [0, 0, 0])[:3]

    def __repr__(self) -> str:
        return f"<Version: {self.build_number} {self.description}>"


class Core:
    """Entry point of the runtime: lists devices, reads, compiles and imports models.

    :param plugin_manager: a pluggy manager (tests pass their own); by default one is built per
        Core from the built-in plugins plus the ``ov_npu_emu`` entry-point group.
    """

    def __init__(self, *, plugin_manager: pluggy.PluginManager | None = None) -> None:
        self._pm = plugin_manager if plugin_manager is not None else get_plugin_manager()
        self._registry: DeviceRegistry | None = None
        self._core_properties: dict[str, Any] = {}

    # -- plugins & devices -------------------------------------------------------------
    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        return self._pm

    @property
    def registry(self) -> DeviceRegistry:
        if self._registry is None:
            reg = DeviceRegistry()
            self._pm.hook.ovnpu_register_devices(registry=reg)
            self._registry = reg
        return self._registry

    @property
    def available_devices(self) -> list[str]:
        return self.get_available_devices()

    def get_available_devices(self) -> list[str]:
        return sorted(self.registry.names())

    def auto_candidates(self, device_name: str | None, config: Mapping[str, Any] | None = None) -> list[str] | None:
        """The devices ``AUTO`` tries, in order; None when ``device_name`` is not AUTO.

        As OpenVINO's AUTO: ``"AUTO:NPU,CPU"`` or ``MULTI_DEVICE_PRIORITIES`` give the list; without
        one it is every registered device except NPU (which AUTO uses only when listed), CPU last.
        """
        raw = "AUTO" if device_name is None else str(device_name).strip()
        if raw.upper() != "AUTO" and not raw.upper().startswith("AUTO:"):
            return None
        listed = raw[5:] if ":" in raw else str((config or {}).get("MULTI_DEVICE_PRIORITIES", "") or "")
        names = [canonical_device_name(x) for x in listed.split(",") if x.strip()]
        if not names:
            names = [n for n in self.registry.names() if n not in ("CPU", "NPU")]
            names += ["CPU"] if "CPU" in self.registry else []
        for n in names:
            if n not in self.registry:
                self.registry.get(n)  # DeviceNotFoundError with a suggestion
        if not names:
            raise ConfigError("AUTO found no device to use; name one (e.g. 'AUTO:NPU' or 'NPU')", key="AUTO")
        return names

    def _device_name(self, device_name: str | None) -> str:
        if self.auto_candidates(device_name) is not None or device_name is None:  # None is AUTO
            raise ConfigError(
                f"{device_name or 'AUTO'} has no properties of its own here; set them on the device itself "
                f"({', '.join(self.registry.names())})", key="AUTO")
        name = canonical_device_name(device_name)
        self.registry.get(name)  # raises DeviceNotFoundError with a suggestion
        return name

    def _claimable_device(self, device_name: str) -> tuple[str, Any]:
        """Canonical name and device, or None when unregistered: a claim hook may still serve it
        (NPUW claims "NPU" LLM configs and runs them on NPUW_DEVICES, e.g. CPU)."""
        name = canonical_device_name(device_name)
        return name, (self.registry.get(name) if name in self.registry else None)

    def _auto(self, what: str, candidates: list[str], config: Mapping[str, Any] | None,
              attempt: Any) -> CompiledModel:
        """Try ``attempt(device, config)`` on each candidate in turn; the first success wins."""
        cfg = {k: v for k, v in (config or {}).items() if k != "MULTI_DEVICE_PRIORITIES"}
        failures = []
        for name in candidates:
            try:
                return attempt(name, cfg)
            except NpuEmuError as e:
                failures.append(f"{name}: {type(e).__name__}: {e}")
                logger.info("AUTO: %s on %s failed, trying the next device: %s", what, name, e)
        raise CompileError(f"AUTO could not {what} on any of {candidates}:\n  " + "\n  ".join(failures))

    # -- models ------------------------------------------------------------------------
    def read_model(
        self, model: str | os.PathLike | bytes | ov.Model, weights: Any = None, config: Mapping[str, Any] | None = None
    ) -> ov.Model:
        """Read an IR with openvino: a path (weights: a path), or the XML in memory (bytes, a
        BytesIO, or a str with the weights given as bytes / BytesIO / openvino.Tensor); ``config``
        as openvino's (CACHE_DIR, ENABLE_MMAP). Tokenizer IR extensions load on demand."""
        if isinstance(model, ov.Model):
            return model
        if isinstance(model, io.BytesIO):
            model = model.getvalue()
        if isinstance(weights, io.BytesIO):
            weights = weights.getvalue()
        if isinstance(model, str) and isinstance(weights, (bytes, bytearray, ov.Tensor)):
            model = model.encode()  # the XML itself, its weights in memory
        if not isinstance(model, (str, os.PathLike, bytes)):
            raise UserTypeError(
                f"Provided python object type {type(model)} isn't supported as 'model' argument. Pass a path, "
                "the IR's XML as bytes, or an openvino.Model"
            )
        if isinstance(model, bytes):
            try:
                model.decode()
            except UnicodeDecodeError as e:
                raise IRReadError(f"Cannot read model <bytes>: IR XML must be UTF-8 text ({e})") from e
        if isinstance(model, (str, os.PathLike)) and not Path(model).exists():
            raise IRReadError(f"Model file {os.fspath(model)!r} does not exist")
        cfg = plain_properties(config) if config else {}
        try:
            return self._read(model, weights, cfg)
        except RuntimeError as e:
            if "extension" in str(e) or "opset" in str(e):
                try:
                    import openvino_tokenizers  # noqa: F401  (registers the tokenizer ops)

                    return self._read(model, weights, cfg)
                except (ImportError, RuntimeError):
                    pass
            raise IRReadError(f"Cannot read model {model if not isinstance(model, bytes) else '<bytes>'}: {e}") from e

    @staticmethod
    def _read(model: Any, weights: Any, config: dict[str, Any]) -> ov.Model:
        core = openvino_core()
        if isinstance(model, bytes):
            if isinstance(weights, ov.Tensor):
                w = weights
            elif weights is not None:
                w = ov.Tensor(__import__("numpy").frombuffer(weights, dtype="uint8").copy())
            else:
                w = ov.Tensor(ov.Type.u8, [0])
            return core.read_model(model.decode(), w)
        path = os.fspath(model)
        weights_path = os.fspath(weights) if weights is not None else None
        m = core.read_model(path, weights_path, config) if config else core.read_model(path, weights_path)
        if path.endswith(".xml"):
            # where the constants live: a weightless NPUW export (CACHE_MODE=OPTIMIZE_SIZE) refers to it
            bin_path = weights_path if weights_path is not None else path[: -len(".xml")] + ".bin"
            m.set_rt_info(os.path.abspath(bin_path), WEIGHTS_PATH_RT_KEY)
        return m

    def compile_model(
        self,
        model: str | os.PathLike | ov.Model,
        device_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        *,
        weights: Any = None,
    ) -> CompiledModel:
        """Compile for a device; a plugin may claim the call first (NPUW does for LLM configs).

        ``model`` is an openvino.Model, a path, or (with ``weights``, the .bin's bytes) the IR's
        XML text, as openvino's ``compile_model(model=xml, weights=bin, device_name=...)``."""
        if weights is not None and isinstance(model, str):
            model = self.read_model(model.encode(), weights)
        elif not isinstance(model, (ov.Model, str, os.PathLike, bytes)):
            # openvino takes str() of any other object as a path, and says so in these words
            raise UserInputError(f"Path: '{model}' does not exist. Please provide valid model's path either as a "
                                 "string, bytes or pathlib.Path (or an openvino.Model)")
        elif not isinstance(model, ov.Model):
            model = self.read_model(model, weights)
        if config is not None and not isinstance(config, Mapping):
            raise UserInputError(f"config must be a dict of properties, got {type(config).__name__}")
        config = plain_properties(config)
        hetero = hetero_devices(device_name, config)
        if hetero is not None:
            return CompiledModel(compile_hetero(self, model, hetero, config), "HETERO")
        candidates = self.auto_candidates(device_name, config)
        if candidates is not None or device_name is None:  # None is AUTO, which always lists candidates
            return self._auto(
                "compile the model", candidates or [], config, lambda name, cfg: self.compile_model(model, name, cfg)
            )
        name, device = self._claimable_device(device_name)
        if device is not None:
            _refuse_read_only(device, config)
        merged = device.merged_config(config) if device is not None else dict(config or {})
        impl = self._pm.hook.ovnpu_compile_model(core=self, model=model, device_name=name, config=merged)
        if impl is None:
            device = device if device is not None else self.registry.get(name)  # DeviceNotFoundError
            impl = self._compile_cached(device, model, merged)
        return CompiledModel(impl, name)

    def _compile_cached(self, device: Device, model: ov.Model, config: dict[str, Any]) -> DeviceCompiledModel:
        """``device.compile_model``, through ``CACHE_DIR`` when the device leaves caching to Core."""
        cache_dir = str(config.get("CACHE_DIR") or self._core_properties.get("CACHE_DIR") or "")
        if not cache_dir or not device.MODEL_CACHE:
            return device.compile_model(model, config)
        mode = str(config.get("CACHE_MODE", "OPTIMIZE_SPEED")).upper()
        if mode != "OPTIMIZE_SPEED":
            raise ConfigError(
                f"CACHE_MODE={config['CACHE_MODE']!r}: the {device.NAME} device caches whole blobs only "
                "(OPTIMIZE_SPEED); weightless OPTIMIZE_SIZE blobs are not implemented for it",
                key="CACHE_MODE",
            )
        cfg = {k: v for k, v in config.items() if k not in ("CACHE_DIR", "CACHE_MODE")}
        path = model_cache.entry_path(
            cache_dir, device.NAME, model, cfg, {"openvino": ov.get_version(), "device": device.version()}
        )
        blob = model_cache.read_entry(path)
        if blob is not None:
            try:
                impl = device.import_model(blob, cfg)
                impl.loaded_from_cache = True
                logger.info("CACHE_DIR: %s loaded from %s", model.get_friendly_name(), path)
                return impl
            except NpuEmuError as e:
                logger.warning("CACHE_DIR entry %s could not be loaded (%s); compiling instead", path, e)
        impl = device.compile_model(model, cfg)
        model_cache.write_entry(path, impl.export_model())
        return impl

    def import_model(
        self,
        model_stream: bytes | io.IOBase | ov.Tensor | Any,
        device_name: str,
        config: Mapping[str, Any] | None = None,
    ) -> CompiledModel:
        """Restore an exported model (bytes, a binary stream, or a u8 Tensor)."""
        if isinstance(model_stream, (bytes, bytearray, memoryview)):
            blob = bytes(model_stream)
        elif isinstance(model_stream, ov.Tensor):
            blob = model_stream.data.tobytes()
        elif isinstance(model_stream, io.BytesIO):
            blob = model_stream.getvalue()
        elif hasattr(model_stream, "read"):
            blob = model_stream.read()
            if not isinstance(blob, (bytes, bytearray)):  # a text-mode stream
                raise UserInputError(
                    f"import_model needs a binary stream (open(path, 'rb')), got one yielding {type(blob).__name__}"
                )
            blob = bytes(blob)
        else:
            raise UserInputError(
                f"import_model needs bytes, a binary stream or a Tensor, got {type(model_stream).__name__}"
            )
        config = plain_properties(config)
        candidates = self.auto_candidates(device_name, config)
        if candidates is not None:
            return self._auto(
                "import the blob", candidates, config, lambda name, cfg: self.import_model(blob, name, cfg)
            )
        name, device = self._claimable_device(device_name)
        merged = device.merged_config(config) if device is not None else dict(config or {})
        impl = self._pm.hook.ovnpu_import_model(core=self, blob=blob, device_name=name, config=merged)
        if impl is None:
            device = device if device is not None else self.registry.get(name)  # DeviceNotFoundError
            impl = device.import_model(blob, merged)
        return CompiledModel(impl, name)

    def query_model(
        self, model: ov.Model, device_name: str, config: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        """``{op friendly name: device}`` for the ops ``device_name`` runs (openvino's semantics)."""
        if not isinstance(model, ov.Model):
            raise UserInputError(f"query_model needs an openvino.Model, got {type(model).__name__}")
        hetero = hetero_devices(device_name, config)
        if hetero is not None:
            return query_hetero(self, model, hetero, plain_properties(config))
        name, device = self._claimable_device(device_name)
        device = device if device is not None else self.registry.get(name)  # DeviceNotFoundError
        return device.query_model(model, device.merged_config(plain_properties(config)))

    # -- extensions, plugins, contexts -----------------------------------------------------
    def add_extension(self, extension: Any) -> None:
        """Custom ops and frontend extensions: openvino's own (they apply to ``read_model``)."""
        try:
            openvino_core().add_extension(extension)
        except (RuntimeError, TypeError) as e:
            raise UserInputError(f"add_extension could not load {extension!r}: {e}") from e

    def register_plugin(self, plugin_name: str, device_name: str, config: Mapping[str, Any] | None = None) -> None:
        raise UnsupportedFeatureError(
            f"register_plugin({plugin_name!r}, {device_name!r}): devices here are Python plugins found through "
            "the 'ov_npu_emu' entry-point group, not shared libraries; publish a Device subclass with an "
            "ovnpu_register_devices hook (docs/plugin_authoring.md)",
            key="register_plugin",
        )

    def register_plugins(self, xml_config_file: str) -> None:
        self.register_plugin(str(xml_config_file), "*")

    def unload_plugin(self, device_name: str) -> None:
        """Drop this Core's instance of the device (and the properties set on it)."""
        self.registry.unload(self._device_name(device_name))

    def create_context(self, device_name: str, properties: Mapping[str, Any]) -> Any:
        raise UnsupportedFeatureError(
            f"create_context({device_name!r}): remote contexts (device memory shared with other APIs) are not "
            "emulated; pass host tensors (numpy arrays or openvino.Tensor)",
            key="create_context",
        )

    def get_default_context(self, device_name: str) -> Any:
        return self.create_context(device_name, {})

    # -- properties --------------------------------------------------------------------
    def set_property(self, *args: Any) -> None:
        """``set_property(properties)`` for every device, or ``set_property(device_name, properties)``;
        ``properties`` a dict, or one ``(name, value)`` pair as ``props.*(value)`` makes."""
        args = tuple(dict([a]) if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) else a
                     for a in args)
        if len(args) == 1:
            (props,) = args
            if not isinstance(props, Mapping):
                raise UserInputError("set_property(properties) needs a dict")
            props = plain_properties(props)
            self._core_properties.update(props)
            for name in self.registry.names():
                self.registry.get(name).set_property(props)
        elif len(args) == 2:
            device_name, props = args
            if not isinstance(props, Mapping):
                raise UserInputError("set_property(device_name, properties) needs a dict")
            device = self.registry.get(self._device_name(device_name))
            props = plain_properties(props)
            _refuse_read_only(device, props)
            device.set_property(props)
        else:
            raise UserInputError("set_property takes (properties) or (device_name, properties)")

    def get_property(self, *args: Any) -> Any:
        """``get_property(device_name, name)`` (or ``get_property(name)`` for core-level keys)."""
        if len(args) == 2:
            device = self.registry.get(self._device_name(args[0]))
            value = device.get_property(args[1])
            if args[1] == "SUPPORTED_PROPERTIES":  # name -> "RO"/"RW", as openvino answers
                return supported_properties(value, device.READ_ONLY_PROPERTIES)
            return value
        if len(args) == 1:
            if args[0] in self._core_properties:
                return self._core_properties[args[0]]
            if args[0] == "AVAILABLE_DEVICES":
                return self.get_available_devices()
            if args[0] in _CORE_DEFAULTS:
                return _CORE_DEFAULTS[args[0]]
            raise ConfigError(f"Unsupported core property {args[0]}", key=args[0])
        raise UserInputError("get_property takes (device_name, name) or (name)")

    def get_versions(self, device_name: str) -> dict[str, Version]:
        out = {}
        for raw in str(device_name).split(","):
            name = self._device_name(raw)
            dev = self.registry.get(name)
            out[name] = Version(f"ov_npu_emu {type(dev).__module__}", dev.version())
        return out


def _refuse_read_only(device: Any, config: Mapping[str, Any]) -> None:
    """A key the device lists "RO" in SUPPORTED_PROPERTIES cannot be set: openvino's CPU plugin
    refuses one in ``set_property`` and in ``compile_model``'s config with this text (measured,
    2026.4.1; the real NPU plugin could not be loaded to measure its own)."""
    if not config:
        return
    listed = supported_properties(device.get_property("SUPPORTED_PROPERTIES"), device.READ_ONLY_PROPERTIES)
    for key in config:
        if listed.get(key) == "RO":
            raise ConfigError(f"Unsupported property {key} by {device.NAME} plugin. It is read-only: read it "
                              f"with get_property('{device.NAME}', '{key}')", key=key)
