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
