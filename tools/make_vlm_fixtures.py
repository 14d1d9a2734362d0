#!/usr/bin/env python3
"""Make the tiny visual-language fixtures under tests/fixtures/vlm/ (issue 31).

A sibling of make_optimum_fixtures.py: per family (FAMILIES, one build function each), a tiny,
seeded, random Hugging Face model built from a config (no hub, no downloads) - a 2-block vision
tower and a 2-layer language model - with a byte-level BPE tokenizer trained here on
tools/fixture_corpus.txt (ChatML, or Gemma 3's turn format, and the family's vision special
tokens), the image processor's
preprocessor_config.json, exported by
`optimum-cli export openvino --task image-text-to-text --weight-format fp32` as a user would,
and trimmed to the files openvino_genai's VLMPipeline reads.

Two stages:

  exports  (default)  in a venv with torch, transformers, optimum-intel (the [fixtures] extra)
  goldens  (--goldens) openvino_genai only: golden.json from the REAL VLMPipeline on CPU (f32)
           and on NPU with NPUW_DEVICES=CPU, with an image and text only, plus the top-1
           margins of every greedy step (teacher-forced through the exported models).

  python tools/make_vlm_fixtures.py                          # export every family
  python tools/make_vlm_fixtures.py --only qwen2_5vl-fp32    # one family
  python tools/make_vlm_fixtures.py --goldens [--only ...]   # (re-)record golden.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "vlm"
CORPUS_FILE = Path(__file__).resolve().parent / "fixture_corpus.txt"
SEED = 5
#: seed 5 gave Qwen2.5-VL a 0.035 top-1 margin with the golden image
QWEN2_5_SEED = 6
#: seed 5 gave LLaVA one-token answers (EOS) with images
LLAVA_SEED = int(os.environ.get("LLAVA_SEED", "7"))

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>",
                 "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
LLAVA_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>"]
LLAVA_VIDEO_SPECIALS = [*LLAVA_SPECIALS, "<video>"]
#: Gemma 3's: <pad> (unk/pad), <eos>, <bos>, the turn markers and the image tokens
GEMMA3_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>",
                   "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
#: seed 5 gave a 0.06 top-1 margin with the golden image
GEMMA3_SEED = int(os.environ.get("GEMMA3_SEED", "6"))
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
#: Gemma 3's chat format (written here): <bos>, a system message folded into the first user
#: turn, "model" for the assistant, contents through ``| trim`` (which the real strips from the
#: template so that the image expansion's "\n\n" survive)
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
#: Qwen3-VL's chat format (written here, after the structure of the Instruct models' template):
#: ChatML with no default system message; a message's content a string or a list of
#: {"type": "image" | "video" | "text"} parts, the vision parts as the native tags
QWEN3_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'video' %}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
#: seed of Qwen3-VL's weights (QWEN3_SEED in the environment: another export)
QWEN3_SEED = int(os.environ.get("QWEN3_SEED", "5"))
VOCAB = 512
HIDDEN = 64
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# patch 14, merge 2: 28-pixel units; at most 16 units (112x112), at least 4 (56x56)
QWEN_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "do_convert_rgb": True,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
    "min_pixels": 3136,
    "max_pixels": 12544,
    "size": {"shortest_edge": 3136, "longest_edge": 12544},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}
# Qwen3-VL's image processor: patch 16, merge 2 (32-pixel units), mean/std 0.5, the pixel bounds
# as size.shortest_edge / size.longest_edge only (as the real's Qwen3-VL exports; the real reads
# them when min_pixels / max_pixels are absent): at least 2x2 units (64x64), at most 4x4 (128x128)
QWEN3_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "processor_class": "Qwen3VLProcessor",
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "do_convert_rgb": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "size": {"shortest_edge": 4096, "longest_edge": 16384},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
}
# CLIP's: the shortest edge to 56, a 56x56 centre crop (4x4 patches of 14)
LLAVA_PREPROCESSOR = {
    "image_processor_type": "CLIPImageProcessor",
    "processor_class": "LlavaProcessor",
    "do_resize": True,
    "size": {"shortest_edge": 56},
    "resample": 3,
    "do_center_crop": True,
    "crop_size": {"height": 56, "width": 56},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
    "do_convert_rgb": True,
}
# LLaVA-NeXT's: CLIP's at 56 px, and "anyres": the image also resized and padded to the best of
# these grids (the real reads each pair as width, height) and cut into 56x56 tiles
LLAVA_NEXT_PINPOINTS = [[56, 112], [112, 56], [112, 112], [56, 168]]
LLAVA_NEXT_PREPROCESSOR = {
    **LLAVA_PREPROCESSOR,
    "image_processor_type": "LlavaNextImageProcessor",
    "processor_class": "LlavaNextProcessor",
    "do_pad": True,
    "image_grid_pinpoints": LLAVA_NEXT_PINPOINTS,
}
# LLaVA-NeXT-Video's: LLaVA-NeXT's for images (video frames take CLIP's resize and crop)
LLAVA_NEXT_VIDEO_PREPROCESSOR = {**LLAVA_NEXT_PREPROCESSOR, "processor_class": "LlavaNextVideoProcessor"}
#: seed for LLaVA-NeXT's weights
LLAVA_NEXT_SEED = int(os.environ.get("LLAVA_NEXT_SEED", "7"))
# Gemma 3's image processor: a plain resize to 64x64 (bilinear), mean/std 0.5, no pan-and-scan
GEMMA3_PREPROCESSOR = {
    "image_processor_type": "Gemma3ImageProcessor",
    "processor_class": "Gemma3Processor",
    "do_resize": True,
    "size": {"height": 64, "width": 64},
    "resample": 2,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_convert_rgb": True,
    "do_pan_and_scan": False,
    "image_seq_length": 16,
}
COMMON_FILES = (
    "openvino_language_model.xml", "openvino_language_model.bin",
    "openvino_text_embeddings_model.xml", "openvino_text_embeddings_model.bin",
    "openvino_vision_embeddings_model.xml", "openvino_vision_embeddings_model.bin",
    "openvino_tokenizer.xml", "openvino_tokenizer.bin",
    "openvino_detokenizer.xml", "openvino_detokenizer.bin",
    "config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
    "preprocessor_config.json",
)
MERGER_FILES = ("openvino_vision_embeddings_merger_model.xml", "openvino_vision_embeddings_merger_model.bin")
POS_FILES = ("openvino_vision_embeddings_pos_model.xml", "openvino_vision_embeddings_pos_model.bin")
VIDEO_FILES = ("openvino_multi_modal_projector_model.xml", "openvino_multi_modal_projector_model.bin",
               "openvino_vision_resampler_model.xml", "openvino_vision_resampler_model.bin")


def build_tokenizer(specials: list[str], bos: str | None = None, eos: str = "<|im_end|>",
                    template: str = CHATML_TEMPLATE):
    """A byte-level BPE of VOCAB tokens on the fixture corpus; specials[0] is the unknown/pad token,
    the rest are additional special tokens (never split)."""
    from transformers import PreTrainedTokenizerFast

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_optimum_fixtures import train_bytelevel_bpe

    lines = [s for s in CORPUS_FILE.read_text(encoding="utf-8").splitlines() if s.strip()]
    tok = train_bytelevel_bpe(lines, VOCAB, specials)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=2048, clean_up_tokenization_spaces=False,
        bos_token=bos, eos_token=eos, unk_token=specials[0], pad_token=specials[0],
        additional_special_tokens=specials[1:])
    fast.chat_template = template
    return fast


def init_weights(model, seed: int) -> None:
    """Deterministic re-init with peaky logits (see make_optimum_fixtures.init_weights): matrices
    N(0, 1/fan_in), q/k (and the vision qkv) x1.5, biases and norm offsets N(0, 0.1^2),
    embeddings N(0, 0.5^2), an untied lm_head with std 8 logits and lognormal row norms."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.split(".")
            if p.ndim == 1:
                if name.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
                else:
                    p.add_(torch.randn(p.shape, generator=gen) * 0.1)
                continue
            fan_in = 1
            for d in p.shape[1:]:
                fan_in *= d
            if "lm_head" in leaf:
                w = torch.randn(p.shape, generator=gen) * (8.0 / HIDDEN ** 0.5)
                w *= torch.exp(0.5 * torch.randn(p.shape[0], 1, generator=gen))
            elif "embed_tokens" in leaf:
                w = torch.randn(p.shape, generator=gen) * 0.5
            else:
                w = torch.randn(p.shape, generator=gen) / fan_in ** 0.5
                if any(n in leaf for n in ("q_proj", "k_proj", "qkv")):
                    w *= 1.5
            p.copy_(w)


def _text_config(ids: dict[str, int], **extra) -> dict:
    """The 2-layer language model every family shares (hidden 64, 4 heads, 2 KV heads)."""
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"], **extra)


def _save(model, tok, text: dict, preprocessor: dict, out_dir: Path, seed: int = SEED) -> None:
    """Seeded re-init, then the model, tokenizer and preprocessor_config.json into out_dir."""
    import torch
    from transformers import GenerationConfig

    model = model.to(torch.float32)
    init_weights(model, seed)
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=text["bos_token_id"], eos_token_id=text["eos_token_id"],
                                               pad_token_id=text["pad_token_id"])
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    (out_dir / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")


def _qwen_ids(tok) -> tuple[dict[str, int], dict[str, int]]:
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    top = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
               vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    return ids, top


def build_qwen2vl(out_dir: Path) -> None:
    """Qwen2-VL: a 2-block vision tower (embed 32, patch 14, merge 2) and its patch merger;
    M-RoPE sections [2, 3, 3]."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    # (the multipart template: upstream test_vlm_pipeline.py sends list contents; for str
    # contents it renders as CHATML_TEMPLATE, which the exported fixtures keep)
    tok = build_tokenizer(QWEN_SPECIALS, template=QWEN3_TEMPLATE)
    ids, top = _qwen_ids(tok)
    text = _text_config(ids, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, embed_dim=32, hidden_size=HIDDEN, mlp_ratio=2, num_heads=2, in_channels=3,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, **top, bos_token_id=text["bos_token_id"],
                        eos_token_id=text["eos_token_id"], pad_token_id=text["pad_token_id"],
                        tie_word_embeddings=False)
    torch.manual_seed(SEED)
    _save(Qwen2VLForConditionalGeneration(cfg), tok, text, QWEN_PREPROCESSOR, out_dir)


def build_qwen2_5vl(out_dir: Path) -> None:
    """Qwen2.5-VL: a 2-block vision tower (hidden 32, SwiGLU 64, patch 14, merge 2) whose first
    block attends within 56-pixel windows (2x2 merged patches) and second over the whole image,
    then its merger to 64; M-RoPE sections [2, 3, 3]."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tok = build_tokenizer(QWEN_SPECIALS, template=QWEN3_TEMPLATE)  # multipart, as build_qwen2vl's
    ids, top = _qwen_ids(tok)
    text = _text_config(ids, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, tokens_per_second=2, window_size=56,
                  out_hidden_size=HIDDEN, fullatt_block_indexes=[1])
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **top, bos_token_id=text["bos_token_id"],
                           eos_token_id=text["eos_token_id"], pad_token_id=text["pad_token_id"],
                           tie_word_embeddings=False)
    torch.manual_seed(QWEN2_5_SEED)
    _save(Qwen2_5_VLForConditionalGeneration(cfg), tok, text, QWEN_PREPROCESSOR, out_dir, QWEN2_5_SEED)


def build_qwen3vl(out_dir: Path) -> None:
    """Qwen3-VL: a 2-block vision tower (hidden 32, patch 16, merge 2) with learned position
    embeddings on a 4x4 grid (num_position_embeddings 16, bilinearly interpolated to each image's
    patch grid) and a deepstack merger after each block (deepstack_visual_indexes [0, 1]: their
    features are added to the hidden states of the language model's first two layers at the image
    tokens), the final merger to 64; a 2-layer Qwen3 language model (head dim 16, q/k norms) with
    interleaved M-RoPE sections [2, 3, 3]. QWEN3_SHAPES=alt: other shapes (hidden 48 tower, one
    deepstack layer, a 3x3 position grid) for the generalisation check."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    alt = os.environ.get("QWEN3_SHAPES") == "alt"
    tok = build_tokenizer(QWEN_SPECIALS, template=QWEN3_TEMPLATE)
    ids, top = _qwen_ids(tok)
    text = _text_config(ids, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                                           "mrope_section": [2, 3, 3], "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=48 if alt else 32, intermediate_size=64, num_heads=2, in_channels=3,
                  patch_size=16, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=HIDDEN,
                  num_position_embeddings=9 if alt else 16, deepstack_visual_indexes=[1] if alt else [0, 1],
                  hidden_act="gelu_pytorch_tanh")
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, **top, tie_word_embeddings=False)
    cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = (text["bos_token_id"], text["eos_token_id"],
                                                            text["pad_token_id"])
    torch.manual_seed(QWEN3_SEED)
    _save(Qwen3VLForConditionalGeneration(cfg), tok, text, QWEN3_PREPROCESSOR, out_dir, QWEN3_SEED)


def _build_llava_family(out_dir: Path, config_cls, model_cls, preprocessor: dict, seed: int,
                        specials: list[str] = LLAVA_SPECIALS, image_key: str = "image_token_id", **extra) -> None:
    """A 2-layer CLIP vision tower (hidden 32, image 56, patch 14: 16 patch features from the
    second-to-last layer, CLS dropped), a GELU projector to 64 and a 2-layer Llama; ``extra``
    goes to the family's config."""
    import torch
    import transformers

    tok = build_tokenizer(specials)
    ids = {t: tok.convert_tokens_to_ids(t) for t in specials}
    # transformers 4.x names the rope settings rope_theta / rope_scaling (LLaVA-NeXT-Video exports
    # with optimum-intel 2.2 only under transformers <= 4.57.6)
    rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
            if int(transformers.__version__.split(".")[0]) >= 5 else {"rope_theta": 10000.0})
    text = _text_config(ids, model_type="llama", **rope)
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=56, patch_size=14, projection_dim=32)
    if "<video>" in ids:
        extra["video_token_index"] = ids["<video>"]
    extra[image_key] = ids["<image>"]
    cfg = config_cls(vision_config=vision, text_config=text,
                     projector_hidden_act="gelu", vision_feature_select_strategy="default",
                     vision_feature_layer=-2, tie_word_embeddings=False, **extra)
    torch.manual_seed(seed)
    _save(model_cls(cfg), tok, text, preprocessor, out_dir, seed)


def build_llava(out_dir: Path) -> None:
    """LLaVA (:func:`_build_llava_family`)."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    _build_llava_family(out_dir, LlavaConfig, LlavaForConditionalGeneration, LLAVA_PREPROCESSOR, LLAVA_SEED)


def build_llava_next(out_dir: Path) -> None:
    """LLaVA-NeXT: LLaVA's shapes with "anyres" tiling (a 56 px base image and the 56 px tiles of
    the best grid in LLAVA_NEXT_PINPOINTS), the unpadded tile features with an ``image_newline``
    row after each row of them."""
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    _build_llava_family(out_dir, LlavaNextConfig, LlavaNextForConditionalGeneration, LLAVA_NEXT_PREPROCESSOR,
                        LLAVA_NEXT_SEED, image_grid_pinpoints=LLAVA_NEXT_PINPOINTS)


def build_llava_next_video(out_dir: Path) -> None:
    """LLaVA-NeXT-Video: LLaVA-NeXT's shapes and grids for images; video frames through the same
    tower, a 2x2 average pool (the resampler) and the projector. optimum-intel 2.2 exports it only
    under transformers <= 4.57.6 (put one first on PYTHONPATH)."""
    from transformers import LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration

    _build_llava_family(out_dir, LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration,
                        LLAVA_NEXT_VIDEO_PREPROCESSOR, LLAVA_NEXT_SEED, specials=LLAVA_VIDEO_SPECIALS,
                        image_key="image_token_index", image_grid_pinpoints=LLAVA_NEXT_PINPOINTS,
                        spatial_pool_mode="average", spatial_pool_stride=2)


def build_gemma3(out_dir: Path) -> None:
    """Gemma 3: a 2-layer SigLIP tower (hidden 32, image 64, patch 8: 8x8 patches), the projector's
    2x2 average pool to 16 soft tokens per image (mm_tokens_per_image), RMS norm and projection to
    64, and a 2-layer Gemma 3 text model (a sliding-window layer, window 512, then a full one; head
    dim 16) whose image tokens attend bidirectionally within their image (token_type_ids)."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    tok = build_tokenizer(GEMMA3_SPECIALS, bos="<bos>", eos="<end_of_turn>", template=GEMMA3_TEMPLATE)
    ids = {t: tok.convert_tokens_to_ids(t) for t in GEMMA3_SPECIALS}
    text = dict(model_type="gemma3_text", vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                query_pre_attn_scalar=16, max_position_embeddings=2048, sliding_window=512,
                layer_types=["sliding_attention", "full_attention"],
                bos_token_id=ids["<bos>"], eos_token_id=ids["<end_of_turn>"], pad_token_id=ids["<pad>"],
                tie_word_embeddings=False)
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=64, patch_size=8)
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=16,
                       boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
                       image_token_index=ids["<image_soft_token>"], tie_word_embeddings=False)
    cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = ids["<bos>"], ids["<end_of_turn>"], ids["<pad>"]
    torch.manual_seed(GEMMA3_SEED)
    _save(Gemma3ForConditionalGeneration(cfg), tok, text, GEMMA3_PREPROCESSOR, out_dir, GEMMA3_SEED)


@dataclass(frozen=True)
class Family:
    build: Callable[[Path], None]  # writes the HF model, tokenizer and preprocessor config
    files: tuple[str, ...]  # what the fixture keeps of the export


FAMILIES: dict[str, Family] = {
    "qwen2vl-fp32": Family(build_qwen2vl, COMMON_FILES + MERGER_FILES),
    "qwen2_5vl-fp32": Family(build_qwen2_5vl, COMMON_FILES + MERGER_FILES),
    "qwen3vl-fp32": Family(build_qwen3vl, COMMON_FILES + MERGER_FILES + POS_FILES),
    "llava-fp32": Family(build_llava, COMMON_FILES),
    "llava_next-fp32": Family(build_llava_next, COMMON_FILES),
    "llava_next_video-fp32": Family(build_llava_next_video, COMMON_FILES + VIDEO_FILES),
    "gemma3-fp32": Family(build_gemma3, COMMON_FILES),
}


def export(name: str, out_root: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_optimum_fixtures import run_optimum_cli

    family = FAMILIES[name]
    out_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vlm-fixture-") as work:
        w = Path(work)
        family.build(w / "hf")
        run_optimum_cli(["export", "openvino", "--model", "hf", "--task", "image-text-to-text",
                         "--weight-format", "fp32", "raw"], w)
        raw = w / "raw"
        stage = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_root))
        for f in family.files:
            # the model's own preprocessor_config.json (optimum may re-save the processor's, as
            # transformers 5's fast processor, without min_pixels / max_pixels)
            prefer_hf = f == "preprocessor_config.json"
            src = w / "hf" / f if prefer_hf or not (raw / f).exists() else raw / f
            if not src.exists():
                if f == "special_tokens_map.json":  # transformers 5 writes none
                    continue
                raise RuntimeError(f"export produced no {f}: {sorted(os.listdir(raw))}")
            shutil.copy(src, stage / f)
        cfg_path = stage / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        cfg["chat_template"] = (GEMMA3_TEMPLATE if name.startswith("gemma3") else
                                QWEN3_TEMPLATE if name.startswith("qwen3vl") else CHATML_TEMPLATE)
        cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        final = out_root / name
        if final.exists():
            if (final / "golden.json").exists():
                shutil.copy(final / "golden.json", stage / "golden.json")
            shutil.rmtree(final)
        stage.chmod(0o755)
        stage.rename(final)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="+", choices=sorted(FAMILIES), help="these fixtures (default: all)")
    ap.add_argument("--goldens", action="store_true", help="record golden.json (openvino_genai only)")
    a = ap.parse_args(argv)
    names = a.only or list(FAMILIES)
    if a.goldens:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from vlm_goldens import record

        for name in names:
            record(a.out / name)
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in names:
        export(name, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
