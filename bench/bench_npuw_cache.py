"""CACHE_DIR: first start (compile + store) vs second start (load) of our NPUW, and the real one's.

Usage: python bench/bench_npuw_cache.py [--model DIR_OR_XML] [--max-prompt 1024]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu import Core
from ov_npu_emu.models import find_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(find_model("stories260K")))
    ap.add_argument("--max-prompt", type=int, default=1024)
    args = ap.parse_args()
    path = Path(args.model)
    xml = path / "openvino_model.xml" if path.is_dir() else path
    base = {
        "NPU_USE_NPUW": "YES",
        "NPUW_LLM": "YES",
        "NPUW_DEVICES": "CPU",
        "NPUW_ONLINE_PIPELINE": "NONE",
        "NPUW_LLM_MAX_PROMPT_LEN": args.max_prompt,
        "NPUW_LLM_PREFILL_CHUNK_SIZE": 64,
        "NPUW_LLM_GENERATE_VARIANTS": "256,512,1024",
    }
    print(f"model {xml}; {base}")
    setups = [
        ("ours NPUW/CPU", Core, "CPU"),
        ("ours NPUW/NPU", Core, "NPU"),
        ("real NPUW/CPU", ov.Core, "CPU"),
    ]
    for name, make_core, sub_device in setups:
        if name == "ours NPUW/NPU" and "NPU" not in Core().registry:
            print("(emulated NPU not registered: skipped)")
            continue
        with tempfile.TemporaryDirectory() as d:
            cfg = dict(base, CACHE_DIR=d, NPUW_DEVICES=sub_device)
            if name.startswith("real"):
                cfg.pop("NPUW_LLM_GENERATE_VARIANTS")  # our key
            times = []
            for _ in range(2):
                core = make_core()  # a new Core per start, like a new process
                model = ov.Core().read_model(xml)
                t = time.perf_counter()
                core.compile_model(model, "NPU", cfg)
                times.append(time.perf_counter() - t)
            print(
                f"{name}: first start {times[0]:.3f} s, second start {times[1]:.3f} s, ratio {times[1] / times[0]:.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
