"""NPUW LLM: damaged artefacts and CACHE_DIR entries, bad stateful call sequences, KV-cache full."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import openvino as ov_real
import pytest

import ov_npu_emu as ov
from ov_npu_emu.errors import (
    ArtefactConfigError,
    BlobFieldError,
    BlobFormatError,
    KVCacheFullError,
    PromptTooLongError,
    UserInputError,
)

pytestmark = pytest.mark.filterwarnings("ignore")

CFG = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "CPU",
       "NPUW_LLM_MAX_PROMPT_LEN": 16, "NPUW_LLM_MIN_RESPONSE_LEN": 8}


@pytest.fixture(scope="module")
def core() -> ov.Core:
    return ov.Core()


@pytest.fixture(scope="module")
def compiled(core: ov.Core, tiny_model_dir: Path) -> ov.CompiledModel:
    return core.compile_model(tiny_model_dir / "openvino_model.xml", "NPU", CFG)


@pytest.fixture(scope="module", params=["weightless", "with-weights"])
def artefact(request: pytest.FixtureRequest, core: ov.Core, tiny_model_dir: Path) -> tuple[bytes, dict]:
    """An exported artefact and the config its import needs: the default export is weightless
    (like the real NPUW's) and takes WEIGHTS_PATH; OPTIMIZE_SPEED keeps the weights."""
    xml = tiny_model_dir / "openvino_model.xml"
    if request.param == "weightless":
        blob = core.compile_model(xml, "NPU", CFG).export_model().getvalue()
        return blob, {"WEIGHTS_PATH": str(xml.with_suffix(".bin"))}
    return core.compile_model(xml, "NPU", {**CFG, "CACHE_MODE": "OPTIMIZE_SPEED"}).export_model().getvalue(), {}


def feed(ids: list[int] | np.ndarray, start: int = 0, mask_len: int | None = None) -> dict[str, np.ndarray]:
    ids = np.asarray(ids, np.int64).reshape(1, -1)
    n = ids.shape[1]
    return {"input_ids": ids, "attention_mask": np.ones((1, mask_len or start + n), np.int64),
            "position_ids": np.arange(start, start + n, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)}


def greedy(req: ov.InferRequest, prompt: list[int], steps: int) -> list[int]:
    out = req.infer(feed(prompt))
    toks, n = [], len(prompt)
    for _ in range(steps):
        toks.append(int(np.argmax(out["logits"][0, -1])))
        out = req.infer(feed([toks[-1]], start=n))
        n += 1
    return toks


PROMPT = [5, 17, 99, 3, 250]


# -- artefacts ---------------------------------------------------------------------------------
def _header(blob: bytes) -> tuple[int, int]:
    from ov_npu_emu_npuw.serialize import MAGIC

    # MAGIC | u32 format | u64 header length | SHA-256 of the header | header
    return len(MAGIC) + 12 + 32, struct.unpack_from("<Q", blob, len(MAGIC) + 4)[0]


def _with_header(blob: bytes, edit) -> bytes:  # noqa: ANN001
    """Re-encode the JSON header after ``edit(header)`` (length and hash updated: this tests the
    checks behind the header hash)."""
    import hashlib

    from ov_npu_emu_npuw.serialize import FORMAT_VERSION, MAGIC

    off, hlen = _header(blob)
    h = json.loads(blob[off:off + hlen])
    edit(h)
    js = json.dumps(h).encode()
    return MAGIC + struct.pack("<IQ", FORMAT_VERSION, len(js)) + hashlib.sha256(js).digest() + js + blob[off + hlen:]


@pytest.mark.parametrize(("edit", "error", "match"), [
    (lambda h: h.pop("blobs"), BlobFormatError, r"header is corrupt \(KeyError: 'blobs'\)"),
    (lambda h: h["blobs"][0].pop("size"), BlobFormatError, r"header is corrupt \(KeyError: 'size'\)"),
    (lambda h: h.pop("kv"), BlobFormatError, r"header is corrupt \(KeyError: 'kv'\)"),
    (lambda h: h["kv"].__setitem__("present", ["nope"] * len(h["kv"]["present"])), BlobFormatError,
     r"KV descriptor does not match its sub-models \['nope'"),
    (lambda h: h["config"].__setitem__("bogus_field", 1), ArtefactConfigError, r"unknown field 'bogus_field'"),
    (lambda h: h["inputs"][0].__setitem__("type", "fhoat32"), BlobFormatError, r"TypeError: data type 'fhoat32'"),
    (lambda h: h["inputs"][0].__setitem__("shape", "?$?"), BlobFormatError, r"Cannot parse dimension"),
    (lambda h: h.pop("device"), BlobFormatError, r"header is corrupt \(KeyError: 'device'\)"),
    (lambda h: h.clear(), BlobFormatError, r"different OV version"),
    (lambda h: h["kv"].__setitem__("heads", "x"), BlobFormatError, r"heads/dims \('x'"),
], ids=["no-blobs", "no-size", "no-kv", "kv-names", "config-field", "port-type", "port-shape",
        "no-device", "empty", "heads"])
def test_damaged_header_is_blob_format_error(core: ov.Core, artefact: tuple[bytes, dict], edit, error,  # noqa: ANN001
                                             match: str) -> None:
    blob, imp = artefact
    with pytest.raises(error, match=match) as e:
        cm = core.import_model(_with_header(blob, edit), "NPU", imp)
        cm.create_infer_request()
    assert type(e.value) is error


def _cfg(**values):  # noqa: ANN202
    return lambda h: h["config"].update(values)


def _raw(**values):  # noqa: ANN202
    return lambda h: h["config"]["raw"].update(values)


@pytest.mark.parametrize(("edit", "key", "field"), [
    (_cfg(max_prompt_len=1 << 40), "NPUW_LLM_MAX_PROMPT_LEN", "config.max_prompt_len"),
    (_cfg(min_response_len=1 << 40), "NPUW_LLM_MIN_RESPONSE_LEN", "config.min_response_len"),
    (_cfg(variants=[1 << 30]), "NPUW_LLM_GENERATE_VARIANTS", "config.variants"),
    (_cfg(variants=7), "NPUW_LLM_GENERATE_VARIANTS", "config.variants"),
    (_cfg(max_lora_rank=1 << 30), "NPUW_LLM_MAX_LORA_RANK", "config.max_lora_rank"),
    (_cfg(kv_precision="u2"), "KV_CACHE_PRECISION", "config.kv_precision"),
    (_cfg(max_gen_len=True), "NPUW_LLM_MAX_GENERATION_TOKEN_LEN", "config.max_gen_len"),
    (_cfg(generate_rungs=[1 << 30]), "NPUW_LLM_GENERATE_LADDER", "config.generate_rungs"),
    (_cfg(shared_head="yes"), "NPUW_LLM_SHARED_HEAD", "config.shared_head"),
    (_cfg(raw=[]), "config", "config.raw"),
    (lambda h: h["config"].pop("variants"), "NPUW_LLM_GENERATE_VARIANTS", "config.variants"),
    (_raw(KV_CACHE_PRECISION="bogus"), "KV_CACHE_PRECISION", "config.raw.KV_CACHE_PRECISION"),
    (_raw(NPUW_LLM_ENABLE_PREFIX_CACHING="YES"), "NPUW_LLM_ENABLE_PREFIX_CACHING",
     "config.raw.NPUW_LLM_ENABLE_PREFIX_CACHING"),
    (_raw(NPUW_LLM_MAX_PROMPT_LEN=4096), "NPUW_LLM_MAX_PROMPT_LEN", "config.max_prompt_len"),
], ids=["max-prompt", "min-response", "variants", "variants-type", "lora-rank", "kv-precision", "max-gen-bool",
        "rungs", "shared-head", "raw-type", "no-variants", "raw-value", "raw-rule", "raw-vs-field"])
def test_stored_config_is_validated_like_a_compiled_one(core: ov.Core, artefact: tuple[bytes, dict], edit,  # noqa: ANN001
                                                         key: str, field: str) -> None:
    """LLMConfig.from_json: the stored keys through parse_config, every field against its result."""
    blob, imp = artefact
    with pytest.raises(ArtefactConfigError, match="re-export the model or delete the CACHE_DIR entry") as e:
        core.import_model(_with_header(blob, edit), "NPU", imp)
    assert (e.value.key, e.value.field) == (key, field)


def _consistent_prompt(p: int, chunk: int):  # noqa: ANN202
    """MAX_PROMPT_LEN ``p`` written consistently through the stored configuration (raw keys, every
    derived field, the generate variant's role): only the sub-models' ports can tell."""
    from ov_npu_emu_npuw.config import _DERIVED, parse_config

    def edit(h: dict) -> None:
        c = h["config"]
        old = c["variants"][-1]
        c["raw"].update(NPUW_LLM_MAX_PROMPT_LEN=p, NPUW_LLM_GENERATE_PYRAMID="NO", NPUW_LLM_PREFILL_CHUNK_SIZE=chunk)
        ref = parse_config(c["raw"]).to_json()
        c.update({k: ref[k] for k in _DERIVED})
        for b in h["blobs"]:
            if b["role"] == f"kv{old}":
                b["role"] = f"kv{c['variants'][-1]}"
    return edit


@pytest.mark.parametrize(("chunk", "key", "field"), [
    (0, "NPUW_LLM_MAX_PROMPT_LEN", "config.max_prompt_len"), (1024, "NPUW_LLM_PREFILL_CHUNK_SIZE", "config.chunk_size"),
], ids=["static", "chunked"])
def test_a_consistent_config_must_match_the_sub_models(core: ov.Core, artefact: tuple[bytes, dict], chunk: int,
                                                       key: str, field: str) -> None:
    # MAX_PROMPT_LEN 2^30 would size the request's staging and KV from the configuration
    blob, imp = artefact
    with pytest.raises(ArtefactConfigError, match=r"sub-model prefill has input_ids \[1, 64\]") as e:
        core.import_model(_with_header(blob, _consistent_prompt(1 << 30, chunk)), "NPU", imp)
    assert (e.value.key, e.value.field) == (key, field)


@pytest.mark.parametrize(("i", "what", "value", "field"), [(0, "heads", 1000, "kv.heads[0]"),
                                                             (1, "dims", 4096, "kv.dims[1]")])
def test_kv_descriptor_must_match_the_generate_ports(core: ov.Core, artefact: tuple[bytes, dict], i: int, what: str,
                                                     value: int, field: str) -> None:
    blob, imp = artefact
    with pytest.raises(BlobFieldError, match="KV descriptor is corrupt") as e:
        core.import_model(_with_header(blob, lambda h: h["kv"][what].__setitem__(i, value)), "NPU", imp)
    assert e.value.field == field


def test_stored_config_round_trips(compiled: ov.CompiledModel) -> None:
    from ov_npu_emu_npuw.config import LLMConfig

    cfg = compiled.impl.cfg
    assert LLMConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def test_header_byte_flips_are_all_caught(core: ov.Core, artefact: tuple[bytes, dict]) -> None:
    """The header's SHA-256 covers every byte of it: each flip is a BlobFormatError at import."""
    blob, imp = artefact
    off, hlen = _header(blob)
    for i in range(off, off + hlen, 37):  # ~60 positions spread over every field
        b = bytearray(blob)
        b[i] ^= 0x04
        with pytest.raises(BlobFormatError):
            core.import_model(bytes(b), "NPU", imp)


def test_truncated_and_foreign_artefacts(core: ov.Core, artefact: tuple[bytes, dict]) -> None:
    blob, imp = artefact
    off, hlen = _header(blob)
    for cut in (4, off - 1, off + 5, off + hlen, off + hlen + 100, len(blob) - 1):
        with pytest.raises(BlobFormatError):
            core.import_model(blob[:cut], "NPU", imp)
    b = bytearray(blob)
    b[-50] ^= 0xFF  # inside the last sub-blob: the SHA-256 catches it
    with pytest.raises(BlobFormatError, match="SHA-256"):
        core.import_model(bytes(b), "NPU", imp)


@pytest.mark.parametrize(("edit", "why"), [
    (lambda h: h.pop("kv"), "KeyError: 'kv'"),
    (lambda h: h["config"].__setitem__("max_prompt_len", 1 << 40), "(NPUW_LLM_MAX_PROMPT_LEN)"),
], ids=["no-kv", "max-prompt-huge"])
def test_cache_dir_with_garbage_and_damaged_entries(core: ov.Core, tiny_model_dir: Path, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture, edit, why: str) -> None:  # noqa: ANN001
    import logging

    cfg = {**CFG, "CACHE_DIR": str(tmp_path)}
    (tmp_path / "garbage.blob").write_bytes(os.urandom(1000))
    core.compile_model(tiny_model_dir / "openvino_model.xml", "NPU", cfg)
    (entry,) = tmp_path.glob("npuw_llm_*.blob")
    entry.write_bytes(_with_header(entry.read_bytes(), edit))
    logger = logging.getLogger("ov_npu_emu_npuw")
    logger.addHandler(caplog.handler)
    try:
        cm = core.compile_model(tiny_model_dir / "openvino_model.xml", "NPU", cfg)  # compiles again
    finally:
        logger.removeHandler(caplog.handler)
    assert not cm.impl.loaded_from_cache
    assert any("could not be loaded" in r.getMessage() and why in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    assert greedy(cm.create_infer_request(), PROMPT, 3) == greedy(
        core.compile_model(tiny_model_dir / "openvino_model.xml", "NPU", CFG).create_infer_request(), PROMPT, 3)


# -- stateful interface ------------------------------------------------------------------------
@pytest.mark.parametrize(("bad", "text"), [
    ({"input_ids": np.array([[1, 2]], np.int64), "attention_mask": np.ones((1, 1), np.int64),
      "position_ids": np.arange(2)[None]}, "attention_mask has 1 entries for a 2-token prompt"),
    ({"input_ids": np.array([[1, 2, 3]], np.int64), "position_ids": np.arange(2)[None]},
     r"position_ids \[1, 2\] must be \[1, 3\] for the tokens \[1, 3\]"),
    ({"input_ids": np.array([[1, 2], [3, 4]], np.int64), "attention_mask": np.ones((2, 2), np.int64),
      "position_ids": np.tile(np.arange(2), (2, 1)), "beam_idx": np.arange(2, dtype=np.int32)},
     r"input_ids must be \[1, n>0\] \(batch 1\), got \[2, 2\]"),
    ({"input_ids": np.array([1, 2], np.int64)}, r"Input 'input_ids' expects shape \[\?,\?\], got \[2\]\. Reshape"),
    ({"input_ids": np.zeros((1, 0), np.int64), "attention_mask": np.zeros((1, 0), np.int64),
      "position_ids": np.zeros((1, 0), np.int64)}, r"input_ids must be \[1, n>0\] \(batch 1\), got \[1, 0\]"),
    ({"input_ids": np.array([[-1, 2]], np.int64)}, r"input_ids must be token ids in \[0, 512\), got values -1\.\.2"),
    ({"input_ids": np.array([[100000, 2]], np.int64)},
     r"input_ids must be token ids in \[0, 512\), got values 2\.\.100000"),
    ({"input_ids": np.array([[1, 2]], np.int64), "attention_mask": np.array([["a", "b"]])},
     "Input 'attention_mask' expects i64 numbers, got an array of dtype <U1"),
], ids=["mask-short", "pos-len", "batch2", "rank1", "empty", "negative-id", "oov-id", "string-mask"])
def test_bad_calls_are_typed_and_leave_the_request_usable(compiled: ov.CompiledModel, bad: dict, text: str) -> None:
    ref = greedy(compiled.create_infer_request(), PROMPT, 4)
    req = compiled.create_infer_request()
    base = feed([1, 2] if bad["input_ids"].ndim != 2 or bad["input_ids"].shape[1] != 3 else [1, 2, 3])
    with pytest.raises(UserInputError, match=f"^{text}"):
        req.infer({**base, **bad})
    assert greedy(req, PROMPT, 4) == ref


def test_float_ids_tensor_is_rejected(compiled: ov.CompiledModel) -> None:
    req = compiled.create_infer_request()
    with pytest.raises(UserInputError, match="element type"):
        req.set_tensor("input_ids", ov_real.Tensor(np.array([[1.0, 2.0]], np.float32)))


def test_negative_position_in_generate_does_not_corrupt_kv(compiled: ov.CompiledModel) -> None:
    ref = greedy(compiled.create_infer_request(), PROMPT, 4)
    req = compiled.create_infer_request()
    req.infer(feed(PROMPT))
    with pytest.raises(UserInputError, match="negative"):
        req.infer(feed([7], start=-3, mask_len=len(PROMPT) + 1))
    with pytest.raises(UserInputError, match="only 5 tokens"):
        req.infer(feed([7], start=9))
    req.reset_state()
    assert greedy(req, PROMPT, 4) == ref


def test_generate_step_before_any_prefill_is_a_prefill(compiled: ov.CompiledModel) -> None:
    a, b = compiled.create_infer_request(), compiled.create_infer_request()
    la = a.infer(feed([42]))["logits"]
    lb = b.infer(feed([42], start=0))["logits"]
    np.testing.assert_array_equal(la, lb)


def test_prompt_over_limit_then_normal_prompt(compiled: ov.CompiledModel) -> None:
    ref = greedy(compiled.create_infer_request(), PROMPT, 3)
    req = compiled.create_infer_request()
    with pytest.raises(PromptTooLongError, match="NPUW_LLM_MAX_PROMPT_LEN"):
        req.infer(feed([1] * (int(compiled.get_property("NPUW_LLM_MAX_PROMPT_LEN")) + 1)))
    assert greedy(req, PROMPT, 3) == ref


def test_kv_cache_full_keeps_state_consistent(compiled: ov.CompiledModel) -> None:
    ref = greedy(compiled.create_infer_request(), PROMPT, 5)
    req = compiled.create_infer_request()
    out = req.infer(feed(PROMPT))
    n = len(PROMPT)
    with pytest.raises(KVCacheFullError, match="KV-Cache is full"):
        for _ in range(1000):
            out = req.infer(feed([int(np.argmax(out["logits"][0, -1]))], start=n))
            n += 1
    stored = int(req.query_state()[0].state.data[0])
    with pytest.raises(KVCacheFullError):
        req.infer(feed([1], start=n))
    assert int(req.query_state()[0].state.data[0]) == stored  # the failed calls changed nothing
    req.reset_state()
    assert greedy(req, PROMPT, 5) == ref


def test_stored_tokens_state_rejects_non_integers(compiled: ov.CompiledModel) -> None:
    req = compiled.create_infer_request()
    req.infer(feed(PROMPT))
    (state,) = req.query_state()
    for bad in (np.array(["abc"]), np.array([1.5]), np.array([1, 2])):
        with pytest.raises(UserInputError):
            state.state = ov_real.Tensor(bad) if bad.dtype.kind != "U" else bad
    with pytest.raises(UserInputError):
        state.state = ov_real.Tensor(np.array([-1], np.int64))
    assert int(state.state.data[0]) == len(PROMPT)


def test_fresh_request_starting_at_nonzero_position(compiled: ov.CompiledModel) -> None:
    # the first position is latched (real NPUW: m_first_position_id) and num_stored follows
    # position_ids[0], so continuing past the stored tokens is a typed error, never garbage KV
    req = compiled.create_infer_request()
    first = np.array(req.infer(feed(PROMPT, start=5))["logits"])
    with pytest.raises(UserInputError, match="tokens are in the KV cache"):
        req.infer(feed([7], start=5 + len(PROMPT)))
    # the latched first position starts a new conversation, from a clean KV cache
    np.testing.assert_array_equal(req.infer(feed(PROMPT, start=5))["logits"], first)


def test_keys_given_as_numpy_or_openvino_values_survive_export(core: ov.Core, tiny_model_dir: Path) -> None:
    """The stored keys are re-parsed at import: a key given as np.int64, np.bool_, ov.Type or a
    tuple is stored as its converted value, so the artefact imports (it used to be dropped)."""
    cfg = {**CFG, "NPUW_LLM_MAX_PROMPT_LEN": np.int64(128), "KV_CACHE_PRECISION": ov_real.Type.f32,
           "NPUW_LLM_GENERATE_PYRAMID": np.bool_(False), "NPUW_LLM_GENERATE_VARIANTS": (64, 192),
           "CACHE_MODE": "OPTIMIZE_SPEED"}
    cm = core.compile_model(tiny_model_dir / "openvino_model.xml", "NPU", cfg)
    back = core.import_model(cm.export_model().getvalue(), "NPU")
    assert back.impl.cfg == cm.impl.cfg
    assert (back.impl.cfg.max_prompt_len, back.impl.cfg.kv_precision, back.impl.cfg.variants) == (128, "f32", (64, 192))
