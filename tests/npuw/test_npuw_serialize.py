"""Export/import (also in a fresh process), CACHE_DIR, and rejection of bad artefacts."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ov_npu_emu.errors import BlobFormatError, NpuEmuError
from ov_npu_emu_npuw.serialize import MAGIC
from tests.npuw._oracle import greedy, real_npuw_config

SHORT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]
CFG = real_npuw_config(128, 64, NPUW_LLM_PREFILL_CHUNK_SIZE=64, NPUW_LLM_GENERATE_VARIANTS="128")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled(stories_model, emu_core):
    return emu_core.compile_model(stories_model, "NPU", CFG)


@pytest.fixture(scope="module")
def blob(compiled):
    return compiled.export_model().getvalue()


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_export_import_in_fresh_process(device, stories_model, emu_core, cpu_request, tmp_path):
    compiled = emu_core.compile_model(stories_model, "NPU", {**CFG, "NPUW_DEVICES": device})
    expected, _ = greedy(compiled.create_infer_request(), SHORT, 64)
    blob = compiled.export_model().getvalue()
    if device == "NPU":  # the emulated NPU's sub-blobs are ELF files
        assert blob.count(b"\x7fELF") >= 3
    path = tmp_path / "llm.blob"
    path.write_bytes(blob)
    code = f"""
import json, sys
from ov_npu_emu import Core
from tests.npuw._oracle import greedy
cm = Core().import_model(open({str(path)!r}, "rb").read(), "NPU")
print(json.dumps([cm.get_property("NPUW_LLM_MAX_PROMPT_LEN"), greedy(cm.create_infer_request(), {SHORT!r}, 64)[0]]))
"""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'plugins'}"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    max_prompt, tokens = json.loads(out.stdout.strip().splitlines()[-1])
    assert max_prompt == 128
    assert tokens == expected == greedy(cpu_request, SHORT, 64)[0]


def test_artefact_layout(blob):
    assert blob.startswith(MAGIC)
    assert b'"role": "prefill"' in blob and b'"role": "kv192"' in blob


def _with_header(blob: bytes, edit) -> bytes:
    """Rewrite the JSON header of an artefact (keeps the framing and the header hash valid)."""
    off = len(MAGIC)
    fmt, hlen = struct.unpack_from("<IQ", blob, off)
    start = off + 12 + 32  # past the header's SHA-256
    header = json.loads(blob[start : start + hlen])
    edit(header)
    h = json.dumps(header).encode()
    return MAGIC + struct.pack("<IQ", fmt, len(h)) + hashlib.sha256(h).digest() + h + blob[start + hlen :]


@pytest.mark.parametrize(
    "mutate, match",
    [
        (
            lambda b: b"\x00" * 64 + b,
            None,
        ),  # foreign bytes: not claimed by NPUW, rejected by the device
        (lambda b: b[: len(b) // 2], "truncated"),
        (lambda b: b[: len(MAGIC) + 6], "truncated"),
        (
            lambda b: _with_header(b, lambda h: h["versions"].update(openvino="1999.0")),
            "different OV version",
        ),
        (
            lambda b: _with_header(b, lambda h: h["versions"].update(ov_npu_emu="0.0.1")),
            "different OV version",
        ),
        (lambda b: b[:-10] + bytes(10), "corrupt"),
    ],
)
def test_bad_artefacts_are_typed_errors(blob, emu_core, mutate, match):
    with pytest.raises(BlobFormatError if match else NpuEmuError, match=match):
        emu_core.import_model(mutate(blob), "NPU")


def test_cache_dir_second_start_loads(stories_model, emu_core, tmp_path, caplog):
    cfg = {**CFG, "CACHE_DIR": str(tmp_path)}
    first = emu_core.compile_model(stories_model, "NPU", cfg)
    assert not first.impl.loaded_from_cache
    (entry,) = list(tmp_path.glob("npuw_llm_*.blob"))
    second = emu_core.compile_model(stories_model, "NPU", cfg)
    assert second.impl.loaded_from_cache
    assert (
        greedy(second.create_infer_request(), SHORT, 20)[0]
        == greedy(first.create_infer_request(), SHORT, 20)[0]
    )
    # a different config is a different entry
    emu_core.compile_model(stories_model, "NPU", {**cfg, "NPUW_LLM_MIN_RESPONSE_LEN": 128})
    assert len(list(tmp_path.glob("npuw_llm_*.blob"))) == 2
    # a broken entry falls back to compiling, with a warning
    entry.write_bytes(entry.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="ov_npu_emu_npuw"):
        third = emu_core.compile_model(stories_model, "NPU", cfg)
    assert not third.impl.loaded_from_cache
    assert any("compiling instead" in r.message for r in caplog.records)
