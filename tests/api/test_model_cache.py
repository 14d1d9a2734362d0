"""CACHE_DIR on the emulated NPU: the blob is stored once, imported afterwards, damage recompiles."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import ov_npu_emu as ov
from ov_npu_emu.errors import ConfigError
from ov_npu_emu.testing import make_add_model


def _entries(d):
    return sorted(p for p in d.iterdir() if p.suffix == ".blob")


def _run(cm):
    return cm.create_infer_request().infer({"a": np.arange(6, dtype=np.float32).reshape(2, 3),
                                            "b": np.ones((2, 3), np.float32)})[0]


def test_first_compile_writes_later_ones_import(tmp_path):
    core = ov.Core()
    first = core.compile_model(make_add_model(), "NPU", {"CACHE_DIR": str(tmp_path)})
    assert first.get_property("LOADED_FROM_CACHE") is False
    (entry,) = _entries(tmp_path)
    assert entry.name.startswith("npu_")
    again = ov.Core().compile_model(make_add_model(), "NPU", {"CACHE_DIR": str(tmp_path)})
    assert again.get_property("LOADED_FROM_CACHE") is True
    np.testing.assert_array_equal(_run(again), _run(first))
    # another config (or model) is another entry, never a wrong hit
    other = core.compile_model(make_add_model(), "NPU", {"CACHE_DIR": str(tmp_path), "NPU_EMU_CMX_SIZE": 4096})
    assert other.get_property("LOADED_FROM_CACHE") is False and len(_entries(tmp_path)) == 2
    # CACHE_DIR set on the core applies too
    core2 = ov.Core()
    core2.set_property({"CACHE_DIR": str(tmp_path)})
    assert core2.compile_model(make_add_model(), "NPU").get_property("LOADED_FROM_CACHE") is True


def test_a_damaged_entry_recompiles_with_a_warning(tmp_path, caplog):
    core = ov.Core()
    good = _run(core.compile_model(make_add_model(), "NPU", {"CACHE_DIR": str(tmp_path)}))
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[len(data) // 3] ^= 0x10
    entry.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ov_npu_emu"):
        cm = core.compile_model(make_add_model(), "NPU", {"CACHE_DIR": str(tmp_path)})
    assert cm.get_property("LOADED_FROM_CACHE") is False
    assert "could not be loaded" in caplog.text and "damaged" in caplog.text
    np.testing.assert_array_equal(_run(cm), good)
    # the entry was rewritten: the next compile is a hit again
    assert core.compile_model(make_add_model(), "NPU", {"CACHE_DIR": str(tmp_path)}).get_property("LOADED_FROM_CACHE")


def test_weightless_cache_mode_is_a_typed_error(tmp_path):
    with pytest.raises(ConfigError, match="OPTIMIZE_SIZE"):
        ov.Core().compile_model(make_add_model(), "NPU", {"CACHE_DIR": str(tmp_path), "CACHE_MODE": "OPTIMIZE_SIZE"})


def test_cpu_passes_cache_dir_to_openvinos_model_cache(tmp_path):
    core = ov.Core()
    first = core.compile_model(make_add_model(), "CPU", {"CACHE_DIR": str(tmp_path)})
    again = core.compile_model(make_add_model(), "CPU", {"CACHE_DIR": str(tmp_path)})
    assert first.get_property("LOADED_FROM_CACHE") is False and again.get_property("LOADED_FROM_CACHE") is True
    assert any(tmp_path.iterdir())
    np.testing.assert_array_equal(_run(again), _run(first))
