"""Vision models on the emulated NPU against the real OpenVINO CPU plugin.

Builds torchvision models (and a small YOLO-style detector) with seeded random weights — no
download, ``weights=None`` —, converts each with ``openvino.convert_model`` at a static input
shape, saves the IR under ``--out``, then for each: the ops ``query_model`` says device NPU
refuses, whether ``compile_model(..., "NPU")`` succeeds, and the largest relative error of every
output (max |a-b| / max |b|) of ours "NPU" and ours "CPU" against the real CPU plugin at
``INFERENCE_PRECISION_HINT=f32``; and the time ours "NPU" took to compile and infer.

Needs torch and torchvision, which are no dependency of the project: run it in a separate venv
(docs/npu_device.md "Vision models" says how to make one)::

    PYTHONPATH=$PWD:$PWD/plugins /work/venv-vision/bin/python tools/vision_models.py --out /tmp/vision
    ... --only resnet18,vit_tiny   # a subset
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _torch() -> Any:
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the venv
        sys.exit("tools/vision_models.py needs torch and torchvision (a separate venv, see the docstring)")
    return torch


def _yolo_like(torch: Any) -> Any:
    """A small YOLO-style detector: Conv+BN+SiLU stages, an FPN with nearest upsampling and concat,
    three heads whose grids are decoded (sigmoid, grid offsets, anchors) and concatenated."""
    nn = torch.nn

    def cbs(cin: int, cout: int, k: int = 3, s: int = 1) -> Any:
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())

    class C2(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.a, self.b = cbs(c, c // 2, 1), cbs(c, c // 2, 1)
            self.m = nn.Sequential(cbs(c // 2, c // 2), cbs(c // 2, c // 2))
            self.out = cbs(c, c, 1)

        def forward(self, x: Any) -> Any:
            a = self.a(x)
            return self.out(torch.cat([a + self.m(a), self.b(x)], 1))

    class SPPF(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.cv1, self.cv2 = cbs(c, c // 2, 1), cbs(c * 2, c, 1)
            self.pool = nn.MaxPool2d(5, 1, 2)

        def forward(self, x: Any) -> Any:
            x = self.cv1(x)
            y1 = self.pool(x)
            y2 = self.pool(y1)
            return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))

    class Yolo(nn.Module):
        def __init__(self, nc: int = 8, na: int = 3) -> None:
            super().__init__()
            self.nc, self.na, self.no = nc, na, nc + 5
            self.stem = nn.Sequential(cbs(3, 16, 3, 2), cbs(16, 32, 3, 2), C2(32))
            self.s3 = nn.Sequential(cbs(32, 64, 3, 2), C2(64))
            self.s4 = nn.Sequential(cbs(64, 96, 3, 2), C2(96))
            self.s5 = nn.Sequential(cbs(96, 128, 3, 2), C2(128), SPPF(128))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.l4, self.l3 = cbs(128 + 96, 96, 1), cbs(96 + 64, 64, 1)
            self.d4, self.d5 = cbs(64, 64, 3, 2), cbs(96, 96, 3, 2)
            self.p4, self.p5 = cbs(64 + 96, 96, 1), cbs(96 + 128, 128, 1)
            self.heads = nn.ModuleList(nn.Conv2d(c, na * self.no, 1) for c in (64, 96, 128))
            self.register_buffer("anchors", torch.tensor(
                [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]],
                dtype=torch.float32).view(3, 1, na, 1, 1, 2))

        def forward(self, x: Any) -> Any:
            c3 = self.s3(self.stem(x))
            c4 = self.s4(c3)
            c5 = self.s5(c4)
            f4 = self.l4(torch.cat([self.up(c5), c4], 1))
            f3 = self.l3(torch.cat([self.up(f4), c3], 1))
            g4 = self.p4(torch.cat([self.d4(f3), f4], 1))
            g5 = self.p5(torch.cat([self.d5(g4), c5], 1))
            outs = []
            for i, (f, stride) in enumerate(zip((f3, g4, g5), (8, 16, 32), strict=True)):
                b, _, h, w = f.shape
                p = self.heads[i](f).view(b, self.na, self.no, h, w).permute(0, 1, 3, 4, 2).sigmoid()
                gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
                grid = torch.stack((gx, gy), 2).view(1, 1, h, w, 2).float()
                xy = (p[..., :2] * 2 - 0.5 + grid) * stride
                wh = (p[..., 2:4] * 2) ** 2 * self.anchors[i]
                outs.append(torch.cat((xy, wh, p[..., 4:]), -1).view(b, -1, self.no))
            return torch.cat(outs, 1)

    return Yolo()


def _ssd_heads(torch: Any, model: Any) -> Any:
    """An SSD detector without its torch post-processing: backbone, heads, boxes decoded
    against the anchors (CENTER_SIZE), class scores through softmax."""
    from torchvision.models.detection.image_list import ImageList

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x: Any) -> Any:
            feats = list(self.m.backbone(x).values())
            head = self.m.head(feats)
            # the anchors depend only on the shapes: the converter folds them into a constant
            anchors = self.m.anchor_generator(ImageList(x, [tuple(x.shape[-2:])]), feats)[0]
            boxes = self.m.box_coder.decode_single(head["bbox_regression"][0], anchors)
            return boxes, torch.softmax(head["cls_logits"][0], -1)

    return Heads()


def _seg(torch: Any, model: Any) -> Any:
    class Out(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x: Any) -> Any:
            return self.m(x)["out"]

    return Out()


def _det_full(torch: Any, model: Any) -> Any:
    """A torchvision detector with its post-processing (NMS): boxes, scores and labels of one image."""

    class Full(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x: Any) -> Any:
            d = self.m(list(x))[0]
            return d["boxes"], d["scores"], d["labels"]

    return Full()


#: timm models (``pretrained=False``: random weights, no download), input side if not 224
TIMM = {
    "mobilevit_xxs": 256, "levit_128s": 224, "convnextv2_atto": 224, "deit_tiny_patch16_224": 224,
    "poolformer_s12": 224, "ghostnet_100": 224, "rexnet_100": 224, "mixnet_s": 224, "edgenext_xx_small": 256,
    "fastvit_t8": 256, "repvit_m0_9": 224, "efficientvit_m0": 224, "efficientvit_b0": 224,
    "eva02_tiny_patch14_224": 224, "mobilenetv4_conv_small": 224, "hgnetv2_b0": 224, "tiny_vit_5m_224": 224,
    "efficientformerv2_s0": 224, "coatnet_nano_rw_224": 224, "pvt_v2_b0": 224, "xcit_nano_12_p16_224": 224,
    "mambaout_femto": 224, "starnet_s1": 224, "inception_next_atto": 224, "crossvit_tiny_240": 240,
    "hrnet_w18_small": 224, "dla34": 224, "cspresnet50": 224, "mobileone_s0": 224,
}


def builders(torch: Any) -> dict[str, tuple[Callable[[], Any], tuple[int, ...]]]:
    """name -> (a builder of the eval-mode torch module, its input shape)."""
    import torchvision.models as tvm
    from torchvision.models import detection, segmentation
    from torchvision.models.swin_transformer import SwinTransformer
    from torchvision.models.vision_transformer import VisionTransformer

    img = (1, 3, 224, 224)
    models: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
        "resnet18": (lambda: tvm.resnet18(weights=None), img),
        "mobilenet_v3_small": (lambda: tvm.mobilenet_v3_small(weights=None), img),
        "efficientnet_b0": (lambda: tvm.efficientnet_b0(weights=None), img),
        "convnext_tiny": (lambda: tvm.convnext_tiny(weights=None), (1, 3, 160, 160)),
        "vit_tiny": (lambda: VisionTransformer(image_size=96, patch_size=16, num_layers=4, num_heads=4,
                                               hidden_dim=128, mlp_dim=256, num_classes=100), (1, 3, 96, 96)),
        "swin_tiny": (lambda: SwinTransformer(patch_size=[4, 4], embed_dim=48, depths=[2, 2, 2], num_heads=[2, 4, 8],
                                              window_size=[7, 7], num_classes=100), (1, 3, 112, 112)),
        "ssdlite320_heads": (lambda: _ssd_heads(torch, detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=21)), (1, 3, 320, 320)),
        "yolo_like": (lambda: _yolo_like(torch), (1, 3, 256, 256)),
        "lraspp_mobilenet_v3": (lambda: _seg(torch, segmentation.lraspp_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=21)), (1, 3, 256, 256)),
        "deeplabv3_mobilenet_v3": (lambda: _seg(torch, segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=21, aux_loss=False)), (1, 3, 256, 256)),
        "fcn_resnet50": (lambda: _seg(torch, segmentation.fcn_resnet50(
            weights=None, weights_backbone=None, num_classes=21, aux_loss=False)), (1, 3, 160, 160)),
        # what a new user would also try
        "shufflenet_v2_x0_5": (lambda: tvm.shufflenet_v2_x0_5(weights=None), img),
        "squeezenet1_1": (lambda: tvm.squeezenet1_1(weights=None), img),
        "mnasnet0_5": (lambda: tvm.mnasnet0_5(weights=None), img),
        "regnet_y_400mf": (lambda: tvm.regnet_y_400mf(weights=None), img),
        "densenet121": (lambda: tvm.densenet121(weights=None), (1, 3, 160, 160)),
        "googlenet": (lambda: tvm.googlenet(weights=None, aux_logits=False, init_weights=True), img),
        "maxvit_t": (lambda: tvm.maxvit_t(weights=None), img),
        "mobilenet_v2": (lambda: tvm.mobilenet_v2(weights=None), img),
        "efficientnet_v2_s": (lambda: tvm.efficientnet_v2_s(weights=None), img),
        "inception_v3": (lambda: tvm.inception_v3(weights=None, aux_logits=False, init_weights=True),
                         (1, 3, 299, 299)),
        "vit_b_16": (lambda: tvm.vit_b_16(weights=None), img),
        "swin_v2_t": (lambda: tvm.swin_v2_t(weights=None), (1, 3, 256, 256)),
        "ssdlite320_full": (lambda: _det_full(torch, detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=21)), (1, 3, 320, 320)),
        "fasterrcnn_mobilenet_320": (lambda: _det_full(torch, detection.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, num_classes=21)), (1, 3, 320, 320)),
    }
    try:
        import timm
    except ImportError:  # timm is optional
        return models
    for name, side in TIMM.items():
        models[f"timm/{name}"] = (lambda n=name: timm.create_model(n, pretrained=False), (1, 3, side, side))
    return models


def randomize(torch: Any, model: Any) -> None:
    """Random (seeded) weights that make every layer matter: torchvision zero-initialises some
    heads (a ViT's classifier would output zeros) and a fresh BatchNorm is an identity."""
    nn = torch.nn
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)) and m.weight is not None:
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
        for p in model.parameters():
            if p.numel() and not bool(p.any()):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def export(torch: Any, name: str, out: Path) -> Path:
    import openvino as ov

    build, shape = builders(torch)[name]
    torch.manual_seed(0)
    model = build().eval()
    randomize(torch, model)
    xml = out / f"{name.replace('/', '_')}.xml"
    with torch.no_grad():
        ov_model = ov.convert_model(model, example_input=torch.randn(*shape), input=[list(shape)])
    ov.save_model(ov_model, xml, compress_to_fp16=False)
    return xml


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6)) if b.size else 0.0


def measure(xml: Path) -> dict[str, Any]:
    import openvino as real_ov

    import ov_npu_emu as ours

    model = real_ov.Core().read_model(xml)
    rng = np.random.default_rng(0)
    feed = {p.get_any_name(): rng.standard_normal(list(p.get_shape())).astype(np.float32) for p in model.inputs}
    ref_req = real_ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    ref_res = ref_req.infer(feed)
    ref = [np.array(ref_res[i]) for i in range(len(model.outputs))]
    row: dict[str, Any] = {"ops": len(model.get_ordered_ops()), "scale": max(float(np.abs(r).max()) for r in ref)}

    core = ours.Core()
    supported = core.query_model(model, "NPU")
    refused = sorted({n.get_type_name() for n in model.get_ordered_ops()
                      if n.get_friendly_name() not in supported
                      and n.get_type_name() not in ("Parameter", "Result", "Constant")})
    row["refused"] = ",".join(refused) or "-"
    for dev in ("NPU", "CPU"):
        t0 = time.perf_counter()
        try:
            cfg = {"INFERENCE_PRECISION_HINT": "f32"}
            req = core.compile_model(model, dev, cfg).create_infer_request()
            t1 = time.perf_counter()
            res = req.infer(feed)
            t2 = time.perf_counter()
            row[f"{dev}_err"] = max(rel_err(np.array(res[i]), r) for i, r in enumerate(ref))
            row[f"{dev}_ok"] = "yes"
            row[f"{dev}_time"] = f"{t1 - t0:.1f}+{t2 - t1:.1f}"
        except Exception as e:  # noqa: BLE001 - the table reports every failure
            row[f"{dev}_ok"] = f"no: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
            row[f"{dev}_err"] = float("nan")
            row[f"{dev}_time"] = "-"
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for the IRs")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--reuse", action="store_true", help="read IRs already under --out instead of exporting")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    args = ap.parse_args(argv)
    torch = _torch()
    torch.set_num_threads(2)
    names = list(builders(torch))
    if args.list:
        print("\n".join(names))
        return 0
    if args.only:
        names = [n for n in args.only.split(",") if n]
    args.out.mkdir(parents=True, exist_ok=True)
    print("| model | input | ops | NPU refuses (query_model) | NPU compiles | NPU max rel err | ours CPU max rel err"
          " | max abs output | NPU compile+infer s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        xml = args.out / f"{name.replace('/', '_')}.xml"
        step = "export"
        try:
            if not (args.reuse and xml.exists()):
                xml = export(torch, name, args.out)
            step = "measure"
            r = measure(xml)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            print(f"| {name} | | - | {step} failed: {type(e).__name__}: {str(e).splitlines()[0][:80]} | | | | | |")
            continue
        shape = "x".join(map(str, builders(torch)[name][1][1:]))
        print(f"| {name} | {shape} | {r['ops']} | {r['refused']} | {r['NPU_ok']} | {r['NPU_err']:.1e}"
              f" | {r['CPU_err']:.1e} | {r['scale']:.2g} | {r['NPU_time']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
