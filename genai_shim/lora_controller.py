"""LoRA in the model graph, as openvino.genai's AdapterController puts it there.

At construction the adapters of the pipeline's AdapterConfig pick the MatMul nodes to adapt: a
node is adapted when its friendly name contains an adapter layer name (the tensor name minus
``base_model.model.`` and the ``.lora_A.weight`` suffix; the real's substring rule, also tried with
``.`` → ``_``).  Each adapted ``y = x·Wᵀ`` becomes ``y + ((x·Aᵀ) ⊙ alpha)·Bᵀ`` where, by mode:

* DYNAMIC / STATIC_RANK (and AUTO: DYNAMIC on CPU and NPU, as the real): A, alpha, B are model
  variables ``lora_state_<n><node>.A|.alpha|.B`` (ReadValue/Assign, no initializer).  Before each
  generate() the controller writes them: several adapters are blended by concatenating their
  factors along the rank (alpha broadcast to ``[1, rank_i]`` per adapter), no adapter for a node is
  rank 0.  So adapters and alphas change per call without recompiling.  NPUW lifts these variables
  to inputs of static rank (``NPUW_LLM_MAX_LORA_RANK``, see ov_npu_emu_npuw.lora).
* STATIC: the same subgraph over constants; FUSE: ``W + (alpha·B)·A`` folded into the weight.
  Both are fixed at construction (a different config in generate() is the real's error).

The alpha of the safetensors file is not used, only the AdapterConfig's (the real's TODO says so).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino.op.util import Variable, VariableInfo

from genai_shim.lora import Adapter, AdapterConfig, LoRATensors
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["AdapterController", "LORA_STATE_PREFIX", "resolve_adapters"]

logger = logging.getLogger(__name__)

#: every variable this module makes starts with it (the real's name; NPUW matches on it too)
LORA_STATE_PREFIX = "lora_state_"
#: the prefix the LLM pipelines set (set_tensor_name_prefix("base_model.model.")): PEFT's wrapper
TENSOR_NAME_PREFIX = "base_model.model."

_Mode = AdapterConfig.Mode
_DYNAMIC_MODES = (_Mode.MODE_AUTO, _Mode.MODE_DYNAMIC, _Mode.MODE_STATIC_RANK)


def resolve_adapters(value: Any) -> AdapterConfig | None:
    """The ``adapters`` property / GenerationConfig field: an AdapterConfig, an Adapter (the real's
    ``adapters(adapter)`` property form) or None."""
    if value is None or isinstance(value, AdapterConfig):
        return value
    if isinstance(value, Adapter):
        return AdapterConfig(value)
    raise ConfigError(
        f"LoRA adapters must be a genai_shim.AdapterConfig (or an Adapter), got {type(value).__name__}",
        key="adapters",
    )


def _find_layer(adapter: Adapter, node_name: str) -> LoRATensors | None:
    """The real's LoRAWeightGetterDefault: the first (in name order) layer of ``adapter`` whose
    name, without the prefix, occurs in the node name or in it with dots as underscores."""
    variants = (node_name, node_name.replace(".", "_"))
    for layer in sorted(adapter.layers):
        if not layer.startswith(TENSOR_NAME_PREFIX):
            continue
        short = layer[len(TENSOR_NAME_PREFIX) :]
        if any(short in v for v in variants):
            return adapter.layers[layer]
    return None


def _layer_names_used(adapter: Adapter, node_names: list[str]) -> set[str]:
    used = set()
    for name in node_names:
        variants = (name, name.replace(".", "_"))
        for layer in sorted(adapter.layers):
            if layer.startswith(TENSOR_NAME_PREFIX) and any(layer[len(TENSOR_NAME_PREFIX) :] in v for v in variants):
                used.add(layer)
                break
    return used


def blend(
    parts: list[tuple[LoRATensors, float]], in_dim: int, out_dim: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A [Σr, in], alpha [1, Σr], B [out, Σr] of several adapters at one node (the real's
    concat_adapters); rank 0 when none applies (the real's empty_adapters)."""
    if not parts:
        return (np.zeros((0, in_dim), np.float32), np.zeros((1, 0), np.float32), np.zeros((out_dim, 0), np.float32))
    a = np.concatenate([p.A for p, _ in parts], axis=0).astype(np.float32)
    alpha = np.concatenate([np.full((1, p.rank), w, np.float32) for p, w in parts], axis=1)
    b = np.concatenate([p.B for p, _ in parts], axis=1).astype(np.float32)
    return a, alpha, b


class _Site:
    """One adapted MatMul: its in/out sizes and (dynamic modes) its three variable ids."""

    __slots__ = ("name", "in_dim", "out_dim", "var_a", "var_alpha", "var_b")

    def __init__(self, name: str, in_dim: int, out_dim: int, prefix: str) -> None:
        self.name, self.in_dim, self.out_dim = name, in_dim, out_dim
        self.var_a, self.var_alpha, self.var_b = prefix + ".A", prefix + ".alpha", prefix + ".B"


def _variable(model: ov.Model, var_id: str, shape: list[int]) -> ov.Node:
    info = VariableInfo()
    info.data_shape = ov.PartialShape(shape)
    info.data_type = ov.Type.f32  # our factors are f32 (read_safetensors widens f16/bf16)
    info.variable_id = var_id
    var = Variable(info)
    read = ops.read_value(var)
    model.add_variables([var])
    model.add_sinks([ops.assign(read, var)])  # as the real: CPU wants the Assign
    return read


def _weight_constant(node: ov.Node) -> tuple[np.ndarray, ov.Node]:
    """The constant behind a MatMul's weight (through a decompression Convert) as f32, and the
    node to replace."""
    src = node.input_value(1).get_node()
    const = src.input_value(0).get_node() if src.get_type_name() == "Convert" else src
    if const.get_type_name() != "Constant":
        raise ConfigError(
            "LoRA adapter application: not supported decompression pattern at the weight input "
            "(presumably low-bit compression). Use f32/f16/bf16 weights only if MODE_FUSE is used.",
            key="adapters",
        )
    return np.asarray(const.get_data(), dtype=np.float32), src


class AdapterController:
    """Injects the adapters of ``config`` into ``model`` (in place) and writes them per call."""

    def __init__(self, model: ov.Model, config: AdapterConfig, device: str) -> None:
        mode = config.mode
        if mode == _Mode.MODE_AUTO:  # the real's default_modes: DYNAMIC on CPU, GPU and NPU
            mode = _Mode.MODE_DYNAMIC
        self._config = AdapterConfig(mode).updated(config)
        self._sites: list[_Site] = []
        self._state_names: set[str] = set()
        self._need_full_apply = True
        adapters = self._config.get_adapters_and_alphas()
        matmuls = [n for n in model.get_ordered_ops() if n.get_type_name() == "MatMul"]
        for node in matmuls:
            name = node.get_friendly_name()
            found = [(t, w) for a, w in adapters if (t := _find_layer(a, name)) is not None]
            if not found:
                continue
            self._inject(model, node, found, mode)
        names = [n.get_friendly_name() for n in matmuls]
        for a in self._config.get_adapters():
            unused = sorted(set(a.layers) - _layer_names_used(a, names))
            if unused:  # the real prints the same warning to stderr
                logger.warning(
                    "There unused LoRA tensors. The result of generation can be not accurate. Check if "
                    "a given adapter file is compatible with the base model. Unused: %s",
                    ", ".join(unused),
                )
        model.validate_nodes_and_infer_types()

    # -- construction -------------------------------------------------------------------------------
    def _inject(self, model: ov.Model, node: ov.Node, found: list[tuple[LoRATensors, float]], mode: _Mode) -> None:
        transpose_b = bool(node.get_attributes()["transpose_b"])
        wshape = node.get_input_partial_shape(1)
        in_dim, out_dim = wshape[int(transpose_b)].get_length(), wshape[int(not transpose_b)].get_length()
        target = node.output(0)
        consumers = list(target.get_target_inputs())
        a, alpha, b = blend(found, in_dim, out_dim)
        if mode == _Mode.MODE_FUSE:
            weight, src = _weight_constant(node)
            delta = (alpha * b) @ a  # the real's order: (alpha ⊙ B) · A, [out, in]
            fused = weight + (delta if transpose_b else delta.T)
            new = ops.constant(fused.astype(src.get_output_element_type(0).to_dtype()))
            for inp in list(src.output(0).get_target_inputs()):
                inp.replace_source_output(new.output(0))
            return
        name = node.get_friendly_name()
        if mode == _Mode.MODE_STATIC:
            fa, falpha, fb = ops.constant(a), ops.constant(alpha), ops.constant(b)
        else:
            rank = -1 if mode == _Mode.MODE_DYNAMIC else a.shape[0]
            site = _Site(name, in_dim, out_dim, f"{LORA_STATE_PREFIX}{len(model.get_sinks())}{name}")
            fa = _variable(model, site.var_a, [rank, in_dim])
            falpha = _variable(model, site.var_alpha, [1, rank])
            fb = _variable(model, site.var_b, [out_dim, rank])
            self._sites.append(site)
            self._state_names.update((site.var_a, site.var_alpha, site.var_b))
        x = node.input_value(0)
        low = ops.matmul(x, fa, False, True)
        low = ops.multiply(low, falpha)
        delta_out = ops.matmul(low, fb, False, True)
        out = ops.add(target, delta_out)
        out.output(0).get_tensor().set_names(set(target.get_names()))
        for inp in consumers:
            inp.replace_source_output(out.output(0))

    # -- per generate() -----------------------------------------------------------------------------
    def has_state_name(self, name: str) -> bool:
        return name in self._state_names

    @property
    def is_dynamic(self) -> bool:
        return self._config.mode in _DYNAMIC_MODES

    def apply(self, request: Any, config: AdapterConfig | None) -> None:
        """The real's AdapterController::apply: take ``config`` (None keeps the current one) and
        write the variables when anything changed since the last call."""
        changed = False
        if config is not None:
            if config.mode not in (_Mode.MODE_AUTO, self._config.mode):
                raise ConfigError(
                    "AdapterConfig::mode cannot be changed and should be configured once for a model "
                    "at the initialization",
                    key="adapters",
                )
            same = config.get_adapters_and_alphas() == self._config.get_adapters_and_alphas() and all(
                x is y for x, y in zip(config.get_adapters(), self._config.get_adapters(), strict=False)
            )
            if not same and not self.is_dynamic:
                raise ConfigError(
                    "Cannot change adapters and/or the alphas when not one of the dynamic modes are used.",
                    key="adapters",
                )
            changed = not same
            self._config = self._config.updated(config)
        if self.is_dynamic and (changed or self._need_full_apply):
            self._need_full_apply = False
            self._write(request)

    def _write(self, request: Any) -> None:
        states = {s.get_name(): s for s in request.query_state()}
        adapters = self._config.get_adapters_and_alphas()
        for site in self._sites:
            found = [(t, w) for a, w in adapters if (t := _find_layer(a, site.name)) is not None]
            a, alpha, b = blend(found, site.in_dim, site.out_dim)
            for var, value in ((site.var_a, a), (site.var_alpha, alpha), (site.var_b, b)):
                if var not in states:
                    raise UserInputError(
                        f"the compiled model has no LoRA state {var!r}; it was compiled without these adapters"
                    )
                states[var].set_state(ov.Tensor(np.ascontiguousarray(value)))

    def reset_kv(self, request: Any) -> None:
        """A new conversation resets every state but the adapters' (the real's reset_state)."""
        for s in request.query_state():
            if not self.has_state_name(s.get_name()):
                s.reset()
