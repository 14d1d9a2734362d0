"""``_runner.py`` for the speculative-decoding sample: also forces f32 on the draft model, so the
candidates (and the accepted-token counts) of both implementations are comparable exactly."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _runner  # noqa: E402


def main() -> None:
    impl = sys.argv[1]
    module = importlib.import_module("genai_shim" if impl == "ours" else "openvino_genai")
    original = module.draft_model

    def draft_model(path, device="", **properties):
        return original(path, device, **dict(_runner.F32, **properties))

    module.draft_model = draft_model
    _runner.main()


if __name__ == "__main__":
    main()
