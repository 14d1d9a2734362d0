"""NPUW on the emulated NPU: one NPUW_WEIGHTS_BANK name for all sub-models, one copy of their weights."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from ov_npu_emu.modelbuilder import make_model_folder
from tests.npuw._oracle import greedy

PROMPT = [1, 17, 42, 99, 7, 250, 3]


@pytest.fixture(scope="module")
def small_int8(tmp_path_factory):
    return make_model_folder(tmp_path_factory.mktemp("small-int8"), "small", "int8") / "openvino_model.xml"


def _config(**extra):
    return {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "NPU", "NPUW_LLM_MAX_PROMPT_LEN": 32,
            "NPUW_LLM_MIN_RESPONSE_LEN": 32, "NPUW_LLM_GENERATE_VARIANTS": "48", **extra}


def _subs(cm):
    s = cm.impl.subs
    return [s.prefill, *s.generate.values(), *([s.lm_head] if s.lm_head is not None else [])]


def _compile(xml, bank: str = "YES", **extra):
    import ov_npu_emu

    core = ov_npu_emu.Core()
    core.set_property("NPU", {"NPU_EMU_WEIGHTS_BANK": bank})
    return core.compile_model(xml, "NPU", _config(**extra))


def test_all_submodels_get_one_bank_name(small_int8):
    a, b = _compile(small_int8), _compile(small_int8)
    names = {sub.get_property("NPUW_WEIGHTS_BANK") for sub in _subs(a)}
    assert len(_subs(a)) == 4  # prefill, kv48, kv64, LM head
    assert len(names) == 1 and next(iter(names))
    # every NPUW compilation gets its own bank (the real LLMCompiledModel generates a fresh name)
    assert {sub.get_property("NPUW_WEIGHTS_BANK") for sub in _subs(b)} != names
    named = _compile(small_int8, NPUW_WEIGHTS_BANK="my-bank")
    assert {sub.get_property("NPUW_WEIGHTS_BANK") for sub in _subs(named)} == {"my-bank"}
    bank = _subs(named)[0].impl.parsed.banked.bank
    assert {e.bank for e in bank.entries()} == {"my-bank"}


def test_submodels_share_weights_and_decompressed_cache(small_int8):
    shared, private = _compile(small_int8), _compile(small_int8, bank="NO")
    ids = {}
    for name, cm in (("YES", shared), ("NO", private)):
        ids[name], err = greedy(cm.create_infer_request(), PROMPT, 12)
        assert err is None
    assert ids["YES"] == ids["NO"]  # the bank changes where the weights live, not the results
    subs = _subs(shared)
    bank = subs[0].impl.parsed.banked.bank
    stats = bank.stats()
    # the layers' weights are referenced by prefill and both variants, the LM head by the head model
    refs = sorted({e.refs for e in bank.entries()})
    assert refs[-1] == 3 and stats["refs"] == sum(len(s.impl.parsed.banked.entries) for s in subs)
    priv = _subs(private)
    assert all(p.impl.parsed.banked is None for p in priv)
    private_weights = sum(p.impl.parsed.weights.nbytes for p in priv)
    private_dq = sum(p.impl.parsed.weights_cache.nbytes for p in priv)
    # one copy instead of one per sub-model (measured: 3.95 MB vs 11.4 MB int8 weights)
    assert stats["weights_bytes"] < 0.4 * private_weights
    pre, head = priv[0].impl.parsed.weights_cache.nbytes, priv[-1].impl.parsed.weights_cache.nbytes
    # the generate variants (one token a step) read the weights as stored: only the prefill
    # (and the LM head over the prefill's rows) decompress into the cache
    assert private_dq == pre + head and pre > 0
    assert stats["dq_bytes"] <= pre + head
    # only the first sub-model to run a weight decompressed it
    assert sum(s.impl.parsed.weights_cache.misses for s in subs) == sum(
        len(e.dq) for e in bank.entries()) + sum(len(s.impl.parsed.weights_cache._private) for s in subs)
    # releasing the NPUW compiled model releases its sub-models and with them the bank entries
    del shared, subs, cm
    gc.collect()
    assert bank.stats()["entries"] == 0 and bank.counters["freed"] == stats["entries"]


def test_imported_npuw_artefact_shares_through_the_anonymous_bank(small_int8):
    """Import passes no bank name: the sub-models still share, by content, in the device's "" bank."""
    import ov_npu_emu

    core = ov_npu_emu.Core()
    compiled = core.compile_model(small_int8, "NPU", _config())
    want, _ = greedy(compiled.create_infer_request(), PROMPT, 6)
    blob = compiled.export_model()
    del compiled
    gc.collect()
    cm = core.import_model(blob, "NPU", {**_config(), "WEIGHTS_PATH": str(Path(small_int8).with_suffix(".bin"))})
    subs = _subs(cm)
    assert {s.get_property("NPUW_WEIGHTS_BANK") for s in subs} == {""}
    bank = subs[0].impl.parsed.banked.bank
    assert max(e.refs for e in bank.entries("")) == 3  # prefill, kv48, kv64 share the layers
    ids, err = greedy(cm.create_infer_request(), PROMPT, 6)
    assert err is None and ids == want
