"""HETERO: one model split over several devices by their ``query_model`` answers, as OpenVINO's
HETERO plugin does.

``"HETERO:NPU,CPU"`` (or ``"HETERO"`` with ``MULTI_DEVICE_PRIORITIES``) gives the priority list.
Each op goes to the first listed device that claims it; Parameters, Constants and Results follow
the ops that use them. The ops are then ordered into stages, each a connected run on one device:
a topological walk that keeps taking ready ops of the current device and switches device only
when none is ready, so the model is cut as few times as the graph allows. Each stage becomes an
``openvino.Model`` of its own (tensors crossing a cut become its Parameters and Results) compiled
on its device through ``Core.compile_model``; a stage its device fails to compile moves to the
next listed device. An inference runs the stages in order, passing the tensors between them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from ov_npu_emu.errors import NpuEmuError, UnsupportedFeatureError, UnsupportedOpError
from ov_npu_emu.registry import canonical_device_name
from ov_npu_emu.runtime.device import DeviceCompiledModel, DeviceInferRequest, PortInfo

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel
    from ov_npu_emu.api.core import Core

__all__ = ["HeteroCompiledModel", "affinities", "compile_hetero", "hetero_devices", "query_hetero"]

logger = logging.getLogger("ov_npu_emu")

#: ops that go with their neighbours instead of being claimed
_FOLLOWERS = ("Parameter", "Constant", "Result")

Key = tuple[str, int]  # (node friendly name, output index)


def hetero_devices(device_name: str | None, config: Mapping[str, Any] | None) -> list[str] | None:
    """The priority list of ``"HETERO:A,B"`` / ``"HETERO"`` + MULTI_DEVICE_PRIORITIES; None if not HETERO."""
    raw = "" if device_name is None else str(device_name).strip()
    if raw.upper() != "HETERO" and not raw.upper().startswith("HETERO:"):
        return None
    listed = raw[7:] if ":" in raw else str((config or {}).get("MULTI_DEVICE_PRIORITIES", "") or "")
    names = [canonical_device_name(x) for x in listed.split(",") if x.strip()]
    if not names:
        from ov_npu_emu.errors import ConfigError

        raise ConfigError("HETERO needs its devices: 'HETERO:NPU,CPU' or MULTI_DEVICE_PRIORITIES='NPU,CPU'",
                          key="MULTI_DEVICE_PRIORITIES")
    return names


def _unique_names(model: ov.Model) -> ov.Model:
    """A clone whose ops have unique friendly names (queries and stages refer to ops by name)."""
    m = model.clone()
    seen: set[str] = set()
    for op in m.get_ordered_ops():
        name = op.get_friendly_name()
        if name in seen:
            k = 1
            while f"{name}/{k}" in seen:
                k += 1
            name = f"{name}/{k}"
            op.set_friendly_name(name)
        seen.add(name)
    return m


def affinities(core: Core, model: ov.Model, devices: Sequence[str], config: Mapping[str, Any]) -> dict[str, str]:
    """Op friendly name -> the first device in ``devices`` whose query_model claims it (Parameters,
    Constants and Results left out); UnsupportedOpError naming the ops no listed device claims."""
    answers = []
    for d in devices:
        try:
            answers.append(set(core.query_model(model, d, config)))
        except NpuEmuError as e:  # e.g. the NPU's DynamicShapeError: that device claims nothing
            logger.info("HETERO: %s claims no op of %s: %s", d, model.get_friendly_name(), e)
            answers.append(set())
    out: dict[str, str] = {}
    orphans = []
    for op in model.get_ordered_ops():
        name = op.get_friendly_name()
        if op.get_type_name() in _FOLLOWERS:
            continue
        dev = next((d for d, claimed in zip(devices, answers, strict=True) if name in claimed), None)
        if dev is None:
            orphans.append(f"{op.get_type_name()} {name!r}")
        else:
            out[name] = dev
    if orphans:
        raise UnsupportedOpError(f"HETERO:{','.join(devices)}: no listed device supports {', '.join(orphans[:5])}"
                                 f"{' ...' if len(orphans) > 5 else ''}; add a device that does (e.g. CPU)",
                                 op_type=orphans[0].split()[0], node_name=orphans[0].split(" ", 1)[1].strip("'"))
    return out


def _stages(model: ov.Model, affinity: Mapping[str, str]) -> list[tuple[str, list[ov.Node]]]:
    """The claimed ops as (device, ops in topological order) runs; few cuts, inputs before users."""
    ops_ = [op for op in model.get_ordered_ops() if op.get_friendly_name() in affinity]
    name_of = {id(op): op.get_friendly_name() for op in ops_}
    preds: dict[str, set[str]] = {}
    users: dict[str, list[str]] = {n: [] for n in name_of.values()}
    by_name = {op.get_friendly_name(): op for op in ops_}
    for op in ops_:
        n = op.get_friendly_name()
        preds[n] = {iv.get_node().get_friendly_name() for iv in op.input_values()
                    if iv.get_node().get_friendly_name() in by_name}
        for p in preds[n]:
            users[p].append(n)
    waiting = {n: len(p) for n, p in preds.items()}
    order = {op.get_friendly_name(): i for i, op in enumerate(ops_)}
    ready = sorted((n for n, w in waiting.items() if w == 0), key=order.__getitem__)
    stages: list[tuple[str, list[ov.Node]]] = []
    while ready:
        current = stages[-1][0] if stages else affinity[ready[0]]
        pick = next((n for n in ready if affinity[n] == current), None)
        if pick is None:
            pick = ready[0]
        ready.remove(pick)
        if not stages or stages[-1][0] != affinity[pick]:
            stages.append((affinity[pick], []))
        stages[-1][1].append(by_name[pick])
        for u in users[pick]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
        ready.sort(key=order.__getitem__)
    return stages


@dataclasses.dataclass
class _Stage:
    device: str
    model: ov.Model
    inputs: list[Key]  # where each stage input comes from: a model input ("", port) or a stage output
    outputs: list[Key]  # what each stage output is
    compiled: CompiledModel | None = None


def _build_stages(model: ov.Model, stages: list[tuple[str, list[ov.Node]]]) -> list[_Stage]:
    """One openvino.Model per stage, cut out of a clone of ``model`` each."""
    stage_of = {op.get_friendly_name(): i for i, (_, nodes) in enumerate(stages) for op in nodes}
    param_port = {p.get_friendly_name(): i for i, p in enumerate(model.get_parameters())}
    # what leaves a stage: read by a later stage or by a model Result
    leaving: list[list[Key]] = [[] for _ in stages]
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant":
            continue
        for iv in op.input_values():
            src = iv.get_node().get_friendly_name()
            key = (src, iv.get_index())
            if src not in stage_of:
                continue
            reader_stage = stage_of.get(op.get_friendly_name(), -1)  # -1: a Result
            if reader_stage != stage_of[src] and key not in leaving[stage_of[src]]:
                leaving[stage_of[src]].append(key)
    out: list[_Stage] = []
    for i, (device, _nodes) in enumerate(stages):
        m = model.clone()
        by_name = {op.get_friendly_name(): op for op in m.get_ordered_ops()}
        inputs: list[Key] = []
        params: list[ov.Node] = []
        for op in list(m.get_ordered_ops()):
            if stage_of.get(op.get_friendly_name()) != i:
                continue
            for inp in op.inputs():
                src = inp.get_source_output()
                sname = src.get_node().get_friendly_name()
                if sname in stage_of and stage_of[sname] == i or src.get_node().get_type_name() == "Constant":
                    continue
                key = ("", param_port[sname]) if sname in param_port else (sname, src.get_index())
                if key not in inputs:
                    inputs.append(key)
                    p = ops.parameter(src.get_partial_shape(), src.get_element_type(), name=f"{key[0]}:{key[1]}")
                    p.output(0).get_tensor().set_names({f"hetero_in_{len(params)}"})
                    params.append(p)
                inp.replace_source_output(params[inputs.index(key)].output(0))
        results = []
        for key in leaving[i]:
            r = ops.result(by_name[key[0]].output(key[1]))
            results.append(r)
        out.append(_Stage(device, ov.Model(results, params, f"{model.get_friendly_name()}_stage{i}_{device}"),
                          inputs, list(leaving[i])))
    return out


class HeteroInferRequest(DeviceInferRequest):
    """Runs the stages in order; tensors crossing a cut go from one stage's request to the next."""

    def __init__(self, compiled: HeteroCompiledModel) -> None:
        self._cm = compiled
        self._requests = [s.compiled.create_infer_request() for s in compiled.stages if s.compiled is not None]
        self._inputs: dict[int, ov.Tensor] = {}
        self._outputs: dict[int, ov.Tensor] = {}
        self._bound_outputs: set[int] = set()

    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        store = self._inputs if is_input else self._outputs
        if index not in store:
            port = (self._cm.inputs if is_input else self._cm.outputs)[index]
            shape = port.partial_shape.to_shape() if port.partial_shape.is_static else ov.Shape([0])
            store[index] = ov.Tensor(port.element_type, shape)
        return store[index]

    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        if is_input:
            self._inputs[index] = tensor
        else:
            self._outputs[index] = tensor
            self._bound_outputs.add(index)

    def infer(self) -> None:
        values: dict[Key, np.ndarray] = {("", i): self.get_tensor(i, True).data for i in range(len(self._cm.inputs))}
        for stage, req in zip(self._cm.stages, self._requests, strict=True):
            res = req.infer({j: values[k] for j, k in enumerate(stage.inputs)})
            for j, k in enumerate(stage.outputs):
                values[k] = np.asarray(res[j])
        for j, key in enumerate(self._cm.result_sources):
            data = values[key]
            if j in self._bound_outputs and tuple(self._outputs[j].shape) == data.shape:
                np.copyto(self._outputs[j].data, data, casting="unsafe")
            else:
                self._outputs[j] = ov.Tensor(np.asarray(data, order="C"))  # keeps rank 0 (ascontiguousarray would not)


class HeteroCompiledModel(DeviceCompiledModel):
    """The stages compiled on their devices, with the model's own inputs and outputs."""

    def __init__(self, model: ov.Model, stages: list[_Stage], result_sources: list[Key]) -> None:
        self.inputs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.inputs)]
        self.outputs = [PortInfo.from_ov_port(i, p) for i, p in enumerate(model.outputs)]
        self.stages = stages
        self.result_sources = result_sources

    @property
    def execution_devices(self) -> list[str]:
        seen: list[str] = []
        for s in self.stages:
            if s.device not in seen:
                seen.append(s.device)
        return seen

    def create_infer_request(self) -> HeteroInferRequest:
        return HeteroInferRequest(self)

    def export_model(self) -> bytes:
        raise UnsupportedFeatureError("HETERO compiled models cannot be exported here; export the model compiled on "
                                      "one device, or compile it again with HETERO")

    def get_property(self, name: str) -> Any:
        if name == "EXECUTION_DEVICES":
            return self.execution_devices
        if name == "OPTIMAL_NUMBER_OF_INFER_REQUESTS":
            return 1
        return super().get_property(name)


class _Whole(DeviceCompiledModel):
    """A model HETERO gives whole to one device (stateful): that device's compiled model."""

    def __init__(self, compiled: CompiledModel) -> None:
        self._cm = compiled
        self.inputs = compiled.impl.inputs
        self.outputs = compiled.impl.outputs
        self.execution_devices = [compiled.device_name]

    def create_infer_request(self) -> DeviceInferRequest:
        return self._cm.impl.create_infer_request()

    def export_model(self) -> bytes:
        return self._cm.impl.export_model()

    def get_property(self, name: str) -> Any:
        return self.execution_devices if name == "EXECUTION_DEVICES" else self._cm.get_property(name)

    def get_runtime_model(self) -> ov.Model | None:
        return self._cm.get_runtime_model()


def _result_sources(model: ov.Model) -> list[Key]:
    param_port = {p.get_friendly_name(): i for i, p in enumerate(model.get_parameters())}
    out = []
    for r in model.get_results():
        src = r.input_value(0)
        name = src.get_node().get_friendly_name()
        out.append(("", param_port[name]) if name in param_port else (name, src.get_index()))
    return out


def compile_hetero(core: Core, model: ov.Model, devices: Sequence[str], config: Mapping[str, Any]
                   ) -> DeviceCompiledModel:
    """Split ``model`` over ``devices`` by their query_model answers and compile each stage."""
    cfg = {k: v for k, v in config.items() if k != "MULTI_DEVICE_PRIORITIES"}
    m = _unique_names(model)
    affinity = affinities(core, m, devices, cfg)
    if model.get_sinks():  # stateful: whole on the one device claiming every op, or not at all
        claimed = set(affinity.values())
        if len(claimed) != 1:
            raise UnsupportedFeatureError(
                f"HETERO does not split stateful models (ReadValue/Assign) here; its ops go to {sorted(claimed)}: "
                "compile it on one device")
        return _Whole(core.compile_model(model, claimed.pop(), cfg))
    stages = _build_stages(m, _stages(m, affinity))
    sources = _result_sources(m)
    # a Result returning a Constant: a one-op stage on the first device
    results = m.get_results()
    for j, key in enumerate(sources):
        if key[0] and not any(key in s.outputs for s in stages):
            c_model = ov.Model([ops.result(results[j].input_value(0))], [], f"{m.get_friendly_name()}_const{j}")
            stages.append(_Stage(devices[0], c_model, [], [key]))
    for s in stages:
        failures = []
        for dev in [s.device, *[d for d in devices if d != s.device]]:
            try:
                s.compiled = core.compile_model(s.model, dev, cfg)
                s.device = dev
                break
            except NpuEmuError as e:
                failures.append(f"{dev}: {type(e).__name__}: {e}")
        if s.compiled is None:
            raise UnsupportedOpError(f"HETERO could not compile the stage {s.model.get_friendly_name()} on any of "
                                     f"{list(devices)}:\n  " + "\n  ".join(failures))
    return HeteroCompiledModel(m, stages, sources)


def query_hetero(core: Core, model: ov.Model, devices: Sequence[str], config: Mapping[str, Any]) -> dict[str, str]:
    """HETERO's query_model: every op with its device; Parameters and Constants with their first
    reader's, Results with their producer's."""
    cfg = {k: v for k, v in config.items() if k != "MULTI_DEVICE_PRIORITIES"}
    out = affinities(core, model, devices, cfg)
    for op in model.get_ordered_ops():
        t = op.get_type_name()
        if t == "Result":
            src = op.input_value(0).get_node().get_friendly_name()
            out[op.get_friendly_name()] = out.get(src, devices[0])
    for op in model.get_ordered_ops():
        if op.get_type_name() in ("Parameter", "Constant"):
            readers = [ti.get_node().get_friendly_name() for o in op.outputs() for ti in o.get_target_inputs()]
            out[op.get_friendly_name()] = next((out[r] for r in readers if r in out), devices[0])
    return out
