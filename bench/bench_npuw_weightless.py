"""Weightless NPUW artefacts: size, export and import time with CACHE_MODE=OPTIMIZE_SIZE vs
OPTIMIZE_SPEED (ours on the emulated NPU and on CPU; the real NPUW on CPU beside it), in one run.

Usage: python bench/bench_npuw_weightless.py [--model DIR_OR_XML ...] [--max-prompt 64]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu import Core
from ov_npu_emu.models import find_model


def _export(core: object, xml: Path, cfg: dict) -> tuple[bytes, float]:
    cm = core.compile_model(str(xml), "NPU", cfg)
    t0 = time.perf_counter()
    buf = io.BytesIO()
    cm.export_model(buf)
    return buf.getvalue(), time.perf_counter() - t0


def _import(core: object, blob: bytes, cfg: dict) -> float:
    t0 = time.perf_counter()
    core.import_model(blob, "NPU", cfg)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="*", default=[str(find_model("stories260K"))])
    ap.add_argument("--max-prompt", type=int, default=64)
    args = ap.parse_args()
    print("| model | .bin | setup | artefact OPTIMIZE_SPEED | artefact OPTIMIZE_SIZE | size ratio | "
          "export ratio (SIZE/SPEED) | import ratio (SIZE+WEIGHTS_PATH / SPEED) |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.model:
        path = Path(model)
        xml = path / "openvino_model.xml" if path.is_dir() else path
        weights = str(xml.with_suffix(".bin"))
        base = {
            "NPU_USE_NPUW": "YES",
            "NPUW_LLM": "YES",
            "NPUW_ONLINE_PIPELINE": "NONE",
            "NPUW_LLM_MAX_PROMPT_LEN": args.max_prompt,
            "NPUW_LLM_MIN_RESPONSE_LEN": 64,
        }
        setups = (
            ("ours NPUW/NPU", Core(), "NPU"),
            ("ours NPUW/CPU", Core(), "CPU"),
            ("real NPUW/CPU", ov.Core(), "CPU"),
        )
        for name, core, sub in setups:
            cfg = dict(base, NPUW_DEVICES=sub)
            full, t_full = _export(core, xml, dict(cfg, CACHE_MODE="OPTIMIZE_SPEED"))
            slim, t_slim = _export(core, xml, dict(cfg, CACHE_MODE="OPTIMIZE_SIZE"))
            i_full = _import(core, full, {})
            i_slim = _import(core, slim, {"WEIGHTS_PATH": weights})
            print(f"| {path.name} | {os.path.getsize(weights)} | {name} | {len(full)} | {len(slim)} | "
                  f"{len(slim) / len(full):.3f} | {t_slim / t_full:.2f} | {i_slim / i_full:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
