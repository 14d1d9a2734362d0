"""samples/beam_search_causal_lm.py under genai_shim and under the real openvino_genai (CPU)."""

from __future__ import annotations

import re

import pytest

from tests.samples.sample_runner import only_import_and_device_differ, run

SCORE = re.compile(r"^(-?\d+\.\d{6}): ", flags=re.MULTILINE)


def _split(out: str) -> tuple[str, list[float]]:
    """(output with every leading "score: " blanked, the scores)."""
    return SCORE.sub("S: ", out), [float(s) for s in SCORE.findall(out)]


def test_beam_search_causal_lm(stories_dir, real_genai):
    args = [str(stories_dir), "Once upon a time", "Lily"]
    ours = run("ours", "-", "beam_search_causal_lm.py", *args)
    real = run("real", "-", "beam_search_causal_lm.py", *args)
    ours_text, ours_scores = _split(ours)
    real_text, real_scores = _split(real)
    # 15 beams in 3 groups, all returned, for each of the two prompts
    assert len(ours_scores) == 30
    assert ours_text == real_text
    assert ours_scores == pytest.approx(real_scores, abs=1e-5)
    # default properties: both run the paged-attention pipeline, so every printed digit agrees
    assert ours == real


def test_beam_search_sample_differs_only_in_import():
    only_import_and_device_differ("beam_search_causal_lm.py")
