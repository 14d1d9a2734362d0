"""Sample tests reuse the genai_shim fixtures (model folders, the real oracle)."""

from __future__ import annotations

from tests.genai_shim.conftest import chat_dir, model_dir, real_genai, stories_dir  # noqa: F401
