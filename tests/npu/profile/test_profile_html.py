"""``ov-npu-emu profile --html``: one self-contained page, rendered by headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from ov_npu_emu.cli import main


def _png_pixels(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) to [H, W, C]."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    w = h = ch = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0
            ch = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + w * ch
    rows: list[bytearray] = []
    prev = bytearray(w * ch)
    for y in range(h):  # PNG filters: None, Sub, Up, Average, Paeth (plain ints: fast enough)
        f, line = raw[y * stride], bytearray(raw[y * stride + 1:(y + 1) * stride])
        if f == 2:
            line = bytearray(((np.frombuffer(line, np.uint8).astype(np.int32) + np.frombuffer(prev, np.uint8))
                              & 0xFF).astype(np.uint8).tobytes())
        elif f in (1, 3, 4):
            for x in range(len(line)):
                a = line[x - ch] if x >= ch else 0
                b = prev[x]
                if f == 1:
                    line[x] = (line[x] + a) & 0xFF
                elif f == 3:
                    line[x] = (line[x] + (a + b) // 2) & 0xFF
                else:
                    c = prev[x - ch] if x >= ch else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(line)
        prev = line
    out = np.frombuffer(b"".join(rows), np.uint8)
    return out.reshape(h, w, ch)


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


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_headless_chromium_renders_it(page: Path, tmp_path: Path) -> None:
    exe = _chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    png = tmp_path / "shot.png"
    subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", "--window-size=1200,900", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    px = _png_pixels(png.read_bytes())[:, :, :3][::4, ::4]  # every 4th pixel is plenty
    colors = {tuple(c) for c in px.reshape(-1, 3)}
    not_white = (px.min(axis=2) < 240).mean()
    assert len(colors) > 20 and not_white > 0.05, (len(colors), not_white)
    # the engine colours are on screen: DMA blue, DPU orange, SHAVE green
    for rgb in ((0x3B, 0x7D, 0xD8), (0xE8, 0x87, 0x0E), (0x2E, 0x9E, 0x5B)):
        assert (np.abs(px - rgb).sum(axis=2) < 30).any(), rgb
