"""Write the LoRA adapters the LoRA tests use (PEFT-style safetensors, numpy only, deterministic).

    python tools/make_lora_fixture.py [--out tests/fixtures/lora]

The adapters target the committed optimum export ``tests/fixtures/optimum/llama-fp32`` (hidden 128,
2 layers): tensor names are PEFT's ``base_model.model.<module>.lora_A.weight`` ([rank, in]) and
``.lora_B.weight`` ([out, rank]), the names openvino.genai matches against the model's MatMul nodes
after dropping the ``base_model.model.`` prefix.  B is not zero (a freshly initialised PEFT
adapter's is) so that each adapter changes the greedy text.
"""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

import numpy as np

#: (file, seed, rank, modules, B scale): q/v only, all projections, and one rank over NPUW's default 32
ADAPTERS = (
    ("llama_qv_r8.safetensors", 1, 8, ("self_attn.q_proj", "self_attn.v_proj"), 2.0),
    ("llama_mlp_r4.safetensors", 2, 4, ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "self_attn.o_proj"), 2.0),
    ("llama_qv_r40.safetensors", 3, 40, ("self_attn.q_proj", "self_attn.v_proj"), 1.0),
)

#: llama-fp32's projection shapes (out, in)
_SHAPES = {
    "self_attn.q_proj": (128, 128),
    "self_attn.k_proj": (64, 128),
    "self_attn.v_proj": (64, 128),
    "self_attn.o_proj": (128, 128),
    "mlp.gate_proj": (128, 128),
    "mlp.up_proj": (128, 128),
    "mlp.down_proj": (128, 128),
}
_LAYERS = 2


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The documented safetensors layout: u64 header size, JSON header, raw little-endian data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_vlm_lora(path: Path) -> Path:
    """A PEFT-style rank-4 LoRA on the VLM fixtures' 2-layer language model (tests/fixtures/vlm):
    q, v and down projections, B not zero; written to ``path``."""
    rng = np.random.default_rng(3)
    shapes = {"self_attn.q_proj": (64, 64), "self_attn.v_proj": (32, 64), "mlp.down_proj": (64, 128)}
    tensors = {}
    for layer in range(2):
        for mod, (n_out, n_in) in shapes.items():
            key = f"base_model.model.language_model.layers.{layer}.{mod}"
            tensors[f"{key}.lora_A.weight"] = rng.standard_normal((4, n_in)) / np.sqrt(n_in)
            tensors[f"{key}.lora_B.weight"] = rng.standard_normal((n_out, 4))
    write_safetensors(path, tensors)
    return path


def make_adapter(seed: int, rank: int, modules: tuple[str, ...], b_scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for layer in range(_LAYERS):
        for mod in modules:
            n_out, n_in = _SHAPES[mod]
            key = f"base_model.model.model.layers.{layer}.{mod}"
            out[f"{key}.lora_A.weight"] = rng.standard_normal((rank, n_in)) / np.sqrt(n_in)
            out[f"{key}.lora_B.weight"] = rng.standard_normal((n_out, rank)) * b_scale / np.sqrt(rank)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests/fixtures/lora"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, seed, rank, modules, scale in ADAPTERS:
        write_safetensors(out / name, make_adapter(seed, rank, modules, scale))
        print(out / name)


if __name__ == "__main__":
    main()
