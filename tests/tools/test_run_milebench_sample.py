"""tools/run_milebench_sample.py: its synthetic MileBench subset reads back as the sample reads it
(the JSON layout, the PPM images through the stand-in PIL), a small sample of our own in the
upstream layout runs the same on both sides through the tool, and, where the openvino.genai
mirror is present, the upstream MileBench sample itself prints the real's lines."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tools import run_milebench_sample as rms

pytest.importorskip("openvino_genai")

#: a sample of our own in the upstream layout (not upstream's text): what the tool needs of one
_SAMPLE = '''import argparse
import json
import os

import numpy as np
import openvino
from PIL import Image
from openvino_genai import (
    ContinuousBatchingPipeline,
    GenerationConfig,
    SchedulerConfig,
)

ap = argparse.ArgumentParser()
ap.add_argument("-m")
ap.add_argument("-s")
ap.add_argument("--data_dir")
ap.add_argument("-mt", type=int)
ap.add_argument("--seqs_per_request", type=int)
a = ap.parse_args()
ann = json.load(open(os.path.join(a.data_dir, a.s, a.s + ".json")))
prompts, images = [], []
for d in ann["data"]:
    prompts.append(d["task_instance"]["context"].replace("{image#1}", "<ov_genai_image_0>"))
    images.append([openvino.Tensor(np.array(Image.open(os.path.join(a.data_dir, a.s, "images", p)).convert("RGB")))
                   for p in d["task_instance"]["images_path"]])
cfg = GenerationConfig()
cfg.max_new_tokens = a.mt
sc = SchedulerConfig()
sc.num_kv_blocks = 64
pipe = ContinuousBatchingPipeline(a.m, sc, "CPU")
for r in pipe.generate(prompts, images=images, generation_config=[cfg] * len(prompts)):
    print(repr(r.texts[0]), r.perf_metrics.get_num_input_tokens())
m = pipe.get_metrics()
print(f"Cache usage: max {m.max_cache_usage:.3f}, avg {m.avg_cache_usage:.3f}")
'''


def _stand_in_pil(tmp_path: Path) -> object:
    """The tool's stand-in PIL.Image, loaded from its file as the sample's process would."""
    folder = tmp_path / "stub"
    (folder / "PIL").mkdir(parents=True)
    for rel in ("PIL/__init__.py", "PIL/Image.py"):
        (folder / rel).write_text(rms.STANDINS[rel])
    spec = importlib.util.spec_from_file_location("stand_in_pil_image", folder / "PIL" / "Image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_data_dir_reads_back_as_the_sample_reads_it(tmp_path: Path) -> None:
    data = rms.write_data(tmp_path / "data", 5)
    ann = json.loads((data / rms.SUBSET / f"{rms.SUBSET}.json").read_text())
    assert ann["meta_data"]["num_sample"] == 5 and ann["meta_data"]["question_type"] == "multi-choice"
    counts = [len(d["task_instance"]["images_path"]) for d in ann["data"]]
    assert sorted(set(counts)) == [0, 1, 2, 3]
    for d in ann["data"]:
        assert d["response"] in d["task_instance"]["choice_list"]
        n = len(d["task_instance"]["images_path"])
        assert all(f"{{image#{i + 1}}}" in d["task_instance"]["context"] for i in range(n))
        assert d["task_instruction_id"] < len(ann["meta_data"]["task_instruction"])
    pil = _stand_in_pil(tmp_path)
    name = ann["data"][1]["task_instance"]["images_path"][0]
    image = pil.open(data / rms.SUBSET / "images" / name).convert("RGB")  # type: ignore[attr-defined]
    w, h = image.size
    assert 32 <= min(w, h) and max(w, h) <= 512  # the sample's resize keeps it as it is
    pixels = np.array(image.resize((w, h), pil.Resampling.LANCZOS))  # type: ignore[attr-defined]
    assert pixels.shape == (h, w, 3) and pixels.dtype == np.uint8
    with pytest.raises(ValueError, match="does not resample"):
        image.resize((w + 1, h))
    if importlib.util.find_spec("PIL") is not None:  # Pillow reads the same pixels
        from PIL import Image

        assert np.array_equal(np.array(Image.open(data / rms.SUBSET / "images" / name).convert("RGB")), pixels)


def test_own_sample_same_on_both_sides(tmp_path: Path) -> None:
    upstream = tmp_path / "genai"
    (upstream / rms.SAMPLE).parent.mkdir(parents=True)
    (upstream / rms.SAMPLE).write_text(_SAMPLE)
    proc = subprocess.run([sys.executable, str(rms.ROOT / "tools" / "run_milebench_sample.py"), "--upstream",
                           str(upstream), "--samples", "4", "--work", str(tmp_path / "w"), "--show"],
                          capture_output=True, text=True, timeout=900, cwd=rms.ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cpu: same output (5 lines; qwen2vl-fp32, 4 samples" in proc.stdout


@pytest.mark.skipif(not rms.DEFAULT_UPSTREAM.is_dir(), reason="no openvino.genai mirror on this host")
def test_upstream_milebench_sample_prints_the_reals_lines(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(rms.ROOT / "tools" / "run_milebench_sample.py"),
                           "--work", str(tmp_path / "w"), "--show"],
                          capture_output=True, text=True, timeout=900, cwd=rms.ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cpu: same output (3 lines; qwen2vl-fp32" in proc.stdout
    assert "Score: " in proc.stdout and "Cache usage: max " in proc.stdout
