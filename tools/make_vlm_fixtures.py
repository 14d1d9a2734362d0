#!/usr/bin/env python3
"""Make the tiny visual-language fixtures under tests/fixtures/vlm/ (issue 31).

A sibling of make_optimum_fixtures.py: a tiny, seeded, random Hugging Face Qwen2-VL built from a
config (no hub, no downloads) - a 2-block vision tower with its patch merger and a 2-layer
language model with M-RoPE - with a byte-level BPE tokenizer trained here on
tools/fixture_corpus.txt (ChatML and the vision special tokens), the image processor's
preprocessor_config.json, exported by
`optimum-cli export openvino --task image-text-to-text --weight-format fp32` as a user would,
and trimmed to the files openvino_genai's VLMPipeline reads.

Two stages:

  exports  (default)  in a venv with torch, transformers, optimum-intel (the [fixtures] extra)
  goldens  (--goldens) openvino_genai only: golden.json from the REAL VLMPipeline on CPU (f32)
           and on NPU with NPUW_DEVICES=CPU, with an image and text only, plus the top-1
           margins of every greedy step (teacher-forced through the exported models).

  python tools/make_vlm_fixtures.py              # export into tests/fixtures/vlm
  python tools/make_vlm_fixtures.py --goldens    # (re-)record golden.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "vlm"
CORPUS_FILE = Path(__file__).resolve().parent / "fixture_corpus.txt"
NAME = "qwen2vl-fp32"
SEED = 5

VISION_SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *VISION_SPECIALS]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
VOCAB = 512
HIDDEN = 64
# patch 14, merge 2: 28-pixel units; at most 16 units (112x112), at least 4 (56x56)
PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "do_convert_rgb": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "min_pixels": 3136,
    "max_pixels": 12544,
    "size": {"shortest_edge": 3136, "longest_edge": 12544},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}
KEEP_FILES = (
    "openvino_language_model.xml", "openvino_language_model.bin",
    "openvino_text_embeddings_model.xml", "openvino_text_embeddings_model.bin",
    "openvino_vision_embeddings_model.xml", "openvino_vision_embeddings_model.bin",
    "openvino_vision_embeddings_merger_model.xml", "openvino_vision_embeddings_merger_model.bin",
    "openvino_tokenizer.xml", "openvino_tokenizer.bin",
    "openvino_detokenizer.xml", "openvino_detokenizer.bin",
    "config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
    "preprocessor_config.json",
)


def build_tokenizer():
    from transformers import PreTrainedTokenizerFast

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_optimum_fixtures import train_bytelevel_bpe

    lines = [s for s in CORPUS_FILE.read_text(encoding="utf-8").splitlines() if s.strip()]
    tok = train_bytelevel_bpe(lines, VOCAB, SPECIALS)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=2048, clean_up_tokenization_spaces=False,
        bos_token=None, eos_token="<|im_end|>", unk_token="<|endoftext|>", pad_token="<|endoftext|>",
        additional_special_tokens=SPECIALS[1:])
    fast.chat_template = CHATML_TEMPLATE
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


def build_hf_model(out_dir: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tok = build_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    text = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"])
    vision = dict(depth=2, embed_dim=32, hidden_size=HIDDEN, mlp_ratio=2, num_heads=2, in_channels=3,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision,
                        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                        bos_token_id=text["bos_token_id"], eos_token_id=text["eos_token_id"],
                        pad_token_id=text["pad_token_id"], tie_word_embeddings=False)
    torch.manual_seed(SEED)
    model = Qwen2VLForConditionalGeneration(cfg).to(torch.float32)
    init_weights(model, SEED)
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=text["bos_token_id"], eos_token_id=text["eos_token_id"],
                                               pad_token_id=text["pad_token_id"])
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    (out_dir / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")


def export(out_root: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_optimum_fixtures import run_optimum_cli

    out_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vlm-fixture-") as work:
        w = Path(work)
        build_hf_model(w / "hf")
        run_optimum_cli(["export", "openvino", "--model", "hf", "--task", "image-text-to-text",
                         "--weight-format", "fp32", "raw"], w)
        raw = w / "raw"
        stage = Path(tempfile.mkdtemp(prefix=f".{NAME}.", dir=out_root))
        for f in KEEP_FILES:
            src = raw / f if (raw / f).exists() else w / "hf" / f
            if not src.exists():
                if f == "special_tokens_map.json":  # transformers 5 writes none
                    continue
                raise RuntimeError(f"export produced no {f}: {sorted(os.listdir(raw))}")
            shutil.copy(src, stage / f)
        cfg_path = stage / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        cfg["chat_template"] = CHATML_TEMPLATE
        cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        final = out_root / NAME
        if final.exists():
            if (final / "golden.json").exists():
                shutil.copy(final / "golden.json", stage / "golden.json")
            shutil.rmtree(final)
        stage.chmod(0o755)
        stage.rename(final)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--goldens", action="store_true", help="record golden.json (openvino_genai only)")
    a = ap.parse_args(argv)
    if a.goldens:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from vlm_goldens import record

        record(a.out / NAME)
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    export(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
