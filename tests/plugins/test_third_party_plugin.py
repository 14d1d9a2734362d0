"""A third-party distribution with an ``ov_npu_emu`` entry point adds a device; the env var removes it."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import openvino as real_ov
import pytest
from openvino import opset13 as ops

import ov_npu_emu as ov
from ov_npu_emu.errors import DeviceNotFoundError
from ov_npu_emu.plugin_manager import DISABLE_ENV, get_plugin_manager

PLUGIN_SRC = textwrap.dedent(
    '''
    """A toy device that doubles every float input: proves plugins need no change to ov-npu-emu."""
    import numpy as np
    import openvino as ov
    from ov_npu_emu import hookimpl
    from ov_npu_emu.runtime.device import Device, DeviceCompiledModel, DeviceInferRequest, PortInfo


    class _Req(DeviceInferRequest):
        def __init__(self, cm):
            self.cm = cm
            self.t = {}

        def get_tensor(self, index, is_input):
            return self.t.setdefault((index, is_input), ov.Tensor(np.zeros((2, 2), np.float32)))

        def set_tensor(self, index, is_input, tensor):
            self.t[(index, is_input)] = tensor

        def infer(self):
            self.get_tensor(0, False).data[:] = 2 * self.get_tensor(0, True).data


    class _CM(DeviceCompiledModel):
        def __init__(self, model):
            self.inputs = [PortInfo.from_ov_port(0, model.inputs[0])]
            self.outputs = [PortInfo.from_ov_port(0, model.outputs[0])]

        def create_infer_request(self):
            return _Req(self)

        def export_model(self):
            return b"toy"


    class ToyDevice(Device):
        NAME = "TOY"
        FULL_DEVICE_NAME = "Toy doubling device"

        def compile_model(self, model, config):
            return _CM(model)

        def import_model(self, blob, config):
            raise NotImplementedError


    @hookimpl
    def ovnpu_register_devices(registry):
        registry.add(ToyDevice)
    '''
)


@pytest.fixture
def installed_toy_plugin(tmp_path, monkeypatch):
    """Lay out a real installed distribution (module + .dist-info with entry_points.txt)."""
    (tmp_path / "ovnpu_toy_device.py").write_text(PLUGIN_SRC)
    dist = tmp_path / "ovnpu_toy_device-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ovnpu-toy-device\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ov_npu_emu]\ntoy = ovnpu_toy_device\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield
    sys.modules.pop("ovnpu_toy_device", None)


def _model():
    p = ops.parameter([2, 2], np.float32, name="x")
    return real_ov.Model([ops.relu(p)], [p], "toy")


def test_entry_point_plugin_adds_device(installed_toy_plugin):
    core = ov.Core()
    assert "TOY" in core.available_devices
    out = core.compile_model(_model(), "toy")({"x": np.full((2, 2), 3, np.float32)})[0]
    np.testing.assert_array_equal(out, np.full((2, 2), 6, np.float32))


def test_env_var_disables_plugin(installed_toy_plugin, monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "toy")
    core = ov.Core()
    assert "TOY" not in core.available_devices
    with pytest.raises(DeviceNotFoundError):
        core.compile_model(_model(), "TOY")


def test_core_without_entry_points_has_only_builtins(installed_toy_plugin):
    core = ov.Core(plugin_manager=get_plugin_manager(load_entrypoints=False))
    assert "TOY" not in core.available_devices and "CPU" in core.available_devices


def test_every_hook_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "plugin_authoring.md").read_text()
    pm = get_plugin_manager(load_entrypoints=False, builtins=False)
    hooks = [name for name in dir(pm.hook) if name.startswith("ovnpu_")]
    assert hooks, "no hooks found"
    missing = [h for h in hooks if h not in doc]
    assert not missing, f"hooks missing from docs/plugin_authoring.md: {missing}"


def test_a_missing_builtin_plugin_fails_loudly(monkeypatch):
    """A broken install must not quietly lose a device (tests would fall back or skip)."""
    from ov_npu_emu import plugin_manager
    from ov_npu_emu.errors import PluginError

    monkeypatch.setitem(plugin_manager.BUILTIN_PLUGINS, "npu", "ov_npu_emu_npu_not_installed")
    with pytest.raises(PluginError, match="ov_npu_emu_npu_not_installed.*reinstall"):
        plugin_manager.get_plugin_manager(load_entrypoints=False)
    # leaving it out on purpose is allowed, and then the device is simply not there
    monkeypatch.setenv(plugin_manager.DISABLE_ENV, "npu")
    pm = plugin_manager.get_plugin_manager(load_entrypoints=False)
    assert pm.get_plugin("npu") is None and pm.get_plugin("cpu") is not None
