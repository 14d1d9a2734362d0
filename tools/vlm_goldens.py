"""golden.json for the VLM fixtures from the REAL openvino_genai.VLMPipeline (openvino_genai only).

Recorded: greedy texts on CPU under f32 hints, with an image and text only, a 3-turn chat (the
image in the first turn), and on NPU with NPUW_DEVICES=CPU (f32 sub-configs, as the NPUW oracle
tests set them) plus the real's error for a prompt over MAX_PROMPT_LEN.
"""

from __future__ import annotations

import json
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
    return golden


def margins(folder: Path, golden: dict[str, Any]) -> dict[str, Any]:
    """Per greedy step of the CPU goldens (image, text only): the top-1 minus top-2 logit of the
    exported language model on the OpenVINO CPU plugin in f32, fed genai_shim's inputs embedder
    (its embeddings, pad expansion and M-RoPE positions equal the real's: same texts)."""
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
