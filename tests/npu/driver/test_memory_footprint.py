"""Host memory of the emulated NPU: split blobs (weights stay in the model's constants), the
bounded decompressed-weights cache, and blobs that do not outlive their parse."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu.modelbuilder import make_model_folder
from ov_npu_emu_npu.blob.integrity import verify
from ov_npu_emu_npu.blob.reader import BlobReader, SplitBlob
from ov_npu_emu_npu.compiler import compile_to_blob
from ov_npu_emu_npu.driver import WeightsBank
from ov_npu_emu_npu.driver.hpi import ParsedBlob
from tests.npu.conftest import llm_feed, static_llm


@pytest.fixture(scope="module")
def small_xmls(tmp_path_factory):
    return {dtype: make_model_folder(tmp_path_factory.mktemp(dtype), "small", dtype) / "openvino_model.xml"
            for dtype in ("int8", "int4", "f16")}


@pytest.fixture(scope="module")
def small_models(small_xmls):
    return {dtype: static_llm(xml, 1, 15) for dtype, xml in small_xmls.items()}


def _run(cm, feed):
    return np.array(cm.create_infer_request().infer(feed)[0])


@pytest.mark.parametrize("dtype", ["int8", "int4", "f16"])
def test_split_blob_joins_to_the_blob(small_models, dtype):
    model = small_models[dtype]
    whole = compile_to_blob(model)
    split = compile_to_blob(model, split=True)
    # the split blob is the unsealed image: join() appends the integrity trailer
    assert isinstance(split, SplitBlob) and len(split) == verify(whole)
    assert split.join() == whole
    # the reader parses the split blob without its weights bytes: same metadata and relocations
    a, b = BlobReader(whole), BlobReader(split)
    assert a.meta == b.meta and list(a.iter_relocations()) == list(b.iter_relocations())


@pytest.mark.parametrize("dtype", ["int8", "f16"])
def test_bank_adopts_the_models_constants(small_models, dtype):
    """An in-process compile hands the weights to the bank as views: no copy, same export bytes."""
    model = small_models[dtype]
    bank = WeightsBank()
    split = compile_to_blob(model, split=True)
    parsed = ParsedBlob(split, bank=bank)
    assert bank.counters["adopted"] == len(parsed.banked.entries) > 0
    pieces = list(split.image.pieces.values())
    for e in parsed.banked.entries:
        assert any(np.shares_memory(e.buf, p) for p in pieces)
    assert parsed.blob == compile_to_blob(model)


@pytest.mark.parametrize("dtype", ["int8", "int4", "f16"])
def test_split_and_imported_blobs_give_identical_results(npu_core, small_models, dtype):
    model = small_models[dtype]
    feed = llm_feed(model)
    compiled = npu_core.compile_model(model, "NPU")  # split, banked
    want = _run(compiled, feed)
    private = npu_core.compile_model(model, "NPU", {"NPU_EMU_WEIGHTS_BANK": "NO"})
    np.testing.assert_array_equal(want, _run(private, feed))
    imported = npu_core.import_model(compiled.export_model().getvalue(), "NPU")
    np.testing.assert_array_equal(want, _run(imported, feed))


@pytest.mark.parametrize("dtype", ["int8", "int4", "f16"])
def test_weights_cache_budget(small_xmls, dtype):
    """Weights over NPU_EMU_WEIGHTS_CACHE_MB are not cached: a blob whose decompressed matmul_dq
    weights do not all fit caches none. Results agree to f32 rounding: the
    tile-by-tile matmul sums in the same order per output, but BLAS picks other kernels for a
    tile than for the whole matrix (measured ≤ 2e-6 absolute on logits of order 1). A 32-token
    prompt: decode-shaped tasks read the weights as stored and never use the cache.  f32 mode:
    in f16 each task's output is rounded to f16, and a 2e-6 BLAS difference can flip an f16 ulp
    (the budget and the cached bytes are the same in both modes)."""
    import ov_npu_emu

    model = static_llm(small_xmls[dtype], 32, 15)
    feed = llm_feed(model)

    def compiled(mb):  # a Core each: the budget is the device bank's, shared by its models
        return ov_npu_emu.Core().compile_model(model, "NPU", {"NPU_EMU_WEIGHTS_CACHE_MB": mb,
                                                                 "INFERENCE_PRECISION_HINT": "f32"})

    full = compiled(-1)
    want = _run(full, feed)
    assert full.impl.parsed.weights_cache.refused == 0 and len(full.impl.parsed.weights_cache) > 0
    none = compiled(0)
    np.testing.assert_allclose(_run(none, feed), want, rtol=1e-5, atol=1e-5)
    wc = none.impl.parsed.weights_cache
    assert len(wc) == 0 and wc.refused > 0
    # the blob knows what a full cache holds; a budget under it caches nothing (all or nothing:
    # a part of a large model's weights would cost the budget for a few percent of a prefill)
    assert full.impl.parsed.meta["dq_bytes"] == full.impl.parsed.weights_cache.nbytes
    half = full.impl.parsed.weights_cache.nbytes / 2 / 2**20
    part = compiled(half)
    np.testing.assert_allclose(_run(part, feed), want, rtol=1e-5, atol=1e-5)
    wc = part.impl.parsed.weights_cache
    assert len(wc) == 0 and wc.refused > 0
    enough = compiled(full.impl.parsed.meta["dq_bytes"] / 2**20)
    assert np.array_equal(_run(enough, feed), want)  # the same cached weights, the same bits
    assert enough.impl.parsed.weights_cache.refused == 0


def test_bad_cache_budget_is_a_config_error(npu_core, small_models):
    from ov_npu_emu.errors import ConfigError

    with pytest.raises(ConfigError, match="NPU_EMU_WEIGHTS_CACHE_MB"):
        npu_core.compile_model(small_models["int8"], "NPU", {"NPU_EMU_WEIGHTS_CACHE_MB": "lots"})


@pytest.mark.parametrize("fmt", ["f16", "i4", "u4", "u8", "i8"])
@pytest.mark.parametrize("tile", [7, 100, 500])
def test_tile_dequantizer_is_bit_exact(fmt, tile):
    """The uncached matmul_dq path decompresses exactly as dequantize() (and the cache fill) do."""
    from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS
    from ov_npu_emu_npu.device.kernels import TileDequantizer, dequantize

    rng = np.random.default_rng(1)
    n, k = 500, 256
    q, sc, zp = {
        "f16": (rng.standard_normal((n, k)).astype(np.float16), None, None),
        "i4": (rng.integers(0, 255, (n, k // 32, 16), dtype=np.uint8),
               (rng.random((n, k // 32, 1)) + 0.1).astype(np.float16), None),
        "u4": (rng.integers(0, 255, (n, k // 32, 16), dtype=np.uint8),
               (rng.random((n, k // 32, 1)) + 0.1).astype(np.float32),
               rng.integers(0, 15, (n, k // 32, 1), dtype=np.uint8)),
        "u8": (rng.integers(0, 255, (n, 1, k), dtype=np.uint8), (rng.random((n, 1, 1)) + 0.1).astype(np.float16),
               rng.integers(0, 255, (n, 1, 1), dtype=np.uint8)),
        "i8": (rng.integers(-128, 127, (n, 1, k), dtype=np.int8), (rng.random((n, 1, 1)) + 0.1).astype(np.float16),
               None),
    }[fmt]
    code = WEIGHT_FORMATS[fmt]
    td = TileDequantizer(code, q, sc, zp, False, k, tile)
    got = np.concatenate([td.rows(r, min(n, r + tile)).copy() for r in range(0, n, tile)])
    want = dequantize(code, q, sc, zp, False, k)
    assert np.array_equal(want.view(np.uint32), got.view(np.uint32))
