"""Write the f16-overflow fixture the numerics tests use (deterministic, nothing downloaded).

    python tools/make_numerics_fixture.py [--out tests/fixtures/numerics/overflow-tiny]

A ``tiny`` Llama from the project's model builder (``ov_npu_emu.modelbuilder``, seed 0, vocab
320) whose layer-1 MLP down-projection weights are multiplied by :data:`DOWN_SCALE`: in f32 the
model is an ordinary (random-weight) LLM, but the down-projection output, and the residual stream
after it, pass the f16 maximum 65504 on ordinary prompts, as the FFN outputs of the Gemma and
T5 overflow reports do.  At INFERENCE_PRECISION_HINT=f16 the emulated NPU stores it as inf,
the next RMSNorm turns it into NaN and the greedy tokens change; NPU_EMU_F16_CLAMP=YES or
ACTIVATIONS_SCALE_FACTOR=8, each with the higher-precision compiler parameter, bring the f32
tokens back (tests/genai_shim/test_numerics.py).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import openvino as ov

from ov_npu_emu.modelbuilder import make_model_folder

#: the layer whose down_proj overflows, and the factor on its weights
LAYER = 1
DOWN_SCALE = 50000.0
WEIGHT_NAME = f"model.layers.{LAYER}.mlp.down_proj.weight"
_FILES = ("openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml", "openvino_tokenizer.bin",
          "openvino_detokenizer.xml", "openvino_detokenizer.bin", "config.json", "generation_config.json")


def make(out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_model_folder(Path(tmp) / "m", "tiny", "f32", 0, vocab_size=320)
        model = ov.Core().read_model(folder / "openvino_model.xml")
        hits = [n for n in model.get_ordered_ops() if n.get_friendly_name() == WEIGHT_NAME]
        if len(hits) != 1:
            raise SystemExit(f"expected one Constant {WEIGHT_NAME!r}, found {len(hits)}")
        old = hits[0]
        data = np.array(old.get_data(), dtype=np.float32) * np.float32(DOWN_SCALE)
        new = ov.opset13.constant(data)
        new.set_friendly_name(WEIGHT_NAME)
        for target in list(old.output(0).get_target_inputs()):
            target.replace_source_output(new.output(0))
        model.validate_nodes_and_infer_types()
        out.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, out / "openvino_model.xml", compress_to_fp16=False)
        for f in _FILES[2:]:
            shutil.copyfile(folder / f, out / f)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "fixtures"
                    / "numerics" / "overflow-tiny")
    args = ap.parse_args()
    print(f"wrote {make(args.out)}")


if __name__ == "__main__":
    main()
