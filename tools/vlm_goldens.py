"""golden.json for the VLM fixtures from the REAL openvino_genai.VLMPipeline (openvino_genai only).

Recorded: greedy texts on CPU under f32 hints, with an image and text only, a 3-turn chat (the
image in the first turn), and on NPU with NPUW_DEVICES=CPU (f32 sub-configs, as the NPUW oracle
tests set them) plus the real's error for a prompt over MAX_PROMPT_LEN.  For the families that
take videos (Qwen2-VL, Qwen2.5-VL) ``record_videos`` adds a ``videos`` entry: VIDEO_CASES and a
video chat on both devices, with their margins. ``record_cpp_preprocess`` adds a
``vision_preprocess_cpp`` entry: CPP_CASES from pipelines built under ``VISION_PREPROCESS=CPP``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

PROMPT = "Describe the picture."
CHAT = ("Describe the picture.", "What is in the water?", "Tell me more.")
MAX_NEW_TOKENS = 20
#: a golden's smallest top1-top2 logit margin (f32) must be at least this
MIN_MARGIN = 0.1
CPU_PROPS = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
F32_SUB = {"INFERENCE_PRECISION_HINT": "f32"}
NPU_PROPS: dict[str, Any] = {
    "NPUW_DEVICES": "CPU",
    "NPUW_ONLINE_PIPELINE": "NONE",
    "NPUW_LLM_SHARED_HEAD": "NO",
    "++NPUW_LLM_PREFILL_CONFIG": F32_SUB,
    "++NPUW_LLM_GENERATE_CONFIG": F32_SUB,
}


def npu_extra(folder: Path) -> dict[str, Any]:
    """Extra NPU properties for a fixture: with a sliding window narrower than the default KV size
    (MAX_PROMPT_LEN 1024 + MIN_RESPONSE_LEN 128) a MAX_PROMPT_LEN whose KV fits the window, where
    the real NPUW 2026.4.1 gives its CPU's text (past it, it does not on Gemma 3: docs/genai_shim.md)."""
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    window = (cfg.get("text_config") or {}).get("sliding_window")
    if window and window < 1024 + 128:
        return {"MAX_PROMPT_LEN": max(64, (window - 128) // 64 * 64 // 2)}
    return {}


def test_image(h: int = 80, w: int = 80) -> np.ndarray:
    """A deterministic RGB gradient [1, h, w, 3] uint8."""
    img = np.zeros((1, h, w, 3), np.uint8)
    img[0, :, :, 0] = (np.arange(w)[None, :] * 255 // w).astype(np.uint8)
    img[0, :, :, 1] = (np.arange(h)[:, None] * 255 // h).astype(np.uint8)
    img[0, :, :, 2] = ((np.arange(h)[:, None] + np.arange(w)[None, :]) * 3 % 256).astype(np.uint8)
    return img


def test_video(frames: int, h: int, w: int, shift: int = 7) -> np.ndarray:
    """A deterministic video [frames, h, w, 3] uint8: the test image rolled ``shift`` pixels
    along its width per frame."""
    base = test_image(h, w)[0]
    return np.ascontiguousarray(np.stack([np.roll(base, shift * i, axis=1) for i in range(frames)]))


#: name -> (prompt, images as (h, w), videos as (frames, h, w[, shift]), frames_indices per video or None);
#: shifts and indices picked for top-1 margins >= MIN_MARGIN on both Qwen fixtures (the first tries,
#: shift 7 and indices [0, 2, 3, 5, 7], had 0.046 / 0.003 / 0.092)
VIDEO_CASES: dict[str, tuple[str, list[tuple[int, ...]], list[tuple[int, ...]], list[list[int]] | None]] = {
    "4_frames_70x90": ("Describe the video.", [], [(4, 70, 90)], None),
    "3_frames_40x100": ("Describe the video.", [], [(3, 40, 100, 11)], None),
    "1_frame_64x64": ("Describe the video.", [], [(1, 64, 64)], None),
    "5_of_8_frames_80x80": ("Describe the video.", [], [(8, 80, 80)], [[0, 1, 3, 5, 7]]),
    "image_and_video": (PROMPT, [(80, 80)], [(2, 70, 90)], None),
    "two_videos": ("Compare the videos.", [], [(2, 70, 90), (5, 60, 60, 9)], None),
}
#: Qwen3-VL's extra video cases (its timestamps): name -> (prompt, images, videos, frames_indices
#: per video or None, VideoMetadata.fps per video or None)
QWEN3_VIDEO_CASES: dict[str, tuple[str, list[tuple[int, ...]], list[tuple[int, ...]], list[list[int]] | None,
                                   list[float] | None]] = {
    "6_frames_100x100": ("Describe the video.", [], [(6, 100, 100)], None, None),
    "4_frames_fps2": ("Describe the video.", [], [(4, 70, 90)], None, [2.0]),
    "3_of_8_frames_fps4": ("Describe the video.", [], [(8, 80, 80)], [[1, 4, 6]], [4.0]),
    "universal_video_then_image": ("<ov_genai_video_0> then <ov_genai_image_0>: describe.", [(64, 96)],
                                   [(4, 70, 90)], None, None),
    # VIDEO_CASES' two_videos had a 0.0099 margin on Qwen3-VL: the second video rolled 13 px instead of 9
    "two_videos_shift13": ("Compare the videos.", [], [(2, 70, 90), (5, 60, 60, 13)], None, None),
}
#: VIDEO_CASES left out on Qwen3-VL (a top-1 margin under MIN_MARGIN there; QWEN3_VIDEO_CASES replaces it)
QWEN3_SKIPPED_VIDEO_CASES = ("two_videos",)
#: a start_chat chat: (prompt, videos, images) per turn
VIDEO_CHAT: tuple[tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]], ...] = (
    ("Describe the video.", [(3, 60, 60)], []),
    ("What moves?", [], []),
    ("And in these?", [(2, 56, 84)], [(80, 80)]),
)


def video_case_inputs(name: str, lib: Any) -> tuple[str, dict[str, Any]]:
    """VIDEO_CASES[name] as generate()'s prompt and keyword arguments (``lib``: openvino_genai or
    the shim, for its VideoMetadata)."""
    import openvino as ov

    fps: list[float] | None = None
    if name in VIDEO_CASES:
        prompt, images, videos, indices = VIDEO_CASES[name]
    else:
        prompt, images, videos, indices, fps = QWEN3_VIDEO_CASES[name]
    kw: dict[str, Any] = {"videos": [ov.Tensor(test_video(*v)) for v in videos]}
    if images:
        kw["images"] = [ov.Tensor(test_image(*hw)) for hw in images]
    if indices is not None or fps is not None:
        metas = []
        for i in range(len(videos)):
            meta = lib.VideoMetadata()
            if indices is not None:
                meta.frames_indices = indices[i]
            if fps is not None:
                meta.fps = fps[i]
            metas.append(meta)
        kw["videos_metadata"] = metas
    return prompt, kw


def video_case_names(folder: Path) -> list[str]:
    """The video cases recorded for a fixture: VIDEO_CASES, plus QWEN3_VIDEO_CASES on Qwen3-VL."""
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if cfg.get("model_type") != "qwen3_vl":
        return list(VIDEO_CASES)
    return [n for n in VIDEO_CASES if n not in QWEN3_SKIPPED_VIDEO_CASES] + list(QWEN3_VIDEO_CASES)


def video_chat_turns(pipe: Any, lib: Any) -> list[tuple[str, int]]:
    """start_chat(), the VIDEO_CHAT turns, finish_chat(): each turn's (text, input tokens)."""
    import openvino as ov

    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    pipe.start_chat()
    try:
        out = []
        for prompt, videos, images in VIDEO_CHAT:
            kw: dict[str, Any] = {}
            if videos:
                kw["videos"] = [ov.Tensor(test_video(*v)) for v in videos]
            if images:
                kw["images"] = [ov.Tensor(test_image(*hw)) for hw in images]
            r = pipe.generate(prompt, generation_config=cfg, **kw)
            out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        return out
    finally:
        pipe.finish_chat()


def chat_turns(pipe: Any, lib: Any) -> list[tuple[str, int]]:
    """start_chat(), the CHAT turns with the test image in the first, finish_chat(): each
    turn's (text, input tokens), greedy with MAX_NEW_TOKENS (``lib``: openvino_genai or the shim)."""
    import openvino as ov

    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    pipe.start_chat()
    try:
        out = []
        for i, prompt in enumerate(CHAT):
            kw = {"images": [ov.Tensor(test_image())]} if i == 0 else {}
            r = pipe.generate(prompt, generation_config=cfg, **kw)
            out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        return out
    finally:
        pipe.finish_chat()


def _run(pipe: Any, ov: Any, og: Any) -> dict[str, Any]:
    cfg = og.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    image = ov.Tensor(test_image())
    out: dict[str, Any] = {}
    r = pipe.generate(PROMPT, images=[image], generation_config=cfg)
    out["image"] = {"text": r.texts[0], "num_input_tokens": r.perf_metrics.get_num_input_tokens()}
    r = pipe.generate(PROMPT, generation_config=cfg)
    out["text_only"] = {"text": r.texts[0], "num_input_tokens": r.perf_metrics.get_num_input_tokens()}
    out["chat"] = [{"prompt": p, "text": t, "num_input_tokens": n}
                   for p, (t, n) in zip(CHAT, chat_turns(pipe, og), strict=True)]
    return out


def record(folder: Path) -> dict[str, Any]:
    import openvino as ov
    import openvino_genai as og

    golden: dict[str, Any] = {
        "fixture": folder.name,
        "openvino_genai": og.__version__,
        "prompt": PROMPT,
        "image": "tools/vlm_goldens.py test_image(80, 80)",
        "max_new_tokens": MAX_NEW_TOKENS,
    }
    golden["cpu"] = {"device": "CPU", "properties": CPU_PROPS,
                     **_run(og.VLMPipeline(str(folder), "CPU", **CPU_PROPS), ov, og)}
    extra = npu_extra(folder)
    golden["npuw_cpu"] = {"device": "NPU", "properties": {**NPU_PROPS, **extra},
                          **_run(og.VLMPipeline(str(folder), "NPU", **NPU_PROPS, **extra), ov, og)}
    if extra:  # the default KV size, past the sliding window: what the real gives there
        golden["npuw_cpu_default_kv"] = {"device": "NPU", "properties": dict(NPU_PROPS),
                                         **_run(og.VLMPipeline(str(folder), "NPU", **NPU_PROPS), ov, og)}
    small = og.VLMPipeline(str(folder), "NPU", **NPU_PROPS, MAX_PROMPT_LEN=16)
    try:
        small.generate(PROMPT, images=[ov.Tensor(test_image())], max_new_tokens=4)
        golden["npu_too_long"] = None
    except RuntimeError as e:
        golden["npu_too_long"] = {"MAX_PROMPT_LEN": 16, "error": str(e)}
    golden["margins"] = margins(folder, golden)
    for key in ("image", "text_only"):
        m = golden["margins"][key]
        if m["min"] < MIN_MARGIN or not m["text_equals_golden"]:
            raise SystemExit(f"{key}: top-1 margin {m['min']} < {MIN_MARGIN} or text differs; pick another "
                             "image or prompt")
    (folder / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if cfg.get("model_type") in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):  # the families here that take videos
        golden = record_videos(folder)
    return golden


def _cpu_models(folder: Path) -> tuple[Any, Any, Any, Any]:
    """(openvino_genai, the folder's real Tokenizer, genai_shim's inputs embedder on CPU, the
    language model compiled on CPU in f32): what the margin functions feed."""
    import openvino as ov
    import openvino_genai as og

    sys_path = str(Path(__file__).resolve().parents[1])
    import sys

    if sys_path not in sys.path:
        sys.path.insert(0, sys_path)
    from genai_shim.vlm.common import Placement
    from genai_shim.vlm.pipeline import EMBEDDERS

    core = ov.Core()
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tok = og.Tokenizer(str(folder))
    emb = EMBEDDERS[cfg["model_type"]](core, folder, cfg, Placement({}, ("CPU", CPU_PROPS)), tok)
    lm = core.compile_model(core.read_model(folder / "openvino_language_model.xml"), "CPU", CPU_PROPS)
    return og, tok, emb, lm


def margins(folder: Path, golden: dict[str, Any]) -> dict[str, Any]:
    """Per greedy step of the CPU goldens (image, text only): the top-1 minus top-2 logit of the
    exported language model on the OpenVINO CPU plugin in f32, fed genai_shim's inputs embedder
    (its embeddings, pad expansion and M-RoPE positions equal the real's: same texts)."""
    import openvino as ov

    og, tok, emb, lm = _cpu_models(folder)
    out: dict[str, Any] = {"source": "openvino CPU f32, openvino_language_model.xml, greedy"}
    for key, images in (("image", [ov.Tensor(test_image())]), ("text_only", [])):
        encoded = emb.encode_images(images)
        unified = emb.normalize_prompt(PROMPT, encoded)
        templated = tok.apply_chat_template([{"role": "user", "content": unified}], add_generation_prompt=True)
        ids = np.array(tok.encode(templated, add_special_tokens=False).input_ids.data, np.int64)
        x = emb.embed(ids, encoded)
        pos, delta = emb.position_ids(ids, encoded)
        extras, step_extras = emb.lm_inputs(ids, encoded), emb.step_lm_inputs()
        req = lm.create_infer_request()
        n = ids.shape[1]
        logits = req.infer({"inputs_embeds": x, "attention_mask": np.ones((1, n), np.int64), "position_ids": pos,
                            "beam_idx": np.zeros(1, np.int32), **extras})["logits"][0, -1]
        tokens, steps = [], []
        for _ in range(MAX_NEW_TOKENS):
            top = np.sort(logits)[-2:]
            steps.append(round(float(top[1] - top[0]), 5))
            t = int(np.argmax(logits))
            tokens.append(t)
            if t == tok.get_eos_token_id():
                break
            length = n + len(tokens)
            logits = req.infer({"inputs_embeds": emb.token_embeddings(np.array([[t]], np.int64)),
                                "attention_mask": np.ones((1, length), np.int64),
                                "position_ids": emb.step_position_ids(length, delta),
                                "beam_idx": np.zeros(1, np.int32), **step_extras})["logits"][0, -1]
        out[key] = {"ids": tokens, "per_step": steps, "min": min(steps),
                    "text_equals_golden": tok.decode(tokens) == golden["cpu"][key]["text"]}
    return out


def _run_videos(make: Any, og: Any, chat: bool, names: list[str]) -> dict[str, Any]:
    """The video cases ``names``, each on a fresh real pipeline from ``make()`` (a long-lived real
    VLMPipeline's texts depend on what it ran before), then the chat."""
    cfg = og.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    out: dict[str, Any] = {}
    for name in names:
        prompt, kw = video_case_inputs(name, og)
        r = make().generate(prompt, generation_config=cfg, **kw)
        out[name] = {"text": r.texts[0], "num_input_tokens": r.perf_metrics.get_num_input_tokens()}
    pipe = make()
    if chat:
        out["chat"] = [{"prompt": p, "text": t, "num_input_tokens": n}
                       for (p, _, _), (t, n) in zip(VIDEO_CHAT, video_chat_turns(pipe, og), strict=True)]
    else:  # the real's NPU refuses videos in a chat
        try:
            video_chat_turns(pipe, og)
            out["chat_error"] = None
        except RuntimeError as e:
            out["chat_error"] = str(e).strip().splitlines()[-1]
    return out


def record_videos(folder: Path) -> dict[str, Any]:
    """golden.json's ``videos`` entry (the rest of the file is kept): VIDEO_CASES and the
    VIDEO_CHAT chat from the real on CPU (f32) and on NPU (NPUW_DEVICES=CPU), with the CPU
    cases' greedy margins; a case under MIN_MARGIN stops the tool (change the video)."""
    import openvino_genai as og

    path = folder / "golden.json"
    golden: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    names = video_case_names(folder)
    qwen3 = any(n in QWEN3_VIDEO_CASES for n in names)
    entry: dict[str, Any] = {
        "videos": "tools/vlm_goldens.py VIDEO_CASES / VIDEO_CHAT (test_video: the test image rolled 7 px per frame)"
                  + (" and QWEN3_VIDEO_CASES; no CPU chat (the real's Qwen3-VL chat bug, docs/genai_shim.md)"
                     if qwen3 else ""),
        # Qwen3-VL: no CPU chat golden (the real's later turns are not its one-shot answers)
        "cpu": _run_videos(lambda: og.VLMPipeline(str(folder), "CPU", **CPU_PROPS), og, chat=not qwen3,
                           names=names),
        "npuw_cpu": _run_videos(lambda: og.VLMPipeline(str(folder), "NPU", **NPU_PROPS), og, chat=False,
                                names=names),
    }
    entry["margins"] = video_margins(folder, entry)
    low = {k: m["min"] for k, m in entry["margins"].items()
           if isinstance(m, dict) and (m["min"] < MIN_MARGIN or not m["text_equals_golden"])}
    if low:
        raise SystemExit(f"video goldens with a top-1 margin under {MIN_MARGIN} (or another text): {low}")
    golden["videos"] = entry
    path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return golden


def _greedy_margins(emb: Any, lm: Any, tok: Any, prompt: str, images: list[Any], videos: list[Any],
                    metadata: Any = None) -> tuple[list[int], list[float]]:
    """Greedy ids and per-step top-1 minus top-2 logits of the exported language model (CPU f32)
    on genai_shim's inputs for one templated prompt with images and videos (Qwen3-VL: videos
    sampled by the embedder with their ``metadata``, DeepStack inputs fed)."""
    from genai_shim.vlm.common import UNIVERSAL_IMAGE, UNIVERSAL_VIDEO, universal_to_native

    encoded = emb.encode_images(images)
    if getattr(emb, "samples_videos", False):
        clips = emb.encode_videos(videos, metadata) if videos else []
    else:
        clips = emb.encode_videos(videos) if videos else []
    prompt = universal_to_native(prompt, emb.native_tag, UNIVERSAL_IMAGE, 0, len(images))[0]
    if clips:
        prompt = universal_to_native(prompt, emb.video_tag, UNIVERSAL_VIDEO, 0, len(clips))[0]
    unified = emb.normalize_prompt(prompt, encoded, clips) if clips else emb.normalize_prompt(prompt, encoded)
    templated = tok.apply_chat_template([{"role": "user", "content": unified}], add_generation_prompt=True)
    ids = np.array(tok.encode(templated, add_special_tokens=False).input_ids.data, np.int64)
    x = emb.embed(ids, encoded, clips) if clips else emb.embed(ids, encoded)
    pos, delta = emb.position_ids(ids, encoded, clips) if clips else emb.position_ids(ids, encoded)
    return _greedy(emb, lm, tok, ids, x, pos, delta, emb.lm_inputs(ids, encoded))


def _greedy(emb: Any, lm: Any, tok: Any, ids: np.ndarray, x: np.ndarray, pos: np.ndarray, delta: int,
            extras: dict[str, Any]) -> tuple[list[int], list[float]]:
    """Greedy ids and per-step top-1 minus top-2 logits of ``lm`` from a prompt's inputs."""
    req = lm.create_infer_request()
    n = ids.shape[1]
    logits = req.infer({"inputs_embeds": x, "attention_mask": np.ones((1, n), np.int64), "position_ids": pos,
                        "beam_idx": np.zeros(1, np.int32), **extras})["logits"][0, -1]
    step_extras = emb.step_lm_inputs()
    tokens: list[int] = []
    steps: list[float] = []
    for _ in range(MAX_NEW_TOKENS):
        top = np.sort(logits)[-2:]
        steps.append(round(float(top[1] - top[0]), 5))
        t = int(np.argmax(logits))
        tokens.append(t)
        if t == tok.get_eos_token_id():
            break
        length = n + len(tokens)
        logits = req.infer({"inputs_embeds": emb.token_embeddings(np.array([[t]], np.int64)),
                            "attention_mask": np.ones((1, length), np.int64),
                            "position_ids": emb.step_position_ids(length, delta),
                            "beam_idx": np.zeros(1, np.int32), **step_extras})["logits"][0, -1]
    return tokens, steps


def video_margins(folder: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Per VIDEO_CASES case (frames sampled as the metadata says): the greedy margins of the CPU
    golden, from genai_shim's inputs embedder (equal to the real's: same texts)."""
    og, tok, emb, lm = _cpu_models(folder)
    from genai_shim.vlm.common import sample_videos

    out: dict[str, Any] = {"source": "openvino CPU f32, openvino_language_model.xml, greedy"}
    for name in video_case_names(folder):
        prompt, kw = video_case_inputs(name, og)
        if getattr(emb, "samples_videos", False):
            videos, meta = kw["videos"], kw.get("videos_metadata")
        else:
            videos, meta = sample_videos(kw["videos"], kw.get("videos_metadata")), None
        tokens, steps = _greedy_margins(emb, lm, tok, prompt, kw.get("images", []), videos, meta)
        out[name] = {"ids": tokens, "per_step": steps, "min": min(steps),
                     "text_equals_golden": tok.decode(tokens) == entry["cpu"][name]["text"]}
    return out


#: name -> (images as (h, w), pruning_ratio, relevance_weight): visual-token pruning (CDPruner)
#: goldens for the families the real prunes in (Qwen2-VL, Qwen2.5-VL); relevance_weight 0 is left
#: out: its kernel's diagonal is 1 within an ulp or two, an ulp-level tie (docs/genai_shim.md);
#: sizes picked for top-1 margins >= MIN_MARGIN on both Qwen fixtures (224x168 at 25/50/75 % had
#: 0.03 .. 0.07 on one of them)
PRUNING_CASES: dict[str, tuple[list[tuple[int, int]], int, float]] = {
    "r25_w0.5": ([(300, 420)], 25, 0.5),
    "r50_w0.5": ([(300, 420)], 50, 0.5),
    "r75_w0.5": ([(300, 420)], 75, 0.5),
    "r50_w1.0": ([(140, 140)], 50, 1.0),
    "r40_w0.3": ([(196, 252)], 40, 0.3),
    "r60_w0.9": ([(168, 224)], 60, 0.9),
    "r100": ([(140, 140)], 100, 0.5),
    "two_images_r60_w1.0": ([(224, 168), (112, 140)], 60, 1.0),
    "two_images_r30_w0.9": ([(140, 140), (196, 252)], 30, 0.9),
}


#: Qwen3-VL's video pruning cases (the real prunes its videos, each frame pair a region):
#: name -> (images as (h, w), videos as (frames, h, w[, shift]), pruning_ratio, relevance_weight)
QWEN3_PRUNING_CASES: dict[str, tuple[list[tuple[int, int]], list[tuple[int, ...]], int, float]] = {
    "video_r50_w0.5": ([], [(4, 140, 140)], 50, 0.5),
    "video_5_frames_r25_w0.5": ([], [(5, 128, 160)], 25, 0.5),
    "video_r75_w0.8": ([], [(6, 160, 160)], 75, 0.8),
    "image_and_video_r50_w0.5": ([(160, 128)], [(2, 140, 140)], 50, 0.5),
    # replacing PRUNING_CASES' r75_w0.5 and two_images_r30_w0.9 (margins 0.011 and 0.069 on Qwen3-VL)
    "r75_w0.5_280x392": ([(280, 392)], [], 75, 0.5),
    "two_images_r30_w0.9_140x168": ([(140, 168), (196, 252)], [], 30, 0.9),
}
#: PRUNING_CASES left out on Qwen3-VL (top-1 margins under MIN_MARGIN there; replaced above)
QWEN3_SKIPPED_PRUNING_CASES = ("r75_w0.5", "two_images_r30_w0.9")


def pruning_case_names(folder: Path) -> list[str]:
    """The pruning cases recorded for a fixture: PRUNING_CASES, plus QWEN3_PRUNING_CASES on Qwen3-VL."""
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if cfg.get("model_type") != "qwen3_vl":
        return list(PRUNING_CASES)
    return [n for n in PRUNING_CASES if n not in QWEN3_SKIPPED_PRUNING_CASES] + list(QWEN3_PRUNING_CASES)


def pruning_case_inputs(name: str, lib: Any) -> dict[str, Any]:
    """PRUNING_CASES[name] (or QWEN3_PRUNING_CASES[name]) as generate()'s keyword arguments (a
    GenerationConfig of ``lib``)."""
    import openvino as ov

    videos: list[tuple[int, ...]] = []
    if name in PRUNING_CASES:
        sizes, ratio, weight = PRUNING_CASES[name]
    else:
        sizes, videos, ratio, weight = QWEN3_PRUNING_CASES[name]
    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = MAX_NEW_TOKENS
    cfg.pruning_ratio = ratio
    cfg.relevance_weight = weight
    kw: dict[str, Any] = {"images": [ov.Tensor(test_image(*hw)) for hw in sizes], "generation_config": cfg}
    if videos:
        kw["videos"] = [ov.Tensor(test_video(*v)) for v in videos]
    return kw


def record_pruning(folder: Path) -> dict[str, Any]:
    """golden.json's ``pruning`` entry (the rest of the file is kept): PRUNING_CASES from the real
    on CPU (f32) and on NPU (NPUW_DEVICES=CPU), a fresh pipeline per case, with the CPU cases'
    greedy margins on genai_shim's pruned inputs (a case under MIN_MARGIN stops the tool)."""
    import openvino_genai as og

    path = folder / "golden.json"
    golden: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    entry: dict[str, Any] = {"cases": "tools/vlm_goldens.py PRUNING_CASES (images: test_image(h, w))"}
    for key, device, props in (("cpu", "CPU", CPU_PROPS), ("npuw_cpu", "NPU", {**NPU_PROPS, **npu_extra(folder)})):
        runs: dict[str, Any] = {}
        for name in pruning_case_names(folder):
            r = og.VLMPipeline(str(folder), device, **props).generate(PROMPT, **pruning_case_inputs(name, og))
            runs[name] = {"text": r.texts[0], "num_input_tokens": r.perf_metrics.get_num_input_tokens()}
        entry[key] = runs
    entry["margins"] = pruning_margins(folder, entry)
    low = {k: m["min"] for k, m in entry["margins"].items()
           if isinstance(m, dict) and (m["min"] < MIN_MARGIN or not m["text_equals_golden"])}
    if low:
        raise SystemExit(f"pruning goldens with a top-1 margin under {MIN_MARGIN} (or another text): {low}")
    golden["pruning"] = entry
    path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return golden


def pruning_margins(folder: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Per PRUNING_CASES case: the greedy margins of the CPU golden on genai_shim's pruned inputs
    (its kept tokens equal the real's: same texts and input token counts)."""
    og, tok, emb, lm = _cpu_models(folder)
    from genai_shim.vlm.pruning import prune_qwen2vl, prune_vision

    out: dict[str, Any] = {"source": "openvino CPU f32, openvino_language_model.xml, greedy"}
    for name in pruning_case_names(folder):
        kw = pruning_case_inputs(name, og)
        ratio, weight = kw["generation_config"].pruning_ratio, kw["generation_config"].relevance_weight
        encoded = emb.encode_images(kw["images"])
        clips = emb.encode_videos(kw["videos"]) if kw.get("videos") else []
        unified = emb.normalize_prompt(PROMPT, encoded, clips) if clips else emb.normalize_prompt(PROMPT, encoded)
        templated = tok.apply_chat_template([{"role": "user", "content": unified}], add_generation_prompt=True)
        ids = np.array(tok.encode(templated, add_special_tokens=False).input_ids.data, np.int64)
        x = emb.embed(ids, encoded, clips) if clips else emb.embed(ids, encoded)
        pos, delta = emb.position_ids(ids, encoded, clips) if clips else emb.position_ids(ids, encoded)
        regions = getattr(emb, "pruning_regions", None)
        if regions is None:
            pruned = prune_qwen2vl(ids, x, [im.grid_thw for im in encoded], emb.cfg.merge_size, emb.vision_start,
                                   emb.vision_end, emb.image_pad, ratio, weight)
        else:  # Qwen3-VL: image and video pads, frame pairs as regions, the DeepStack rows pruned too
            pruned = prune_vision(ids, x, regions(ids, encoded, clips), emb.cfg.merge_size, emb.vision_start,
                                  emb.vision_end, (emb.image_pad, emb.video_pad), ratio, weight)
            if pruned is not None:
                emb.keep_vision_rows(pruned[5])
        if pruned is not None:
            ids, x, pos, delta = pruned[:4]
        tokens, steps = _greedy(emb, lm, tok, ids, x, pos, delta, emb.lm_inputs(ids, encoded))
        out[name] = {"ids": tokens, "per_step": steps, "min": min(steps), "input_tokens": ids.shape[1],
                     "kept": None if pruned is None else pruned[4],
                     "text_equals_golden": tok.decode(tokens) == entry["cpu"][name]["text"]}
    return out


#: pruning inside a start_chat() chat (issue 31): name -> turns of (prompt, images as (h, w),
#: pruning_ratio, relevance_weight); the real's CPU default (continuous batching) re-templates
#: the whole unpruned history each turn and prunes every image of it against the whole
#: history's text
PRUNING_CHAT_CASES: dict[str, list[tuple[str, list[tuple[int, int]], int, float]]] = {
    "image_then_text": [(CHAT[0], [(300, 420)], 50, 0.5), (CHAT[1], [], 50, 0.5), (CHAT[2], [], 50, 0.5)],
    "three_images": [(CHAT[0], [(300, 420)], 50, 0.5), (CHAT[1], [(140, 140)], 50, 0.5),
                     (CHAT[2], [(196, 252)], 30, 0.9)],
    "text_then_image": [(CHAT[0], [], 50, 0.5), (CHAT[1], [(300, 420)], 75, 0.5), (CHAT[2], [], 25, 0.5)],
    "ratio_0_then_60": [(CHAT[0], [(300, 420)], 0, 0.5), (CHAT[1], [(140, 140)], 60, 1.0), (CHAT[2], [], 0, 0.5)],
    "two_images": [(CHAT[0], [(224, 168), (112, 140)], 60, 1.0), (CHAT[2], [], 60, 1.0)],
}
#: turns left out on Qwen3-VL: its real chat's turns after an image turn are not its own answers
#: for that history (docs/genai_shim.md, the real's Qwen3-VL chat bug), and these two differ
QWEN3_SKIPPED_PRUNING_CHAT_TURNS = {("three_images", 1), ("ratio_0_then_60", 2)}


def pruning_chat_turns(pipe: Any, lib: Any, name: str, history: bool = False) -> list[tuple[str, int]]:
    """PRUNING_CHAT_CASES[name] as a start_chat() chat (or, with ``history``, a ChatHistory
    grown turn by turn): each turn's (text, input tokens)."""
    import openvino as ov

    out = []
    hist = lib.ChatHistory() if history else None
    if hist is None:
        pipe.start_chat()
    try:
        for prompt, sizes, ratio, weight in PRUNING_CHAT_CASES[name]:
            cfg = lib.GenerationConfig()
            cfg.max_new_tokens = MAX_NEW_TOKENS
            cfg.pruning_ratio = ratio
            cfg.relevance_weight = weight
            images = [ov.Tensor(test_image(*hw)) for hw in sizes]
            if hist is None:
                r = pipe.generate(prompt, images=images, generation_config=cfg)
            else:
                hist.append({"role": "user", "content": prompt})
                r = pipe.generate(hist, images=images, generation_config=cfg)
                hist.append({"role": "assistant", "content": r.texts[0]})
            out.append((r.texts[0], r.perf_metrics.get_num_input_tokens()))
        return out
    finally:
        if hist is None:
            pipe.finish_chat()


def record_pruning_chat(folder: Path) -> dict[str, Any]:
    """golden.json's ``pruning_chat`` entry (the rest of the file is kept): PRUNING_CHAT_CASES on
    the real's CPU (f32, its default continuous-batching backend), a fresh pipeline per case."""
    import openvino_genai as og

    entry: dict[str, Any] = {"cases": "tools/vlm_goldens.py PRUNING_CHAT_CASES (images: test_image(h, w))", "cpu": {}}
    for name in PRUNING_CHAT_CASES:
        turns = pruning_chat_turns(og.VLMPipeline(str(folder), "CPU", **CPU_PROPS), og, name)
        entry["cpu"][name] = [{"text": t, "num_input_tokens": n} for t, n in turns]
    path = folder / "golden.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["pruning_chat"] = entry
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return entry


#: VISION_PREPROCESS=CPP (the real's host-side preprocessing, read when a pipeline is built):
#: name -> (prompt, images as (h, w), videos as (frames, h, w[, shift])); odd sizes, sizes the smart
#: resize scales up (13x20, 30x40) or down (300x420, 480x640), one side up and the other down
#: (20x150), tall ones where the order of the two resize passes matters; picked where the host
#: path's text differs from the graph's on some fixture (the ``graph_text`` recorded with each:
#: where it equals the text, the case is coverage only)
CPP_CASES: dict[str, tuple[str, list[tuple[int, int]], list[tuple[int, ...]]]] = {
    "77x100": (PROMPT, [(77, 100)], []),
    "100x77": (PROMPT, [(100, 77)], []),
    "13x20": (PROMPT, [(13, 20)], []),
    "30x40": (PROMPT, [(30, 40)], []),
    "20x150": (PROMPT, [(20, 150)], []),
    "64x300": (PROMPT, [(64, 300)], []),
    "150x200": (PROMPT, [(150, 200)], []),
    "256x100": (PROMPT, [(256, 100)], []),
    "300x420": (PROMPT, [(300, 420)], []),
    "480x640": (PROMPT, [(480, 640)], []),
    # tall images the real resizes width first where Pillow 13 would go height first (measured)
    "604x218": (PROMPT, [(604, 218)], []),
    "333x111": (PROMPT, [(333, 111)], []),
    "two_images": (PROMPT, [(100, 77), (30, 40)], []),
    "video_3x40x100": ("Describe the video.", [], [(3, 40, 100)]),
    "video_4x57x75": ("Describe the video.", [], [(4, 57, 75)]),
    "video_1x20x150": ("Describe the video.", [], [(1, 20, 150)]),
    "video_5x13x20": ("Describe the video.", [], [(5, 13, 20)]),
    "video_3x160x240": ("Describe the video.", [], [(3, 160, 240)]),
    "video_2x200x150": ("Describe the video.", [], [(2, 200, 150)]),
    "image_and_video": (PROMPT, [(100, 77)], [(3, 40, 100, 11)]),
}
#: CPP_CASES left out per model type: top-1 margins under MIN_MARGIN there (measured 2026-12-07)
CPP_SKIPPED: dict[str, tuple[str, ...]] = {
    "qwen2_vl": ("30x40", "20x150", "604x218", "video_3x160x240"),
    "qwen2_5_vl": ("77x100", "64x300", "604x218", "video_3x40x100", "video_1x20x150", "image_and_video"),
    "qwen3_vl": ("image_and_video",),
    "llava_next_video": ("100x77", "480x640", "604x218"),
}


def cpp_case_names(folder: Path) -> list[str]:
    """The CPP cases recorded for a fixture: CPP_CASES but CPP_SKIPPED's (and the video cases for a
    family that takes no videos)."""
    kind = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    videos = kind in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava_next_video")
    return [n for n in CPP_CASES if n not in CPP_SKIPPED.get(kind, ()) and (videos or not CPP_CASES[n][2])]


def cpp_case_inputs(name: str) -> tuple[str, dict[str, Any]]:
    """CPP_CASES[name] as generate()'s prompt and keyword arguments."""
    import openvino as ov

    prompt, images, videos = CPP_CASES[name]
    kw: dict[str, Any] = {}
    if images:
        kw["images"] = [ov.Tensor(test_image(*hw)) for hw in images]
    if videos:
        kw["videos"] = [ov.Tensor(test_video(*v)) for v in videos]
    return prompt, kw


@contextlib.contextmanager
def vision_preprocess(value: str | None) -> Iterator[None]:
    """VISION_PREPROCESS set to ``value`` (None: unset) while pipelines are built (the real reads it then)."""
    saved = os.environ.pop("VISION_PREPROCESS", None)
    if value is not None:
        os.environ["VISION_PREPROCESS"] = value
    try:
        yield
    finally:
        os.environ.pop("VISION_PREPROCESS", None)
        if saved is not None:
            os.environ["VISION_PREPROCESS"] = saved


def record_cpp_preprocess(folder: Path) -> dict[str, Any]:
    """golden.json's ``vision_preprocess_cpp`` entry (the rest of the file is kept): CPP_CASES from
    the real on CPU (f32) built under VISION_PREPROCESS=CPP, a fresh pipeline per case, each with the
    real's text under the default graph preprocessing too (``graph_text``: where they differ, the
    case tells the two apart), and the greedy margins on genai_shim's CPP inputs (a case under
    MIN_MARGIN stops the tool)."""
    import openvino_genai as og

    names = cpp_case_names(folder)
    gen = og.GenerationConfig()
    gen.max_new_tokens = MAX_NEW_TOKENS
    entry: dict[str, Any] = {
        "cases": "tools/vlm_goldens.py CPP_CASES (test_image(h, w), test_video(frames, h, w[, shift]))",
        "environment": {"VISION_PREPROCESS": "CPP"}, "cpu": {}}
    for name in names:
        prompt, kw = cpp_case_inputs(name)
        texts = {}
        for mode in ("CPP", None):
            with vision_preprocess(mode):
                pipe = og.VLMPipeline(str(folder), "CPU", **CPU_PROPS)
            texts[mode] = pipe.generate(prompt, generation_config=gen, **kw)
        r = texts["CPP"]
        entry["cpu"][name] = {"text": r.texts[0], "num_input_tokens": r.perf_metrics.get_num_input_tokens(),
                              "graph_text": texts[None].texts[0]}
    with vision_preprocess("CPP"):
        _, tok, emb, lm = _cpu_models(folder)
    margins_: dict[str, Any] = {"source": "openvino CPU f32, openvino_language_model.xml, greedy, "
                                          "VISION_PREPROCESS=CPP"}
    for name in names:
        prompt, kw = cpp_case_inputs(name)
        tokens, steps = _greedy_margins(emb, lm, tok, prompt, kw.get("images", []), kw.get("videos", []))
        margins_[name] = {"ids": tokens, "per_step": steps, "min": min(steps),
                          "text_equals_golden": tok.decode(tokens) == entry["cpu"][name]["text"]}
    entry["margins"] = margins_
    low = {k: m["min"] for k, m in margins_.items()
           if isinstance(m, dict) and (m["min"] < MIN_MARGIN or not m["text_equals_golden"])}
    if low:
        raise SystemExit(f"CPP goldens with a top-1 margin under {MIN_MARGIN} (or another text): {low}")
    path = folder / "golden.json"
    golden: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    golden["vision_preprocess_cpp"] = entry
    path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return entry
