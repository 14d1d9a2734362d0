"""Runs a sample the way a user would, with two test-only adjustments.

``python _runner.py ours|real DEVICE SAMPLE.py ARGS...``:

* ``real`` swaps the sample's ``import genai_shim as X`` for ``import openvino_genai as X``;
  that import line and the device are the only differences between our samples and upstream's.
* Every ``LLMPipeline`` gets f32 hints (exact token equality between implementations) and, on
  "NPU", the NPUW-on-CPU keys; ``DEVICE`` (if not "-") replaces the sample's device.  On "NPU",
  genai_shim uses our NPUW plugin (a missing plugin is an error, never a test double).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
NPU = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}


def main() -> None:
    impl, device, sample, *argv = sys.argv[1:]
    module = importlib.import_module("genai_shim" if impl == "ours" else "openvino_genai")
    original = module.LLMPipeline

    def LLMPipeline(models_path, dev="CPU", *args, **kwargs):  # noqa: N802 - replaces a class
        dev = dev if device == "-" else device
        extra = dict(F32, **(NPU if dev == "NPU" else {}))
        extra.update(kwargs)
        return original(models_path, dev, *args, **extra)

    module.LLMPipeline = LLMPipeline
    if impl == "ours":
        sys.path.insert(0, str(ROOT))
        from tests.genai_shim.conftest import npuw_available

        if not npuw_available():
            raise SystemExit("the built-in NPUW plugin is not registered: reinstall ov-npu-emu")
    source = Path(sample).read_text(encoding="utf-8")
    if impl == "real":
        source, n = re.subn(
            r"^import genai_shim as (\w+)$", r"import openvino_genai as \1", source, flags=re.M
        )
        if n != 1:
            raise SystemExit(f"{sample}: expected exactly one 'import genai_shim as ...' line")
    sys.argv = [sample, *argv]
    exec(compile(source, sample, "exec"), {"__name__": "__main__", "__file__": sample})


if __name__ == "__main__":
    main()
