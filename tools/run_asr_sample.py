#!/usr/bin/env python3
"""Run openvino.genai's speech-recognition sample (samples/python/automatic_speech_recognition/
automatic_speech_recognition.py) unchanged but for its import line, under genai_shim and under
the real openvino_genai, on the repo's tiny Whisper fixtures, and compare what each prints.

Nothing of openvino.genai is copied into this repository: the sample is read at run time from a
checkout or a git directory (--upstream).  What the sample needs beyond the two packages is made
here, in a work directory:

* a WAV file (16 kHz, 16-bit PCM, mono) of ov_npu_emu.testing's deterministic speech-like audio
  (--audio short|medium|long: 3, 10 or 45 s);
* a stand-in ``librosa`` package (first on PYTHONPATH) whose ``load(path, sr=...)`` reads such a
  file as librosa does (float32 in [-1, 1): the samples / 32768) and refuses other sample rates
  or encodings -- librosa, numba-heavy, is no dependency of this project;
* a copy of the Whisper fixture whose generation_config.json also suppresses the tokens that
  decode to an incomplete UTF-8 character alone: the random fixture emits them, and the real
  2026.4.1 crashes (SIGSEGV) computing word timestamps over a window of such tokens, which the
  sample asks for.  Both sides read the same copy.

Runs, each in a fresh process and working directory (the sample writes ``asr_cache`` on NPU):

  cpu   the sample's default device "CPU": the real as it is, ours with the import swapped
        (`import genai_shim as openvino_genai`); no property added -- the outputs must be equal
  npu   device "NPU": the real with NPUW on the CPU plugin (NPU_USE_NPUW, NPUW_DEVICES=CPU) and
        ours on the emulated NPU, both given INFERENCE_PRECISION_HINT=f32 (exact tokens) by a
        wrapper around ASRPipeline, the sample's text unchanged -- the outputs must be equal

  python tools/run_asr_sample.py --upstream /path/to/openvino.genai [--runs cpu,npu]
      [--audio medium] [--fixture whisper-tiny-random-fp32] [--work DIR] [--show]

Exit status 0 when every run matches (or both sides fail, whose errors are printed); the
differing lines are printed otherwise.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from upstream_suite import read_upstream_file  # noqa: E402

SAMPLE = "samples/python/automatic_speech_recognition/automatic_speech_recognition.py"
FIXTURES = ROOT / "tests" / "fixtures" / "whisper"

#: the stand-in librosa: load() as librosa reads a 16-bit PCM WAV at its own rate (soundfile's
#: float32 scaling), anything else refused with what to do
_LIBROSA = '''"""A stand-in for librosa.load, written by ov-npu-emu's tools/run_asr_sample.py."""
import wave

import numpy as np


def load(path, sr=22050, mono=True, **kwargs):
    with wave.open(str(path), "rb") as f:
        if f.getsampwidth() != 2 or f.getnchannels() != 1 or f.getframerate() != sr:
            raise ValueError(f"{path}: the stand-in librosa reads 16-bit mono WAV at {sr} Hz only; "
                             "install librosa for other files")
        raw = f.readframes(f.getnframes())
    return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0, sr
'''

#: runs the sample (argv: impl, sample path, sample args...); on "NPU" it adds the run's
#: properties to every ASRPipeline the sample makes
_RUNNER = '''import importlib, json, re, sys
impl, extra, sample, *argv = sys.argv[1:]
module = importlib.import_module("genai_shim" if impl == "ours" else "openvino_genai")
extra = json.loads(extra)
original = module.ASRPipeline
if extra:
    class ASRPipeline(original):
        def __init__(self, models_path, device="CPU", **kwargs):
            super().__init__(models_path, device, **dict(extra, **kwargs))
    module.ASRPipeline = ASRPipeline
source = open(sample, encoding="utf-8").read()
if impl == "ours":
    source, n = re.subn(r"^import openvino_genai$", "import genai_shim as openvino_genai", source, flags=re.M)
    if n != 1:
        raise SystemExit(f"{sample}: expected exactly one 'import openvino_genai' line")
sys.argv = [sample, *argv]
exec(compile(source, sample, "exec"), {"__name__": "__main__", "__file__": sample})
'''

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
#: per run: device, the real's added properties, ours'
RUNS = {
    "cpu": ("CPU", {}, {}),
    "npu": ("NPU", {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", **F32}, F32),
}


def write_wav(path: Path, audio: np.ndarray, rate: int = 16000) -> None:
    pcm = np.clip(np.round(audio * 32768.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())


def fixture_copy(src: Path, dst: Path) -> Path:
    """``src`` copied with the incomplete-character tokens added to its suppress_tokens."""
    import genai_shim

    shutil.copytree(src, dst)
    tok = genai_shim.Tokenizer(str(src))
    path = dst / "generation_config.json"
    cfg = json.loads(path.read_text())
    incomplete = [i for i in range(cfg["eos_token_id"]) if "\ufffd" in tok.decode([i])]
    cfg["suppress_tokens"] = sorted(set(cfg.get("suppress_tokens") or []) | set(incomplete))
    path.write_text(json.dumps(cfg, indent=2))
    return dst


def run_side(work: Path, impl: str, extra: dict, sample: Path, args: list[str]) -> subprocess.CompletedProcess:
    cwd = Path(tempfile.mkdtemp(prefix=f"{impl}-", dir=work))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(work / "site"), str(ROOT), str(ROOT / "plugins"),
                                         env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, str(work / "site" / "_asr_runner.py"), impl, json.dumps(extra),
                           str(sample), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=1800)


def _last_error(stderr: str) -> str:
    """The exception line(s) at the end of a traceback (the real's C++ messages span lines)."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^[\w.]+(Error|Exception)\b", lines[i]):
            return " | ".join(ln.strip() for ln in lines[i:])[:600]
    return lines[-1][:600] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--upstream", type=Path, required=True, help="openvino.genai checkout or git directory")
    ap.add_argument("--runs", default="cpu,npu", help=f"comma-separated, of {sorted(RUNS)}")
    ap.add_argument("--audio", default="medium", help="short (3 s), medium (10 s) or long (45 s)")
    ap.add_argument("--fixture", default="whisper-tiny-random-fp32", help=f"a folder under {FIXTURES}")
    ap.add_argument("--work", type=Path, help="work directory (default: a new temporary one)")
    ap.add_argument("--show", action="store_true", help="print each side's output")
    args = ap.parse_args(argv)
    runs = args.runs.split(",")
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        ap.error(f"unknown run(s) {unknown}; use {sorted(RUNS)}")

    from ov_npu_emu.testing import whisper_test_audio

    work = args.work or Path(tempfile.mkdtemp(prefix="asr-sample-"))
    work.mkdir(parents=True, exist_ok=True)
    source = read_upstream_file(args.upstream, SAMPLE)
    if len(re.findall(r"^import openvino_genai$", source, flags=re.M)) != 1:
        raise SystemExit("the sample no longer has exactly one 'import openvino_genai' line: update this tool")
    sample = work / "automatic_speech_recognition.py"
    sample.write_text(source, encoding="utf-8")
    (work / "site" / "librosa").mkdir(parents=True, exist_ok=True)
    (work / "site" / "librosa" / "__init__.py").write_text(_LIBROSA)
    (work / "site" / "_asr_runner.py").write_text(_RUNNER)
    wav = work / f"{args.audio}.wav"
    write_wav(wav, whisper_test_audio(args.audio))
    model = work / args.fixture
    if not model.exists():
        fixture_copy(FIXTURES / args.fixture, model)

    failed = 0
    for name in runs:
        device, real_extra, our_extra = RUNS[name]
        outs, errors = {}, {}
        for impl, extra in (("real", real_extra), ("ours", our_extra)):
            proc = run_side(work, impl, extra, sample, [str(model), str(wav), device])
            outs[impl] = proc.stdout
            if proc.returncode != 0:
                errors[impl] = _last_error(proc.stderr) or f"exit {proc.returncode}"
            if args.show:
                print(f"--- {name} {impl}\n{proc.stdout}{proc.stderr[-3000:] if proc.returncode else ''}", end="")
        for impl, err in errors.items():
            print(f"{name}: {impl} failed: {err}")
        if len(errors) == 2:  # both refuse the input: a match of behaviour, said as such
            print(f"{name}: both failed ({args.fixture}, {args.audio} audio)")
            continue
        same = not errors and outs["real"] == outs["ours"]
        lines = outs["real"].count("\n")
        print(f"{name}: {'same output' if same else 'DIFFERENT output'} ({lines} lines; {args.fixture}, "
              f"{args.audio} audio)")
        if not same:
            failed += 1
            sys.stdout.writelines(difflib.unified_diff(outs["real"].splitlines(True), outs["ours"].splitlines(True),
                                                       "real", "ours"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
