#!/usr/bin/env python3
"""Run openvino.genai's MileBench sample (samples/python/visual_language_chat/milebench_eval_vlm.py:
ContinuousBatchingPipeline on a VLM folder, several images per prompt, get_metrics) unchanged but
for its import line, under genai_shim and under the real openvino_genai, on a repo VLM fixture,
and compare what each prints.

Nothing of openvino.genai is copied into this repository: the sample is read at run time from a
checkout or a git directory (--upstream).  What the sample needs beyond the two packages is made
here, in a work directory:

* a MileBench data directory the sample reads instead of downloading (its ``--data_dir``):
  ``<subset>/<subset>.json`` in MileBench's layout (``meta_data``: ``num_sample``,
  ``task_instruction``, ``question_type`` "multi-choice"; ``data``: ``task_instance`` with
  ``context``, ``images_path``, ``choice_list``, and ``task_instruction_id``, ``response``) and
  ``<subset>/images/`` with deterministic binary PPM images (tools/vlm_goldens.py's test image at
  sizes between the sample's 32 and 512 pixel bounds, so its resize keeps them as they are);
  samples with 0, 1, 2 and 3 images, ``{image#i}`` placeholders in the context;
* stand-ins (first on PYTHONPATH) for the sample's imports this interpreter lacks -- requests
  (never called: the data is there), tqdm (a progress bar that prints nothing), rouge (the
  open-ended scorer, unused for a multi-choice subset) and PIL (``Image.open`` of a binary PPM,
  ``convert("RGB")``, ``size``, ``resize`` to the same size, ``numpy.array(image)``); installed
  packages are used as they are.

Runs (device "CPU", no property added, the sample's own SchedulerConfig: a fixed 500-block cache
and dynamic split-fuse; without --enable_cache_eviction, which genai_shim does not implement):
the real with the sample as it is, ours with ``from openvino_genai import`` made ``from genai_shim
import``; each in a fresh process.  The outputs must be equal ("Eviction is OFF", "Score: ...",
"Cache usage: max ..., avg ...").

  python tools/run_milebench_sample.py [--upstream /path/to/openvino.genai]
      [--fixture qwen2vl-fp32] [--samples 4] [--seqs-per-request 2] [--max-new-tokens 8]
      [--work DIR] [--show]

Exit status 0 when both outputs are equal; the differing lines are printed otherwise.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = "samples/python/visual_language_chat/milebench_eval_vlm.py"
FIXTURES = ROOT / "tests" / "fixtures" / "vlm"
DEFAULT_UPSTREAM = Path("/work/.mirror/openvinotoolkit+openvino.genai/repo")
SUBSET = "ActionLocalization"  # a multi-choice subset of the sample's list
IMPORT_LINE = "from openvino_genai import ("

sys.path.insert(0, str(ROOT / "tools"))
from upstream_suite import read_upstream_file  # noqa: E402
from vlm_goldens import test_image  # noqa: E402

#: stand-ins for the sample's imports the interpreter lacks: module path -> source
STANDINS: dict[str, str] = {
    "requests/__init__.py": '''"""A stand-in for requests, written by ov-npu-emu's tools/run_milebench_sample.py."""


def get(url, **kwargs):
    raise RuntimeError(f"offline stand-in of requests: no download of {url}; give the sample --data_dir")
''',
    "tqdm/__init__.py": '''"""A stand-in for tqdm (a progress bar printing nothing), tools/run_milebench_sample.py's."""


class tqdm:
    def __init__(self, iterable=None, total=None, **kwargs):
        self.iterable, self.total, self.n = iterable, total, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return iter(self.iterable)

    def update(self, n=1):
        self.n += n
''',
    "rouge/__init__.py": '''"""A stand-in for rouge (tools/run_milebench_sample.py): multi-choice subsets never
score with it."""


class Rouge:
    def get_scores(self, *args, **kwargs):
        raise RuntimeError("stand-in rouge: open-ended scoring needs the rouge package")
''',
    "PIL/__init__.py": '"""A stand-in for Pillow (binary PPM only), by tools/run_milebench_sample.py."""\n',
    "PIL/Image.py": '''"""Image.open of a binary PPM (P6, maxval 255) as Pillow reads it; resize to the same
size only."""
import builtins
import enum

import numpy as np


class Resampling(enum.IntEnum):
    NEAREST = 0
    LANCZOS = 1


class Image:
    def __init__(self, pixels):
        self._pixels = pixels

    @property
    def size(self):
        return (self._pixels.shape[1], self._pixels.shape[0])

    def convert(self, mode):
        if mode != "RGB":
            raise ValueError(f"stand-in PIL converts to RGB only, not {mode!r}")
        return Image(self._pixels.copy())

    def resize(self, size, resample=None):
        if tuple(size) != self.size:
            raise ValueError(f"stand-in PIL does not resample ({self.size} -> {tuple(size)}); install Pillow")
        return Image(self._pixels.copy())

    def __array__(self, dtype=None, copy=None):
        return self._pixels if dtype is None else self._pixels.astype(dtype)


def open(path):
    with builtins.open(path, "rb") as f:
        data = f.read()
    fields, pos = [], 0
    while len(fields) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    if fields[0] != b"P6" or fields[3] != b"255":
        raise ValueError(f"{path}: the stand-in PIL reads binary PPM (P6, maxval 255) only")
    w, h = int(fields[1]), int(fields[2])
    pixels = np.frombuffer(data[pos + 1:pos + 1 + w * h * 3], np.uint8).reshape(h, w, 3)
    return Image(pixels.copy())
''',
}

#: (context with placeholders, image sizes (h, w), choices, answer index) per data sample
_SAMPLES = [
    ("Which frame shows the start of the action? {image#1}", [(80, 80)], ["frame one", "frame two"], 0),
    ("Compare {image#1} and {image#2}. Where does the action happen?", [(64, 96), (80, 80)],
     ["in the first", "in the second", "in both"], 1),
    ("No picture this time: what comes first?", [], ["start", "end"], 0),
    ("Order {image#1}, {image#2} and {image#3} in time.", [(56, 56), (72, 64), (80, 80)],
     ["1-2-3", "3-2-1", "2-1-3"], 2),
]


def write_ppm(path: Path, pixels: np.ndarray) -> None:
    h, w, _ = pixels.shape
    path.write_bytes(b"P6\n%d %d\n255\n" % (w, h) + np.ascontiguousarray(pixels, np.uint8).tobytes())


def write_data(data_dir: Path, n: int, subset: str = SUBSET) -> Path:
    """A MileBench subset of ``n`` samples (cycling through _SAMPLES) in the sample's layout."""
    folder = data_dir / subset
    (folder / "images").mkdir(parents=True, exist_ok=True)
    data = []
    for i in range(n):
        context, sizes, choices, answer = _SAMPLES[i % len(_SAMPLES)]
        paths = []
        for j, (h, w) in enumerate(sizes):
            name = f"s{i}_{j}.ppm"
            write_ppm(folder / "images" / name, np.roll(test_image(h, w)[0], 5 * (i + j), axis=1))
            paths.append(name)
        data.append({"sample_id": i, "task_instruction_id": i % 2, "response": choices[answer],
                     "task_instance": {"context": context, "images_path": paths, "choice_list": choices}})
    meta = {"num_sample": n, "question_type": "multi-choice",
            "task_instruction": ["Answer with the letter of the right choice.", "Look at the frames {i} and answer."]}
    (folder / f"{subset}.json").write_text(json.dumps({"meta_data": meta, "data": data}, indent=1), encoding="utf-8")
    return data_dir


def write_standins(folder: Path) -> list[str]:
    """Stand-ins for the sample's imports this interpreter lacks; returns their module names."""
    written = []
    for rel, source in STANDINS.items():
        top = rel.split("/")[0]
        if importlib.util.find_spec(top) is not None:
            continue
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        if top not in written:
            written.append(top)
    return written


def ours_source(source: str) -> str:
    """The sample with its openvino_genai import line made genai_shim's (the only change)."""
    if source.count(IMPORT_LINE) != 1 or "import openvino_genai" in source:
        raise SystemExit(f"{SAMPLE}: expected exactly one '{IMPORT_LINE}' line and no other openvino_genai import")
    return source.replace(IMPORT_LINE, "from genai_shim import (")


def run_side(side: str, source: str, args: list[str], work: Path, stubs: Path) -> subprocess.CompletedProcess[str]:
    script = work / f"milebench_{side}.py"
    script.write_text(source if side == "real" else ours_source(source), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stubs), str(ROOT), str(ROOT / "plugins"),
                                                    env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          cwd=work, timeout=1800)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", type=Path, default=DEFAULT_UPSTREAM, help="openvino.genai checkout or git directory")
    ap.add_argument("--fixture", default="qwen2vl-fp32", help="a folder of tests/fixtures/vlm")
    ap.add_argument("--samples", type=int, default=4, help="MileBench samples to write")
    ap.add_argument("--seqs-per-request", type=int, default=2, help="the sample's --seqs_per_request")
    ap.add_argument("--max-new-tokens", type=int, default=8, help="the sample's --max_new_tokens")
    ap.add_argument("--work", type=Path, default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--show", action="store_true", help="print both outputs")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="milebench-"))
    work.mkdir(parents=True, exist_ok=True)
    source = read_upstream_file(args.upstream, SAMPLE)
    data_dir = write_data(work / "data", args.samples)
    stubs = work / "stubs"
    standins = write_standins(stubs)
    sample_args = ["-m", str(FIXTURES / args.fixture), "-s", SUBSET, "--data_dir", str(data_dir),
                   "-mt", str(args.max_new_tokens), "--seqs_per_request", str(args.seqs_per_request)]
    out = {side: run_side(side, source, sample_args, work, stubs) for side in ("real", "ours")}
    for side, proc in out.items():
        if args.show or proc.returncode != 0:
            print(f"--- {side} (exit {proc.returncode}) ---\n{proc.stdout}{proc.stderr[-3000:]}")
    real, ours = out["real"], out["ours"]
    what = f"{args.fixture}, {args.samples} samples, stand-ins: {', '.join(standins) or 'none'}"
    if real.returncode != 0 or ours.returncode != 0:
        print(f"cpu: exit codes differ or failed (real {real.returncode}, ours {ours.returncode}; {what})")
        return 1
    if real.stdout != ours.stdout:
        print(f"cpu: outputs differ ({what})")
        sys.stdout.writelines(difflib.unified_diff(real.stdout.splitlines(True), ours.stdout.splitlines(True),
                                                   "real", "ours"))
        return 1
    print(f"cpu: same output ({len(real.stdout.splitlines())} lines; {what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
