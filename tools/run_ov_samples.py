#!/usr/bin/env python3
"""Run OpenVINO's own Python samples (samples/python of openvinotoolkit/openvino) with only their
import lines changed (``openvino`` -> ``ov_npu_emu``) and compare what they print with the real.

Nothing of openvino is copied into this repository: the samples are read from a directory given
on the command line, laid out as upstream (``hello_classification/hello_classification.py``,
``benchmark/sync_benchmark/sync_benchmark.py`` ...).  They need OpenCV (``cv2``), which is not a
dependency of this project: install ``opencv-python-headless`` where you run this tool.

  python tools/run_ov_samples.py models --out DIR
      writes the models and inputs the samples take: ResNet-like and MobileNet-like classifiers
      and an SSD-like detector as IR (ov_npu_emu.testing's builders, f32), lenet.bin for
      model_creation_sample (random weights in the layout the sample reads), test images (.bmp)
      and a stand-in data.py (seeded 28x28 digits) for model_creation_sample's ``from data import
      digits`` (upstream's data.py is used instead where the samples directory has one).

  python tools/run_ov_samples.py run SAMPLES_DIR --models DIR [--samples NAME ...]

Each sample runs four times, each in a fresh process and a fresh working directory:

  real-cpu  the sample as it is, openvino on "CPU" (the CPU plugin at its defaults)
  ours-cpu  the import lines swapped, on "CPU" (ov_npu_emu's CPU passthrough)
  real-f32  the sample as it is on "CPU", openvino's Core set to INFERENCE_PRECISION_HINT=f32
            (the harness subclasses openvino.Core; the sample's text is unchanged)
  ours-npu  the import lines swapped, on "NPU" (the emulated NPU, f32 by default)

and ``ours-cpu`` must print ``real-cpu``'s lines exactly, ``ours-npu`` ``real-f32``'s with every
number within 1e-4 relative (1e-7 absolute for the printed 7-digit probabilities).  Lines that
are timings (Count, Duration, Latency, Median, Average, Min, Max, Throughput) or the build
version (``ov.__version__``: openvino's on the real, ours on ov_npu_emu) are left out.
hello_query_device takes no device: its ``CPU :`` section is compared but for the keys of our own
that the passthrough lists after the real plugin's (``CPU_EMU_*``); the NPU section is ours only.
Exit status 0 when every sample matches.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: sample name -> (script path under the samples dir, argv builder)
SAMPLES = {
    "hello_query_device": "hello_query_device/hello_query_device.py",
    "hello_classification": "hello_classification/hello_classification.py",
    "classification_sample_async": "classification_sample_async/classification_sample_async.py",
    "hello_reshape_ssd": "hello_reshape_ssd/hello_reshape_ssd.py",
    "model_creation_sample": "model_creation_sample/model_creation_sample.py",
    "sync_benchmark": "benchmark/sync_benchmark/sync_benchmark.py",
    "throughput_benchmark": "benchmark/throughput_benchmark/throughput_benchmark.py",
}

_TIMING = re.compile(r"^\[ INFO \] +(Count|Duration|Latency|Median|Average|Min|Max|Throughput|AVG|MIN|MAX)\b|"
                     r"^\[ INFO \] Build \.+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_IMPORT = re.compile(r"^(\s*)(import openvino\b|from openvino\b)")

_F32_HARNESS = '''\
import runpy, sys
import openvino, openvino._ov_api as _api

class _F32Core(openvino.Core):
    """openvino's Core with the CPU plugin at f32 (the reference for the emulated NPU)."""
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.set_property("CPU", {"INFERENCE_PRECISION_HINT": "f32"})

openvino.Core = _F32Core
_api.Core = _F32Core
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, __import__("os").path.dirname(script))
runpy.run_path(script, run_name="__main__")
'''


def swap_imports(text: str) -> str:
    """The sample with its import lines (and only those) naming ov_npu_emu instead of openvino."""
    out = []
    for line in text.splitlines(keepends=True):
        m = _IMPORT.match(line)
        if m:
            line = line.replace("openvino", "ov_npu_emu", 1)
        out.append(line)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# models and inputs
# --------------------------------------------------------------------------------------------

def write_models(out: Path) -> None:
    import numpy as np
    import openvino as ov

    sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
    from ov_npu_emu.testing import make_mobilenet_like, make_resnet_like, make_ssd_like

    out.mkdir(parents=True, exist_ok=True)
    for name, model in (("resnet_like", make_resnet_like()), ("mobilenet_like", make_mobilenet_like()),
                        ("ssd_like", make_ssd_like())):
        ov.save_model(model, out / f"{name}.xml", compress_to_fp16=False)
    rng = np.random.default_rng(7)
    # lenet.bin: the float32 stream model_creation_sample slices, in its order; the two int64
    # reshape targets [0, -1] (batch kept, so set_batch works) sit in four float32 slots
    parts = [rng.standard_normal(20 * 25) * 0.2, rng.standard_normal(20) * 0.1,
             rng.standard_normal(50 * 20 * 25) * 0.045, rng.standard_normal(50) * 0.1]
    shape = np.array([0, -1], np.int64).view(np.float32)
    tail = [rng.standard_normal(500 * 800) * 0.035, rng.standard_normal(500) * 0.1,
            rng.standard_normal(10 * 500) * 0.045, rng.standard_normal(10) * 0.1]
    blob = np.concatenate([np.concatenate(parts).astype(np.float32), shape,
                           np.concatenate(tail).astype(np.float32)])
    blob.astype(np.float32).tofile(out / "lenet.bin")
    digits = (rng.uniform(0, 1, (10, 784)) ** 4 * 255).astype(np.uint8)
    np.save(out / "digits.npy", digits)
    (out / "data.py").write_text("# stand-in digits for model_creation_sample (tools/run_ov_samples.py)\n"
                                 "import numpy\n\n"
                                 f"digits = numpy.load({str(out.resolve() / 'digits.npy')!r})\n")
    for i, (h, w) in enumerate(((60, 80), (64, 64), (50, 90))):
        yy, xx = np.mgrid[0:h, 0:w]
        img = np.stack([(xx * 255 // w), (yy * 255 // h), ((xx + yy) * 7 % 256)], -1)
        img = (img + rng.integers(0, 40, img.shape)).clip(0, 255).astype(np.uint8)
        write_bmp(out / f"image{i}.bmp", img)
    yy, xx = np.mgrid[0:96, 0:128]
    write_bmp(out / "street.bmp", (np.stack([xx * 2, yy * 2, (xx ^ yy)], -1) % 256).astype(np.uint8))
    print(f"wrote models and inputs to {out}")


def write_bmp(path: Path, img: object) -> None:
    """A 24-bit BMP of an HxWx3 uint8 (BGR) array, the layout cv2.imread gives back."""
    import numpy as np

    a = np.asarray(img, np.uint8)
    h, w, _ = a.shape
    row = (w * 3 + 3) & ~3
    pixels = np.zeros((h, row), np.uint8)
    pixels[:, : w * 3] = a[::-1].reshape(h, w * 3)
    header = b"BM" + (54 + pixels.size).to_bytes(4, "little") + b"\0\0\0\0" + (54).to_bytes(4, "little")
    info = (40).to_bytes(4, "little") + w.to_bytes(4, "little") + h.to_bytes(4, "little") + (1).to_bytes(2, "little")
    info += (24).to_bytes(2, "little") + bytes(4) + pixels.size.to_bytes(4, "little") + bytes(16)
    path.write_bytes(header + info + pixels.tobytes())


# --------------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------------

def sample_args(name: str, models: Path, device: str) -> list[str]:
    m = str(models)
    return {
        "hello_query_device": [],
        "hello_classification": [f"{m}/resnet_like.xml", f"{m}/image0.bmp", device],
        "classification_sample_async": ["-m", f"{m}/mobilenet_like.xml", "-i", f"{m}/image0.bmp",
                                        f"{m}/image1.bmp", f"{m}/image2.bmp", "-d", device],
        "hello_reshape_ssd": [f"{m}/ssd_like.xml", f"{m}/street.bmp", device],
        "model_creation_sample": [f"{m}/lenet.bin", device],
        "sync_benchmark": [f"{m}/resnet_like.xml", device],
        "throughput_benchmark": [f"{m}/mobilenet_like.xml", device, "--seconds-to-run", "3"],
    }[name]


@dataclass
class Run:
    side: str
    rc: int
    out: str
    err: str


@dataclass
class Verdict:
    name: str
    runs: dict[str, Run] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def run_side(script: Path, side: str, args: list[str], models: Path, timeout: float) -> Run:
    work = Path(tempfile.mkdtemp(prefix=f"ovsample-{side}-"))
    for f in script.parent.iterdir():
        if f.is_file():
            shutil.copy(f, work / f.name)
    if not (work / "data.py").exists() and (models / "data.py").exists():
        shutil.copy(models / "data.py", work / "data.py")
    target = work / script.name
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, str(target), *args]
    if side.startswith("ours"):
        target.write_text(swap_imports(script.read_text()))
    elif side == "real-f32":
        (work / "_f32_harness.py").write_text(_F32_HARNESS)
        cmd = [sys.executable, str(work / "_f32_harness.py"), str(target), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=timeout)
        return Run(side, proc.returncode, proc.stdout, proc.stderr)
    except subprocess.TimeoutExpired as e:
        return Run(side, -1, str(e.stdout or ""), f"timed out after {timeout}s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def comparable(name: str, out: str) -> list[str]:
    lines = [ln for ln in out.splitlines() if not _TIMING.match(ln)]
    if name == "hello_query_device":  # the CPU section only
        keep, on = [], False
        for ln in lines:
            if re.match(r"^\[ INFO \] \S+ :$", ln):
                on = ln == "[ INFO ] CPU :"
            if on and "_EMU_" not in ln:  # our own keys (CPU_EMU_*) come after the real's
                keep.append(ln)
        return keep
    return lines


def numbers_close(a: str, b: str, rel: float, abs_: float) -> bool:
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
        fx, fy = float(x), float(y)
        if not math.isclose(fx, fy, rel_tol=rel, abs_tol=abs_):
            return False
    return True


def compare(name: str, ref: Run, got: Run, exact: bool) -> list[str]:
    if got.rc != 0:
        return [f"{got.side} exited {got.rc}: {got.err.strip().splitlines()[-1:] or got.out[-300:]}"]
    a, b = comparable(name, ref.out), comparable(name, got.out)
    if len(a) != len(b):
        diff = [d for d in difflib.unified_diff(a, b, ref.side, got.side, n=0, lineterm="")][2:8]
        return [f"{got.side}: {len(b)} lines, {ref.side}: {len(a)}", *diff]
    bad = []
    for x, y in zip(a, b, strict=True):
        if x == y or (not exact and numbers_close(x, y, 1e-4, 1e-7)):
            continue
        bad.append(f"{got.side}: {y!r} != {ref.side}: {x!r}")
    if bad and not exact and sorted(a) != sorted(b):
        # top-k lists: a near tie may be ordered the other way; match lines as a multiset
        rest = list(b)
        for x in a:
            hit = next((y for y in rest if x == y or numbers_close(x, y, 1e-4, 1e-7)), None)
            if hit is None:
                return bad[:5]
            rest.remove(hit)
        return []
    return bad[:5]


def run_samples(samples_dir: Path, models: Path, names: list[str], timeout: float) -> list[Verdict]:
    verdicts = []
    for name in names:
        script = samples_dir / SAMPLES[name]
        v = Verdict(name)
        if not script.exists():
            v.problems.append(f"missing {script}")
            verdicts.append(v)
            continue
        for side, device in (("real-cpu", "CPU"), ("ours-cpu", "CPU"), ("real-f32", "CPU"), ("ours-npu", "NPU")):
            if name == "hello_query_device" and side in ("real-f32", "ours-npu"):
                continue
            v.runs[side] = run_side(script, side, sample_args(name, models, device), models, timeout)
        for ref, got, exact in (("real-cpu", "ours-cpu", True), ("real-f32", "ours-npu", False)):
            if got not in v.runs:
                continue
            if v.runs[ref].rc != 0:
                v.problems.append(f"{ref} itself failed: {v.runs[ref].err.strip()[-300:]}")
                continue
            v.problems += compare(name, v.runs[ref], v.runs[got], exact)
        if name == "hello_query_device" and "[ INFO ] NPU :" not in v.runs["ours-cpu"].out:
            v.problems.append("ours lists no NPU")
        verdicts.append(v)
        status = "ok" if not v.problems else "DIFFERS"
        print(f"{name:<28} {status}", flush=True)
        for p in v.problems:
            print(f"    {p}")
    return verdicts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("models", help="write the models and inputs the samples take")
    m.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run", help="run the samples on the real and on ours and compare")
    r.add_argument("samples_dir", type=Path, help="openvino's samples/python (as laid out upstream)")
    r.add_argument("--models", type=Path, required=True, help="what `models --out` wrote")
    r.add_argument("--samples", nargs="+", choices=sorted(SAMPLES), default=list(SAMPLES))
    r.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    r.add_argument("--show", action="store_true", help="print each run's output")
    args = ap.parse_args(argv)
    if args.cmd == "models":
        write_models(args.out)
        return 0
    verdicts = run_samples(args.samples_dir, args.models, args.samples, args.timeout)
    if args.show:
        for v in verdicts:
            for run in v.runs.values():
                print(f"===== {v.name} {run.side} (rc {run.rc})\n{run.out}{run.err[-2000:]}")
    failed = [v.name for v in verdicts if v.problems]
    print(f"{len(verdicts) - len(failed)}/{len(verdicts)} samples print the real's output"
          + (f"; differ: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
