"""Where a VLM's image-processor settings come from (issue 31): as the real's VisionEncoder, the
``image_processor`` object of a combined processor_config.json (what transformers 5's
``processor.save_pretrained`` writes, with no preprocessor_config.json) when that file also has a
``video_processor``; else preprocessor_config.json; else the defaults."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov

import genai_shim
from genai_shim.vlm.common import image_processor_json
from genai_shim.vlm.gemma3 import Gemma3Config
from genai_shim.vlm.llava import CLIPConfig
from genai_shim.vlm.qwen2vl import ProcessorConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vlm"

QWEN3_IMAGE = {"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16, "merge_size": 2,
               "temporal_patch_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
               "size": {"shortest_edge": 4096, "longest_edge": 16384}}


def _write(folder: Path, name: str, data: dict) -> None:
    (folder / name).write_text(json.dumps(data), encoding="utf-8")


def test_combined_processor_config_is_read(tmp_path: Path) -> None:
    _write(tmp_path, "processor_config.json", {"image_processor": QWEN3_IMAGE, "video_processor": QWEN3_IMAGE,
                                               "processor_class": "Qwen3VLProcessor"})
    cfg = ProcessorConfig.read(tmp_path)
    assert (cfg.patch_size, cfg.min_pixels, cfg.max_pixels) == (16, 4096, 16384)
    assert cfg.image_mean == (0.5, 0.5, 0.5)


def test_combined_processor_config_wins_over_preprocessor_config(tmp_path: Path) -> None:
    _write(tmp_path, "preprocessor_config.json", {"size": {"height": 32, "width": 32}, "crop_size": {"height": 20}})
    _write(tmp_path, "processor_config.json",
           {"image_processor": {"size": {"height": 64, "width": 48, "shortest_edge": 56}, "crop_size": {"height": 56}},
            "video_processor": {}})
    assert (Gemma3Config.read(tmp_path).height, Gemma3Config.read(tmp_path).width) == (64, 48)
    assert (CLIPConfig.read(tmp_path).shortest_edge, CLIPConfig.read(tmp_path).crop_height) == (56, 56)


def test_processor_config_without_both_keys_falls_back(tmp_path: Path) -> None:
    # a processor_config.json holding a chat template only (or only image_processor): preprocessor_config.json
    _write(tmp_path, "preprocessor_config.json", {"patch_size": 16})
    for combined in ({"chat_template": "{{ messages }}"}, {"image_processor": {"patch_size": 10}}):
        _write(tmp_path, "processor_config.json", combined)
        assert image_processor_json(tmp_path) == {"patch_size": 16}
    (tmp_path / "preprocessor_config.json").unlink()
    assert image_processor_json(tmp_path) == {}
    assert ProcessorConfig.read(tmp_path) == ProcessorConfig()


def test_qwen3_vl_export_with_processor_config_only(tmp_path: Path) -> None:
    # the layout the upstream tests' own export writes under transformers 5: patch 16 must come
    # from processor_config.json (the default 14 made the vision model's reshape fail)
    src = FIXTURES / "qwen3vl-fp32"
    folder = tmp_path / "model"
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("golden.json"))
    image = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
    (folder / "preprocessor_config.json").unlink()
    _write(folder, "processor_config.json", {"image_processor": image, "video_processor": image})
    rng = np.random.default_rng(0)
    tensor = ov.Tensor(rng.integers(0, 256, (1, 70, 90, 3), dtype=np.uint8))
    config = genai_shim.GenerationConfig(max_new_tokens=4)
    want = genai_shim.VLMPipeline(str(src), "CPU").generate("Describe", images=[tensor], generation_config=config)
    got = genai_shim.VLMPipeline(str(folder), "CPU").generate("Describe", images=[tensor], generation_config=config)
    assert got.texts == want.texts
