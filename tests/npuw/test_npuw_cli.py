"""``ov-npu-emu npuw``: summary JSON and export through the plugin's CLI hook."""

from __future__ import annotations

import json
import os

import pytest

from ov_npu_emu.cli import main
from ov_npu_emu.errors import ConfigError


def test_npuw_command_summarizes_and_exports(tmp_path, capsys, emu_core, stories260k_dir):
    blob = tmp_path / "llm.blob"
    argv = [
        "npuw",
        str(stories260k_dir),
        "--max-prompt",
        "128",
        "--min-response",
        "64",
        "--chunk",
        "64",
        "--variants",
        "128",
        "--export",
        str(blob),
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["variants"] == [128, 192] and out["capacity_tokens"] == 191
    names = [m["model"] for m in out["models"]]
    assert names == ["Model0_prefill", "Model0_kv128", "Model0_kv192", "Model0_lm_head"]
    assert out["models"][1]["past"] == "[1,4,127,8]"
    assert out["models"][3]["inputs"] == {"npuw_output_embed": "[1,1,64]"}
    assert out["features"]["NPUW_LLM_GENERATE_GROUPED_ATTENTION"] is True  # device CPU
    assert out["features"]["NPUW_LLM_ENABLE_PREFIX_CACHING"] is False
    # weightless by default, like the real NPUW's export: the import takes the .bin back
    assert os.path.samefile(out["exported_weights_path"], stories260k_dir / "openvino_model.bin")
    with pytest.raises(ConfigError, match="Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR"):
        emu_core.import_model(blob.read_bytes(), "NPU")
    cm = emu_core.import_model(blob.read_bytes(), "NPU", {"WEIGHTS_PATH": out["exported_weights_path"]})
    assert cm.get_property("NPUW_LLM_GENERATE_VARIANTS") == "128,192"


def test_npuw_command_bad_config_is_an_error_exit(capsys, tiny_model_dir):
    assert main(["npuw", str(tiny_model_dir), "--chunk", "48"]) == 1
    assert "not power of 2" in capsys.readouterr().err
