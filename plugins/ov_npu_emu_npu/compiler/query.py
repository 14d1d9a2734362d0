"""``Core.query_model`` on the NPU: which ops of a model the compiler lowers.

The model goes through the front end (static-shape check, lifting, constant folding: PriorBox,
ShapeOf and other shape subgraphs fold away) and through lowering in query mode, where an op
that lowering refuses (no handler, or attributes it does not support) is recorded and replaced by
a placeholder, so every op gets an answer, as the real NPU plugin's query does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openvino as ov

from ov_npu_emu_npu.arch import HardwareConfig
from ov_npu_emu_npu.compiler.frontend import prepare
from ov_npu_emu_npu.compiler.lower import refused_ops
from ov_npu_emu_npu.compiler.pipeline import precision_of

__all__ = ["query"]

_IO = ("Parameter", "Constant")


def query(model: ov.Model, config: Mapping[str, Any] | None = None) -> tuple[set[str], dict[str, str]]:
    """(friendly names of the ops of ``model`` the NPU runs, refused op -> why).

    Ops folded or lifted by the front end count as supported. A Parameter or Constant is
    supported when an op reading it is (or nothing reads it), a Result when what it returns is.
    """
    config = config or {}
    prep = prepare(model, dynamic_ops=True)
    refused = refused_ops(prep, HardwareConfig.from_config(config), f16=precision_of(config) == "f16")
    ops = model.get_ordered_ops()
    supported = {op.get_friendly_name() for op in ops
                 if op.get_type_name() not in (*_IO, "Result") and op.get_friendly_name() not in refused}
    for op in ops:
        t = op.get_type_name()
        if t in _IO:
            readers = [ti.get_node() for out in op.outputs() for ti in out.get_target_inputs()]
            if not readers or any(r.get_friendly_name() in supported or r.get_type_name() == "Result"
                                  for r in readers):
                supported.add(op.get_friendly_name())
    for op in ops:
        if op.get_type_name() == "Result":
            src = op.input_value(0).get_node()
            if src.get_friendly_name() in supported:
                supported.add(op.get_friendly_name())
    return supported, refused
