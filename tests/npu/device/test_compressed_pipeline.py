"""int4 gs16 end to end: genai_shim -> NPUW -> emulated NPU, with the weights kept compressed."""

from __future__ import annotations

import numpy as np
import openvino as ov

from ov_npu_emu.modelbuilder import load_reference


def test_int4_gs16_through_npuw_on_emulated_npu(tiny_model_dir_int4, monkeypatch):
    """Real NPUW rejects group size 16 (see docs/npu_device.md); our stack runs it exactly."""
    import genai_shim
    import ov_npu_emu_npu.compiler as compiler

    formats: list[dict[str, int]] = []
    real = compiler.compile_to_blob

    def spy(model, config=None, **kwargs):
        blob = real(model, config, **kwargs)
        from ov_npu_emu_npu.blob.reader import BlobReader

        formats.append(BlobReader(blob).meta["weights_format"]["counts"])
        return blob

    monkeypatch.setattr(compiler, "compile_to_blob", spy)
    pipe = genai_shim.LLMPipeline(str(tiny_model_dir_int4), "NPU", INFERENCE_PRECISION_HINT="f32",
                                  KV_CACHE_PRECISION="f32", NPUW_DEVICES="NPU", MAX_PROMPT_LEN=64,
                                  MIN_RESPONSE_LEN=64)
    ids = [1, 82, 113, 102, 104]
    out = pipe.generate(ov.Tensor(np.array([ids], np.int64)), max_new_tokens=24, ignore_eos=True)
    assert list(out.tokens[0]) == load_reference(tiny_model_dir_int4).greedy_generate(ids, 24)
    # NPUW's submodels went through the NPU compiler compressed: prefill and every generate
    # variant (the generate ladder's rungs too) with the 14 i4 layer weights and the u8
    # embedding, the cut-out LM head with its u8 weight
    assert formats.count({"u8": 1}) == 1
    layers = [f for f in formats if f != {"u8": 1}]
    assert len(layers) >= 2 and all(f == {"i4": 14, "u8": 1} for f in layers)
