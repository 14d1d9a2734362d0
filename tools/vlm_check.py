#!/usr/bin/env python3
"""Check a VLM export folder against the real openvino_genai, side by side (issue 31's acceptance
on a model that is not in the repo, as an outside user would try it).

For each folder: the same prompts (an image, text only, two images, a video where the family
takes videos) and a 3-turn ChatHistory chat with images in turns 1 and 3 run through

  real CPU      openvino_genai.VLMPipeline(folder, "CPU")
  ours CPU      genai_shim.VLMPipeline(folder, "CPU")
  real NPU      openvino_genai on "NPU" with NPUW_DEVICES=CPU, NPUW_ONLINE_PIPELINE=NONE
  ours NPU      genai_shim on "NPU": the language model on the emulated NPU (NPUW)
  ours NPU+vis  the same with every vision model on the emulated NPU too

with f32 hints (exact tokens) unless --defaults, and the over-long-prompt error on NPU
(MAX_PROMPT_LEN below the image prompt).  Texts and input token counts are compared: ours CPU
with the real CPU, ours NPU setups with the real NPU and the real CPU (a prompt counts as equal
when it equals either: ours does not copy the real NPU's bugs, such as Qwen3-VL losing its
DeepStack features).  Prints one line per setup and a diff for each prompt that equals neither;
the exit code is 1 when any does.

    python tools/vlm_check.py FOLDER [FOLDER ...] [--defaults] [--tokens 20] [--skip-real-npu]

Needs the real openvino_genai (the [test] extra) next to this repository.  The real NPU cannot
run the chat after a video on NPU (its own rule) and refuses int4 groups under 64 (docs).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
REAL_NPU = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}
VISION_ON_NPU = {"DEVICE_PROPERTIES": {"AUTO": {"MULTI_DEVICE_PRIORITIES": "NPU"}}}
#: model_type values whose pipelines take videos (genai_shim and the real)
VIDEO_FAMILIES = {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava_next_video"}


def _images() -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (1, 96, 128, 3), dtype=np.uint8)
    a[:, 20:60, 30:90] = (200, 40, 40)  # some structure, not only noise
    b = rng.integers(0, 256, (1, 50, 70, 3), dtype=np.uint8)
    return ov.Tensor(a), ov.Tensor(b)


def _video() -> Any:
    frames = np.zeros((4, 64, 80, 3), np.uint8)
    for i in range(4):
        frames[i, :, 10 * i : 10 * i + 20] = (255, 128, 0)
    return ov.Tensor(frames)


def _run(mod: Any, folder: Path, device: str, props: dict[str, Any], tokens: int, video: bool
         ) -> list[tuple[str, Any, int]]:
    """(case, text, input tokens) per prompt; an exception's text where one was raised."""
    a, b = _images()
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("image", "Describe the image.", {"images": [a]}),
        ("text", "Hello there, who are you?", {}),
        ("two images", "Compare the two images.", {"images": [a, b]}),
    ]
    if video:
        cases.append(("video", "What happens in the video?", {"videos": [_video()]}))
    out: list[tuple[str, Any, int]] = []
    try:
        pipe = mod.VLMPipeline(str(folder), device, **props)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return [("construct", f"{type(e).__name__}: {str(e).splitlines()[-1][:160]}", -1)]
    for name, prompt, kw in cases:
        try:
            r = pipe.generate(prompt, max_new_tokens=tokens, **kw)
            out.append((name, r.texts[0], r.perf_metrics.get_num_input_tokens()))
        except Exception as e:  # noqa: BLE001
            out.append((name, f"{type(e).__name__}: {str(e).splitlines()[-1][:160]}", -1))
    history = mod.ChatHistory()
    for i, (question, images) in enumerate((("What is in this picture?", [a]), ("And its colours?", []),
                                            ("Now this one?", [b]))):
        history.append({"role": "user", "content": question})
        try:
            r = pipe.generate(history, images=images, max_new_tokens=tokens)
        except Exception as e:  # noqa: BLE001
            out.append((f"chat {i + 1}", f"{type(e).__name__}: {str(e).splitlines()[-1][:160]}", -1))
            break
        history.append({"role": "assistant", "content": r.texts[0]})
        out.append((f"chat {i + 1}", r.texts[0], r.perf_metrics.get_num_input_tokens()))
    return out


def _too_long(mod: Any, folder: Path, props: dict[str, Any]) -> str:
    a, _ = _images()
    try:
        pipe = mod.VLMPipeline(str(folder), "NPU", **props, MAX_PROMPT_LEN=16, MIN_RESPONSE_LEN=16)
        pipe.generate("Describe the image in detail.", images=[a], max_new_tokens=4)
    except Exception as e:  # noqa: BLE001
        text = str(e)
        start = text.find("VLM pipeline on NPU")
        return text[start:].strip() if start >= 0 else f"{type(e).__name__}: {text.splitlines()[-1][:160]}"
    return "(no error)"


def check(folder: Path, defaults: bool, tokens: int, real_npu: bool) -> bool:
    import openvino_genai as real

    import genai_shim as ours

    model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type", "?")
    video = model_type in VIDEO_FAMILIES
    base = {} if defaults else dict(F32)
    npu = dict(base, MAX_PROMPT_LEN=512, MIN_RESPONSE_LEN=64)
    setups: list[tuple[str, Any, str, dict[str, Any], str]] = [
        ("real CPU", real, "CPU", base, ""),
        ("ours CPU", ours, "CPU", base, "real CPU"),
    ]
    if real_npu:
        setups.append(("real NPU", real, "NPU", dict(npu, **REAL_NPU), ""))
    anchor = "real NPU" if real_npu else "real CPU"
    setups += [("ours NPU", ours, "NPU", npu, anchor),
               ("ours NPU+vis", ours, "NPU", dict(npu, **VISION_ON_NPU), anchor)]
    results: dict[str, list[tuple[str, Any, int]]] = {}
    print(f"## {folder} ({model_type}; {'defaults' if defaults else 'f32 hints'}, {tokens} new tokens)")
    same = True
    for name, mod, device, props, against in setups:
        results[name] = _run(mod, folder, device, props, tokens, video)
        if not against:
            print(f"  {name:13s} {len(results[name])} prompts")
            continue
        # ours on NPU: the real NPU's text, or the real CPU's where the real NPU has a bug that
        # ours does not copy (docs/genai_shim.md: Qwen3-VL's DeepStack, near ties); both counted
        refs = [against] + (["real CPU"] if against != "real CPU" else [])
        counts = [sum(x == y for x, y in zip(results[r], results[name], strict=False)) for r in refs]
        print(f"  {name:13s} " + ", ".join(f"{c}/{len(results[r])} equal to {r}" for c, r in zip(counts, refs,
                                                                                                 strict=True)))
        for i, mine in enumerate(results[name]):
            theirs = [results[r][i] for r in refs if i < len(results[r])]
            if mine not in theirs:
                same = False
                print(f"    {mine[0]:10s} {refs[0]}: {theirs[0][1]!r:.90} ({theirs[0][2]})\n"
                      f"    {'':10s} {name}: {mine[1]!r:.90} ({mine[2]})")
        if len(results[name]) != len(results[against]):
            same = False
    if real_npu:
        theirs, mine = _too_long(real, folder, dict(base, **REAL_NPU)), _too_long(ours, folder, base)
        print(f"  over-long    {'same error' if theirs == mine else 'DIFFERENT'}: {mine.splitlines()[0][:100]}")
        same &= theirs == mine
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, help="VLM export folders (optimum-cli image-text-to-text)")
    ap.add_argument("--defaults", action="store_true", help="default properties instead of f32 hints")
    ap.add_argument("--tokens", type=int, default=20, help="max_new_tokens per prompt (default 20)")
    ap.add_argument("--skip-real-npu", action="store_true",
                    help="no real NPU runs (ours NPU is then compared with the real CPU)")
    args = ap.parse_args()
    ok = True
    for folder in args.folders:
        try:
            ok &= check(folder, args.defaults, args.tokens, not args.skip_real_npu)
        except Exception:  # noqa: BLE001 - one folder's failure does not stop the others
            traceback.print_exc()
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
