"""KV_CACHE_PRECISION u8 / u4 vs f16: greedy token agreement and KV bytes (docs/npuw.md).

Usage: python bench/kv_quant_agreement.py [--devices CPU,NPU] [--groups 0,4] [--new 96]
Prints, per device, precision and NPUW_EMU_KV_GROUP_SIZE, how many of the greedy tokens equal
the f16-KV run's at the same position (5 stories260K prompts) and the KV bytes NPUW allocated.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "npuw"))

from _oracle import greedy  # noqa: E402

from ov_npu_emu import Core  # noqa: E402
from ov_npu_emu.models import find_model  # noqa: E402

#: "Once upon a time, there was a little girl named Lily.", "Tom and his dog went to the park.",
#: "The sun was shining and the birds", "One day, a big bear found a red ball.",
#: "Sara liked to play with her cat." (stories260K tokenizer)
PROMPTS = [
    [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426],
    [1, 274, 287, 269, 345, 400, 428, 263, 377, 267, 265, 282, 295, 433, 426],
    [1, 291, 262, 379, 286, 262, 415, 271, 299, 269, 265, 268, 315, 418, 419],
    [1, 385, 328, 432, 261, 370, 329, 295, 272, 277, 264, 261, 352, 266, 268, 388, 426],
    [1, 301, 295, 412, 397, 355, 267, 337, 335, 311, 280, 294, 426],
]


def run(
    core: Core, device: str, precision: str, group: int, new: int
) -> tuple[list[list[int]], object, float]:
    cfg = {
        "NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": device,
        "NPUW_LLM_MAX_PROMPT_LEN": 64, "NPUW_LLM_MIN_RESPONSE_LEN": 128,
        "KV_CACHE_PRECISION": precision, "NPUW_EMU_KV_GROUP_SIZE": group,
    }
    xml = find_model("stories260K") / "openvino_model.xml"
    req = core.compile_model(str(xml), "NPU", cfg).create_infer_request()
    outs = []
    t0 = time.perf_counter()
    for p in PROMPTS:
        ids, err = greedy(req, p, new)
        if err:
            raise SystemExit(err)
        outs.append(ids)
    ms = (time.perf_counter() - t0) * 1e3 / (len(PROMPTS) * new)  # prefill included
    return outs, req.impl.kv, ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="CPU,NPU")
    ap.add_argument("--groups", default="0")
    ap.add_argument("--new", type=int, default=96)
    a = ap.parse_args()
    core = Core()
    print(f"{'device':6s} {'KV':4s} {'G':>3s}  agreement per prompt (of {a.new})   mean   "
          "KV bytes (data + scales + residual)   vs f16   ms/token (vs f16)")
    first = None
    for dev in a.devices.split(","):
        base, kv16, ms16 = run(core, dev, "f16", 0, a.new)
        same = ""
        if first is None:
            first = (dev, base)
        else:  # the f16 texts of the devices: the test uses the CPU one for both
            same = str([sum(x == y for x, y in zip(o, b, strict=False)) for o, b in zip(base, first[1], strict=False)])
            same = f"{same} vs {first[0]} f16"
        print(f"{dev:6s} f16  {'-':>3s}  {same:36s} {'':6s} {kv16.nbytes:>9,d}{'':43s}{ms16:.2f}")
        for prec in ("u8", "u4"):
            for g in map(int, a.groups.split(",")):
                outs, kv, ms = run(core, dev, prec, g, a.new)
                agree = [sum(x == y for x, y in zip(o, b, strict=False)) for o, b in zip(outs, base, strict=False)]
                mean = sum(agree) / len(agree)
                print(
                    f"{dev:6s} {prec:4s} {g or kv.head_dims[0]:>3d}  {str(agree):36s} {mean:5.1f}  "
                    f"{kv.nbytes:>9,d} ({kv.data_nbytes:,} + {kv.scale_nbytes:,} + "
                    f"{kv.residual_nbytes:,})  {kv.nbytes / kv16.nbytes:.2f}×    "
                    f"{ms:.2f} ({ms / ms16:.2f}×)"
                )


if __name__ == "__main__":
    main()
