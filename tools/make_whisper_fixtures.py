#!/usr/bin/env python3
"""Make the tiny Whisper fixtures under tests/fixtures/whisper/ (issue 32).

A sibling of make_optimum_fixtures.py and make_vlm_fixtures.py: a tiny, seeded, random Hugging
Face WhisperForConditionalGeneration built from a config (no hub, no downloads) - 80 mel bins,
2 encoder and 2 decoder layers, max_source_positions 1500, max_target_positions 448,
multilingual - with a Whisper-style tokenizer trained here (byte-level BPE on
tools/fixture_corpus.txt, then Whisper's special tokens in Whisper's order: <|endoftext|>,
<|startoftranscript|>, the 99 language tokens of the multilingual Whisper models in their order,
<|translate|>, <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|> and
the 1501 timestamp tokens <|0.00|> .. <|30.00|>), exported by
`optimum-cli export openvino --task automatic-speech-recognition-with-past --weight-format fp32`
as a user would (stateful decoder; `--disable-stateful` for the second fixture), and trimmed to
the files openvino_genai's WhisperPipeline reads.

transformers 5 / optimum-intel write a generation_config.json without Whisper's own fields
(lang_to_id, task_to_id, no_timestamps_token_id, alignment_heads ...); the tool writes them the
way a Whisper checkpoint on the hub has them (see whisper_generation_config).

Two stages:

  exports  (default)  in a venv with torch, transformers, optimum-intel (the [fixtures] extra)
  goldens  (--goldens) openvino_genai only: golden.json from the REAL WhisperPipeline on CPU (f32)
           and on NPU with NPUW_DEVICES=CPU (default stateful path and STATIC_PIPELINE), see
           tools/whisper_goldens.py; --goldens --check re-records in memory and compares.

  python tools/make_whisper_fixtures.py                   # export into tests/fixtures/whisper
  python tools/make_whisper_fixtures.py --goldens         # (re-)record golden.json
  python tools/make_whisper_fixtures.py --goldens --check # compare with the committed goldens
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "whisper"
CORPUS_FILE = Path(__file__).resolve().parent / "fixture_corpus.txt"

#: fixture name -> extra optimum-cli flags
FIXTURES: dict[str, list[str]] = {
    "whisper-tiny-random-fp32": [],
    "whisper-tiny-random-stateless-fp32": ["--disable-stateful"],
}
SEED = 0
BPE_VOCAB = 400  # byte-level BPE entries before <|endoftext|> (256 bytes + merges)
D_MODEL = 32
HEADS = 4
FFN = 128
LAYERS = 2
# Documented weight shaping (init_weights), chosen by --search so that greedy outputs are several
# tokens long, end with <|endoftext|>, and timestamps appear only when asked for:
#: the timestamp tokens' embedding rows (= their proj_out rows, tied) are scaled by this
TS_SCALE = 0.3
#: the learned decoder position p gets p * EOT_RAMP along a fixed unit direction u ...
EOT_RAMP = 1.0
#: ... and <|endoftext|>'s embedding row gets EOT_GAIN * u: its logit grows with the position
EOT_GAIN = 4.0
#: ... and the timestamp rows get TS_GAIN * u: timestamps, too, grow likelier along the output
TS_GAIN = 2.0
#: std of the random learned decoder positions (varied positions vary the greedy tokens)
POS_STD = 1.0
#: the decoder's final LayerNorm (weight and bias) x this: every logit x this (larger top-1 margins)
LOGIT_GAIN = 3.0
#: the decoder layers' output projections (self_attn.out_proj, encoder_attn.out_proj, fc2) x this:
#: with tied embeddings the residual stream is otherwise the input token's own row, whose logit
#: then wins (the same token repeated for ever)
DEC_GAIN = 6.0

TIMESTAMPS = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
#: the symbols the multilingual Whisper checkpoints suppress (a subset: the single characters)
SUPPRESSED_SYMBOLS = '"#()*+/:;<=>@[\\]^_`{|}~'
KEEP_FILES = (
    "openvino_encoder_model.xml", "openvino_encoder_model.bin",
    "openvino_decoder_model.xml", "openvino_decoder_model.bin",
    "openvino_decoder_with_past_model.xml", "openvino_decoder_with_past_model.bin",
    "openvino_tokenizer.xml", "openvino_tokenizer.bin",
    "openvino_detokenizer.xml", "openvino_detokenizer.bin",
    "config.json", "generation_config.json", "preprocessor_config.json",
    "tokenizer_config.json", "special_tokens_map.json",
)
REQUIRED = ("openvino_encoder_model.xml", "openvino_decoder_model.xml", "openvino_tokenizer.xml",
            "openvino_detokenizer.xml", "config.json", "generation_config.json", "preprocessor_config.json")


def languages() -> list[str]:
    """Whisper's language codes in Whisper's token order: the 99 of the multilingual checkpoints
    before large-v3 (large-v3 appends "yue")."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    codes = [c for c in LANGUAGES if c != "yue"]
    assert len(codes) == 99 and codes[:3] == ["en", "zh", "de"] and codes[-1] == "su", codes
    return codes


def special_tokens() -> list[str]:
    """Whisper's special tokens after the BPE entries, in Whisper's order (timestamps excluded)."""
    return ["<|endoftext|>", "<|startoftranscript|>", *[f"<|{c}|>" for c in languages()],
            "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
            "<|notimestamps|>"]


def build_tokenizer():
    """A WhisperTokenizer: byte-level BPE trained on the corpus, then the specials and timestamps."""
    from make_optimum_fixtures import train_bytelevel_bpe
    from transformers.models.whisper.tokenization_whisper import WhisperTokenizer

    lines = [s for s in CORPUS_FILE.read_text(encoding="utf-8").splitlines() if s.strip()]
    bpe = json.loads(train_bytelevel_bpe(lines, BPE_VOCAB, []).to_str())["model"]
    assert len(bpe["vocab"]) == BPE_VOCAB, len(bpe["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in bpe["merges"]]
    tok = WhisperTokenizer(vocab=bpe["vocab"], merges=merges, unk_token="<|endoftext|>",
                           bos_token="<|endoftext|>", eos_token="<|endoftext|>", model_max_length=1024)
    specials = special_tokens()
    tok.add_special_tokens({"additional_special_tokens": specials[1:]})
    tok.add_tokens(TIMESTAMPS)  # like the hub's Whisper tokenizers: added, not special
    ids = tok.convert_tokens_to_ids(specials + TIMESTAMPS)
    assert ids == list(range(BPE_VOCAB, BPE_VOCAB + len(ids))), "special tokens out of order"
    return tok


def token_ids(tok) -> dict[str, int]:
    return {t: int(tok.convert_tokens_to_ids(t)) for t in special_tokens()}


def whisper_generation_config(tok) -> dict:
    """The Whisper fields of a hub checkpoint's generation_config.json, for this vocabulary."""
    ids = token_ids(tok)
    eot = ids["<|endoftext|>"]
    suppress = []
    for ch in SUPPRESSED_SYMBOLS:
        for piece in (ch, " " + ch):
            enc = tok.encode(piece, add_special_tokens=False)
            if len(enc) == 1:
                suppress.append(int(enc[0]))
    suppress += [ids[t] for t in ("<|startoftranscript|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
                                  "<|startofprev|>", "<|nospeech|>")]
    space = tok.encode(" ", add_special_tokens=False)
    assert len(space) == 1, space
    return {
        "alignment_heads": [[LAYERS - 1, h] for h in range(HEADS)],
        "begin_suppress_tokens": [int(space[0]), eot],
        "bos_token_id": eot,
        "decoder_start_token_id": ids["<|startoftranscript|>"],
        "eos_token_id": eot,
        "is_multilingual": True,
        "lang_to_id": {f"<|{c}|>": ids[f"<|{c}|>"] for c in languages()},
        "max_initial_timestamp_index": 50,
        "max_length": 448,
        "no_timestamps_token_id": ids["<|notimestamps|>"],
        "pad_token_id": eot,
        "prev_sot_token_id": ids["<|startofprev|>"],
        "return_timestamps": False,
        "suppress_tokens": sorted(set(suppress)),
        "task_to_id": {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
    }


def init_weights(model, seed: int, eot: int, ts_begin: int) -> None:
    """Deterministic re-init, then the documented shaping.

    Random part (_init_random): matrices N(0, 1/fan_in) (q/k x1.5; the decoder's out_proj and fc2
    x DEC_GAIN), biases and norm offsets N(0, 0.1^2), token embeddings (tied with proj_out)
    N(0, 0.5^2), the learned decoder positions N(0, POS_STD^2); the encoder's sinusoidal
    positions are kept.  Shaping, with u a seeded random unit vector: the timestamp rows x TS_SCALE
    + TS_GAIN * u, the <|endoftext|> row + EOT_GAIN * u, position p's component along u replaced
    by p * EOT_RAMP (so <|endoftext|>, and timestamps, grow likelier along the output), and the
    decoder's final LayerNorm x LOGIT_GAIN (all logits x LOGIT_GAIN)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    _init_random(model, gen)
    u = torch.randn(D_MODEL, generator=gen)
    u /= u.norm()
    with torch.no_grad():
        emb = model.model.decoder.embed_tokens.weight
        emb[ts_begin:] *= TS_SCALE
        emb[eot] += EOT_GAIN * u
        emb[ts_begin:] += TS_GAIN * u
        pos = model.model.decoder.embed_positions.weight
        pos -= (pos @ u)[:, None] * u[None, :]  # the ramp alone moves positions along u
        pos += torch.arange(pos.shape[0], dtype=torch.float32)[:, None] * EOT_RAMP * u[None, :]
        model.model.decoder.layer_norm.weight *= LOGIT_GAIN
        model.model.decoder.layer_norm.bias *= LOGIT_GAIN


def _init_random(model, gen) -> None:
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.split(".")
            if "embed_positions" in leaf:
                if "encoder" in leaf:
                    continue
                p.copy_(torch.randn(p.shape, generator=gen) * POS_STD)
                continue
            if p.ndim == 1:
                if name.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
                else:
                    p.add_(torch.randn(p.shape, generator=gen) * 0.1)
                continue
            fan_in = 1
            for d in p.shape[1:]:
                fan_in *= d
            if "embed_tokens" in leaf:
                w = torch.randn(p.shape, generator=gen) * 0.5
            else:
                w = torch.randn(p.shape, generator=gen) / fan_in ** 0.5
                if any(n in leaf for n in ("q_proj", "k_proj")):
                    w *= 1.5
                if "decoder" in leaf and ("out_proj" in leaf or "fc2" in leaf):
                    w *= DEC_GAIN
            p.copy_(w)


def build_hf_model(out_dir: Path, seed: int | None = None):
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    seed = SEED if seed is None else seed
    tok = build_tokenizer()
    gen = whisper_generation_config(tok)
    cfg = WhisperConfig(
        vocab_size=len(tok), num_mel_bins=80, d_model=D_MODEL,
        encoder_layers=LAYERS, encoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
        decoder_layers=LAYERS, decoder_attention_heads=HEADS, decoder_ffn_dim=FFN,
        max_source_positions=1500, max_target_positions=448,
        bos_token_id=gen["bos_token_id"], eos_token_id=gen["eos_token_id"], pad_token_id=gen["pad_token_id"],
        decoder_start_token_id=gen["decoder_start_token_id"],
        begin_suppress_tokens=gen["begin_suppress_tokens"], suppress_tokens=gen["suppress_tokens"],
    )
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(cfg).to(torch.float32)
    init_weights(model, seed, gen["eos_token_id"], gen["no_timestamps_token_id"] + 1)
    model.eval()
    model.generation_config = GenerationConfig(**gen)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(out_dir)
    return model, tok


def _export_one(name: str, flags: list[str], out_root: Path, work: Path) -> None:
    from make_optimum_fixtures import run_optimum_cli

    raw = work / "raw" / name
    run_optimum_cli(["export", "openvino", "--model", "hf", "--task", "automatic-speech-recognition-with-past",
                     "--weight-format", "fp32", *flags, f"raw/{name}"], work)
    stage = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_root))
    try:
        for f in KEEP_FILES:
            src = raw / f if (raw / f).exists() else work / "hf" / f
            if src.exists():
                shutil.copy(src, stage / f)
        missing = [f for f in REQUIRED if not (stage / f).exists()]
        if missing:
            raise RuntimeError(f"export produced no {missing}: {sorted(os.listdir(raw))}")
        # transformers 5 / optimum drop Whisper's own fields: put them back as a checkpoint has them
        gc_path = stage / "generation_config.json"
        gc = json.loads(gc_path.read_text(encoding="utf-8"))
        gc.update(json.loads((work / "whisper_generation_config.json").read_text(encoding="utf-8")))
        gc_path.write_text(json.dumps(gc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
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


def export(out_root: Path, names: list[str]) -> None:
    from make_optimum_fixtures import _in_child, check_export_env

    check_export_env()
    import optimum.commands.optimum_cli  # noqa: F401
    import optimum.exporters.openvino  # noqa: F401
    import transformers  # noqa: F401

    out_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="whisper-fixtures-") as d:
        work = Path(d)

        def build() -> None:
            _, tok = build_hf_model(work / "hf")
            (work / "whisper_generation_config.json").write_text(json.dumps(whisper_generation_config(tok)))

        _in_child(build)
        for name in names:
            _in_child(_export_one, name, FIXTURES[name], out_root, work)
            print(f"[{name}] exported", flush=True)


# --------------------------------------------------------------------------------------------
# search (torch only): the shaping constants and seed, judged with the real's decoding rules
# --------------------------------------------------------------------------------------------

class TorchModels:
    """The HF model behind tools/whisper_goldens.greedy_case's interface (encode, stepper,
    detect_language); no KV cache: every step recomputes the decoder over the whole sequence."""

    def __init__(self, model) -> None:
        self.model = model

    def encode(self, features: np.ndarray):
        import torch

        with torch.no_grad():
            return self.model.model.encoder(torch.from_numpy(features[None])).last_hidden_state

    def _logits(self, seq: list[int], enc) -> np.ndarray:
        import torch

        if len(seq) > 160:
            raise RuntimeError("no <|endoftext|> within 160 tokens")
        with torch.no_grad():
            h = self.model.model.decoder(input_ids=torch.tensor([seq]), encoder_hidden_states=enc).last_hidden_state
            return self.model.proj_out(h)[0, -1].double().numpy()

    def stepper(self, enc):
        seq: list[int] = []

        def step(new: list[int]) -> np.ndarray:
            seq.extend(new)
            return self._logits(seq, enc)

        return step

    def detect_language(self, enc, gen: dict) -> tuple[int, float]:
        logits = self._logits([gen["decoder_start_token_id"]], enc)
        scores = sorted(((logits[i], -n, i) for n, (_, i) in enumerate(sorted(gen["lang_to_id"].items()))),
                        reverse=True)
        return scores[0][2], float(scores[0][0] - scores[1][0])


def torch_cases(model, tok) -> dict:
    """Every golden case (tools/whisper_goldens.CASES) decoded from the HF model under the real's rules."""
    from whisper_goldens import CASES, greedy_case

    gen = whisper_generation_config(tok)
    models = TorchModels(model)
    return {name: greedy_case(lambda text: tok.encode(text, add_special_tokens=False), models, gen, case)
            for name, case in CASES.items()}


def score_cases(cases: dict, gen: dict) -> dict:
    """Summary of torch_cases: lengths, EOT, timestamps, distinct ids, the smallest margins."""
    ts_begin = gen["no_timestamps_token_id"] + 1
    eot = gen["eos_token_id"]
    r: dict = {"min_margin": 1e9, "min_ts_margin": 1e9, "lang_margin": 1e9, "lengths": [], "distinct": [],
               "eot": True, "ts_in_text": 0, "stamps": [], "worst": ""}
    texts = set()
    for name, c in cases.items():
        if c["language_margin"] is not None:
            r["lang_margin"] = min(r["lang_margin"], c["language_margin"])
        if c["min_margin"] < r["min_margin"]:
            r["min_margin"], r["worst"] = c["min_margin"], name
        if c["min_ts_margin"] is not None:
            r["min_ts_margin"] = min(r["min_ts_margin"], c["min_ts_margin"])
        ids = [t for ch in c["chunks"] for t in ch["ids"]]
        r["lengths"].append(len(ids))
        r["distinct"].append(len({t for t in ids if t < ts_begin}))
        r["eot"] &= all(ch["ids"][-1] == eot for ch in c["chunks"]) or name == "short_max_new_tokens"
        if c["timestamps"]:
            r["stamps"].append(sum(t >= ts_begin for t in ids))
        else:
            r["ts_in_text"] += sum(t >= ts_begin for t in ids)
            texts.add(tuple(ids))
    r["different_texts"] = len(texts)
    return r


def search(grid: list[dict], seeds: Sequence[int]) -> None:
    """Print score_cases for every seed x shaping setting (module constants overridden)."""
    import torch

    torch.set_num_threads(1)
    g = globals()
    for seed in seeds:
        for params in grid:
            g.update(params)
            with tempfile.TemporaryDirectory() as d:
                model, tok = build_hf_model(Path(d), seed)
            try:
                r = score_cases(torch_cases(model, tok), whisper_generation_config(tok))
            except RuntimeError as e:  # an output that never ends
                print(json.dumps({"seed": seed, **params, "failed": str(e)}), flush=True)
                continue
            print(json.dumps({"seed": seed, **params, **{k: (round(v, 3) if isinstance(v, float) else v)
                                                          for k, v in r.items()}}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="+", choices=sorted(FIXTURES), help="fixture names")
    ap.add_argument("--goldens", action="store_true", help="record golden.json (openvino_genai only)")
    ap.add_argument("--check", action="store_true", help="with --goldens: re-record in memory and compare")
    ap.add_argument("--search", metavar="JSON", help="torch: a list of {CONSTANT: value} settings to score")
    ap.add_argument("--seeds", type=int, nargs="+", default=[SEED], help="seeds for --search")
    a = ap.parse_args(argv)
    names = a.only or list(FIXTURES)
    if a.search:
        search(json.loads(a.search), a.seeds)
        return 0
    if a.goldens:
        from whisper_goldens import run

        return run([a.out / n for n in names], check=a.check)
    if a.check:
        ap.error("--check needs --goldens")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    export(a.out, names)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
