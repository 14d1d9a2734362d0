"""Model folders: contents, determinism by seed, caching, manifest round trip, make-model CLI."""

from __future__ import annotations

import json

import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.modelbuilder import MODEL_FILES, load_weights, make_model_folder, read_manifest


def test_folder_contents(tiny_model_dir):
    for name in MODEL_FILES:
        assert (tiny_model_dir / name).is_file(), name
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["model_type"], config["vocab_size"], config["num_hidden_layers"]) == (
        "llama",
        512,
        2,
    )
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)
    gen = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 2 and "max_new_tokens" not in gen
    assert read_manifest(tiny_model_dir)["dtype"] == "f32"


def test_same_seed_gives_identical_files(tmp_path, tiny_model_dir):
    again = make_model_folder(tmp_path / "again", "tiny", "f32", seed=0)
    for name in (
        "openvino_model.bin",
        "openvino_model.xml",
        "openvino_tokenizer.bin",
        "openvino_detokenizer.bin",
    ):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    other = make_model_folder(tmp_path / "other", "tiny", "f32", seed=1)
    assert (other / "openvino_model.bin").read_bytes() != (
        again / "openvino_model.bin"
    ).read_bytes()


def test_existing_folder_is_reused_unless_spec_changes(tmp_path):
    folder = make_model_folder(tmp_path / "m", "tiny", num_hidden_layers=1)
    stamp = (folder / "openvino_model.bin").stat().st_mtime_ns
    make_model_folder(folder, "tiny", num_hidden_layers=1)
    assert (folder / "openvino_model.bin").stat().st_mtime_ns == stamp
    make_model_folder(folder, "tiny", num_hidden_layers=1, overwrite=True)
    make_model_folder(folder, "tiny", "f16", num_hidden_layers=1)
    assert read_manifest(folder)["dtype"] == "f16"


def test_weights_regenerate_from_manifest(tiny_model_dir_int8):
    weights = load_weights(tiny_model_dir_int8)
    assert weights.dtype == "int8" and weights.embed.kind == "int8"
    assert weights.layers[0].input_norm.kind == "f32"  # norms stay f32 in int8 models


def test_bad_requests_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'tiny'"):
        make_model_folder(tmp_path, "tinny")
    with pytest.raises(ConfigError, match="did you mean 'num_hidden_layers'"):
        make_model_folder(tmp_path, "tiny", num_hidden_layer=3)
    with pytest.raises(ConfigError, match="dtype"):
        make_model_folder(tmp_path, "tiny", "bf16")
    with pytest.raises(ConfigError, match="vocab_size"):
        make_model_folder(tmp_path, "tiny", vocab_size=64)
    assert not any(tmp_path.iterdir())


def test_cli_make_model(tmp_path, capsys):
    from ov_npu_emu.cli import main

    out_dir = tmp_path / "cli"
    rc = main(
        [
            "make-model",
            str(out_dir),
            "--layers",
            "1",
            "--qkv-bias",
            "--no-tie",
            "--dtype",
            "f16",
            "--seed",
            "7",
        ]
    )
    assert rc == 0
    assert "1 layers" in capsys.readouterr().out
    manifest = read_manifest(out_dir)
    assert manifest["seed"] == 7 and manifest["dtype"] == "f16"
    assert (
        manifest["config"]["attention_bias"] is True
        and manifest["config"]["tie_word_embeddings"] is False
    )

    assert (
        main(
            [
                "make-model",
                str(out_dir),
                "--layers",
                "1",
                "--qkv-bias",
                "--no-tie",
                "--dtype",
                "f16",
                "--seed",
                "7",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["num_parameters"] == manifest["num_parameters"]

    assert main(["make-model", str(tmp_path / "bad"), "--vocab", "10"]) == 1
    assert "vocab_size" in capsys.readouterr().err


def test_cli_make_model_int4(tmp_path, capsys):
    from ov_npu_emu.cli import main

    args = ["make-model", str(tmp_path / "q4"), "--dtype", "int4", "--group-size", "16"]
    assert main(args) == 0
    manifest = read_manifest(tmp_path / "q4")
    assert manifest["dtype"] == "int4" and manifest["group_size"] == 16
    assert load_weights(tmp_path / "q4").layers[0].q_proj.group_size == 16
    assert main(["make-model", str(tmp_path / "bad"), "--dtype", "int4", "--group-size", "5"]) == 1
    assert "group_size" in capsys.readouterr().err


def test_cli_help_lists_presets(capsys):
    from ov_npu_emu.cli import main

    with pytest.raises(SystemExit):
        main(["make-model", "--help"])
    out = capsys.readouterr().out
    assert "qwen2.5-0.5b-shape" in out and "494.03M" in out and "int8" in out
