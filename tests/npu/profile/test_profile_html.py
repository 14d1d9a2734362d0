"""``ov-npu-emu profile --html``: one self-contained page, rendered by headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ov_npu_emu.cli import main
from ov_npu_emu.testing import chromium_screenshot


@pytest.fixture(scope="module")
def page(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "profile.html"
    assert main(["profile", str(tiny_model_dir / "openvino_model.xml"), "--decode-kv", "31",
                 "--config", "NPU_EMU_CMX_SIZE=32768", "--config", "NPUW_LLM_GENERATE_VARIANTS=512,1152",
                 "--html", str(out), "--json"]) == 0
    return out


def test_page_shows_the_npuw_kv_plan_per_generate_variant(page: Path, tiny_model_dir: Path) -> None:
    """The NPUW plugin's kv-plan (through the ovnpu_kv_plan hook) for the profiled model's keys."""
    from ov_npu_emu_npuw.kvplan import plan_from_model

    plan = plan_from_model(tiny_model_dir / "openvino_model.xml", {"NPUW_LLM_GENERATE_VARIANTS": "512,1152"})
    text = page.read_text(encoding="utf-8")
    assert "NPUW KV plan per generate variant" in text and len(plan["variants"]) == 2
    for v in plan["variants"]:
        assert (f"<td class='num'>{v['kv_size']:,}</td><td class='num'>{v['past_slots']:,}</td>"
                f"<td class='num'>{v['bytes']:,}</td>") in text
    assert f"<td class='num'>{plan['bytes']:,}</td></tr></table>" in text
    # the DMA-under-compute row (32 KiB CMX: the MatMuls' ping-pong) is drawn
    assert ">DMA ∥ compute</text>" in text and text.count('class="overlap"') > 10


def test_page_is_self_contained_and_complete(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    # no network: no scripts, stylesheets, images or fonts from anywhere
    assert not re.search(r"<script|<link|<img|@import|url\(|src=", text)
    assert all(f">{lane}</text>" in text for lane in ("DMA0", "DMA1", "DPU", "SHAVE", "barriers"))
    assert text.count('class="task"') > 50 and text.count('class="barrier"') > 10
    assert text.count('class="buf"') > 10  # the memory plan drawn from the blob metadata
    assert "past_key_values.0.key" in text and "15,872" in text  # 4 × [1,2,31,16] f32


def test_headless_chromium_renders_it(page: Path, tmp_path: Path) -> None:
    px = chromium_screenshot(page, tmp_path / "shot.png")[:, :, :3][::4, ::4]  # every 4th pixel is plenty
    colors = {tuple(c) for c in px.reshape(-1, 3)}
    not_white = (px.min(axis=2) < 240).mean()
    assert len(colors) > 20 and not_white > 0.05, (len(colors), not_white)
    # the engine colours are on screen: DMA blue, DPU orange, SHAVE green
    for rgb in ((0x3B, 0x7D, 0xD8), (0xE8, 0x87, 0x0E), (0x2E, 0x9E, 0x5B)):
        assert (np.abs(px - rgb).sum(axis=2) < 30).any(), rgb
