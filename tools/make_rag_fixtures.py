#!/usr/bin/env python3
"""Make the tiny RAG fixtures under tests/fixtures/rag/ (issue 33).

A sibling of make_optimum_fixtures.py and make_vlm_fixtures.py: tiny, seeded, random Hugging Face
BERT-style encoders built from a config (no hub, no downloads) with a WordPiece tokenizer trained
here on tools/fixture_corpus.txt, exported by `optimum-cli export openvino` as a user would, and
trimmed to the files openvino_genai's TextEmbeddingPipeline / TextRerankPipeline read:

  bert-embed-fp32   BertModel, `--task feature-extraction --weight-format fp32`
  bert-rerank-fp32  BertForSequenceClassification (1 label, a cross-encoder),
                    `--task text-classification --weight-format fp32`
  qwen3-embed-fp32  Qwen3Model (a decoder, Qwen3-Embedding-style: causal, RoPE, q/k norms; the
                    byte-level BPE of make_optimum_fixtures.py's qwen3),
                    `--task feature-extraction --weight-format fp32`
  qwen3-rerank-fp32 Qwen3ForCausalLM (a Qwen3-Reranker-style decoder: the score is the softmax of
                    the "no"/"yes" logits at the last token; the byte-level BPE of the qwen3 recipe
                    trained with "yes" and "no" as whole tokens, ChatML specials, padding on the
                    left as the Qwen3-Reranker recipe), `--task text-generation-with-past
                    --weight-format fp32` (stateful, as the upstream tests convert it)

Two stages:

  exports  (default)  in a venv with torch, transformers, optimum-intel (the [fixtures] extra)
  goldens  (--goldens) openvino_genai only: golden.json per fixture from the REAL pipelines on
           CPU with f32 hints (see tools/rag_goldens.py)

  python tools/make_rag_fixtures.py              # export into tests/fixtures/rag
  python tools/make_rag_fixtures.py --only bert-embed-fp32
  python tools/make_rag_fixtures.py --goldens    # (re-)record golden.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_optimum_fixtures import ARCHS, Arch, _in_child, init_weights, run_optimum_cli  # noqa: E402
from make_optimum_fixtures import build_tokenizer as build_llm_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "rag"
CORPUS_FILE = Path(__file__).resolve().parent / "fixture_corpus.txt"

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = 512
BERT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=128, type_vocab_size=2)
KEEP_FILES = (
    "openvino_model.xml", "openvino_model.bin",
    "openvino_tokenizer.xml", "openvino_tokenizer.bin",
    "openvino_detokenizer.xml", "openvino_detokenizer.bin",
    "config.json", "tokenizer_config.json", "special_tokens_map.json",
)


@dataclass(frozen=True)
class RagFixture:
    task: str  # optimum-cli --task
    head: str  # "model" (BertModel), "classifier" (BertForSequenceClassification, 1 label), "decoder", "lm"
    seed: int
    note: str


FIXTURES: dict[str, RagFixture] = {
    "bert-embed-fp32": RagFixture("feature-extraction", "model", 3,
                                  "BertModel: last_hidden_state [batch, seq, 64]"),
    "bert-rerank-fp32": RagFixture("text-classification", "classifier", 4,
                                   "BertForSequenceClassification, num_labels=1: logits [batch, 1]"),
    "qwen3-embed-fp32": RagFixture("feature-extraction", "decoder", 19,
                                   "Qwen3Model: last_hidden_state [batch, seq, 64], causal"),
    "qwen3-rerank-fp32": RagFixture("text-generation-with-past", "lm", 23,
                                    "Qwen3ForCausalLM: logits [batch, seq, 512], stateful; 'yes'/'no' tokens"),
}


def train_wordpiece(lines: list[str], vocab_size: int):
    """A BERT-style uncased WordPiece tokenizer (BertNormalizer, BertPreTokenizer, ## pieces,
    [CLS] A [SEP] (B [SEP]) with token type ids) whose vocab is built from ``lines``.

    The vocab is laid out deterministically (the `tokenizers` WordPiece trainer breaks ties in
    its merges differently from run to run): the specials, every character alone and as a
    ``##`` continuation, then whole words by frequency (ties alphabetical),
    then the commonest 2-4 character ``##`` pieces; a word not in the vocab splits into the
    longest known pieces, as WordPiece does."""
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for line in lines:
        words.update(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(line)))
    chars = sorted({c for w in words for c in w})
    vocab = [*SPECIALS, *chars, *(f"##{c}" for c in chars)]
    # then continuation pieces (2 to 4 characters inside a word), also by frequency
    pieces: Counter[str] = Counter()
    for w, n in words.items():
        for i in range(1, len(w)):
            for k in (2, 3, 4):
                if i + k <= len(w):
                    pieces[f"##{w[i:i + k]}"] += n
    known = set(vocab)
    for table in (words, pieces):
        for w, _ in sorted(table.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(vocab) == vocab_size:
                break
            if w not in known:
                vocab.append(w)
                known.add(w)
    assert len(vocab) == vocab_size, (len(vocab), vocab_size)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                     max_input_chars_per_word=100))
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.add_special_tokens(SPECIALS)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab.index("[CLS]")), ("[SEP]", vocab.index("[SEP]"))])
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def build_tokenizer():
    from transformers import PreTrainedTokenizerFast

    lines = [s for s in CORPUS_FILE.read_text(encoding="utf-8").splitlines() if s.strip()]
    tok = train_wordpiece(lines, VOCAB)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=BERT["max_position_embeddings"],
        clean_up_tokenization_spaces=False, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
        cls_token="[CLS]", mask_token="[MASK]", do_lower_case=True,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def build_decoder_model(name: str, out_dir: Path) -> None:
    """A Qwen3Model (no LM head) with the weights and tokenizer recipe of make_optimum_fixtures.py's
    qwen3 (2 layers, hidden 64, GQA 4/2, head_dim 16, q/k RMSNorm, byte-level BPE of 512)."""
    import torch
    from transformers import AutoConfig, AutoModel

    spec = FIXTURES[name]
    arch = ARCHS["qwen3"]
    tok = build_llm_tokenizer(arch.tokenizer, arch.config["vocab_size"], None)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = AutoConfig.for_model(arch.model_type, **arch.config, **ids)
    torch.manual_seed(spec.seed)
    model = AutoModel.from_config(cfg, dtype=torch.float32)
    init_weights(model, arch, spec.seed)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def build_yes_no_tokenizer():
    """The qwen3 recipe's byte-level BPE (512, ChatML specials) trained with "yes" and "no" as
    whole words first (a Qwen3-Reranker's score reads their logits; the real looks both up in
    the vocab), padding on the left (the Qwen3-Reranker recipe's tokenizer)."""
    from make_optimum_fixtures import CHATML_TEMPLATE, train_bytelevel_bpe
    from transformers import PreTrainedTokenizerFast

    lines = [s for s in CORPUS_FILE.read_text(encoding="utf-8").splitlines() if s.strip()]
    lines += ["yes", "no"] * 2000  # the first merges: y+e, ye+s, n+o
    specials = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
    tok = train_bytelevel_bpe(lines, VOCAB, specials)
    vocab = tok.get_vocab()
    assert "yes" in vocab and "no" in vocab and tok.get_vocab_size() == VOCAB
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=2048, clean_up_tokenization_spaces=False,
                                   bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|pad|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"], padding_side="left")
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_lm_model(name: str, out_dir: Path) -> None:
    """A Qwen3ForCausalLM with the qwen3 recipe's config and weights (tied head) and the
    yes/no tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = FIXTURES[name]
    arch = ARCHS["qwen3"]
    tok = build_yes_no_tokenizer()
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = AutoConfig.for_model(arch.model_type, **arch.config, **ids)
    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    init_weights(model, arch, spec.seed)
    # the "no" row of the tied embedding/head close to the "yes" row: random rows put their
    # logits ~20 apart and every score at 0 or 1; this spreads the scores over (0, 1)
    vocab = tok.get_vocab()
    emb = model.get_input_embeddings().weight
    gen = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        emb[vocab["no"]] = emb[vocab["yes"]] + 0.03 * torch.randn(emb.shape[1], generator=gen)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def build_hf_model(name: str, out_dir: Path) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    spec = FIXTURES[name]
    if spec.head == "decoder":
        build_decoder_model(name, out_dir)
        return
    if spec.head == "lm":
        build_lm_model(name, out_dir)
        return
    tok = build_tokenizer()
    cfg = BertConfig(**BERT, pad_token_id=tok.pad_token_id, hidden_act="gelu")
    torch.manual_seed(spec.seed)
    if spec.head == "classifier":
        cfg.num_labels = 1
        model = BertForSequenceClassification(cfg)
    else:
        model = BertModel(cfg, add_pooling_layer=False)
    model = model.to(torch.float32)
    # the LLM fixtures' deterministic re-init (matrices N(0, 1/fan_in), biases and norm offsets
    # N(0, 0.1^2), embeddings N(0, 0.5^2)): token and position both matter in the outputs
    init_weights(model, Arch("bert", "wordpiece", BERT, spec.seed), spec.seed)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def export_args(hf_dir: str, name: str, out: str) -> list[str]:
    """The optimum-cli arguments (after `optimum-cli`) for one fixture."""
    return ["export", "openvino", "--model", hf_dir, "--task", FIXTURES[name].task,
            "--weight-format", "fp32", out]


def _export_one(name: str, out_root: Path, work: Path) -> None:
    run_optimum_cli(export_args("hf", name, "raw"), work)
    raw = work / "raw"
    stage = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_root))
    try:
        for f in KEEP_FILES:
            src = raw / f if (raw / f).exists() else work / "hf" / f
            if not src.exists():
                if f == "special_tokens_map.json":  # transformers 5 writes none
                    continue
                raise RuntimeError(f"export produced no {f}: {sorted(os.listdir(raw))}")
            shutil.copy(src, stage / f)
        final = out_root / name
        if final.exists():
            if (final / "golden.json").exists():
                shutil.copy(final / "golden.json", stage / "golden.json")
            shutil.rmtree(final)
        stage.chmod(0o755)
        stage.rename(final)
    finally:
        if stage.exists():
            shutil.rmtree(stage)


def export(names: list[str], out_root: Path) -> None:
    import optimum.commands.optimum_cli  # noqa: F401
    import optimum.exporters.openvino  # noqa: F401
    import transformers  # noqa: F401

    out_root.mkdir(parents=True, exist_ok=True)
    for name in names:
        with tempfile.TemporaryDirectory(prefix="rag-fixture-") as work:
            w = Path(work)
            # a fresh fork per step: OpenVINO's node-name counters start from the same state
            _in_child(build_hf_model, name, w / "hf")
            _in_child(_export_one, name, out_root, w)
            print(f"[{name}] exported", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="+", choices=sorted(FIXTURES), metavar="NAME")
    ap.add_argument("--goldens", action="store_true", help="record golden.json (openvino_genai only)")
    a = ap.parse_args(argv)
    names = a.only or list(FIXTURES)
    if a.goldens:
        from rag_goldens import record

        for name in names:
            record(a.out / name)
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    export(names, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
