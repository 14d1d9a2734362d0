"""NPUW on NPUW_DEVICES=CPU: one copy of the weights for every CPU-compiled sub-model (the CPU
device's weights bank, plugins/ov_npu_emu_cpu/bank.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.modelbuilder import make_model_folder
from ov_npu_emu.testing import CPU_EXACT_CONFIG
from ov_npu_emu_cpu import bank as cpu_bank
from ov_npu_emu_cpu.bank import BANK_MIN_BYTES, BANK_PARAM_PREFIX
from tests.npuw._oracle import greedy

PROMPT = [1, 17, 42, 99, 7, 250, 3]
#: 2 layers, hidden 512: the projections of 512x512 and up (1 MiB as f32) are banked; the vocab
#: (1024x512) is tied, so the embedding Gather and the LM head read one entry
SHAPE = {"hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1024, "tie_word_embeddings": True}


@pytest.fixture(autouse=True)
def bank_small_models(monkeypatch):
    """The builder models here are small; the default only banks models of >= 256 MiB."""
    monkeypatch.setattr(cpu_bank, "BANK_MIN_MODEL_BYTES", 0)


@pytest.fixture(scope="module")
def model_xml(tmp_path_factory):
    folder = make_model_folder(tmp_path_factory.mktemp("bank-f16"), "tiny", "f16", **SHAPE)
    return folder / "openvino_model.xml"


def _config(**extra):
    # a prefill ladder rung and one generate-ladder rung are compiled on first use as well
    return {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "CPU", "NPUW_LLM_MAX_PROMPT_LEN": 128,
            "NPUW_LLM_MIN_RESPONSE_LEN": 64, "NPUW_LLM_GENERATE_LADDER": "YES",
            "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", **extra}


def _subs(cm):
    s = cm.impl.subs
    return [s.prefill, *s.generate.values(), s.lm_head, *s.prefill_ladder.values(), *s.generate_ladder.values()]


def _compile(xml, bank: str = "YES", **extra):
    import ov_npu_emu

    core = ov_npu_emu.Core()
    core.set_property("CPU", {"CPU_EMU_WEIGHTS_BANK": bank})
    return core.compile_model(xml, "NPU", _config(**extra))


def _large_weights(xml) -> int:
    """f16 constants of at least BANK_MIN_BYTES as f32 (all are MatMul / Gather weights here)."""
    model = ov.Core().read_model(xml)
    return sum(1 for op in model.get_ops() if op.get_type_name() == "Constant"
               and op.get_element_type() == ov.Type.f16 and 4 * int(np.prod(op.get_output_shape(0))) >= BANK_MIN_BYTES)


def test_submodels_share_one_copy_and_keep_the_tokens(model_xml):
    banked, private = _compile(model_xml), _compile(model_xml, bank="NO")
    ids = {}
    for name, cm in (("YES", banked), ("NO", private)):
        ids[name], err = greedy(cm.create_infer_request(), PROMPT, 20)
        assert err is None
    oracle = ov.Core().compile_model(model_xml, "CPU", CPU_EXACT_CONFIG).create_infer_request()
    assert ids["YES"] == ids["NO"] == greedy(oracle, PROMPT, 20)[0]

    subs = _subs(banked)
    assert len(subs) == 5  # prefill, kv192, LM head, prefill rung l64, generate rung kv64
    entries = {id(e): e for sub in subs for e in sub.impl.bank}
    # q, o, gate, up, down x 2 layers + the tied vocab (k and v, 256x512, stay below BANK_MIN_BYTES)
    assert len(entries) == _large_weights(model_xml) == 11
    # the prefill rung (compiled on first use) reads the very arrays the load-time prefill reads
    first = {id(e) for e in banked.impl.subs.prefill.impl.bank}
    assert first == {id(e) for e in next(iter(banked.impl.subs.prefill_ladder.values())).impl.bank}
    # the head reads the vocab the embedding Gather reads (tied): one entry, not a second copy
    head = banked.impl.subs.lm_head.impl.bank
    assert len(head) == 1 and id(head[0]) in first
    for sub in subs:
        runtime = sub.impl.get_runtime_model()
        big = [op.get_friendly_name() for op in runtime.get_ops()
               if op.get_type_name() == "Constant" and op.get_output_element_type(0).size * int(
                   np.prod(op.get_output_shape(0))) >= BANK_MIN_BYTES]
        assert big == [], f"{sub.impl} still holds weights of its own: {big}"
        # the lifted inputs are not the sub-model's ports (NPUW binds by name; nobody sets them)
        assert not any(n.startswith(BANK_PARAM_PREFIX) for p in sub.inputs for n in p.get_names())
    assert all(not sub.impl.bank for sub in _subs(private))


def test_f32_weights_are_bound_in_place(tmp_path):
    xml = make_model_folder(tmp_path, "tiny", "f32", **SHAPE) / "openvino_model.xml"
    model = ov.Core().read_model(xml)
    import ov_npu_emu

    cm = ov_npu_emu.Core().compile_model(model, "NPU", _config())
    consts = [op.data for op in model.get_ops() if op.get_type_name() == "Constant"
              and op.get_byte_size() >= BANK_MIN_BYTES]
    bank = cm.impl.subs.prefill.impl.bank
    assert len(bank) == len(consts) == 11
    # no copy at all: every entry is the model's own constant memory
    assert all(any(np.shares_memory(e.array, c) for c in consts) for e in bank)


def test_export_import_of_a_banked_llm_keeps_the_tokens(model_xml):
    import ov_npu_emu

    banked = _compile(model_xml)
    ids, _ = greedy(banked.create_infer_request(), PROMPT, 12)
    core = ov_npu_emu.Core()
    # weightless by default (like the real NPUW): the CPU sub-blobs take the .bin back
    weights = str(Path(model_xml).with_suffix(".bin"))
    imported = core.import_model(banked.export_model(), "NPU", {"WEIGHTS_PATH": weights})
    assert greedy(imported.create_infer_request(), PROMPT, 12)[0] == ids


def test_bank_needs_f32_and_rejects_bad_values(model_xml, monkeypatch):
    import ov_npu_emu

    # bf16 / f16 compute: runtime weights would be converted at every inference, so no bank
    cm = _compile(model_xml, INFERENCE_PRECISION_HINT="bf16")
    assert all(not sub.impl.bank for sub in _subs(cm))
    # small models keep FullyConnected on packed weights (faster per step there)
    monkeypatch.setattr(cpu_bank, "BANK_MIN_MODEL_BYTES", 256 << 20)
    assert all(not sub.impl.bank for sub in _subs(_compile(model_xml)))
    with pytest.raises(ConfigError, match="CPU_EMU_WEIGHTS_BANK"):
        ov_npu_emu.Core().set_property("CPU", {"CPU_EMU_WEIGHTS_BANK": "maybe"})
    with pytest.raises(ConfigError, match="CPU_EMU_WEIGHTS_BANK"):
        _compile(model_xml, **{"++NPUW_LLM_PREFILL_CONFIG": {"CPU_EMU_WEIGHTS_BANK": "maybe"}})
    with pytest.raises(ConfigError, match=r"did you mean CPU_EMU_WEIGHTS_BANK\?"):
        ov_npu_emu.Core().set_property("CPU", {"CPU_EMU_WEIGHTS_BANKS": "NO"})
    # the emulated NPU's key is not the CPU device's: set on the device it is refused, naming ours
    with pytest.raises(ConfigError, match="the CPU device's key is CPU_EMU_WEIGHTS_BANK"):
        ov_npu_emu.Core().set_property("CPU", {"NPU_EMU_WEIGHTS_BANK": "NO"})
