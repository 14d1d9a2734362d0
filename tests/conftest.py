"""Project-wide pytest setup: shared fixtures from ov_npu_emu.testing (model builders)."""

from __future__ import annotations

import importlib.util

import pytest

pytest_plugins = ["ov_npu_emu.testing"] if importlib.util.find_spec("ov_npu_emu.testing") else []


@pytest.fixture
def core():
    """A fresh Core with built-in plugins and entry points."""
    from ov_npu_emu import Core

    return Core()


@pytest.fixture(scope="session")
def require_npuw() -> None:
    """Fails (never skips) when the built-in NPUW plugin is not registered."""
    from ov_npu_emu import Core

    assert Core().plugin_manager.get_plugin("npuw") is not None, (
        "the built-in NPUW plugin (plugins/ov_npu_emu_npuw) is not registered")
