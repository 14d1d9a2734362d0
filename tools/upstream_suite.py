#!/usr/bin/env python3
"""Run openvino.genai's own Python tests (tests/python_tests) against genai_shim and the real
openvino_genai, test by test, on offline stand-ins for the hub models, and write the table
docs/upstream_suite.md.

Nothing of openvino.genai is copied into this repository: the tests are extracted at run time
from a checkout or a git directory (--upstream) into a work directory (--work).

Setup (once; never needed by CI):

  1. A fixtures venv.  The upstream tests import transformers and optimum-intel (they export
     the models and compute HF references), so they run in a venv with the [fixtures] extra,
     this repository installed editable, pytest, and xgrammar:

       python3 -m venv /work/venv-fixtures && . /work/venv-fixtures/bin/activate
       pip install -e ".[fixtures,test]" && pip uninstall -y torchvision
       pip install --no-deps "xgrammar==0.1.31"
       pip install pydantic pytest-timeout   # test_structured_output.py imports pydantic

     (test_kokoro_pipeline.py, test_sparse_prefill.py and test_vllm_parsers_wrapper.py import
     further packages: vllm ...; they are outside what genai_shim covers.  test_rag.py imports
     langchain: `pip install langchain-core langchain-community` in that venv.
     test_whisper_pipeline*.py need datasets, librosa and soundfile:
     pip install "datasets==3.6.0" librosa soundfile -- datasets 3.6 decodes audio with
     soundfile, 4 and later need torchcodec.)

  2. Stand-ins.  Every hub id that the selected test files (and utils/, data/models.py,
     models/lightweight) name as a string literal gets a tiny seeded random model of the
     architecture its name suggests (Llama when none; standin_arch), built with
     tools/make_optimum_fixtures.py's builders: a 1024-token tokenizer trained on
     tools/fixture_corpus.txt plus the prompts of the selected tests, a chat template, sliding
     windows widened to 4096.  Ids the tests use only for a tokenizer (BERT-like: WordPiece with
     a pair template; llava-next, MiniCPM: Llama-style) get one too.  The embedding and reranker
     ids of the selected files get RAG stand-ins instead (RAG_KINDS, build_rag_standin): BERT
     encoders (BertModel; BertForSequenceClassification with one label for cross-encoders) with a
     WordPiece of up to 4096 pieces and token type ids, a Qwen3Model for Qwen3-Embedding, a
     Qwen3ForCausalLM whose byte-level BPE has "yes" and "no" for Qwen3-Reranker, and a
     Qwen3ForSequenceClassification for its seq-cls variant; the tests export them with
     optimum-intel as they export the hub models.  They are written in the
     Hugging Face hub cache layout (<work>/hf/hub/models--org--name/snapshots/...), so that
     snapshot_download / from_pretrained resolve offline (HF_HUB_OFFLINE=1); an existing
     stand-in is kept:

       python tools/upstream_suite.py standins --upstream /path/to/openvino.genai [--files ...]

     Make them once for the whole selection (the tokenizers' corpus includes the selected
     files' prompts); other stand-ins go in another --work.  With a whisper test file selected,
     the Whisper ids get the tiny random Whisper of tools/make_whisper_fixtures.py (a torch
     checkpoint the tests export themselves) and the audio data sets they snapshot
     (librispeech_asr_dummy, meanwhile) parquet stand-ins of ov_npu_emu.testing's deterministic
     audio (whisper_standins); facebook/multilingual_librispeech is streamed from the hub by
     datasets itself and fails offline on both sides.

     test_vlm_pipeline.py: its ids of the VLM families genai_shim has (VLM_STANDINS: Qwen2-VL,
     Qwen2.5-VL, Qwen3-VL, LLaVA, LLaVA-NeXT, Gemma 3) get tools/make_vlm_fixtures.py's tiny
     seeded checkpoints (the tests export them with optimum-intel themselves); its other ids get
     none (not an LLM stand-in either).  The images it downloads get deterministic stand-ins in
     <work>/web, which the offline plugin serves to requests.get.  Its export loads the HF
     processors, whose video processors need torchvision (the fixtures venv has none, see above):
     put a torch-matching one on PYTHONPATH for these runs only, e.g.
     pip install --no-deps --target /tmp/upw-vlm/tv torchvision==0.29.1 (torch 2.14.1), then
     PYTHONPATH=/tmp/upw-vlm/tv:$PYTHONPATH.

  3. The runs.  Each selected file runs twice with pytest (junit XML): "real" with the
     installed openvino_genai, "ours" with a plugin (-p) that sets
     sys.modules["openvino_genai"] = genai_shim before collection.  Results per file and side
     are kept in <work>/results/, so a long run can be resumed or split; `table` rewrites the
     doc from whatever results exist:

       python tools/upstream_suite.py run --upstream /path/to/openvino.genai \\
           [--files test_tokenizer.py test_sampling.py] [-k EXPR] [--side real|ours|both]
       python tools/upstream_suite.py table [--also OTHER_WORK ...] [--keep]

     --chunk NAME (with -k) stores a part of a file as <file>@NAME.xml; `table` merges a file's
     chunks, so a long file (test_vlm_pipeline.py) can run in parts.

     --keep keeps the doc's rows (file table, failure and not-compared groups) of the files that
     have no results in --work, and says so in the doc: a run of a few files in a fresh work dir
     then adds its rows to the table without dropping the others'.

     --also lists, besides, the failures seen only on the stand-ins of other work dirs (a
     random stand-in can make the real itself fail a test that other stand-ins let it pass).

Both sides share the converted-model cache (OV_CACHE=<work>/ov_cache, the upstream
utils/constants.py layout); the optimum export is done once, by whichever side runs first.
The plugin also makes utils.network.retry_request a single try (offline, a retry only waits).
Each test gets --test-timeout seconds: a stand-in never emits a stop token id of the hub
model's vocabulary, so a test that relies on one (max_length at its default) would otherwise
generate for ever, on the real as on ours, inside a C++ call that no signal interrupts.  So the
tests run in one pytest-xdist worker (-n 1) with pytest-timeout's thread method: a test over
time ends its worker, xdist reports it failed and starts a new worker for the rest.

Comparison: ours runs only the tests the real passed (by node id, through a pytest @file),
unless --ours-all.  A test counts where the real passes; ours "fails" it when the real passes and
ours does not (fail, error or skip).  Tests the real fails (a stand-in cannot replace a VLM,
a gated model, a GGUF file ...) are counted as such and not compared.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "upstream_suite.md"
DEFAULT_WORK = Path(os.environ.get("UPSTREAM_SUITE_WORK", Path.home() / ".cache" / "ov-npu-emu-upstream"))
DEFAULT_UPSTREAM = Path("/work/.mirror/openvinotoolkit+openvino.genai/repo")
TESTS_SUBDIR = "tests/python_tests"

PRIORITY_FILES = (
    "test_tokenizer.py",
    "test_generation_config.py",
    "test_llm_pipeline_static.py",
    "test_continuous_batching.py",
    "test_llm_pipeline.py",
    "test_structured_output.py",
    "test_sampling.py",
)

# hub ids that name something other than a causal LM (or a file), no stand-in is made for them
_NOT_LLM = re.compile(r"whisper|librispeech|-asr\b|flux|latent-consistency|stable-diffusion|sdxl|kokoro|"
                      r"-gguf|eagle3|qwen3-next|mamba|zamba|"
                      r"vl-|-vl|clip|reranker|embedding", re.I)
# encoder tokenizers (the tests use only their tokenizer): WordPiece, [CLS] A [SEP] B [SEP]
_BERT = re.compile(r"bert|bge-", re.I)
_HUB_ID = re.compile(r"""["']([A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9])["']""")
_FILE_EXT = re.compile(r"\.(py|txt|json|xml|bin|gguf|png|jpg|wav|safetensors|md)$", re.I)

_LLAMA_CHAT = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


# --------------------------------------------------------------------------------------------
# upstream tests
# --------------------------------------------------------------------------------------------

def read_upstream_file(upstream: Path, rel: str) -> str:
    """A file's text from an openvino.genai checkout or (at HEAD) a git directory of it."""
    if (upstream / rel).is_file():
        return (upstream / rel).read_text(encoding="utf-8")
    out = subprocess.run(["git", "-C", str(upstream), "show", f"HEAD:{rel}"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{upstream}: neither a checkout nor a git directory of openvino.genai with {rel}")
    return out.stdout


def upstream_commit(upstream: Path) -> str:
    out = subprocess.run(["git", "-C", str(upstream), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def extract_tests(upstream: Path, work: Path) -> Path:
    """The upstream tests/python_tests at HEAD into <work>/src/<commit>/; returns its tests dir."""
    commit = upstream_commit(upstream)
    dest = work / "src" / commit[:12]
    tests = dest / TESTS_SUBDIR
    if tests.is_dir():
        return tests
    tmp = Path(tempfile.mkdtemp(dir=work))
    if (upstream / TESTS_SUBDIR).is_dir():  # a checkout
        shutil.copytree(upstream / TESTS_SUBDIR, tmp / TESTS_SUBDIR)
    else:  # a git directory
        arch = subprocess.run(["git", "-C", str(upstream), "archive", "HEAD", TESTS_SUBDIR],
                              capture_output=True, check=True)
        with tarfile.open(fileobj=io.BytesIO(arch.stdout)) as tf:
            try:
                tf.extractall(tmp, filter="data")
            except TypeError:  # Python < 3.10.12 has no extraction filters; the archive is git's own
                tf.extractall(tmp)  # noqa: S202
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(dest)
    return tests


def hub_ids(tests: Path, files: list[str]) -> list[str]:
    """Hub-id string literals in the selected test files, utils/ and data/models.py."""
    sources = [tests / f for f in files if f not in VLM_FILES]
    sources += sorted((tests / "utils").glob("*.py")) + [tests / "data" / "models.py"]
    ids: set[str] = set()
    for src in sources:
        if not src.is_file():
            continue
        for m in _HUB_ID.finditer(src.read_text(encoding="utf-8")):
            s = m.group(1)
            if _FILE_EXT.search(s) or s.startswith(("utils/", "data/", "tests/", "./")) or s.count("/") != 1:
                continue
            if not _NOT_LLM.search(s):
                ids.add(s)
    # models/lightweight (and the like): one hub id a line, read by test_continuous_batching.py
    lists = [tests / "models" / "lightweight"] if any("continuous_batching" in f for f in files) else []
    for lst in lists:
        if lst.is_file():
            ids |= {ln.strip() for ln in lst.read_text().splitlines()
                    if ln.strip() and not ln.startswith("#") and not _NOT_LLM.search(ln)}
    return sorted(ids)


# --------------------------------------------------------------------------------------------
# stand-ins (fixtures venv: torch, transformers, tokenizers)
# --------------------------------------------------------------------------------------------

def standin_arch(hub_id: str) -> str:
    """The tiny architecture that stands in for a hub id (by name; llama when nothing matches)."""
    low = hub_id.lower()
    if _BERT.search(hub_id):
        return "bert"
    rules = (("phi3", "phi3"), ("phi-3", "phi3"), ("phi-4", "phi3"), ("qwen3", "qwen3"), ("qwen", "qwen2"),
             ("gemma2", "gemma2"), ("gemma-2", "gemma2"), ("gemma-3", "gemma3"), ("gemma3", "gemma3"),
             ("gemma", "gemma"), ("opt-", "opt"), ("optforcausallm", "opt"),
             ("codegen", "codegen"), ("lfm2", "lfm2"), ("granitemoehybrid", "granitemoehybrid"),
             ("phi", "phi"), ("mistral", "mistral"), ("gpt2", "gpt2"))
    for key, arch in rules:
        if key in low:
            return arch
    return "llama"


def _extra_archs():
    sys.path.insert(0, str(ROOT / "tools"))
    import make_optimum_fixtures as mof  # noqa: E402 (tools/ is not a package)

    base = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=2048)
    extra = {
        "opt": mof.Arch("opt", "bytelevel", {**base, "ffn_dim": 128, "word_embed_proj_dim": 64}, seed=3),
        "phi": mof.Arch("phi", "bytelevel", {**base, "intermediate_size": 128}, seed=5),
        "codegen": mof.Arch("codegen", "bytelevel", dict(vocab_size=512, n_embd=64, n_layer=2, n_head=4,
                                                        rotary_dim=8, n_positions=2048, n_ctx=2048), seed=6),
        # linear attention (transformers >= 5): a short-conv layer / a Mamba-2 layer, then attention
        "lfm2": mof.Arch("lfm2", "bytelevel", {**base, "intermediate_size": 128, "num_key_value_heads": 2,
                                               "layer_types": ["conv", "full_attention"]},
                         seed=8, chat_template=mof.CHATML_TEMPLATE),
        "granitemoehybrid": mof.Arch("granitemoehybrid", "bytelevel",
                                     {**base, "intermediate_size": 128, "shared_intermediate_size": 128,
                                      "num_key_value_heads": 2, "layer_types": ["mamba", "attention"],
                                      "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16,
                                      "mamba_n_groups": 1, "num_local_experts": 2, "num_experts_per_tok": 1},
                                     seed=4, chat_template=mof.CHATML_TEMPLATE),
    }
    return mof, {**mof.ARCHS, **extra}


def build_bert_tokenizer(vocab_size: int, corpus: Path):
    """A BERT-style tokenizer trained on the corpus: lower-casing WordPiece, paired input."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                             show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=512, cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")


STANDIN_VOCAB = 1024


def standin_corpus(tests: Path, files: list[str], out: Path) -> Path:
    """tools/fixture_corpus.txt plus the prompts the tests use (data/*.txt and the string literals of
    the selected files), so that a stand-in's tokenizer gives a prompt about as many tokens as a hub
    tokenizer does (a 512-token BPE over the small corpus alone made `max_length=30` shorter than
    the prompt)."""
    import ast

    parts = [(ROOT / "tools" / "fixture_corpus.txt").read_text(encoding="utf-8")]
    parts += [p.read_text(encoding="utf-8") for p in sorted((tests / "data").glob("*.txt"))]
    for f in files:
        src = tests / f
        if src.is_file():
            for node in ast.walk(ast.parse(src.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value:
                    parts.append(node.value)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


def silence_partial_utf8(model, tok) -> None:
    """Zero the lm_head rows of tokens that decode to a partial UTF-8 sequence (byte-fallback
    <0xNN> pieces, lone byte-level bytes) when the head is not tied: their logits sit at ~0 among
    logits of std ~8, so they practically never win.  A random model otherwise emits them, and
    HF's decode ('\ufffd') and the OpenVINO detokenizer then disagree on the real already."""
    import torch

    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or head.weight is emb.weight:
        return
    bad = [i for i in range(min(len(tok), head.weight.shape[0])) if "\ufffd" in tok.decode([i])]
    with torch.no_grad():
        head.weight[bad] = 0.0


def make_standin(hub_id: str, hub_cache: Path, seed: int, corpus: Path) -> Path:
    """A tiny random model + trained tokenizer in the HF hub cache layout; returns the snapshot.

    The architecture follows the name (standin_arch); sliding windows are widened past any prompt
    the tests use (the fixtures' 16-32 token windows made the HF reference and OpenVINO differ on
    the real already)."""
    import dataclasses

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    mof, archs = _extra_archs()
    mof.CORPUS_FILE = corpus
    arch = standin_arch(hub_id)
    spec = archs["llama" if arch == "bert" else arch]
    config = {**spec.config, "vocab_size": STANDIN_VOCAB}
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        if key in config:
            config[key] = 4096
    if config.get("sliding_window"):
        config["sliding_window"] = 4096
    spec = dataclasses.replace(spec, config=config)
    repo = hub_cache / ("models--" + hub_id.replace("/", "--"))
    revision = hashlib.sha1(f"standin {hub_id} {seed}".encode()).hexdigest()
    snap = repo / "snapshots" / revision
    if (repo / "refs" / "main").is_file():
        return repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
    template = mof.CHATML_TEMPLATE if spec.tokenizer == "bytelevel" else _LLAMA_CHAT
    if arch == "bert":  # the tokenizer is what the tests use; the model is a tiny llama over its vocab
        tok = build_bert_tokenizer(STANDIN_VOCAB, corpus)
    else:
        tok = mof.build_tokenizer(spec.tokenizer, STANDIN_VOCAB, template)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if arch == "bert":
        ids = dict(bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)
    cfg = AutoConfig.for_model(spec.model_type, **spec.config, **ids)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    mof.init_weights(model, spec, seed)
    silence_partial_utf8(model, tok)
    model.eval()
    model.generation_config = GenerationConfig(**ids)
    tmp = Path(tempfile.mkdtemp(dir=hub_cache))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    snap.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(snap)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snap


# --------------------------------------------------------------------------------------------
# RAG stand-ins (test_rag.py): embedding models, cross-encoders, Qwen3 rerankers
# --------------------------------------------------------------------------------------------

#: hub id pattern -> the kind of tiny model that stands in for it (first match; VL ids excluded)
RAG_KINDS: tuple[tuple[str, str], ...] = (
    (r"qwen3-reranker.*seq-cls", "qwen3-seqcls"),  # Qwen3ForSequenceClassification, 1 label
    (r"qwen3-reranker", "qwen3-rerank"),  # Qwen3ForCausalLM scored by its "yes"/"no" logits
    (r"qwen3-embedding", "qwen3-embed"),  # Qwen3Model (last-token pooling)
    (r"^cross-encoder/|ms-marco|reranker", "bert-cross-encoder"),  # BertForSequenceClassification
    (r"bge-|mxbai-embed|-minilm-|sentence-transformers/", "bert-embed"),  # BertModel
)
RAG_BERT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                type_vocab_size=2, hidden_act="gelu")
# a WordPiece of up to 4096 pieces: test_rag.py's 200-character chunks are ~30-37 tokens, as with
# the hub's 30k vocab (1024 gave 60-75: max_length=50 / 64 then truncated, where the hub's does not)
RAG_BERT_VOCAB = 4096


def rag_standin_kind(hub_id: str) -> str | None:
    """The RAG stand-in kind for a hub id (RAG_KINDS), None for any other id and for VL models."""
    if re.search(r"vl-|-vl", hub_id, re.I):
        return None
    return next((kind for rx, kind in RAG_KINDS if re.search(rx, hub_id, re.I)), None)


def rag_hub_ids(tests: Path, files: list[str]) -> list[str]:
    """Hub-id string literals of the selected files with a RAG stand-in kind."""
    ids: set[str] = set()
    for f in files:
        src = tests / f
        if src.is_file() and f not in VLM_FILES:
            ids |= {m.group(1) for m in _HUB_ID.finditer(src.read_text(encoding="utf-8"))
                    if m.group(1).count("/") == 1 and rag_standin_kind(m.group(1))}
    return sorted(ids)


def _yes_no_bytelevel_tokenizer(corpus: Path, vocab_size: int):
    """The stand-ins' byte-level BPE with ChatML specials, trained with "yes" and "no" as whole
    tokens (a Qwen3 reranker's score reads their logits; the real looks both up in the vocab)."""
    from transformers import PreTrainedTokenizerFast

    mof, _ = _extra_archs()
    lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    specials = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
    tok = mof.train_bytelevel_bpe(lines + ["yes", "no"] * 2000, vocab_size, specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=4096, clean_up_tokenization_spaces=False,
                                   bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                   pad_token="<|pad|>", additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = mof.CHATML_TEMPLATE
    return fast


def build_rag_standin(hub_id: str, kind: str, out: Path, seed: int, corpus: Path) -> None:
    """A tiny seeded model of ``kind`` and its tokenizer saved in ``out`` (HF layout), weights
    re-initialised as the project's fixtures (tools/make_optimum_fixtures.py init_weights)."""
    import dataclasses

    import torch
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        BertConfig,
        BertForSequenceClassification,
        BertModel,
    )

    mof, archs = _extra_archs()
    torch.manual_seed(seed)
    if kind.startswith("bert"):
        positions = 4096 if "mxbai" in hub_id.lower() else 512
        tok = build_bert_tokenizer(RAG_BERT_VOCAB, corpus)
        tok.model_max_length = positions
        cfg = BertConfig(vocab_size=len(tok), max_position_embeddings=positions, pad_token_id=tok.pad_token_id,
                         **RAG_BERT)
        if kind == "bert-cross-encoder":
            cfg.num_labels = 1
            model = BertForSequenceClassification(cfg)
        else:
            model = BertModel(cfg, add_pooling_layer=False)
        mof.init_weights(model, mof.Arch("bert", "wordpiece", {**RAG_BERT, "vocab_size": len(tok)}, seed), seed)
    else:
        spec = archs["qwen3"]
        config = {**spec.config, "vocab_size": STANDIN_VOCAB, "max_position_embeddings": 4096}
        if kind == "qwen3-embed":
            tok = mof.build_tokenizer("bytelevel", STANDIN_VOCAB, mof.CHATML_TEMPLATE)
        else:
            tok = _yes_no_bytelevel_tokenizer(corpus, STANDIN_VOCAB)
        ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        if kind == "qwen3-seqcls":
            cfg = AutoConfig.for_model(spec.model_type, **config, **ids, num_labels=1)
            model = AutoModelForSequenceClassification.from_config(cfg, dtype=torch.float32)
        elif kind == "qwen3-embed":
            model = AutoModel.from_config(AutoConfig.for_model(spec.model_type, **config, **ids), dtype=torch.float32)
        else:
            cfg = AutoConfig.for_model(spec.model_type, **config, **ids)
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        mof.init_weights(model, dataclasses.replace(spec, config=config), seed)
        if kind == "qwen3-rerank":  # "no" near "yes" in the tied head: scores spread over (0, 1)
            vocab, emb = tok.get_vocab(), model.get_input_embeddings().weight
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                emb[vocab["no"]] = emb[vocab["yes"]] + 0.03 * torch.randn(emb.shape[1], generator=gen)
    model.eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    if kind.startswith("bert"):
        # token type ids as a BERT tokenizer gives them (the converted tokenizer then outputs them;
        # without them the real leaves a cross-encoder's token_type_ids input unset and fails)
        path = out / "tokenizer_config.json"
        cfg_json = json.loads(path.read_text(encoding="utf-8"))
        cfg_json["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
        path.write_text(json.dumps(cfg_json, indent=2) + "\n", encoding="utf-8")


def make_rag_standin(hub_id: str, hub_cache: Path, seed: int, corpus: Path) -> Path:
    """build_rag_standin in the HF hub cache layout (as make_standin); an existing one is kept."""
    repo = hub_cache / ("models--" + hub_id.replace("/", "--"))
    if (repo / "refs" / "main").is_file():
        return repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
    revision = hashlib.sha1(f"rag standin {hub_id} {seed}".encode()).hexdigest()
    tmp = Path(tempfile.mkdtemp(dir=hub_cache))
    build_rag_standin(hub_id, rag_standin_kind(hub_id) or "", tmp, seed, corpus)
    snap = repo / "snapshots" / revision
    snap.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(snap)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snap


def cmd_standins(args) -> int:
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    tests = extract_tests(args.upstream, work)
    hub_cache = work / "hf" / "hub"
    hub_cache.mkdir(parents=True, exist_ok=True)
    ids = sorted(set(hub_ids(tests, args.files)) | set(rag_hub_ids(tests, args.files)))
    corpus = standin_corpus(tests, args.files, work / "standin_corpus.txt")
    failed = 0
    for hub_id in ids:
        try:
            # the seed follows the id, not its place in the list (which depends on --files)
            seed = args.seed + int(hashlib.sha1(hub_id.encode()).hexdigest()[:6], 16) % 100_000
            if rag_standin_kind(hub_id):
                snap = make_rag_standin(hub_id, hub_cache, seed=seed, corpus=corpus)
            else:
                snap = make_standin(hub_id, hub_cache, seed=seed, corpus=corpus)
        except Exception as e:  # one architecture that cannot be built must not stop the others
            failed += 1
            print(f"{hub_id:60s} {standin_arch(hub_id):8s} FAILED: {type(e).__name__}: {e}")
            continue
        print(f"{hub_id:60s} {rag_standin_kind(hub_id) or standin_arch(hub_id):8s} {snap}")
    for hub_id in vlm_hub_ids(tests, args.files):
        try:
            snap = make_vlm_standin(hub_id, hub_cache)
        except Exception as e:
            failed += 1
            print(f"{hub_id:60s} {'vlm':8s} FAILED: {type(e).__name__}: {e}")
            continue
        print(f"{hub_id:60s} {VLM_STANDINS[hub_id].removeprefix('build_'):8s} {snap}")
    if any(f in VLM_FILES for f in args.files):
        print(f"{'web images':60s} {'png':8s} {web_standins(work)}")
    if any("whisper" in f for f in args.files):
        for repo_id, snap in whisper_standins(hub_cache):
            print(f"{repo_id:60s} {'whisper':8s} {snap}")
    print(f"{len(ids) - failed} stand-ins in {hub_cache}" + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0


# --------------------------------------------------------------------------------------------
# Whisper stand-ins (test_whisper_pipeline*.py): models and audio data sets, self-contained
# --------------------------------------------------------------------------------------------

#: the Whisper hub ids test_whisper_pipeline*.py export (Qwen3-ASR / Fun-ASR are skipped by the
#: tests themselves without their packages)
WHISPER_IDS = ("openai/whisper-tiny", "distil-whisper/distil-small.en")
#: data set repos the tests read through snapshot_download: (repo, config or None, split, clips);
#: a clip is (audio kind of ov_npu_emu.testing.whisper_test_audio, start s, length s).
#: facebook/multilingual_librispeech is streamed from the hub by datasets.load_dataset itself and
#: fails offline on both sides.
WHISPER_DATASETS = (
    # the tests take(30) of it (the hub's has 73 clips of 1.5-35 s)
    ("hf-internal-testing/librispeech_asr_dummy", "clean", "validation",
     [("long", (4.0 * i) % 30.0, 2.0 + 1.5 * (i % 6)) for i in range(34)]
     + [("short", 0.0, 3.0), ("medium", 0.0, 10.0)]),
    # long form: sample ids 0..9, over 30 s each
    ("distil-whisper/meanwhile", None, "test", [("long", 2.5 * i, 31.0 + 1.7 * i) for i in range(10)]),
)


def _hub_snapshot(hub_cache: Path, repo_id: str, kind: str, build) -> Path:
    """``build(tmp_dir)`` into the hub cache layout (``models--`` / ``datasets--``), once."""
    repo = hub_cache / (f"{kind}--" + repo_id.replace("/", "--"))
    if (repo / "refs" / "main").is_file():
        return repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
    revision = hashlib.sha1(f"standin {kind} {repo_id}".encode()).hexdigest()
    tmp = Path(tempfile.mkdtemp(dir=hub_cache))
    build(tmp)
    snap = repo / "snapshots" / revision
    snap.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(snap)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snap


def make_whisper_standin(hub_id: str, hub_cache: Path) -> Path:
    """The tiny random Whisper of tools/make_whisper_fixtures.py (torch checkpoint, Whisper-style
    tokenizer with timestamps, feature extractor, Whisper's generation_config fields) as ``hub_id``;
    the tests export it with optimum-intel themselves.  Its seed is the fixture's (chosen there so
    that greedy texts end with <|endoftext|> well before 448 tokens), not --seed."""
    sys.path.insert(0, str(ROOT / "tools"))
    import make_whisper_fixtures as mwf  # noqa: E402 (tools/ is not a package)

    return _hub_snapshot(hub_cache, hub_id, "models", lambda d: mwf.build_hf_model(d))


def make_audio_dataset_standin(repo_id: str, config: str | None, split: str, clips: list, hub_cache: Path) -> Path:
    """A parquet data set with an ``audio`` column (16 kHz clips of the project's deterministic
    speech-like audio), ``text`` and ``id``, loadable with ``datasets.load_dataset(snapshot,
    [config], split=split)`` (README configs when a config is named)."""
    import datasets
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from ov_npu_emu.testing import whisper_test_audio

    def build(d: Path) -> None:
        rows = {"audio": [], "text": [], "id": []}
        for i, (kind, start, length) in enumerate(clips):
            # a clip may run past the audio's end: it goes on from its start
            audio = np.tile(whisper_test_audio(kind), 2)[int(start * 16000):int((start + length) * 16000)]
            rows["audio"].append({"array": audio.astype("float32"), "sampling_rate": 16000, "path": f"{i}.wav"})
            rows["text"].append(f"STAND IN CLIP {i}")
            rows["id"].append(f"standin-{i}")
        ds = datasets.Dataset.from_dict(rows).cast_column("audio", datasets.Audio(sampling_rate=16000))
        sub = d / (config or "data")
        sub.mkdir(parents=True)
        ds.to_parquet(str(sub / f"{split}-00000-of-00001.parquet"))
        if config:
            (d / "README.md").write_text(
                f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: {split}\n"
                f"    path: {config}/{split}-*.parquet\n---\nA stand-in made by tools/upstream_suite.py.\n")

    return _hub_snapshot(hub_cache, repo_id, "datasets", build)


def whisper_standins(hub_cache: Path) -> list[tuple[str, Path]]:
    """Every Whisper model and data set stand-in; (repo id, snapshot) each."""
    out = []
    for hub_id in WHISPER_IDS:
        out.append((hub_id, make_whisper_standin(hub_id, hub_cache)))
    for repo_id, config, split, clips in WHISPER_DATASETS:
        out.append((repo_id, make_audio_dataset_standin(repo_id, config, split, clips, hub_cache)))
    return out


# --------------------------------------------------------------------------------------------
# VLM stand-ins (test_vlm_pipeline.py): the families genai_shim supports, and the test images
# --------------------------------------------------------------------------------------------

#: test files whose hub ids are visual-language models: they get VLM stand-ins (VLM_STANDINS) or
#: none, never an LLM one
VLM_FILES = ("test_vlm_pipeline.py",)
#: hub id -> the tools/make_vlm_fixtures.py builder of its family (a tiny seeded random HF
#: checkpoint with the trained byte-level BPE; the tests export it with optimum-intel themselves).
#: The file's other ids (InternVL2, MiniCPM-V, Phi-3-vision, Phi-4-multimodal, Gemma 3n / 4,
#: Qwen3-Omni, Qwen3.5, nanoLLaVA, Muse Glimmer, VideoChat-Flash, the Qwen3-VL eagle3 pair) are
#: families genai_shim does not have: no stand-in.  LLaVA-NeXT-Video is missing too: optimum-intel
#: 2.2 exports it only under transformers <= 4.57 while the tests export under the venv's 5.0, and
#: under transformers 5 the file names it in no collected test.
VLM_STANDINS = {
    "optimum-intel-internal-testing/tiny-random-qwen2vl": "build_qwen2vl",
    "optimum-intel-internal-testing/tiny-random-qwen2.5-vl": "build_qwen2_5vl",
    "optimum-intel-internal-testing/tiny-random-qwen3-vl": "build_qwen3vl",
    "optimum-intel-internal-testing/tiny-random-llava": "build_llava",
    "optimum-intel-internal-testing/tiny-random-llava-next": "build_llava_next",
    "optimum-intel-internal-testing/tiny-random-gemma3": "build_gemma3",
}


def vlm_hub_ids(tests: Path, files: list[str]) -> list[str]:
    """The VLM_STANDINS ids that the selected VLM files name."""
    ids: set[str] = set()
    for f in files:
        if f in VLM_FILES and (tests / f).is_file():
            ids |= {m.group(1) for m in _HUB_ID.finditer((tests / f).read_text(encoding="utf-8"))}
    return sorted(ids & set(VLM_STANDINS))


def make_vlm_standin(hub_id: str, hub_cache: Path) -> Path:
    """The family's make_vlm_fixtures builder into the hub cache layout (its own seeds, not --seed);
    an existing stand-in is kept."""
    sys.path.insert(0, str(ROOT / "tools"))
    import make_vlm_fixtures as mvf  # noqa: E402 (tools/ is not a package)

    return _hub_snapshot(hub_cache, hub_id, "models", getattr(mvf, VLM_STANDINS[hub_id]))


#: web files the selected tests download (test_vlm_pipeline.py's images, by requests.get):
#: URL -> (width, height, seed) of a deterministic stand-in image (smooth colour fields, a few
#: blocks and stripes; PNG), served by the offline plugin
WEB_IMAGES = {
    "https://github.com/openvinotoolkit/openvino_notebooks/assets/29454499/d5fbbd1a-d484-415c-88cb-9986625b7b11":
        (480, 360, 1),  # cat
    "https://huggingface.co/datasets/huggingface/documentation-images/resolve/main/transformers/tasks/car.jpg":
        (320, 213, 2),  # car (also the frames of synthetic_video, shifted per pixel in Python: small)
    "https://github.com/user-attachments/assets/8c9ae017-7837-4abc-ae92-c1054c9ec350": (256, 128, 3),  # handwritten
}


def standin_image(width: int, height: int, seed: int):
    """A deterministic RGB PIL image: two colour gradients, random blocks and stripes."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack([255 * x / width, 255 * y / height, 128 + 100 * np.sin((x + y) / (7 + seed))], -1)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width - 8)), int(rng.integers(0, height - 8))
        colour = rng.integers(0, 256, 3)
        h, w = int(rng.integers(8, height // 2)), int(rng.integers(8, width // 2))
        img[y0:y0 + h, x0:x0 + w] = colour
    img[:, ::9] *= 0.6
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def web_standins(work: Path) -> Path:
    """<work>/web: the WEB_IMAGES as PNG files and index.json (URL -> file) for the offline plugin."""
    d = work / "web"
    d.mkdir(parents=True, exist_ok=True)
    index = {}
    for url, (w, h, seed) in WEB_IMAGES.items():
        name = hashlib.sha1(url.encode()).hexdigest()[:16] + ".png"
        if not (d / name).is_file():
            standin_image(w, h, seed).save(d / name)
        index[url] = name
    (d / "index.json").write_text(json.dumps(index, indent=1))
    return d


# --------------------------------------------------------------------------------------------
# runs
# --------------------------------------------------------------------------------------------

_ALIAS_PLUGIN = '''\
"""pytest plugin (written by tools/upstream_suite.py): openvino_genai is genai_shim."""
import sys

import genai_shim

sys.modules["openvino_genai"] = genai_shim
'''

_OFFLINE_PLUGIN = '''\
"""pytest plugin (written by tools/upstream_suite.py): offline, a network retry only waits."""
try:
    import utils.network as _net

    def _once(func, retries=7):
        return func()

    _net.retry_request = _once
except ImportError:
    pass

# the web files the tests download (test images) from <work>/web (tools/upstream_suite.py web_standins)
import json as _json
import os as _os

_web = _os.environ.get("UPSTREAM_SUITE_WEB")
if _web and _os.path.isfile(_os.path.join(_web, "index.json")):
    import requests as _requests

    with open(_os.path.join(_web, "index.json")) as _fh:
        _index = _json.load(_fh)
    _get = _requests.get

    class _Response:
        status_code = 200
        ok = True

        def __init__(self, path):
            with open(path, "rb") as fh:
                self.content = fh.read()
            import io

            self.raw = io.BytesIO(self.content)

        def raise_for_status(self):
            pass

    def _standin_get(url, *args, **kwargs):
        if url in _index:
            return _Response(_os.path.join(_web, _index[url]))
        return _get(url, *args, **kwargs)

    _requests.get = _standin_get
'''


def write_plugins(work: Path) -> Path:
    d = work / "plugins"
    d.mkdir(parents=True, exist_ok=True)
    (d / "upstream_suite_alias.py").write_text(_ALIAS_PLUGIN)
    (d / "upstream_suite_offline.py").write_text(_OFFLINE_PLUGIN)
    return d


def run_env(work: Path, tests: Path, plugins: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HOME=str(work / "hf"), HF_HUB_CACHE=str(work / "hf" / "hub"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", OV_CACHE=str(work / "ov_cache"),
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"),
               UPSTREAM_SUITE_WEB=str(work / "web"),
               PYTHONPATH=os.pathsep.join([str(plugins), str(tests)] + [p for p in [env.get("PYTHONPATH")] if p]))
    return env


def run_one(args, tests: Path, plugins: Path, test_file: str, side: str) -> Path:
    chunk = f"@{args.chunk}" if getattr(args, "chunk", None) else ""
    out = args.work / "results" / side / (test_file.replace("/", "__") + chunk + ".xml")
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [args.python, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider", "-p", "upstream_suite_offline",
           "-o", "junit_family=xunit1", f"--junitxml={out}", "-rN", "--tb=line",
           f"--timeout={args.test_timeout}", "--timeout-method=thread", "-n", "1", "--max-worker-restart=1000"]
    if side == "ours":
        cmd[5:5] = ["-p", "upstream_suite_alias"]
    if args.k:
        cmd += ["-k", args.k]
    cmd += args.pytest_args
    real_xml = args.work / "results" / "real" / out.name
    if side == "ours" and not args.ours_all and real_xml.is_file():
        # only what the real passes: the rest is not compared, and a stand-in that makes the real
        # time out would make ours time out too
        passed = [n for n, (o, _) in parse_junit(real_xml).items() if o == "passed"]
        if not passed:
            out.write_text('<testsuites><testsuite name="pytest" tests="0"/></testsuites>')
            return out
        # an id whose parameters hold a newline (a code snippet) cannot go through the @file: its
        # test function goes instead (its other cases run too, and are not compared)
        sel = list(dict.fromkeys(n if "\n" not in n and "\r" not in n else n.split("[", 1)[0] for n in passed))
        ids = out.with_suffix(".ids")
        ids.write_text("\n".join(sel) + "\n")
        cmd[3] = f"@{ids}"
    log = out.with_suffix(".log")
    print(f"[{datetime.datetime.now():%H:%M:%S}] {side}: {test_file}", flush=True)
    out.unlink(missing_ok=True)
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, cwd=tests, env=run_env(args.work, tests, plugins), stdout=fh,
                                stderr=subprocess.STDOUT, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"  over --timeout {args.timeout:g} s: no results for this file and side", flush=True)
            return out
    if rc not in (0, 1, 5):  # 2 interrupted (a collection error), 3 internal, 4 usage
        print(f"  pytest exit {rc}: see {log}", flush=True)
    return out


def cmd_run(args) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    tests = extract_tests(args.upstream, args.work)
    plugins = write_plugins(args.work)
    meta = {"upstream": str(args.upstream), "commit": upstream_commit(args.upstream),
            "k": None if args.chunk else args.k, "versions": versions(args.python)}
    (args.work / "results").mkdir(exist_ok=True)
    (args.work / "results" / "meta.json").write_text(json.dumps(meta, indent=1))
    sides = ["real", "ours"] if args.side == "both" else [args.side]
    for f in args.files:
        for side in sides:
            run_one(args, tests, plugins, f, side)
    return cmd_table(args)


def versions(python: str) -> dict[str, str]:
    code = ("import json, importlib.metadata as m\n"
            "out = {}\n"
            "for p in ('openvino', 'openvino-genai', 'openvino-tokenizers', 'ov-npu-emu', 'optimum-intel',"
            " 'transformers', 'torch', 'xgrammar', 'pytest'):\n"
            "    try: out[p] = m.version(p)\n"
            "    except m.PackageNotFoundError: out[p] = '-'\n"
            "print(json.dumps(out))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else {}


# --------------------------------------------------------------------------------------------
# results and the table
# --------------------------------------------------------------------------------------------

def parse_junit(path: Path) -> dict[str, tuple[str, str]]:
    """node id -> (outcome, one-line message); outcome passed/failed/error/skipped."""
    if not path.is_file():
        return {}
    root = ET.parse(path).getroot()
    out: dict[str, tuple[str, str]] = {}
    for tc in root.iter("testcase"):
        node = f"{tc.get('file') or tc.get('classname')}::{tc.get('name')}"
        outcome, msg = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                msg = (child.get("message") or child.text or "").strip()
                break
        if outcome == "error" and node in out:  # a teardown error after the call's outcome
            continue
        out[node] = (outcome, one_line(msg))
    return out


def one_line(msg: str, width: int = 160) -> str:
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    # prefer the exception line ("E   TypeError: ...", "TypeError: ...")
    for ln in lines:
        if re.match(r"^(E\s+)?[\w.]*(Error|Exception|assert)\b", ln):
            return ln[:width]
    return (lines[0] if lines else "")[:width]


def collect(work: Path) -> dict[str, dict[str, dict[str, tuple[str, str]]]]:
    """test file -> side -> node -> (outcome, message)."""
    res: dict[str, dict[str, dict[str, tuple[str, str]]]] = {}
    for side in ("real", "ours"):
        for xml in sorted((work / "results" / side).glob("*.xml")):
            # a chunk's results (run --chunk NAME): <file>@NAME.xml, merged into the file's
            res.setdefault(xml.stem.split("@", 1)[0].replace("__", "/"), {}).setdefault(side, {}).update(
                parse_junit(xml))
    return res


# Causes found by reading the failures: (file, test function regex, error regex) -> one line.
# A fixed cause simply stops matching anything; keep each to what was seen, not guessed.
KNOWN_CAUSES: list[tuple[str, str, str, str]] = [
    ("test_generation_config.py", r"test_invalid_(generation_configs_throws|fields_assinment_rises)", r"DID NOT",
     "validate() misses checks the real has: min_p outside [0, 1); max_ngram_size without "
     "num_assistant_tokens; eos_token_id set as an attribute and absent from stop_token_ids"),
    ("test_tokenizer.py", r"test_two_inputs", r"paired_input",
     "the add_second_input load property (the real adds a second input to a one-input tokenizer IR) "
     "is not supported"),
    ("test_tokenizer.py", r"test_load_special_tokens_from", r"",
     "special-token strings: ours derives get_pad_token() from the pad id through the vocab (or from eos); "
     "the real takes the strings from special_tokens_map.json / tokenizer_config.json, ids from config.json"),
    ("test_tokenizer.py", r"test_(template_priorities|set_special_runtime_template)", r"",
     "chat_template.json and processor_config.json are not read as chat-template sources, and the real's "
     "replacement of a known unsupported template (Qwen2-VL's) by a simplified one, at load and in the "
     "chat_template setter, is missing"),
    ("test_tokenizer.py", r"test_chat_template_with_empty_output", r"",
     "the real raises on the unsimplified Qwen2-VL template over chat messages; ours renders it"),
    ("test_llm_pipeline_static.py", r"test_pipeline_from_blob", r"WEIGHTS_PATH was given",
     "EXPORT_BLOB without CACHE_MODE: the real's import takes WEIGHTS_PATH (weightless blob by default); "
     "ours writes the weights into the blob and refuses WEIGHTS_PATH"),
    ("test_continuous_batching.py", r"test_post_oom_health", r"KVCacheFullError",
     "KV cache exhausted (10 blocks, max_new_tokens 1e6): ours raises, the real finishes the requests "
     "with what they generated"),
    ("test_continuous_batching.py", r"test_speculative_decoding_extended_perf_metrics", r"num_assistant_tokens",
     "num_assistant_tokens without a draft model: ours raises, the real ignores it"),
    ("test_llm_pipeline.py", r"test_perf_metrics_with_structured_output", r"",
     "PerfMetrics.get_grammar_compiler_init_times() returns {} (the real: {'xgrammar': > 0})"),
]


def known_cause(test_file: str, func: str, err: str) -> str:
    for f, func_re, err_re, cause in KNOWN_CAUSES:
        if f == test_file and re.search(func_re, func) and re.search(err_re, err):
            return cause
    return ""


def normalise(msg: str) -> str:
    """An error line with its numbers and quoted values folded, to group equal causes."""
    msg = re.sub(r"'[^']{0,200}'|\"[^\"]{0,200}\"", "'…'", msg)
    return re.sub(r"\b\d+(\.\d+)?\b", "N", msg)[:200]


def md(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def other_failures(work_dirs: list[Path], seen: set[tuple[str, str]]) -> list[tuple[str, str, str, str]]:
    """Tests the real passes and ours does not in other work dirs (other stand-ins), not in `seen`."""
    other = []
    for extra in work_dirs:
        for f, sides in sorted(collect(extra).items()):
            real, ours = sides.get("real", {}), sides.get("ours", {})
            for n, (o, _) in sorted(real.items()):
                name = n.split("::", 1)[1]
                if o == "passed" and ours and ours.get(n, ("",))[0] != "passed" and (f, name) not in seen:
                    seen.add((f, name))
                    oo, msg = ours.get(n, ("missing", "not collected"))
                    other.append((f, name, oo, f"[other stand-ins] {msg}"))
    return other


def carried_rows(doc: Path, have: set[str]) -> dict[str, list]:
    """What the existing doc says of test files that have no results in this work dir (``table
    --keep``): their rows of the file table, their failure groups and test ids, their not-compared
    groups (lines verbatim), and the doc's generation date; so a run of some files in a fresh
    work dir adds its rows without dropping the others'."""
    out: dict[str, list] = {"rows": [], "groups": [], "ids": [], "uncompared": [], "generated": []}
    if not doc.is_file():
        return out
    section = ""
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = "failures" if line.startswith("## Real passes") else "uncompared"
        if line.startswith("- generated: "):
            out["generated"].append(line.removeprefix("- generated: "))
        m = re.match(r"^(?:\| |- )(\S+\.py)\b", line)
        if not m or m.group(1) in have:
            continue
        if not section:
            nums = re.match(r"^\| \S+ \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", line)
            if nums:
                out["rows"].append((m.group(1), [int(x) for x in nums.groups()]))
        elif section == "failures":
            out["groups" if line.startswith("|") else "ids"].append(line)
        elif line.startswith("|"):
            out["uncompared"].append(line)
    return out


def cmd_table(args) -> int:
    res = collect(args.work)
    meta_path = args.work / "results" / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    rows, failures = [], []
    uncompared: dict[tuple[str, str, str], list[str]] = {}
    tot = [0, 0, 0, 0]
    for f, sides in sorted(res.items()):
        real, ours = sides.get("real", {}), sides.get("ours", {})
        if not ours:
            continue
        real_pass = {n for n, (o, _) in real.items() if o == "passed"}
        ours_pass = {n for n, (o, _) in ours.items() if o == "passed"}
        both = real_pass & ours_pass
        ours_only = ours_pass - real_pass
        row = [len(real), len(real_pass), len(both), len(ours_only)]
        rows.append((f, row))
        tot = [a + b for a, b in zip(tot, row, strict=True)]
        for n, (o, msg) in sorted(real.items()):
            if o != "passed":
                uncompared.setdefault((f, n.split("::", 1)[1].split("[", 1)[0], f"{o}: {normalise(msg)}"),
                                      []).append(n)
        for n in sorted(real_pass - ours_pass):
            o, msg = ours.get(n, ("missing", "not collected"))
            failures.append((f, n.split("::", 1)[1], o, msg))
    also_dirs = getattr(args, "also", None) or []
    other = other_failures(also_dirs, {(f, n) for f, n, _, _ in failures})
    failures += other
    keep = carried_rows(args.doc, set(res)) if getattr(args, "keep", False) else carried_rows(Path(), set())
    rows = sorted(rows + keep["rows"])
    for _, row in keep["rows"]:
        tot = [a + b for a, b in zip(tot, row, strict=True)]
    n_kept_failures = sum(int(ln.split(" | ")[2]) for ln in keep["groups"])
    lines = [
        "# The upstream openvino.genai test suite against genai_shim",
        "",
        "Generated by `python tools/upstream_suite.py table` (do not edit by hand): the real",
        "openvino.genai's own `tests/python_tests`, run test by test with the installed `openvino_genai`",
        "(\"real\") and with `openvino_genai` resolved to `genai_shim` (\"ours\"), on offline stand-ins",
        "(tiny seeded random models with trained tokenizers, made by the tool, for every hub id the",
        "tests name). How to run it: `python tools/upstream_suite.py --help`.",
        "",
        f"- generated: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- upstream commit: `{meta.get('commit', '?')}`" + (f", `-k {meta['k']}`" if meta.get("k") else ""),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items()),
    ]
    if keep["rows"]:
        lines.append("- rows carried over from the previous table (generated "
                     + ", ".join(keep["generated"][:1]) + "; their results are not in this work dir): "
                     + ", ".join(f for f, _ in keep["rows"]))
    lines += [
        "",
        "| upstream test file | collected | real passes | of those, ours passes | ours passes, real not (--ours-all) |",
        "|---|---:|---:|---:|---:|",
    ]
    for f, r in rows:
        lines.append(f"| {f} | {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
    lines.append(f"| **total** | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} |")
    groups: dict[tuple[str, str, str], list[str]] = {}
    for f, n, o, msg in failures:
        func = n.split("[", 1)[0]
        groups.setdefault((f, func, f"{o}: {normalise(msg)}"), []).append(n)
    also = (f" ({len(other)} of them seen only on the stand-ins of "
            + ", ".join(f"`{Path(a).name}`" for a in also_dirs) + ")") if also_dirs else ""
    n_failures, n_groups = len(failures) + n_kept_failures, len(groups) + len(keep["groups"])
    lines += ["", f"## Real passes, ours does not ({n_failures} tests, {n_groups} groups){also}", "",
              "Grouped by test function and ours' error (numbers and quoted values folded); the cause",
              "column is the tool's `KNOWN_CAUSES` (empty: not yet looked at).", ""]
    if groups or keep["groups"]:
        lines += ["| file | test | n | ours (first line of the error) | cause |", "|---|---|---:|---|---|"]
        for (f, func, err), nodes in groups.items():
            cause = known_cause(f, func, err)
            lines.append(f"| {f} | `{func}` | {len(nodes)} | {md(err)[:160]} | {md(cause)} |")
        lines += keep["groups"]
        lines += ["", "<details><summary>Every test id</summary>", ""]
        for f, n, o, msg in failures:
            lines.append(f"- {f} `{n}` — {o}: {md(msg)[:140]}")
        lines += keep["ids"]
        lines += ["", "</details>"]
    n_unc = sum(len(v) for v in uncompared.values()) + sum(int(ln.split(" | ")[2]) for ln in keep["uncompared"])
    lines += ["", f"## Not compared: the real does not pass on the stand-ins ({n_unc})",
              "", "No stand-in for the hub id (VLM, linear attention, eagle3 drafts, GGUF ...), an HF reference",
              "that a random model does not reproduce, upstream skips and xfails, a test over --test-timeout.",
              "Grouped like the failures above.", "", "<details><summary>Groups</summary>", "",
              "| file | test | n | real |", "|---|---|---:|---|"]
    unc_lines = [(f, -len(nodes), f"| {f} | `{func}` | {len(nodes)} | {md(err)[:140]} |")
                 for (f, func, err), nodes in uncompared.items()]
    unc_lines += [(ln.split(" | ")[0][2:], 0, ln) for ln in keep["uncompared"]]
    lines += [ln for _, _, ln in sorted(unc_lines, key=lambda t: (t[0], t[1]))]
    lines += ["", "</details>"]
    args.doc.write_text("\n".join(lines) + "\n")
    print(f"{args.doc}: {tot[1]} real passes, ours {tot[2]}; {len(failures)} listed")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK,
                    help=f"work/cache directory (default {DEFAULT_WORK}, or $UPSTREAM_SUITE_WORK)")
    ap.add_argument("--doc", type=Path, default=DOC, help="the generated table (default docs/upstream_suite.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--upstream", type=Path, default=DEFAULT_UPSTREAM,
                       help="an openvino.genai checkout or git directory (its HEAD is used)")
        p.add_argument("--files", nargs="+", default=list(PRIORITY_FILES),
                       help="test files under tests/python_tests (default: the priority files)")

    p = sub.add_parser("standins", help="make the stand-in models (fixtures venv)")
    common(p)
    p.add_argument("--seed", type=int, default=1000)
    p.set_defaults(fn=cmd_standins)
    p = sub.add_parser("run", help="run the selected files on both sides, then write the table")
    common(p)
    p.add_argument("--side", choices=("real", "ours", "both"), default="both")
    p.add_argument("-k", default=None, help="pytest -k expression")
    p.add_argument("--chunk", default=None,
                   help="a name for this part of the file (with -k): its results go to <file>@NAME.xml, and "
                        "`table` merges the chunks of a file; a long file can so run in parts")
    p.add_argument("--python", default=sys.executable, help="the python of the fixtures venv (default: this one)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per file and side")
    p.add_argument("--ours-all", action="store_true",
                   help="run every test on ours (default: only those the real passed, when its results exist)")
    p.add_argument("--test-timeout", type=int, default=180, help="seconds per test (pytest-timeout)")
    p.add_argument("--keep", action="store_true",
                   help="keep the doc's rows (and groups) of test files with no results in --work")
    p.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("table", help="rewrite the doc from the results in --work")
    p.add_argument("--also", type=Path, nargs="*", default=[],
                   help="other work dirs (other stand-ins): their failures are listed too")
    p.add_argument("--keep", action="store_true",
                   help="keep the doc's rows (and groups) of test files with no results in --work")
    p.set_defaults(fn=cmd_table)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
