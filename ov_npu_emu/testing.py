"""Shared pytest fixtures and tiny model factories for ov_npu_emu and plugin authors.

Opt in from a conftest with ``pytest_plugins = ["ov_npu_emu.testing"]`` (the project's root
``tests/conftest.py`` does).  Fixtures (session-scoped, built once per test run):

``tiny_model_dir``        builder ``tiny`` preset folder, f32 weights (2 layers, GQA 4/2, vocab 512)
``tiny_model_dir_f16``    the same model with f16-compressed weights
``tiny_model_dir_int8``   the same model with int8 (u8 + zero point + f16 scale) weights
``tiny_model_dir_int4``   the same model with sym int4 weights, group size 16 (int8 embeddings)
``small_model_dir``       builder ``small`` preset folder, f32 (4 layers, hidden 256, vocab 2048)
``tiny_reference``        :class:`~ov_npu_emu.modelbuilder.LlamaReference` of ``tiny_model_dir``
``stories260k_dir``       the trained stories260K folder bundled in ov_npu_emu/models (see
                          :func:`ov_npu_emu.models.find_model`); an error, not a skip, if missing

Model factories (plain functions returning an ``openvino.Model``; static shapes):

``make_add_model(shape)``                          a + b
``make_model_with_memory(shape, dtype, var_id)``   ReadValue(var) + input_data -> Assign(var)
``make_small_cnn(seed)``                           conv/pool/softmax network on [1,3,16,16]

Oracle helpers:

``CPU_EXACT_CONFIG``                               compile config for exact f32 on the CPU plugin
``run_stateful_greedy(compiled, prompt, steps)``   drive a stateful LLM like openvino_genai
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:  # openvino and the builder load lazily: importing this plugin stays cheap
    import openvino as ov

    from ov_npu_emu.modelbuilder import LlamaReference

__all__ = [
    "CPU_EXACT_CONFIG",
    "make_add_model",
    "make_model_with_memory",
    "make_small_cnn",
    "run_stateful_greedy",
    "small_model_dir",
    "stories260k_dir",
    "tiny_model_dir",
    "tiny_model_dir_f16",
    "tiny_model_dir_int8",
    "tiny_model_dir_int4",
    "tiny_reference",
]

#: CPU plugin config for exact f32 comparisons: this CPU otherwise computes in bf16, stores KV
#: as u8, and quantizes activations dynamically for int8-weight models.
CPU_EXACT_CONFIG: dict[str, str] = {
    "INFERENCE_PRECISION_HINT": "f32",
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
}


def run_stateful_greedy(
    compiled: ov.CompiledModel,
    prompt: Sequence[int],
    steps: int,
) -> tuple[list[int], list[np.ndarray]]:
    """Drive a stateful LLM (optimum interface) as openvino_genai does: one prefill call, then
    one token per call with a growing attention mask and ``beam_idx = [0]``.

    Works with ``openvino.CompiledModel`` and with ov_npu_emu's.  Returns the ``steps`` greedy
    tokens and the logits of all ``steps + 1`` calls (prefill first).
    """
    req = compiled.create_infer_request()
    req.reset_state()
    length = len(prompt)
    out = req.infer(
        {
            "input_ids": np.array([list(prompt)], dtype=np.int64),
            "attention_mask": np.ones((1, length), dtype=np.int64),
            "position_ids": np.arange(length, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, dtype=np.int32),
        }
    )
    logits = [np.array(out["logits"])]
    tokens: list[int] = []
    for _ in range(steps):
        token = int(np.argmax(logits[-1][0, -1]))
        tokens.append(token)
        out = req.infer(
            {
                "input_ids": np.array([[token]], dtype=np.int64),
                "attention_mask": np.ones((1, length + 1), dtype=np.int64),
                "position_ids": np.array([[length]], dtype=np.int64),
                "beam_idx": np.zeros(1, dtype=np.int32),
            }
        )
        logits.append(np.array(out["logits"]))
        length += 1
    return tokens, logits


# ---------------------------------------------------------------------------------------- models


def make_add_model(shape: Sequence[int] = (2, 3), dtype: type = np.float32) -> ov.Model:
    """Two inputs ``a`` and ``b`` of ``shape``; output ``res`` = a + b."""
    import openvino as ov
    import openvino.opset13 as ops

    a = ops.parameter(list(shape), dtype, name="a")
    b = ops.parameter(list(shape), dtype, name="b")
    a.output(0).get_tensor().set_names({"a"})
    b.output(0).get_tensor().set_names({"b"})
    res = ops.result(ops.add(a, b))
    res.output(0).get_tensor().set_names({"res"})
    return ov.Model([res], [a, b], name="add_model")


def make_model_with_memory(
    shape: Sequence[int] = (1, 4), dtype: type = np.float32, var_id: str = "var_id_667"
) -> ov.Model:
    """openvino's ``generate_model_with_memory``: input ``input_data`` → ReadValue(var, zeros) +
    input → Assign(var); output ``res`` is the new state: each infer adds the input to it."""
    import openvino as ov
    import openvino.opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    x = ops.parameter(list(shape), dtype, name="input_data")
    x.output(0).get_tensor().set_names({"input_data"})
    info = VariableInfo()
    info.data_shape = ov.PartialShape(list(shape))
    info.data_type = ov.Type(np.dtype(dtype))
    info.variable_id = var_id
    var = Variable(info)
    rv = ops.read_value(ops.constant(np.zeros(shape, dtype)), var)
    add = ops.add(rv, x)
    assign = ops.assign(add, var)
    res = ops.result(add)
    res.output(0).get_tensor().set_names({"res"})
    return ov.Model([res], [assign], [x], name="memory_model")


def make_small_cnn(seed: int = 0) -> ov.Model:
    """A static CNN: input ``data`` f32 [1,3,16,16] → output ``prob`` f32 [1,10] (softmax).

    Ops: Convolution(+bias Add), Relu, GroupConvolution (depthwise), Clamp, MaxPool, Add
    (residual), Multiply, AvgPool, Transpose, Reshape, MatMul, Softmax.
    """
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    data = ops.parameter([1, 3, 16, 16], np.float32, name="data")
    data.output(0).get_tensor().set_names({"data"})
    x = ops.convolution(data, w(8, 3, 3, 3), [1, 1], [1, 1], [1, 1], [1, 1])  # [1,8,16,16]
    x = ops.relu(ops.add(x, w(1, 8, 1, 1)))
    # Depthwise: groups=8, weights [G, out/G, in/G, kh, kw].
    y = ops.group_convolution(x, w(8, 1, 1, 3, 3), [1, 1], [1, 1], [1, 1], [1, 1])
    y = ops.clamp(y, 0.0, 6.0)
    x = ops.add(x, y)  # residual
    x = ops.max_pool(x, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2]).output(0)  # [1,8,8,8]
    x = ops.convolution(x, w(16, 8, 1, 1), [1, 1], [0, 0], [0, 0], [1, 1])  # [1,16,8,8]
    x = ops.multiply(x, np.float32(0.5))
    x = ops.avg_pool(x, [2, 2], [0, 0], [0, 0], [2, 2], exclude_pad=True)  # [1,16,4,4]
    x = ops.transpose(x, np.array([0, 2, 3, 1], dtype=np.int64))  # [1,4,4,16]
    x = ops.reshape(x, np.array([1, 256], dtype=np.int64), special_zero=False)
    logits = ops.matmul(x, w(256, 10), False, False)
    prob = ops.softmax(logits, -1)
    res = ops.result(prob)
    res.output(0).get_tensor().set_names({"prob"})
    return ov.Model([res], [data], name="small_cnn")


# -------------------------------------------------------------------------------------- fixtures


def _builder_dir(
    tmp_path_factory: pytest.TempPathFactory, preset: str, dtype: str, **kw: Any
) -> Path:
    from ov_npu_emu.modelbuilder import make_model_folder

    return make_model_folder(
        tmp_path_factory.mktemp(f"{preset}_{dtype}_model"), preset, dtype, seed=0, **kw
    )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the builder ``tiny`` preset (f32, seed 0); loads in openvino_genai."""
    return _builder_dir(tmp_path_factory, "tiny", "f32")


@pytest.fixture(scope="session")
def tiny_model_dir_f16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` preset with f16 weight constants (+ Convert to f32)."""
    return _builder_dir(tmp_path_factory, "tiny", "f16")


@pytest.fixture(scope="session")
def tiny_model_dir_int8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` preset with int8 weight compression (u8 weight, u8 zero point, f16 scale)."""
    return _builder_dir(tmp_path_factory, "tiny", "int8")


@pytest.fixture(scope="session")
def tiny_model_dir_int4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny`` preset, sym int4 group size 16 (i4 + f16 scale); embeddings stay int8."""
    return _builder_dir(tmp_path_factory, "tiny", "int4", group_size=16)


@pytest.fixture(scope="session")
def small_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the builder ``small`` preset (f32, seed 0, ~4M parameters)."""
    return _builder_dir(tmp_path_factory, "small", "f32")


@pytest.fixture(scope="session")
def tiny_reference(tiny_model_dir: Path) -> LlamaReference:
    """Numpy reference (float64) of ``tiny_model_dir``: ``forward`` / ``greedy_generate``."""
    from ov_npu_emu.modelbuilder import load_reference

    return load_reference(tiny_model_dir)


@pytest.fixture(scope="session")
def stories260k_dir() -> Path:
    """The trained TinyStories 260K model folder (optimum export + tokenizer IR) bundled in
    ``ov_npu_emu/models``, or ``$OV_NPU_EMU_MODELS_DIR/stories260K``; errors if missing."""
    from ov_npu_emu.models import find_model

    return find_model("stories260K")
