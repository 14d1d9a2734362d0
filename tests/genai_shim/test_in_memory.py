"""In-memory constructors against the real openvino_genai on the same folder's files:
``Tokenizer(tok_xml: str, tok_weights: Tensor, detok_xml: str, detok_weights: Tensor)`` and
``LLMPipeline(model_xml: str, weights: Tensor, tokenizer, device, generation_config=None,
**properties)`` — the flow of openvino.genai's ``encrypted_model_causal_lm.py`` sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, IRReadError, UserInputError
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

pytestmark = pytest.mark.oracle

PROMPT = "Once upon a time"


def decrypt_model(model_dir: Path, xml: str, bin_: str) -> tuple[str, ov.Tensor]:
    """The sample's ``decrypt_model``: the XML as str, the weights as a u8 Tensor."""
    with open(model_dir / xml) as f:
        model = f.read()
    with open(model_dir / bin_, "rb") as f:
        weights = np.frombuffer(f.read(), dtype=np.uint8).astype(np.uint8)
    return model, ov.Tensor(weights)


def read_tokenizer(mod, model_dir: Path):
    tok = decrypt_model(model_dir, "openvino_tokenizer.xml", "openvino_tokenizer.bin")
    detok = decrypt_model(model_dir, "openvino_detokenizer.xml", "openvino_detokenizer.bin")
    return mod.Tokenizer(tok[0], tok[1], detok[0], detok[1])


def sample_flow(mod, model_dir: Path, device: str, **props) -> str:
    """encrypted_model_causal_lm.py's main(): build both from memory, generate 100 tokens."""
    model, weights = decrypt_model(model_dir, "openvino_model.xml", "openvino_model.bin")
    tokenizer = read_tokenizer(mod, model_dir)
    pipe = mod.LLMPipeline(model, weights, tokenizer, device, **props)
    config = mod.GenerationConfig()
    config.max_new_tokens = 100
    return pipe.generate(PROMPT, config)


def test_tokenizer_from_memory_like_real(stories_dir, real_genai):
    ours, real = read_tokenizer(genai_shim, stories_dir), read_tokenizer(real_genai, stories_dir)
    for text in (PROMPT, "Hello world, Lily!", ""):
        for special in (True, False):
            a = ours.encode(text, add_special_tokens=special)
            b = real.encode(text, add_special_tokens=special)
            assert a.input_ids.data.tolist() == b.input_ids.data.tolist()
            assert a.attention_mask.data.tolist() == b.attention_mask.data.tolist()
    for ids in ([1, 400, 2, 300], [432, 383, 286]):
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == real.decode(ids, skip_special_tokens=skip)
    for getter in (
        "get_bos_token_id", "get_eos_token_id", "get_pad_token_id",
        "get_bos_token", "get_eos_token", "get_pad_token",
    ):
        assert getattr(ours, getter)() == getattr(real, getter)(), getter
    assert ours.get_pad_token() == ""  # from memory; the folder tokenizer says "</s>"
    assert ours.chat_template == real.chat_template == ""
    assert ours.get_vocab() == real.get_vocab()


def test_tokenizer_from_memory_keywords_and_errors(stories_dir):
    tx, tw = decrypt_model(stories_dir, "openvino_tokenizer.xml", "openvino_tokenizer.bin")
    dx, dw = decrypt_model(stories_dir, "openvino_detokenizer.xml", "openvino_detokenizer.bin")
    tok = genai_shim.Tokenizer(
        tokenizer_model=tx, tokenizer_weights=tw, detokenizer_model=dx, detokenizer_weights=dw
    )
    assert tok.decode(tok.encode(PROMPT).input_ids.data[0].tolist()) == PROMPT
    with pytest.raises(UserInputError, match="detokenizer_model"):
        genai_shim.Tokenizer(tx, tw)
    with pytest.raises(UserInputError, match="tokenizer_model"):
        genai_shim.Tokenizer(b"<xml/>", tw, dx, dw)
    empty = ov.Tensor(np.zeros(0, np.uint8))
    with pytest.raises(IRReadError, match="Unable to read the model"):
        genai_shim.Tokenizer(tx, tw, "", empty)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_encrypted_model_sample_flow_prints_real_text(stories_dir, real_genai, npu_one, device):
    if device == "NPU":
        ours_props, real_props = {**npu_one["props"], **NPU_LENS}, {**REAL_NPU, **NPU_LENS, **F32}
    else:
        ours_props = real_props = F32
    ours = sample_flow(genai_shim, stories_dir, device, **ours_props)
    real = sample_flow(real_genai, stories_dir, device, **real_props)
    assert isinstance(ours, str)
    assert ours == real
    # and equal to the folder pipeline's answer
    folder = genai_shim.LLMPipeline(str(stories_dir), device, **ours_props)
    assert folder.generate(PROMPT, max_new_tokens=100) == ours


def test_generation_config_argument_like_real(stories_dir, real_genai):
    got = []
    for mod in (genai_shim, real_genai):
        model, weights = decrypt_model(stories_dir, "openvino_model.xml", "openvino_model.bin")
        tok = read_tokenizer(mod, stories_dir)
        row = []
        gc = mod.GenerationConfig()
        gc.max_new_tokens = 7
        gc2 = mod.GenerationConfig()
        gc2.max_new_tokens = 9
        gc2.eos_token_id = 5
        for args, kw in (((), {}), ((gc,), {}), ((), {"generation_config": gc2})):
            pipe = mod.LLMPipeline(model, weights, tok, "CPU", *args, **kw, **F32)
            c = pipe.get_generation_config()
            row.append((c.max_new_tokens, c.eos_token_id, sorted(c.stop_token_ids)))
            row.append(pipe.generate(PROMPT, max_new_tokens=12, logprobs=1).__class__.__name__)
            row.append(pipe.generate([PROMPT]).texts if args or kw else None)
        got.append(row)
    assert got[0] == got[1]


def test_export_blob_from_memory_goes_to_working_directory(stories_dir, npu_one, tmp_path, monkeypatch):
    """The real NPU pipeline writes ``openvino_model.blob`` into the working directory when the
    model came from memory and BLOB_PATH is not set (measured, 2026.4.1)."""
    monkeypatch.chdir(tmp_path)
    model, weights = decrypt_model(stories_dir, "openvino_model.xml", "openvino_model.bin")
    tok = read_tokenizer(genai_shim, stories_dir)
    genai_shim.LLMPipeline(model, weights, tok, "NPU", EXPORT_BLOB="YES", **npu_one["props"], **NPU_LENS)
    assert (tmp_path / "openvino_model.blob").is_file()


def test_in_memory_errors(stories_dir, tiny_model_dir):
    model, weights = decrypt_model(stories_dir, "openvino_model.xml", "openvino_model.bin")
    tok = read_tokenizer(genai_shim, stories_dir)
    with pytest.raises(UserInputError, match="tokenizer"):
        genai_shim.LLMPipeline(model, weights, "CPU")
    with pytest.raises(UserInputError, match="model must be"):
        genai_shim.LLMPipeline(model.encode(), weights, tok, "CPU")
    with pytest.raises(UserInputError, match="generation_config"):
        genai_shim.LLMPipeline(model, weights, tok, "CPU", {"x": 1})
    with pytest.raises(ConfigError, match="draft_model") as ei:
        genai_shim.LLMPipeline(
            model, weights, tok, "CPU", draft_model=genai_shim.draft_model(str(tiny_model_dir), "CPU")
        )
    assert ei.value.key == "draft_model"


def test_prompt_lookup_from_memory_like_real(stories_dir, real_genai):
    got = []
    for mod in (genai_shim, real_genai):
        model, weights = decrypt_model(stories_dir, "openvino_model.xml", "openvino_model.bin")
        pipe = mod.LLMPipeline(model, weights, read_tokenizer(mod, stories_dir), "CPU", prompt_lookup=True, **F32)
        res = pipe.generate(
            ["Once upon a time, there was a little girl named Lily. She loved to play"],
            max_new_tokens=60, num_assistant_tokens=5, max_ngram_size=3,
        )
        got.append((res.texts, list(res.perf_metrics.raw_metrics.m_batch_sizes)))
    assert got[0] == got[1]
    assert max(got[0][1]) > 1
