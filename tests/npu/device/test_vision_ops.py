"""Ops of vision models on device NPU against the OpenVINO CPU plugin (f32; f16 within tolerance):
Interpolate (every mode, opset4 and opset11, and what PrePostProcessor's resize makes),
AdaptiveAvgPool / AdaptiveMaxPool, PriorBox / PriorBoxClustered, DetectionOutput, and small
CNN / ViT / SSD-style models built with openvino's opsets."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset1, opset5, opset8, opset10, opset11, opset12
from openvino import opset13 as ops
from openvino.preprocess import PrePostProcessor, ResizeAlgorithm

from ov_npu_emu.errors import UnsupportedOpError
from ov_npu_emu_npu.compiler import compile_to_blob
from ov_npu_emu_npu.compiler.frontend import prepare
from tests.npu.conftest import cpu_reference, rel_err

F32_TOL = 1e-4
F16_TOL = 2e-2


def _run(core, model, feed, config=None):
    res = core.compile_model(model, "NPU", config or {}).create_infer_request().infer(feed)
    return [np.array(res[i]) for i in range(len(model.outputs))]


def _feed(model, seed=0):
    rng = np.random.default_rng(seed)
    return {p.get_any_name(): rng.standard_normal(list(p.get_shape())).astype(np.float32) for p in model.inputs}


def _check(core, model, tol=F32_TOL, config=None):
    feed = _feed(model)
    ours, ref = _run(core, model, feed, config), cpu_reference(model, feed)
    errs = []
    for a, b in zip(ours, ref, strict=True):
        assert a.shape == b.shape
        errs.append(rel_err(a, b))
    assert max(errs) <= tol, errs
    return max(errs)


def _interp_model(build, shape=(1, 2, 5, 7)):
    x = ops.parameter(list(shape), np.float32, name="x")
    return ov.Model([ops.result(build(x))], [x], "interp")


_CTMS = ("half_pixel", "pytorch_half_pixel", "asymmetric", "tf_half_pixel_for_nn", "align_corners")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
_MODES = ("linear", "linear_onnx", "cubic", "bilinear_pillow", "bicubic_pillow")


def _v11(sizes, mode, **kw):
    return lambda x: opset11.interpolate(x, np.array(sizes, np.int64), mode, "sizes", axes=np.array([2, 3]), **kw)


def _v4(sizes, mode, **kw):
    scales = np.array([s / i for s, i in zip(sizes, (5, 7), strict=True)], np.float32)
    return lambda x: opset10.interpolate(x, np.array(sizes, np.int64), scales, mode, "sizes", axes=np.array([2, 3]),
                                         **kw)


@pytest.mark.parametrize("sizes", [[9, 4], [3, 13]], ids=["up_down", "down_up"])
@pytest.mark.parametrize("nearest_mode", _NEAREST)
@pytest.mark.parametrize("ctm", _CTMS)
def test_interpolate_nearest_every_mode(npu_core, ctm, nearest_mode, sizes):
    f = _v11 if nearest_mode in ("floor", "simple") else _v4
    _check(npu_core, _interp_model(f(sizes, "nearest", coordinate_transformation_mode=ctm,
                                     nearest_mode=nearest_mode)))


@pytest.mark.parametrize("version", [4, 11])
@pytest.mark.parametrize("ctm", _CTMS)
@pytest.mark.parametrize("mode", _MODES)
def test_interpolate_modes(npu_core, mode, ctm, version):
    if version == 4 and "pillow" in mode:
        pytest.skip("the pillow modes are opset11's")
    f = _v11 if version == 11 else _v4
    for sizes in ([9, 4], [3, 13]):
        _check(npu_core, _interp_model(f(sizes, mode, coordinate_transformation_mode=ctm)))


@pytest.mark.parametrize("mode", ["linear", "linear_onnx", "cubic"])
def test_interpolate_antialias_as_the_cpu_plugin(npu_core, mode):
    """Downscaling with antialias: the CPU plugin's "linear" is a plain bilinear (the reference's
    triangle filter differs); cubic and linear_onnx as the reference."""
    _check(npu_core, _interp_model(_v11([3, 4], mode, antialias=True)))


@pytest.mark.parametrize(
    "build",
    [
        lambda x: opset11.interpolate(x, np.array([1.5, 0.6], np.float32), "linear_onnx", "scales",
                                      axes=np.array([2, 3])),
        lambda x: opset11.interpolate(x, np.array([1.7, 0.5], np.float32), "nearest", "scales", axes=np.array([2, 3]),
                                      coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        lambda x: opset11.interpolate(x, np.array([8, 10], np.int64), "linear", "sizes", pads_begin=[0, 1, 1, 0],
                                      pads_end=[0, 0, 2, 1], axes=np.array([2, 3])),
        lambda x: opset11.interpolate(x, np.array([8, 10], np.int64), "cubic", "sizes", pads_begin=[0, 0, 1, 2],
                                      pads_end=[0, 0, 2, 1], axes=np.array([2, 3])),
        lambda x: opset11.interpolate(x, np.array([1, 2, 8, 10], np.int64), "linear_onnx", "sizes"),
        lambda x: opset10.interpolate(x, np.array([10], np.int64), np.array([2.0], np.float32), "nearest", "scales",
                                      axes=np.array([3])),
    ],
    ids=["scales_linear_onnx", "scales_nearest", "pads_linear", "pads_cubic", "all_axes", "v4_scales_one_axis"],
)
def test_interpolate_scales_pads_axes(npu_core, build):
    _check(npu_core, _interp_model(build))


def test_interpolate_rank3_to_rank6(npu_core):
    _check(npu_core, _interp_model(lambda x: opset11.interpolate(x, np.array([11], np.int64), "linear", "sizes",
                                                                 axes=np.array([2])), (2, 3, 6)))
    _check(npu_core, _interp_model(lambda x: opset11.interpolate(x, np.array([4, 6, 3], np.int64), "linear_onnx",
                                                                 "sizes", axes=np.array([2, 3, 4])), (1, 2, 3, 4, 5)))
    # five resampled axes: more tables than a descriptor's operands, so two chained tasks
    _check(npu_core, _interp_model(lambda x: opset11.interpolate(x, np.array([3, 5, 2, 4, 3], np.int64), "linear",
                                                                 "sizes", axes=np.array([1, 2, 3, 4, 5])),
                                   (2, 3, 4, 3, 5, 2)))


def test_interpolate_f16(npu_core):
    _check(npu_core, _interp_model(_v11([9, 4], "cubic")), F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})
    _check(npu_core, _interp_model(_v11([9, 4], "nearest")), F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


def test_interpolate_nearest_of_integers_is_a_copy(npu_core):
    x = ops.parameter([1, 1, 4, 5], np.int32, name="x")
    m = ov.Model([ops.result(opset11.interpolate(x, np.array([7, 3], np.int64), "nearest", "sizes",
                                                 axes=np.array([2, 3])))], [x], "interp_i32")
    feed = {"x": np.arange(20, dtype=np.int32).reshape(1, 1, 4, 5) * 1003}  # < 2^24: the CPU plugin goes through f32
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_interpolate_opset1_as_the_cpu_plugin_maps_it(npu_core, mode, align_corners):
    """Old IRs' Interpolate-1: asymmetric (or align_corners) coordinates, nearest_mode simple,
    linear as linear_onnx; pads included."""
    for sizes in ([3, 4], [9, 13]):
        _check(npu_core, _interp_model(lambda x, sizes=sizes: opset1.interpolate(x, np.array(sizes, np.int64), {
            "axes": [2, 3], "mode": mode, "align_corners": align_corners, "pads_begin": [0, 0, 1, 0],
            "pads_end": [0, 0, 0, 2]})))


def test_interpolate_opset1_area_is_refused_by_name():
    x = ops.parameter([1, 1, 4, 4], np.float32, name="x")
    n = opset1.interpolate(x, np.array([2, 2], np.int64), {"axes": [2, 3], "mode": "area"})
    n.set_friendly_name("old_resize")
    with pytest.raises(UnsupportedOpError, match="Interpolate.*old_resize.*area") as e:
        compile_to_blob(ov.Model([ops.result(n)], [x], "interp_v0"))
    assert e.value.op_type == "Interpolate"


_PPP = [ResizeAlgorithm.RESIZE_LINEAR, ResizeAlgorithm.RESIZE_NEAREST, ResizeAlgorithm.RESIZE_CUBIC,
        ResizeAlgorithm.RESIZE_BILINEAR_PILLOW, ResizeAlgorithm.RESIZE_BICUBIC_PILLOW]


@pytest.mark.parametrize("algorithm", _PPP, ids=lambda a: str(a).rsplit(".", 1)[-1])
def test_preprocessing_resize(npu_core, algorithm):
    """hello_classification's preprocessing: an NHWC u8 image of any size, resized and converted."""
    rng = np.random.default_rng(1)
    x = ops.parameter([1, 3, 16, 16], np.float32, name="x")
    w = ops.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2)
    m = ov.Model([ops.result(ops.relu(ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1])))], [x], "net")
    ppp = PrePostProcessor(m)
    ppp.input().tensor().set_shape([1, 27, 21, 3]).set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC"))
    ppp.input().preprocess().convert_element_type(ov.Type.f32).resize(algorithm)
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    m = ppp.build()
    assert "Interpolate" in {n.get_type_name() for n in m.get_ops()}
    feed = {"x": rng.integers(0, 256, (1, 27, 21, 3)).astype(np.uint8)}
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert rel_err(a, b) <= F32_TOL


@pytest.mark.parametrize("mode", ["linear", "linear_onnx"])
@pytest.mark.parametrize(("shape", "out"), [((1, 60, 80, 3), (64, 64)), ((1, 60, 80, 3), (30, 40)),
                                            ((1, 37, 53, 3), (224, 224))])
def test_interpolate_u8_rounds_as_the_cpu_plugin(npu_core, mode, shape, out):
    """Linear resizing of u8 data (what PrePostProcessor's resize makes without a conversion to f32
    first, as hello_classification does): f32 arithmetic rounded half to even, bit for bit."""
    x = ops.parameter(list(shape), np.uint8, name="x")
    m = ov.Model([ops.result(opset11.interpolate(x, np.array(out, np.int64), mode, "sizes", axes=np.array([1, 2]),
                                                 coordinate_transformation_mode="half_pixel"))], [x], "u8")
    feed = {"x": np.random.default_rng(3).integers(0, 256, shape).astype(np.uint8)}
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert a.dtype == b.dtype == np.uint8
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["cubic", "bilinear_pillow"])
def test_interpolate_u8_other_modes_refused(npu_core, mode):
    """Integer modes whose rounding is not the CPU plugin's rint of f32 are refused, not approximated."""
    x = ops.parameter([1, 3, 8, 8], np.uint8, name="x")
    m = ov.Model([ops.result(opset11.interpolate(x, np.array([5, 5], np.int64), mode, "sizes",
                                                 axes=np.array([2, 3])))], [x], "u8")
    with pytest.raises(UnsupportedOpError, match="of uint8 data"):
        npu_core.compile_model(m, "NPU")


def test_hello_classification_preprocessing(npu_core):
    """hello_classification's PrePostProcessor exactly: u8 NHWC tensor of the image's size, a linear
    resize (on the u8 data), the model's NCHW layout, f32 output; a ResNet-like classifier."""
    from ov_npu_emu.testing import make_resnet_like

    ppp = PrePostProcessor(make_resnet_like(classes=20, size=32))
    ppp.input().tensor().set_shape([1, 45, 61, 3]).set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC"))
    ppp.input().preprocess().resize(ResizeAlgorithm.RESIZE_LINEAR)
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    ppp.output().tensor().set_element_type(ov.Type.f32)
    m = ppp.build()
    feed = {"data": np.random.default_rng(4).integers(0, 256, (1, 45, 61, 3)).astype(np.uint8)}
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert rel_err(a, b) <= F32_TOL


@pytest.mark.parametrize(("shape", "out"), [((1, 3, 7, 9), [3, 4]), ((2, 3, 7, 9), [1, 1]), ((1, 2, 4, 4), [7, 5]),
                                            ((1, 2, 9), [4]), ((1, 2, 5, 6, 7), [2, 3, 4])])
def test_adaptive_pools(npu_core, shape, out):
    x = ops.parameter(list(shape), np.float32, name="x")
    avg = opset8.adaptive_avg_pool(x, np.array(out, np.int64))
    mx = opset8.adaptive_max_pool(x, np.array(out, np.int64), "i32").output(0)
    m = ov.Model([ops.result(avg), ops.result(mx)], [x], "adaptive")
    _check(npu_core, m)
    _check(npu_core, m, F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


def test_adaptive_max_pool_indices_are_refused_by_name():
    x = ops.parameter([1, 2, 6, 6], np.float32, name="x")
    mx = opset8.adaptive_max_pool(x, np.array([3, 3], np.int64), "i32")
    mx.set_friendly_name("amp")
    m = ov.Model([ops.result(mx.output(0)), ops.result(mx.output(1))], [x], "amp")
    with pytest.raises(UnsupportedOpError, match="AdaptiveMaxPool.*amp.*indices") as e:
        compile_to_blob(m)
    assert e.value.op_type == "AdaptiveMaxPool"


@pytest.mark.parametrize(("shift", "axes"), [([-3, -3], [1, 2]), ([3, 3], [1, 2]), ([2], [-1]), ([5, -1], [0, 3]),
                                           ([1, 2], [2, 2])],
                         ids=["swin_back", "swin_forth", "neg_axis", "wraps", "repeated_axis"])
def test_roll(npu_core, shift, axes):
    """Swin's shifted windows: Roll (OpenVINO's has no evaluate(); the index map is np.roll's)."""
    x = ops.parameter([2, 8, 8, 3], np.float32, name="x")
    m = ov.Model([ops.result(ops.roll(x, np.array(shift, np.int64), np.array(axes, np.int64)))], [x], "roll")
    assert _check(npu_core, m) == 0.0
    _check(npu_core, m, F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


_EINSUM = {  # equation, operand shapes
    "maxvit_qk": ("BGHID,BGHJD->BGHIJ", [(1, 4, 2, 7, 8), (1, 4, 2, 7, 8)]),
    "maxvit_pv": ("BGHIJ,BGHJD->BGHID", [(1, 4, 2, 7, 7), (1, 4, 2, 7, 8)]),
    "matmul": ("ij,jk->ik", [(5, 6), (6, 3)]),
    "bilinear_outer": ("bi,bj->bij", [(2, 4), (2, 3)]),
    "batch_free_sum": ("bhqd,bhkd->bqhk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    "reduce_one_side": ("abc,cd->ad", [(3, 4, 5), (5, 2)]),
    "ellipsis": ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    "implicit": ("ij,jk", [(3, 4), (4, 2)]),
    "transpose_only": ("abc->cab", [(2, 3, 4)]),
    "trace_free_sum": ("abc->b", [(2, 3, 4)]),
    "three_operands": ("ab,bc,cd->ad", [(3, 4), (4, 5), (5, 2)]),
}


@pytest.mark.parametrize("name", sorted(_EINSUM))
def test_einsum(npu_core, name):
    """Einsum (maxvit's attention) as transposes, sums and batched MatMuls, as the CPU plugin
    decomposes it."""
    eq, shapes = _EINSUM[name]
    xs = [ops.parameter(list(s), np.float32, name=f"x{i}") for i, s in enumerate(shapes)]
    m = ov.Model([ops.result(ops.einsum(xs, eq))], xs, "einsum")
    _check(npu_core, m)
    _check(npu_core, m, F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


def test_einsum_with_a_constant_operand(npu_core):
    x = ops.parameter([2, 3, 4], np.float32, name="x")
    w = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    m = ov.Model([ops.result(ops.einsum([x, ops.constant(w)], "bsk,kn->bns"))], [x], "einsum_const")
    _check(npu_core, m)


def test_einsum_diagonal_is_refused_by_name():
    x = ops.parameter([3, 3], np.float32, name="x")
    e = ops.einsum([x], "ii->i")
    e.set_friendly_name("diag")
    with pytest.raises(UnsupportedOpError, match="Einsum.*diag.*diagonal") as err:
        compile_to_blob(ov.Model([ops.result(e)], [x], "diag"))
    assert err.value.op_type == "Einsum"


_C = 6
_BN = tuple(np.random.default_rng(5).standard_normal((3, _C)).astype(np.float32)) + (
    np.random.default_rng(6).uniform(0.5, 2, _C).astype(np.float32),)
_NORMS = {
    "batch_norm_v5": lambda x: opset5.batch_norm_inference(x, *_BN[:3], _BN[3], 1e-5),
    "batch_norm_v0": lambda x: opset1.batch_norm_inference(x, *_BN[:3], _BN[3], 1e-3),
    "group_norm": lambda x: opset12.group_normalization(x, _BN[0], _BN[1], 3, 1e-5),
    "normalize_l2_add": lambda x: ops.normalize_l2(x, np.array([1]), 1e-6, "add"),
    "normalize_l2_max_hw": lambda x: ops.normalize_l2(x, np.array([2, 3]), 1e-2, "max"),
    "hard_sigmoid": lambda x: ops.hard_sigmoid(x, np.float32(0.2), np.float32(0.5)),
    "selu": lambda x: ops.selu(x, np.array([1.67], np.float32), np.array([1.05], np.float32)),
}


@pytest.mark.parametrize("name", sorted(_NORMS))
def test_normalisations_and_activations_of_converted_cnns(npu_core, name):
    """What convert_model / ONNX CNNs hold unfused: BatchNormInference (folded to a per-channel
    scale and shift), GroupNormalization, NormalizeL2 (Caffe SSD's conv4_3), HardSigmoid, Selu."""
    m = _interp_model(_NORMS[name], (2, _C, 5, 4))
    _check(npu_core, m)
    _check(npu_core, m, F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


@pytest.mark.parametrize(("axes", "size"), [([1], 5), ([1], 3), ([2, 3], 3), ([1], 1)])
def test_lrn(npu_core, axes, size):
    """LRN of AlexNet / GoogLeNet (across channels) and within channels."""
    m = _interp_model(lambda x: ops.lrn(x, np.array(axes), 1e-2, 0.75, 2.0, size), (1, 7, 5, 6))
    _check(npu_core, m)
    _check(npu_core, m, F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


def test_lrn_windows_the_cpu_plugin_places_otherwise_are_refused(npu_core):
    for axes, size in (([1], 4), ([1, 2, 3], 3)):
        m = _interp_model(lambda x, axes=axes, size=size: ops.lrn(x, np.array(axes), 1e-2, 0.75, 2.0, size),
                          (1, 7, 5, 6))
        with pytest.raises(UnsupportedOpError, match="LRN"):
            compile_to_blob(m)
        assert not any(op.get_type_name() == "LRN" for op in m.get_ops()
                       if op.get_friendly_name() in npu_core.query_model(m, "NPU"))


_DECONV = {
    "basic": ((1, 4, 5, 5), (4, 3, 3, 3), False, {"strides": [1, 1]}),
    "stride2_pads": ((1, 4, 5, 5), (4, 3, 4, 4), False, {"strides": [2, 2], "pads_begin": [1, 1], "pads_end": [1, 1]}),
    "output_padding": ((1, 4, 5, 5), (4, 3, 3, 3), False, {"strides": [2, 2], "pads_begin": [1, 1],
                                                          "pads_end": [1, 1], "output_padding": [1, 1]}),
    "asym_dilated_batch2": ((2, 4, 5, 6), (4, 3, 3, 2), False, {"strides": [2, 3], "pads_begin": [1, 0],
                                                               "pads_end": [0, 1], "dilations": [1, 2]}),
    "valid": ((1, 4, 5, 5), (4, 3, 3, 3), False, {"strides": [2, 2], "auto_pad": "valid"}),
    "output_shape": ((1, 4, 5, 5), (4, 3, 3, 3), False, {"strides": [2, 2], "output_shape": np.array([10, 10])}),
    "output_shape_explicit": ((1, 4, 5, 5), (4, 3, 4, 4), False, {"strides": [2, 2], "pads_begin": [0, 0],
                                                                 "pads_end": [0, 0],
                                                                 "output_shape": np.array([9, 11])}),
    "output_shape_same_upper": ((1, 4, 5, 5), (4, 3, 4, 4), False, {"strides": [2, 2], "auto_pad": "same_upper",
                                                                   "output_shape": np.array([9, 11])}),
    "output_shape_same_lower": ((1, 4, 5, 5), (4, 3, 4, 4), False, {"strides": [2, 2], "auto_pad": "same_lower",
                                                                   "output_shape": np.array([9, 11])}),
    "1d": ((1, 4, 7), (4, 2, 3), False, {"strides": [2], "pads_begin": [1], "pads_end": [0]}),
    "group": ((1, 6, 5, 5), (3, 2, 2, 3, 3), True, {"strides": [2, 2], "pads_begin": [1, 1], "pads_end": [1, 1],
                                                     "output_padding": [1, 1]}),
    "depthwise": ((1, 4, 5, 5), (4, 1, 1, 4, 4), True, {"strides": [2, 2], "pads_begin": [1, 1],
                                                         "pads_end": [1, 1]}),
}


@pytest.mark.parametrize("name", sorted(_DECONV))
def test_transposed_convolution(npu_core, name):
    """(Group)ConvolutionBackpropData (FPN / U-Net / segmentation upsampling) on the DPU."""
    shape, wshape, group, kw = _DECONV[name]
    w = ops.constant(np.random.default_rng(8).standard_normal(wshape).astype(np.float32))
    if "output_shape" in kw:
        kw = {**kw, "output_shape": kw["output_shape"].astype(np.int64)}
    f = ops.group_convolution_backprop_data if group else ops.convolution_backprop_data
    m = _interp_model(lambda x: f(x, w, **kw), shape)
    _check(npu_core, m)
    if name == "stride2_pads":
        _check(npu_core, m, F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


# -- SSD: PriorBox, PriorBoxClustered, DetectionOutput ------------------------------------------

def _ssd_head(n=1, classes=4, attrs=None, clustered=False, share=True):
    """Features -> loc / softmaxed conf through MatMuls, priors from the shapes, DetectionOutput."""
    image = ops.parameter([n, 3, 32, 32], np.float32, name="image")
    f = ops.parameter([n, 8, 4, 4], np.float32, name="feat")
    fs = ops.gather(ops.shape_of(f), np.array([2, 3]), np.int64(0))
    ims = ops.gather(ops.shape_of(image), np.array([2, 3]), np.int64(0))
    var = [0.1, 0.1, 0.2, 0.2]
    if clustered:
        pr = ops.prior_box_clustered(fs, ims, {"width": [2.0, 6.0, 9.0], "height": [4.0, 5.5, 3.0], "variance": var,
                                               "offset": 0.5, "clip": False})
    else:
        pr = ops.prior_box(fs, ims, {"min_size": [4.0, 8.0], "max_size": [9.0, 16.0], "aspect_ratio": [2.0],
                                     "flip": True, "clip": False, "variance": var, "offset": 0.5})
    n_priors = pr.get_output_shape(0)[1] // 4
    pr = ops.unsqueeze(pr, np.array([0]))
    at = {"background_label_id": 0, "top_k": 50, "keep_top_k": [20], "nms_threshold": 0.45,
          "code_type": "caffe.PriorBoxParameter.CENTER_SIZE", "confidence_threshold": 0.2, "share_location": share,
          "normalized": True, **(attrs or {})}
    if at.get("variance_encoded_in_target"):
        pr = ops.slice(pr, np.array([0]), np.array([1]), np.array([1]), np.array([1]))
    rng = np.random.default_rng(1)
    flat = ops.reshape(f, np.array([n, -1]), False)
    n_loc = 1 if share else classes
    wl = ops.constant(rng.standard_normal((n_priors * 4 * n_loc, 128)).astype(np.float32) * 0.05)
    wc = ops.constant(rng.standard_normal((n_priors * classes, 128)).astype(np.float32) * 0.3)
    loc = ops.matmul(flat, wl, False, True)
    conf = ops.softmax(ops.reshape(ops.matmul(flat, wc, False, True), np.array([n, n_priors, classes]), False), 2)
    conf = ops.reshape(conf, np.array([n, n_priors * classes]), False)
    det = opset1.detection_output(loc, conf, pr, {"num_classes": classes, **at}) if at.pop("v1", False) else \
        opset8.detection_output(loc, conf, pr, at)
    return ov.Model([ops.result(det)], [image, f], "ssd_head")


@pytest.mark.parametrize(
    "kw",
    [{}, {"attrs": {"v1": True}}, {"n": 2}, {"attrs": {"code_type": "caffe.PriorBoxParameter.CORNER"}},
     {"share": False}, {"attrs": {"clip_after_nms": True, "clip_before_nms": True}},
     {"attrs": {"keep_top_k": [-1], "top_k": -1}}, {"attrs": {"variance_encoded_in_target": True}},
     {"attrs": {"decrease_label_id": True}}, {"clustered": True}, {"attrs": {"background_label_id": -1}},
     {"attrs": {"confidence_threshold": 0.01, "keep_top_k": [5]}}],
    ids=["base", "opset1", "batch2", "corner", "per_class_boxes", "clip", "keep_all", "variance_in_target", "mxnet",
         "clustered", "no_background", "keep5"],
)
def test_detection_output_matches_cpu(npu_core, kw):
    m = _ssd_head(**kw)
    feed = _feed(m, 2)
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert (b[0, 0, :, 0] >= 0).sum() >= 5  # detections to compare, not an empty output
    assert rel_err(a, b) <= F32_TOL


def test_detection_output_long_candidate_lists(npu_core, monkeypatch):
    """Past _PAIRWISE_MAX candidates NMS checks each against the kept boxes instead of taking the
    pairwise overlap matrix; same detections."""
    from ov_npu_emu_npu.device.kernels import vision

    monkeypatch.setattr(vision, "_PAIRWISE_MAX", 0)
    m = _ssd_head(attrs={"keep_top_k": [-1], "top_k": -1})
    feed = _feed(m, 2)
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert rel_err(a, b) <= F32_TOL


def test_detection_output_pixel_priors(npu_core):
    """normalized=False: 5 values per prior in pixels, divided by input_width/height."""
    rng = np.random.default_rng(3)
    p = 24
    xy = rng.uniform(0, 40, (p, 2))
    boxes = np.concatenate([np.zeros((p, 1)), xy, xy + rng.uniform(4, 20, (p, 2))], 1)
    priors = np.stack([boxes.reshape(-1), np.tile([0.1, 0.1, 0.2, 0.2, 0.0], p)])[None].astype(np.float32)
    loc = ops.parameter([1, p * 4], np.float32, name="loc")
    logits = ops.parameter([1, p, 3], np.float32, name="logits")
    conf = ops.reshape(ops.softmax(logits, 2), np.array([1, p * 3]), False)
    det = opset8.detection_output(loc, conf, ops.constant(priors), {
        "background_label_id": 0, "top_k": -1, "keep_top_k": [10], "nms_threshold": 0.5, "confidence_threshold": 0.3,
        "code_type": "caffe.PriorBoxParameter.CENTER_SIZE", "normalized": False, "input_height": 48,
        "input_width": 64})
    m = ov.Model([ops.result(det)], [loc, logits], "pixel_priors")
    feed = {"loc": rng.standard_normal((1, p * 4)).astype(np.float32) * 0.3,
            "logits": rng.standard_normal((1, p, 3)).astype(np.float32) * 2}
    (a,), (b,) = _run(npu_core, m, feed), cpu_reference(m, feed)
    assert (b[0, 0, :, 0] >= 0).sum() >= 3
    assert rel_err(a, b) <= F32_TOL


def test_detection_output_f16_finds_the_same_boxes(npu_core):
    """f16 activations: near-tied scores may swap places, so rows are matched, not compared in order."""
    m = _ssd_head()
    feed = _feed(m, 2)
    (a,), (b,) = _run(npu_core, m, feed, {"INFERENCE_PRECISION_HINT": "f16"}), cpu_reference(m, feed)
    ra, rb = a[0, 0][a[0, 0, :, 0] >= 0], b[0, 0][b[0, 0, :, 0] >= 0]
    assert len(ra) == len(rb)
    for row in rb:
        same = (ra[:, 1] == row[1]) & (np.abs(ra[:, 2:] - row[2:]).max(axis=1) <= F16_TOL)
        assert same.any(), row


def test_prior_boxes_fold_at_compile_time(npu_core):
    """PriorBox(Clustered) read only shapes: the front end's constant folding makes them constants,
    so the blob holds no task for them."""
    for clustered in (False, True):
        folded = {n.get_type_name() for n in prepare(_ssd_head(clustered=clustered)).model.get_ops()}
        assert not folded & {"PriorBox", "PriorBoxClustered", "ShapeOf"}
        assert "DetectionOutput" in folded
    x = ops.parameter([1, 2], np.float32, name="x")
    pb = ops.prior_box(ops.constant(np.array([3, 3], np.int64)), ops.constant(np.array([30, 30], np.int64)),
                       {"min_size": [5.0], "aspect_ratio": [1.5], "flip": True, "variance": [0.1], "offset": 0.5})
    m2 = ov.Model([ops.result(pb), ops.result(ops.relu(x))], [x], "priors")
    feed = {"x": np.ones((1, 2), np.float32)}
    a, b = _run(npu_core, m2, feed), cpu_reference(m2, feed)
    assert rel_err(a[0], b[0]) <= F32_TOL


# -- small models of the kinds the samples run ---------------------------------------------------

def _conv_bn_relu(x, cin, cout, rng, stride=1, groups=1, act=ops.relu):
    if groups == 1:
        w = ops.constant(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * (2 / (9 * cin)) ** 0.5)
        y = ops.convolution(x, w, [stride, stride], [1, 1], [1, 1], [1, 1])
    else:
        w = ops.constant(rng.standard_normal((groups, cout // groups, cin // groups, 3, 3)).astype(np.float32) * 0.3)
        y = ops.group_convolution(x, w, [stride, stride], [1, 1], [1, 1], [1, 1])
    y = ops.add(ops.multiply(y, ops.constant(rng.uniform(0.5, 1.5, (1, cout, 1, 1)).astype(np.float32))),
                ops.constant(rng.standard_normal((1, cout, 1, 1)).astype(np.float32) * 0.1))
    return act(y)


def _resnet_like():
    """torchvision ResNet's shape: stem, max-pool, residual blocks, AdaptiveAvgPool, flatten, FC."""
    rng = np.random.default_rng(10)
    x = ops.parameter([1, 3, 32, 32], np.float32, name="image")
    y = _conv_bn_relu(x, 3, 8, rng, stride=2)
    y = ops.max_pool(y, [2, 2], [1, 1], [0, 0], [0, 0], [3, 3]).output(0)
    for _ in range(2):
        y = ops.relu(ops.add(y, _conv_bn_relu(_conv_bn_relu(y, 8, 8, rng), 8, 8, rng, act=lambda t: t)))
    y = opset8.adaptive_avg_pool(y, np.array([1, 1], np.int64))
    y = ops.reshape(y, np.array([1, -1]), False)
    y = ops.add(ops.matmul(y, ops.constant(rng.standard_normal((10, 8)).astype(np.float32)), False, True),
                ops.constant(rng.standard_normal(10).astype(np.float32)))
    return ov.Model([ops.result(ops.softmax(y, 1))], [x], "resnet_like")


def _mobilenet_like():
    """MobileNetV3's pieces: depthwise convolutions, HSwish, squeeze-excite (ReduceMean, HSigmoid),
    AdaptiveAvgPool to 2x2, an upsampling Interpolate (FPN-style), Concat."""
    rng = np.random.default_rng(11)
    x = ops.parameter([1, 3, 24, 24], np.float32, name="image")
    y = _conv_bn_relu(x, 3, 8, rng, stride=2, act=ops.hswish)
    d = _conv_bn_relu(y, 8, 8, rng, groups=8, act=ops.hswish)
    se = ops.reduce_mean(d, np.array([2, 3]), True)
    se = ops.hsigmoid(ops.convolution(se, ops.constant(rng.standard_normal((8, 8, 1, 1)).astype(np.float32)),
                                      [1, 1], [0, 0], [0, 0], [1, 1]))
    d = ops.multiply(d, se)
    small = _conv_bn_relu(d, 8, 8, rng, stride=2)
    up = opset11.interpolate(small, np.array([2.0, 2.0], np.float32), "nearest", "scales", axes=np.array([2, 3]),
                             coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    y = ops.concat([d, up], 1)
    y = opset8.adaptive_avg_pool(y, np.array([2, 2], np.int64))
    return ov.Model([ops.result(ops.reshape(y, np.array([1, -1]), False))], [x], "mobilenet_like")


def _vit_like():
    """A tiny ViT: conv patch embedding, class token, position embedding, one pre-norm encoder
    block (MVN layer norm, attention through MatMul/Softmax, GELU MLP), head on the class token."""
    rng = np.random.default_rng(12)
    d, heads, patches = 16, 2, 4
    x = ops.parameter([1, 3, 16, 16], np.float32, name="image")
    p = ops.convolution(x, ops.constant(rng.standard_normal((d, 3, 8, 8)).astype(np.float32) * 0.1), [8, 8],
                        [0, 0], [0, 0], [1, 1])
    t = ops.transpose(ops.reshape(p, np.array([1, d, patches]), False), np.array([0, 2, 1]))
    t = ops.concat([ops.constant(rng.standard_normal((1, 1, d)).astype(np.float32)), t], 1)
    t = ops.add(t, ops.constant(rng.standard_normal((1, patches + 1, d)).astype(np.float32) * 0.1))

    def ln(v):
        return ops.add(ops.multiply(ops.mvn(v, np.array([2]), True, 1e-6, "inside_sqrt"),
                                    ops.constant(rng.uniform(0.8, 1.2, d).astype(np.float32))),
                       ops.constant(rng.standard_normal(d).astype(np.float32) * 0.1))

    def lin(v, n_in, n_out):
        return ops.add(ops.matmul(v, ops.constant(rng.standard_normal((n_out, n_in)).astype(np.float32) / n_in ** 0.5),
                                  False, True), ops.constant(rng.standard_normal(n_out).astype(np.float32) * 0.1))

    h = ln(t)
    qkv = ops.transpose(ops.reshape(lin(h, d, 3 * d), np.array([1, patches + 1, 3, heads, d // heads]), False),
                        np.array([2, 0, 3, 1, 4]))
    q, k, v = (ops.squeeze(s, np.array([0])) for s in ops.split(qkv, 0, 3).outputs())
    att = ops.softmax(ops.multiply(ops.matmul(q, k, False, True), ops.constant(np.float32((d // heads) ** -0.5))), -1)
    o = ops.reshape(ops.transpose(ops.matmul(att, v, False, False), np.array([0, 2, 1, 3])),
                    np.array([1, patches + 1, d]), False)
    t = ops.add(t, lin(o, d, d))
    t = ops.add(t, lin(ops.gelu(lin(ln(t), d, 2 * d), "erf"), 2 * d, d))
    cls = ops.gather(t, np.array([0]), np.int64(1))
    return ov.Model([ops.result(ops.softmax(lin(ln(cls), d, 5), -1))], [x], "vit_like")


def _yolo_like():
    """YOLO's neck and head: SiLU, a 2x nearest upsample, Concat, sigmoid decoding."""
    rng = np.random.default_rng(13)
    x = ops.parameter([1, 3, 32, 32], np.float32, name="image")
    c1 = _conv_bn_relu(x, 3, 8, rng, stride=2, act=ops.swish)
    c2 = _conv_bn_relu(c1, 8, 8, rng, stride=2, act=ops.swish)
    up = opset11.interpolate(c2, np.array([2.0, 2.0], np.float32), "nearest", "scales", axes=np.array([2, 3]),
                             coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_floor")
    y = _conv_bn_relu(ops.concat([c1, up], 1), 16, 8, rng, act=ops.swish)
    y = ops.convolution(y, ops.constant(rng.standard_normal((7, 8, 1, 1)).astype(np.float32) * 0.3), [1, 1], [0, 0],
                        [0, 0], [1, 1])
    y = ops.sigmoid(ops.transpose(ops.reshape(y, np.array([1, 7, 256]), False), np.array([0, 2, 1])))
    return ov.Model([ops.result(y)], [x], "yolo_like")


@pytest.mark.parametrize("builder", [_resnet_like, _mobilenet_like, _vit_like, _yolo_like, _ssd_head],
                         ids=["resnet", "mobilenet", "vit", "yolo", "ssd"])
def test_small_vision_models_match_cpu(npu_core, builder):
    _check(npu_core, builder())


@pytest.mark.parametrize("builder", [_resnet_like, _mobilenet_like, _vit_like, _yolo_like],
                         ids=["resnet", "mobilenet", "vit", "yolo"])
def test_small_vision_models_f16(npu_core, builder):
    _check(npu_core, builder(), F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})


def test_a_detector_with_nms_is_refused_by_name_and_queried(npu_core):
    """A detector exported with its post-processing (torchvision's ssdlite): NonMaxSuppression's
    output size depends on the data and the boxes are gathered by its indices. The NPU compiles
    static shapes only: compile_model names the op, query_model leaves it (and what reads it) out."""
    from openvino import opset9

    boxes = ops.parameter([1, 6, 4], np.float32, name="boxes")
    scores = ops.parameter([1, 2, 6], np.float32, name="scores")
    pre = ops.sigmoid(boxes)
    pre.set_friendly_name("decode")
    nms = opset9.non_max_suppression(pre, scores, np.array([3], np.int64), np.array([0.5], np.float32),
                                     np.array([0.1], np.float32), output_type="i64")
    nms.set_friendly_name("nms")
    idx = ops.gather(nms.output(0), np.array(2, np.int64), np.array(1, np.int64))
    picked = ops.gather(ops.squeeze(pre, np.array([0])), idx, np.array(0, np.int64))
    m = ov.Model([ops.result(picked)], [boxes, scores], "det")
    claimed = npu_core.query_model(m, "NPU")
    assert "decode" in claimed and "nms" not in claimed
    with pytest.raises(UnsupportedOpError, match="NonMaxSuppression 'nms'.*dynamic output shape") as e:
        compile_to_blob(m)
    assert e.value.op_type == "NonMaxSuppression"


@pytest.mark.parametrize("mask", [0.0, -1.5], ids=["zero", "bias"])
def test_sdpa_with_a_scalar_mask(npu_core, mask):
    """timm's edgenext calls scaled_dot_product_attention with a scalar mask (a constant [])."""
    q, k, v = (ops.parameter([1, 4, 12, 16], np.float32, name=n) for n in "qkv")
    sdpa = ops.scaled_dot_product_attention(q, k, v, ops.constant(np.float32(mask)), ops.constant(np.float32(0.5)))
    m = ov.Model([ops.result(sdpa)], [q, k, v], "sdpa_scalar_mask")
    _check(npu_core, m)
    _check(npu_core, m, F16_TOL, {"INFERENCE_PRECISION_HINT": "f16"})
