"""Weightless NPUW artefacts (CACHE_MODE=OPTIMIZE_SIZE, WEIGHTS_PATH / MODEL_PTR on import).

What the real NPUW on CPU does (measured with openvino 2026.4.1 on stories260K): OPTIMIZE_SIZE
exports without the weights, import without WEIGHTS_PATH/MODEL_PTR fails with "Blob is weightless
but no WEIGHTS_PATH nor MODEL_PTR property is provided!", a missing file with "Can not open file …
for mapping", WEIGHTS_PATH on a blob with weights fails. Ours also checks each constant's hash, so
a wrong or edited .bin is a typed error (the real maps whatever it is given).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ov_npu_emu.errors import BlobFormatError, ConfigError
from tests.npuw._oracle import greedy, real_npuw_config

PROMPT_IDS = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "optimum"
CFG = real_npuw_config(64, 64, NPUW_DEVICES="NPU", NPUW_LLM_GENERATE_VARIANTS="128")


@pytest.fixture(scope="module")
def ir(stories260k_dir: Path) -> tuple[str, str]:
    return str(stories260k_dir / "openvino_model.xml"), str(stories260k_dir / "openvino_model.bin")


@pytest.fixture(scope="module")
def exported(emu_core, ir):
    """(tokens of the compiled model, artefact with weights, weightless artefact)."""
    full = emu_core.compile_model(ir[0], "NPU", {**CFG, "CACHE_MODE": "OPTIMIZE_SPEED"})
    tokens, _ = greedy(full.create_infer_request(), PROMPT_IDS, 64)
    slim = emu_core.compile_model(ir[0], "NPU", {**CFG, "CACHE_MODE": "OPTIMIZE_SIZE"})
    assert slim.get_property("CACHE_MODE") == "OPTIMIZE_SIZE"
    return tokens, full.export_model().getvalue(), slim.export_model().getvalue()


def _ir_constants(xml: str, bin_path: str, min_size: int = 4096) -> list[bytes]:
    data = Path(bin_path).read_bytes()
    out = []
    for layer in ET.parse(xml).iter("layer"):
        d = layer.find("data")
        if layer.get("type") == "Const" and d is not None and int(d.get("size", 0)) >= min_size:
            off, size = int(d.get("offset", 0)), int(d.get("size", 0))
            out.append(data[off : off + size])
    return out


def test_weightless_artefact_holds_no_ir_weights(exported, ir):
    _, full, slim = exported
    consts = _ir_constants(*ir)
    assert consts and all(c in full for c in consts)  # the check can fail: they are in the full one
    assert not any(c in slim for c in consts)
    # the sub-blobs each carried (nearly) the whole .bin; now only their programs remain
    assert len(slim) < len(full) // 4


@pytest.mark.parametrize("source", ["WEIGHTS_PATH", "MODEL_PTR"])
def test_import_restores_the_same_tokens(exported, emu_core, ir, source):
    tokens, _, slim = exported
    given = ir[1] if source == "WEIGHTS_PATH" else emu_core.read_model(ir[0])
    cm = emu_core.import_model(slim, "NPU", {source: given})
    assert greedy(cm.create_infer_request(), PROMPT_IDS, 64)[0] == tokens


def test_wrong_or_missing_weights_are_typed_errors(exported, emu_core, ir, tmp_path):
    _, full, slim = exported
    with pytest.raises(ConfigError, match="Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR"):
        emu_core.import_model(slim, "NPU", {})
    with pytest.raises(ConfigError, match="Can not open file .* for mapping"):
        emu_core.import_model(slim, "NPU", {"WEIGHTS_PATH": str(tmp_path / "none.bin")})
    edited = bytearray(Path(ir[1]).read_bytes())
    edited[len(edited) // 2] ^= 0x40  # one bit inside a weight
    (tmp_path / "edited.bin").write_bytes(edited)
    with pytest.raises(BlobFormatError, match=r"does not hold the weights .* SHA-256 mismatch"):
        emu_core.import_model(slim, "NPU", {"WEIGHTS_PATH": str(tmp_path / "edited.bin")})
    (tmp_path / "short.bin").write_bytes(bytes(edited[:1000]))
    with pytest.raises(BlobFormatError, match="1000 bytes but the blob was exported from"):
        emu_core.import_model(slim, "NPU", {"WEIGHTS_PATH": str(tmp_path / "short.bin")})
    other = emu_core.read_model(FIXTURES / "llama-fp32" / "openvino_model.xml")
    with pytest.raises(BlobFormatError, match="MODEL_PTR lacks a constant"):
        emu_core.import_model(slim, "NPU", {"MODEL_PTR": other})
    # the real fails on WEIGHTS_PATH with a blob that holds its weights too: never ignored
    with pytest.raises(ConfigError, match="holds its weights"):
        emu_core.import_model(full, "NPU", {"WEIGHTS_PATH": ir[1]})


def test_bad_cache_mode_is_a_config_error(emu_core, ir):
    with pytest.raises(ConfigError, match="CACHE_MODE='FAST' is not one of"):
        emu_core.compile_model(ir[0], "NPU", {**CFG, "CACHE_MODE": "FAST"})


def test_cpu_sub_blobs_are_weightless_through_the_cpu_plugin(emu_core, ir, tmp_path):
    """NPUW_DEVICES=CPU: the CPU plugin writes the weightless sub-blobs (it reads the weights back
    by offset and checks nothing), so the artefact carries the .bin's SHA-256 and import checks it."""
    cfg = {**CFG, "NPUW_DEVICES": "CPU"}
    full = emu_core.compile_model(ir[0], "NPU", {**cfg, "CACHE_MODE": "OPTIMIZE_SPEED"})
    tokens, _ = greedy(full.create_infer_request(), PROMPT_IDS, 16)
    slim = emu_core.compile_model(ir[0], "NPU", {**cfg, "CACHE_MODE": "OPTIMIZE_SIZE"}).export_model().getvalue()
    assert len(slim) < len(full.export_model().getvalue()) // 2
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    cm = emu_core.import_model(slim, "NPU", {**f32, "WEIGHTS_PATH": ir[1]})
    assert greedy(cm.create_infer_request(), PROMPT_IDS, 16)[0] == tokens
    with pytest.raises(ConfigError, match="Blob is weightless but no WEIGHTS_PATH"):
        emu_core.import_model(slim, "NPU", f32)
    with pytest.raises(ConfigError, match="MODEL_PTR cannot restore weightless CPU sub-blobs"):
        emu_core.import_model(slim, "NPU", {"MODEL_PTR": emu_core.read_model(ir[0])})
    edited = bytearray(Path(ir[1]).read_bytes())
    edited[len(edited) // 2] ^= 0x40
    (tmp_path / "edited.bin").write_bytes(edited)
    with pytest.raises(BlobFormatError, match="SHA-256 of the .bin differs"):
        emu_core.import_model(slim, "NPU", {"WEIGHTS_PATH": str(tmp_path / "edited.bin")})


def test_cache_dir_stores_weightless_entries(emu_core, ir, exported, tmp_path):
    tokens, _, slim = exported
    cfg = {**CFG, "CACHE_MODE": "OPTIMIZE_SIZE", "CACHE_DIR": str(tmp_path)}
    emu_core.compile_model(ir[0], "NPU", cfg)
    (entry,) = tmp_path.glob("npuw_llm_*.blob")
    assert entry.stat().st_size < len(slim) + 4096
    warm = emu_core.compile_model(ir[0], "NPU", cfg)
    assert warm._impl.loaded_from_cache
    assert greedy(warm.create_infer_request(), PROMPT_IDS, 64)[0] == tokens


def test_artefacts_of_the_previous_format_are_typed_errors(exported, emu_core, ir):
    """Format 4: the devices write the weightless sub-blobs; a format-3 artefact (weight
    references in NPUW's header) is refused with a clear error, never misread."""
    import struct

    from ov_npu_emu_npuw.serialize import FORMAT_VERSION, MAGIC

    assert FORMAT_VERSION == 4
    slim = bytearray(exported[2])
    struct.pack_into("<I", slim, len(MAGIC), 3)
    with pytest.raises(BlobFormatError, match="artefact format 3 is not supported .*reads 4.*re-export"):
        emu_core.import_model(bytes(slim), "NPU", {"WEIGHTS_PATH": ir[1]})


def test_npuw_leaves_the_sub_blobs_to_the_device(exported):
    """Every sub-blob of the weightless artefact is the NPU device's own weightless container."""
    import json
    import struct

    from ov_npu_emu_npuw.serialize import MAGIC

    slim = exported[2]
    hlen = struct.unpack_from("<Q", slim, len(MAGIC) + 4)[0]
    off = len(MAGIC) + 12 + 32
    header = json.loads(slim[off : off + hlen])
    assert header["weightless"]["by"] == "device" and "refs" not in header["blobs"][0]
    off += hlen
    for entry in header["blobs"]:
        assert slim[off : off + 17] == b"\x13\x37OVNPUEMU-WLESS\x00"
        off += entry["size"]


def test_default_export_is_weightless_like_the_reals(exported, emu_core, ir):
    """CACHE_MODE unset: the real NPUW exports without the weights unless OPTIMIZE_SPEED is asked
    for, and its import then wants WEIGHTS_PATH or MODEL_PTR; ours the same, side by side."""
    import openvino

    tokens, full, slim = exported
    real_cfg = real_npuw_config(64, 64)
    real = openvino.Core()
    real_default = real.compile_model(ir[0], "NPU", real_cfg).export_model().getvalue()
    real_full = real.compile_model(ir[0], "NPU", {**real_cfg, "CACHE_MODE": "OPTIMIZE_SPEED"}).export_model().getvalue()
    assert len(real_default) < len(real_full) // 2  # the oracle's own default is weightless
    with pytest.raises(RuntimeError, match="Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR"):
        real.import_model(real_default, "NPU", {})

    default = emu_core.compile_model(ir[0], "NPU", CFG)
    blob = default.export_model().getvalue()
    assert len(blob) < len(full) // 4 and abs(len(blob) - len(slim)) < 4096
    with pytest.raises(ConfigError, match="Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR.*OPTIMIZE_SPEED"):
        emu_core.import_model(blob, "NPU", {})
    cm = emu_core.import_model(blob, "NPU", {"WEIGHTS_PATH": ir[1]})
    assert greedy(cm.create_infer_request(), PROMPT_IDS, 64)[0] == tokens


def test_default_export_of_a_model_not_read_from_a_file_keeps_its_weights(exported, emu_core, ir):
    """Nothing to take the weights back from: the artefact holds them and imports without keys."""
    import openvino

    tokens, full, _ = exported
    model = openvino.Core().read_model(ir[0])  # the real Core records no .bin path for ours to find
    blob = emu_core.compile_model(model, "NPU", CFG).export_model().getvalue()
    assert len(blob) > len(full) // 2
    cm = emu_core.import_model(blob, "NPU", {})
    assert greedy(cm.create_infer_request(), PROMPT_IDS, 64)[0] == tokens


def test_cache_dir_entries_are_weightless_on_the_emulated_npu(emu_core, ir, exported, tmp_path):
    """As the real's, CACHE_DIR entries hold no weights when CACHE_MODE is unset: the emulated NPU
    restores them from the model being compiled (MODEL_PTR; each constant found by its SHA-256,
    hashed once with the cache key, and adopted, not copied). NPUW_DEVICES=CPU entries keep their
    weights (a weightless CPU sub-blob's restore hashes the whole .bin: slower than compiling)."""
    tokens, full, _ = exported
    cfg = {**CFG, "CACHE_DIR": str(tmp_path / "npu")}
    emu_core.compile_model(ir[0], "NPU", cfg)
    (entry,) = (tmp_path / "npu").glob("npuw_llm_*.blob")
    assert entry.stat().st_size < len(full) // 2
    warm = emu_core.compile_model(ir[0], "NPU", cfg)
    assert warm._impl.loaded_from_cache
    assert greedy(warm.create_infer_request(), PROMPT_IDS, 64)[0] == tokens
    cpu = {**CFG, "NPUW_DEVICES": "CPU", "CACHE_DIR": str(tmp_path / "cpu")}
    emu_core.compile_model(ir[0], "NPU", cpu)
    (entry,) = (tmp_path / "cpu").glob("npuw_llm_*.blob")
    assert entry.stat().st_size > len(full) // 2
    assert emu_core.compile_model(ir[0], "NPU", cpu)._impl.loaded_from_cache
