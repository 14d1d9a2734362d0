"""Kernel parameter records (npu/blob/kernel_params.py): one per kernel of the device's library,
packed and unpacked once; a block that does not fit raises KernelParamsError naming the kernel."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

import ov_npu_emu
from ov_npu_emu.errors import BlobFormatError, KernelParamsError
from ov_npu_emu_npu.blob import kernel_params as kp
from ov_npu_emu_npu.blob.integrity import reseal
from ov_npu_emu_npu.compiler import compile_to_blob
from ov_npu_emu_npu.device.kernels import KERNELS, make_kernel
from tests.npu.conftest import make_mlp

DOC = Path(__file__).resolve().parents[3] / "docs" / "npu_blob_format.md"


def _sample(cls: type[kp.KernelParams]) -> kp.KernelParams:
    """A record with every field set away from zero: counts 2, vectors of 2, flags alternating."""
    kw = {}
    for i, f in enumerate(dataclasses.fields(cls)):
        kind, count, group = f.metadata["kind"], f.metadata["count"], f.metadata["group"]
        one = {"i": 2, "f": -0.375 - i, "b": i % 2 == 0}[kind]
        if count is None:
            kw[f.name] = one
        elif group > 1:
            kw[f.name] = tuple(tuple(range(j, j + group)) for j in (3, -7))
        else:
            kw[f.name] = (one, one + 3) if kind == "i" else (one, one)
    return cls(**kw)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_device_kernel_has_a_record_that_round_trips(kernel):
    assert kernel in kp.KERNEL_PARAMS, f"kernel {kernel!r} has no record in ov_npu_emu_npu/blob/kernel_params.py"
    cls = kp.KERNEL_PARAMS[kernel]
    rec = _sample(cls)
    packed = kp.pack_params(kernel, rec)
    assert all(isinstance(v, float) for v in packed)
    back = kp.unpack_params(kernel, np.asarray(packed, np.float64))  # as the device reads .npu.params
    assert back == rec and type(back) is cls
    # one value too many: a fixed layout rejects it; a trailing vector takes it, so the record changes
    has_rest = any(f.metadata["count"] == kp.REST for f in dataclasses.fields(cls))
    try:
        longer = kp.unpack_params(kernel, [*packed, 1.0])
    except KernelParamsError as e:
        assert e.kernel == kernel and kernel in str(e)
    else:
        assert has_rest and longer != rec


def test_no_record_for_a_kernel_the_device_lacks():
    assert set(kp.KERNEL_PARAMS) <= set(KERNELS)


@pytest.mark.parametrize(
    ("kernel", "values", "what"),
    [
        ("conv", [1, 3, 1, 1, 1], "nd=3 runs past"),
        ("matmul", [0, 0, 0], "3 parameters where the record takes 2"),
        ("matmul", [0], "end before transpose_b"),
        ("sdpa", [0, 2, 0], "has_mask is 2.0, not a flag"),
        ("transpose", [0, 1.5], "perm is 1.5, not an integer"),
        ("gather", [float("nan"), 0], "axis is nan, not an integer"),
        ("pad", [0, 1, 1, 2, 3], "3 trailing parameters do not split"),
        ("slice", [0, 1, 1, 2], "4 trailing parameters do not split into 1 vector"),
        ("add", [1.0], "1 parameters where the record takes 0"),
    ],
)
def test_a_block_that_does_not_fit_names_the_kernel(kernel, values, what):
    with pytest.raises(KernelParamsError, match=what) as ei:
        kp.unpack_params(kernel, values)
    assert isinstance(ei.value, BlobFormatError) and ei.value.kernel == kernel
    assert f"kernel {kernel!r}" in str(ei.value) and "recompile" in str(ei.value)


def test_optional_trailing_field_takes_its_default():
    # sdpa blobs written before grouped-query attention hold three values
    assert kp.unpack_params("sdpa", [1, 0, 0.125]) == kp.SdpaParams(True, False, 0.125, 1)


def test_compiler_side_mismatches_are_caught_where_the_record_is_built():
    with pytest.raises(KernelParamsError, match="takes MatMulParams, not SdpaParams"):
        kp.pack_params("matmul", kp.SdpaParams(True, False, 0.0))
    with pytest.raises(KernelParamsError, match="strides has 1 values, nd is 2"):
        kp.ConvParams(1, 2, (1,), (1, 1), (0, 0), (0, 0))
    with pytest.raises(KernelParamsError, match="trailing vectors differ"):
        kp.PadParams(0, 0.0, (1, 1), (1,))
    with pytest.raises(KernelParamsError, match="no parameter record"):
        kp.pack_params("no_such_kernel", kp.NO_PARAMS)


def test_device_kernels_reject_a_misfit_block():
    x, o = np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32)
    with pytest.raises(KernelParamsError, match="'transpose'"):
        make_kernel("transpose", [x], [o], np.array([1.0, 0.5]))
    make_kernel("transpose", [x], [o], kp.TransposeParams((1, 0)))()  # a record passes through


def test_corrupt_params_section_is_a_typed_error_naming_the_kernel():
    blob = compile_to_blob(make_mlp())
    sec = ELFFile(io.BytesIO(blob)).get_section_by_name(".npu.params")
    off, size = sec["sh_offset"], sec["sh_size"]
    # every f64 becomes 0.5: the first block is the first MatMul's transpose_a flag
    bad = reseal(blob[:off] + np.full(size // 8, 0.5).tobytes() + blob[off + size:])
    core = ov_npu_emu.Core()
    with pytest.raises(KernelParamsError, match="kernel 'matmul': transpose_a is 0.5") as ei:
        cm = core.import_model(bad, "NPU")
        cm.create_infer_request().infer({"x": np.ones((1, 4, 16), np.float32)})
    assert ei.value.kernel == "matmul"


def test_blob_format_doc_table_is_generated_from_the_records():
    doc = DOC.read_text(encoding="utf-8")
    table = doc.partition(kp.DOC_BEGIN)[2].partition(kp.DOC_END)[0].strip()
    assert table == kp.markdown(), "docs/npu_blob_format.md is stale: run python tools/kernel_params_doc.py --write"


def test_a_record_on_the_wrong_engine_is_a_compile_error():
    from ov_npu_emu.errors import CompileError
    from ov_npu_emu_npu.arch import HardwareConfig
    from ov_npu_emu_npu.compiler.graph import Place
    from ov_npu_emu_npu.compiler.lower import _Lowerer

    lw = _Lowerer(None, HardwareConfig(), False, False)  # the task builders never read the model
    v = lw.new_value((2, 2), np.float32, Place.SCRATCH)
    with pytest.raises(CompileError, match="matmul runs on the DPU, not the SHAVE"):
        lw.shave("matmul", [v, v], [v], kp.MatMulParams(False, False), None)
