"""The NPU device the runtime sees: compiles to an ELF blob and runs it on the emulated driver and device."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import openvino as ov

from ov_npu_emu.errors import BlobFormatError, ConfigError, UserInputError
from ov_npu_emu.hookspecs import hookimpl
from ov_npu_emu.registry import DeviceRegistry
from ov_npu_emu.runtime.collector import collector_paused
from ov_npu_emu.runtime.device import (
    Device,
    DeviceCompiledModel,
    DeviceInferRequest,
    PortInfo,
    ProfilingInfo,
    VariableState,
    ir_weights_path,
)
from ov_npu_emu_npu.blob.format import MemKind
from ov_npu_emu_npu.blob.reader import SplitBlob
from ov_npu_emu_npu.device.kernels.blasthreads import one_blas_thread
from ov_npu_emu_npu.driver import (
    CommandList,
    CommandQueue,
    Fence,
    HostParsedInference,
    ParsedBlob,
    Region,
    RowWindow,
    WeightsBank,
)
from ov_npu_emu_npu.options import (
    DEFAULT_DEVICE_MEMORY_MB,
    DEFAULT_WEIGHTS_CACHE_MB,
    NPU_OPTIONS,
    device_defaults,
    device_properties,
    optimal_infer_requests,
)

__all__ = ["NpuCompiledModel", "NpuDevice", "NpuInferRequest", "ZeroVariableState", "ovnpu_register_devices"]

logger = logging.getLogger(__name__)


_OV_TYPES = {t.get_type_name(): t for t in (
    ov.Type.f32, ov.Type.f16, ov.Type.bf16, ov.Type.f64, ov.Type.i64, ov.Type.i32, ov.Type.i16, ov.Type.i8,
    ov.Type.u64, ov.Type.u32, ov.Type.u16, ov.Type.u8, ov.Type.boolean)}


def _ov_type(name: str) -> ov.Type:
    t = _OV_TYPES.get(name)
    if t is None:
        raise BlobFormatError(f"blob metadata names unknown element type {name!r}")
    return t


def _np_dtype(t: ov.Type) -> np.dtype:
    return np.dtype(np.bool_) if t == ov.Type.boolean else np.dtype(t.to_dtype())


def _flat_bytes(arr: np.ndarray) -> np.ndarray:
    if not arr.flags.c_contiguous:
        raise UserInputError("NPU needs contiguous tensors; pass np.ascontiguousarray(...)")
    return arr.reshape(-1).view(np.uint8)


class _Binding:
    """A user tensor mapped into the request's device address space (zero copy)."""

    def __init__(self, tensor: ov.Tensor, region: Region) -> None:
        self.tensor = tensor
        self.region = region


class ZeroVariableState(VariableState):
    """A lifted variable backed by device memory bound to its state input and output."""

    def __init__(self, req: NpuInferRequest, name: str, shape: tuple[int, ...], et: ov.Type,
                 init: np.ndarray | None) -> None:
        self._req = req
        self._name = name
        self._shape = shape
        self._et = et
        self._dtype = _np_dtype(et)
        self._init = init
        self.update_pending = False  # set_state rebound the buffer: the command list needs a patch
        self._array = np.zeros(shape, self._dtype)
        self.region = req.hpi.aspace.map(_flat_bytes(self._array), MemKind.IO, f"state:{name}")
        if init is not None:  # fresh pages already read as zero: a memset would commit them all
            self.reset()

    @property
    def name(self) -> str:
        return self._name

    def get_state(self) -> ov.Tensor:
        return ov.Tensor(np.array(self._array, copy=True))

    def set_state(self, value: ov.Tensor) -> None:
        if not isinstance(value, ov.Tensor):
            raise UserInputError(f"VariableState.state expects an openvino.Tensor, got {type(value).__name__}")
        data = np.asarray(value.data)
        if tuple(data.shape) != self._shape:
            raise UserInputError(f"state {self._name!r} has shape {list(self._shape)}, got {list(data.shape)}")
        if data.dtype.kind not in "biuf":  # string tensors: numpy would raise ValueError mid-copy
            raise UserInputError(f"state {self._name!r} holds {self._et.get_type_name()} numbers, got a "
                                 f"{value.get_element_type().get_type_name()} tensor")
        # like ZeroVariableState: new device memory for the new value, then the command list's
        # state arguments are re-pointed (mutable update) before the next inference
        new = np.ascontiguousarray(data, dtype=self._dtype).copy()
        region = self._req.hpi.aspace.map(_flat_bytes(new), MemKind.IO, f"state:{self._name}")
        self._req.hpi.aspace.unmap(self.region)
        self._array, self.region = new, region
        self.update_pending = True

    def reset(self) -> None:
        # memset 0, or the recorded constant initial value
        if self._init is None:
            self._array.fill(0)
        else:
            np.copyto(self._array, self._init.reshape(self._shape), casting="unsafe")


def _zeros(port: PortInfo) -> ov.Tensor:
    """A zero-filled tensor of ``port``'s shape and type over its own numpy buffer."""
    return ov.Tensor(np.zeros(tuple(port.partial_shape.to_shape()), _np_dtype(port.element_type)), shared_memory=True)


class NpuInferRequest(DeviceInferRequest):
    """Per-request device memory (HostParsedInference), command list, fence and states."""

    def __init__(self, compiled: NpuCompiledModel) -> None:
        self._cm = compiled
        meta = compiled.parsed.meta
        self.hpi: HostParsedInference = HostParsedInference(compiled.parsed)
        self.fence = Fence(compiled.fence_mode)
        self.command_list: CommandList | None = None
        self.counters = {"command_list_builds": 0, "mutable_updates": 0, "patched_args": 0, "inferences": 0}
        self._profile = compiled.profile
        self._in: dict[int, _Binding] = {}
        self._out: dict[int, _Binding] = {}
        # zero tensors sharing their numpy buffers: a copy would write every page of a large
        # prefill's KV outputs up front (docs/performance_log.md, "Load work"); zero pages stay unwritten
        for i, p in enumerate(compiled.inputs):
            self._bind(i, True, _zeros(p))
        for j, p in enumerate(compiled.outputs):
            self._bind(j, False, _zeros(p))
        self._states: list[ZeroVariableState] = []
        for v in meta["variables"]:
            init = None if v["init"] is None else np.array(v["init"])
            st = ZeroVariableState(self, v["id"], tuple(v["shape"]), _ov_type(v["element_type"]), init)
            self._states.append(st)
        self._var_ports = [(v["input"], v["output"]) for v in meta["variables"]]
        # NPU_EMU_SKIP_PADDED_ROWS: the window of real rows, from the left-padded attention mask
        self.window: RowWindow | None = None
        self._mask_index = -1
        if compiled.skip_padded_rows:
            self.window = RowWindow()
            names = {n: i for i, p in enumerate(compiled.inputs) for n in p.names}
            # the padding rows must be one token at one position (checked per inference), so
            # a model without token ids gets no window
            self._mask_index = names.get("attention_mask", -1) if "input_ids" in names else -1
            self._uniform = [names[n] for n in ("input_ids", "position_ids") if n in names]
            self.counters.update(windowed_inferences=0, window_reruns=0)

    # -- tensors -------------------------------------------------------------------------
    def _bind(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        table = self._in if is_input else self._out
        old = table.get(index)
        if old is not None and old.tensor is tensor:
            return
        data = np.asarray(tensor.data)
        region = self.hpi.aspace.map(_flat_bytes(data), MemKind.IO, f"{'in' if is_input else 'out'}.{index}")
        if old is not None:
            self.hpi.aspace.unmap(old.region)
        table[index] = _Binding(tensor, region)

    def get_tensor(self, index: int, is_input: bool) -> ov.Tensor:
        return (self._in if is_input else self._out)[index].tensor

    def set_tensor(self, index: int, is_input: bool, tensor: ov.Tensor) -> None:
        self._bind(index, is_input, tensor)

    def _bindings(self) -> dict[str, int]:
        b = {f"in.{i}": x.region.base for i, x in self._in.items()}
        b.update({f"out.{j}": x.region.base for j, x in self._out.items()})
        for st, (i, j) in zip(self._states, self._var_ports, strict=False):
            b[f"in.{i}"] = b[f"out.{j}"] = st.region.base
        return b

    # -- execution -----------------------------------------------------------------------
    def _build_command_list(self, bindings: dict[str, int]) -> CommandList:
        self.hpi.apply_input_output(bindings)
        self.command_list = CommandList(self.hpi, self.window, fuse=self._cm.host_fusion)
        self.counters["command_list_builds"] += 1
        logger.debug("command list built: %d tasks on %d lanes",
                     sum(len(lane) for lane in self.command_list.lanes), len(self.command_list.lanes))
        return self.command_list

    def infer(self) -> None:
        bindings = self._bindings()
        if self.command_list is None:
            self._build_command_list(bindings)
        else:
            changed = {s: va for s, va in bindings.items() if self.hpi.io_addr.get(s) != va}
            if changed and not self._cm.mutable:
                # a driver without mutable command lists re-records the whole list
                self.hpi.apply_input_output(changed)
                self.command_list = CommandList(self.hpi, self.window, fuse=self._cm.host_fusion)
                self.counters["command_list_builds"] += 1
            elif changed:
                patched = self.hpi.apply_input_output(changed)
                n = self.command_list.update_mutable_commands(patched)
                self.counters["patched_args"] += n
                self.counters["mutable_updates"] += 1
                logger.debug("mutable command list update: %s -> %d argument pointers", sorted(changed), n)
        for st in self._states:
            st.update_pending = False
        w = self.window
        if w is not None:
            self._set_window(w)
        if w is not None and w.size:
            # a windowed prefill's products run on their own threads (kernels/gemm.py) or are
            # small (a window's rows): OpenBLAS's busy-waiting threads only wait for cores on a
            # shared host (docs/performance.md, "A 1B int4 model against the real CPU plugin")
            with one_blas_thread():
                self._submit()
                if w.violated:
                    # attention could not prove the padding irrelevant: the whole inference
                    # again, without the hint (the unoptimised result)
                    w.size = 0
                    self._submit()
                    self.counters["window_reruns"] += 1
                elif w.used or w.windowed_tasks:
                    self.counters["windowed_inferences"] += 1
        else:
            self._submit()
        self.counters["inferences"] += 1

    def _submit(self) -> None:
        assert self.command_list is not None
        value = self._cm.queue.submit(self.command_list, self.fence, profile=self._profile,
                                      inline=self._cm.queue_mode == "inline", walk=self._cm.walk_every_inference)
        self.fence.wait(value)

    def _set_window(self, w: RowWindow) -> None:
        """Real rows = from the first attended mask entry on (left padding before it).  The
        window holds them and at least one padding row, rounded up to about an eighth
        (:func:`window_rows`), and every row a last-rows Slice reads; it is set only when all
        padding rows carry one token id at one position (then they all compute the same K/V: the
        window's padding row stands for the skipped ones in attention's proof)."""
        w.reset()
        if self._mask_index < 0 or w.unusable:
            return
        mask = np.asarray(self._in[self._mask_index].tensor.data)
        if mask.ndim != 2 or mask.shape[0] != 1:
            return
        size = mask.shape[1]
        nz = np.flatnonzero(mask[0])
        if nz.size == 0:
            return
        first = int(nz[0])
        for i in self._uniform:
            x = np.asarray(self._in[i].tensor.data)
            if x.shape != mask.shape or (first and not (x[0, :first] == x[0, 0]).all()):
                return
        start = min(size - min(size, window_rows(size - first + 1)), self._cm.latest_window_start.get(size, size))
        if start > 0:
            w.size, w.start = size, start

    def query_state(self) -> list[VariableState]:
        return list(self._states)

    def get_profiling_info(self) -> list[ProfilingInfo]:
        if self.command_list is None:
            return []
        tl = self.command_list.timeline(self._cm.clock_mhz)
        names = self._cm.task_names
        host = self.command_list.host_ns
        out = []
        for t in self.command_list.tasks():
            node, op = names.get(t.tid, ("", ""))
            dev_us = (tl.end.get(t.tid, 0) - tl.start.get(t.tid, 0)) / self._cm.clock_mhz
            out.append(ProfilingInfo(
                node_name=f"{node or t.kernel}#{t.tid}", node_type=op or t.kernel,
                exec_type=f"{t.kind.name}:{t.kernel}", real_time=datetime.timedelta(microseconds=dev_us),
                cpu_time=datetime.timedelta(microseconds=host.get(t.tid, 0) / 1000.0)))
        return out

    def timeline(self) -> Any:
        """The cost-model timeline of this request's command list: a replay of the barrier graph
        with each task's estimated cycles, so nothing needs to run (the list is built if needed)."""
        cl = self.command_list if self.command_list is not None else self._build_command_list(self._bindings())
        return cl.timeline(self._cm.clock_mhz)

    @property
    def task_names(self) -> dict[int, tuple[str, str]]:
        """Task id -> (source node, op type), from the blob metadata."""
        return self._cm.task_names

    @property
    def blob_meta(self) -> dict[str, Any]:
        """The blob's metadata (memory plan, barriers, tasks) for profiling reports."""
        return self._cm.parsed.meta


def window_rows(need: int) -> int:
    """NPU_EMU_SKIP_PADDED_ROWS: the rows of a window that must hold ``need`` rows, ``need``
    rounded up to a multiple of 2^(bits - 4): exact below 16 rows, then at most an eighth more,
    so about 8 sizes an octave (row-wise kernels whose sums may follow the row count are probed
    per window, device/windowed.py; a prefill matmul_dq's block kernel needs no probe,
    kernels/gemm.py; attention repeats the full run's row blocks).  A multiple of 128 while only attention was
    windowed, then of 32 (bench-small's windowed prefill 155 -> 72 ms); since compressed-weight
    row tiles end on the last row (compiler/lower.py), a short prompt's window mostly lies in
    one tile (3B int4, 21-token prompt, second-generate TTFT 8.9 -> 6.4 s; results identical)."""
    step = 1 << max(0, need.bit_length() - 4)
    return -(-need // step) * step


@dataclasses.dataclass(frozen=True)
class NpuOptions:
    """The emulated NPU's runtime keys, parsed once through NPU_OPTIONS (ov_npu_emu_npu/options.py)."""

    weights_cache: bool = True  # NPU_EMU_WEIGHTS_CACHE: keep decompressed weights (NO: per inference)
    weights_bank: bool = True  # NPU_EMU_WEIGHTS_BANK: constants shared through the device's bank
    cache_budget: int | None = DEFAULT_WEIGHTS_CACHE_MB * 2**20  # NPU_EMU_WEIGHTS_CACHE_MB in bytes
    memory_budget: int | None = DEFAULT_DEVICE_MEMORY_MB * 2**20  # NPU_EMU_DEVICE_MEMORY_MB in bytes
    fence_mode: str = "interrupt"  # NPU_EMU_FENCE_MODE
    queue_mode: str = "inline"  # NPU_EMU_QUEUE_MODE
    mutable: bool = True  # NPU_EMU_MUTABLE_COMMAND_LIST (NO: a driver without mutable lists)
    walk_every_inference: bool = False  # NPU_EMU_BARRIER_WALK=EVERY_INFERENCE
    host_fusion: bool = True  # NPU_EMU_HOST_FUSION: a tiled MatMul's tasks as one host product
    skip_padded_rows: bool = False  # NPU_EMU_SKIP_PADDED_ROWS
    profile: bool = False  # PERF_COUNT

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> NpuOptions:
        o = NPU_OPTIONS.parse(config)
        return cls(
            weights_cache=o["NPU_EMU_WEIGHTS_CACHE"],
            weights_bank=o["NPU_EMU_WEIGHTS_BANK"],
            cache_budget=o["NPU_EMU_WEIGHTS_CACHE_MB"],
            memory_budget=o["NPU_EMU_DEVICE_MEMORY_MB"],
            fence_mode=o["NPU_EMU_FENCE_MODE"],
            queue_mode=o["NPU_EMU_QUEUE_MODE"],
            mutable=o["NPU_EMU_MUTABLE_COMMAND_LIST"],
            walk_every_inference=o["NPU_EMU_BARRIER_WALK"] == "EVERY_INFERENCE",
            host_fusion=o["NPU_EMU_HOST_FUSION"],
            skip_padded_rows=o["NPU_EMU_SKIP_PADDED_ROWS"],
            profile=o["PERF_COUNT"],
        )


#: compile-config keys a compiled model reports back through get_property
_ANSWERED_KEYS = ("PERFORMANCE_HINT", "PERFORMANCE_HINT_NUM_REQUESTS", "NPU_EMU_PLATFORM")


class NpuCompiledModel(DeviceCompiledModel):
    """A parsed NPU blob: ports come from its metadata, not from an ov.Model."""

    def __init__(self, blob: bytes | SplitBlob, device: NpuDevice, config: Mapping[str, Any]) -> None:
        opts = NpuOptions.parse(config)
        #: the keys get_property answers from the compile config (the performance hint's)
        self.config = {k: config[k] for k in _ANSWERED_KEYS if k in config}
        #: NPUW passes one bank name to all its sub-models; "" is the device's anonymous bank
        self.bank_name = str(config.get("NPUW_WEIGHTS_BANK", "") or "")
        #: NPU_EMU_WEIGHTS_CACHE=NO: matmul_dq decompresses its weight tiles on every inference;
        #: NPU_EMU_WEIGHTS_BANK=NO: private weights and cache per compiled model (no sharing)
        self.parsed = ParsedBlob(blob, weights_cache=opts.weights_cache,
                                 bank=device.bank if opts.weights_bank else None, bank_name=self.bank_name,
                                 cache_budget=opts.cache_budget, memory_budget=opts.memory_budget)
        meta = self.parsed.meta
        self._device = device
        self.queue = device.queue
        self.fence_mode = opts.fence_mode
        #: "inline": the submitting thread runs the management core (default, no thread handoff);
        #: "thread": a device thread runs it while the host waits on the fence
        self.queue_mode = opts.queue_mode
        self.profile = opts.profile
        #: NPU_EMU_MUTABLE_COMMAND_LIST=NO emulates a driver without mutable command lists
        self.mutable = opts.mutable
        #: NPU_EMU_BARRIER_WALK=EVERY_INFERENCE: the management core re-walks the barriers task by
        #: task on every inference; ONCE (default): walks once per command-list build and replays
        self.walk_every_inference = opts.walk_every_inference
        #: NPU_EMU_HOST_FUSION=NO: every tile of a tiled MatMul is dispatched on the host as the
        #: device runs it; YES (default): provable ones run as one product (device/fusion.py)
        self.host_fusion = opts.host_fusion
        #: NPU_EMU_SKIP_PADDED_ROWS=YES: the caller (NPUW's prefill) reads no output row left of
        #: the first attended attention_mask entry; attention and the row-wise tasks run on the real rows only
        self.skip_padded_rows = opts.skip_padded_rows
        self.clock_mhz = float(meta["hw"]["clock_mhz"])
        self.task_names = {t["tid"]: (t["node"], t["op"]) for t in meta["tasks"]}
        #: per token-axis length, the latest row a padded-rows window may start at: a task reading
        #: rows from min_row on (a last-rows Slice) needs them computed (device/windowed.py)
        self.latest_window_start: dict[int, int] = {}
        for t in meta["tasks"]:
            r = t.get("rows") or {}
            if "min_row" in r:
                n = int(r["L"])
                self.latest_window_start[n] = min(self.latest_window_start.get(n, n), int(r["min_row"]))
        self.inputs = [self._port(i, p) for i, p in enumerate(p for p in meta["inputs"] if p["state"] is None)]
        self.outputs = [self._port(j, p) for j, p in enumerate(p for p in meta["outputs"] if p["state"] is None)]

    @staticmethod
    def _port(index: int, p: Mapping[str, Any]) -> PortInfo:
        return PortInfo(index, tuple(p["names"]), _ov_type(p["element_type"]), ov.PartialShape(p["shape"]))

    def create_infer_request(self) -> NpuInferRequest:
        return NpuInferRequest(self)

    def get_runtime_model(self) -> ov.Model:
        """The blob holds tasks, not an openvino graph: a model with the compiled model's
        inputs (Parameters) and outputs (Results, over a placeholder Broadcast of the output's
        type and shape), its name, and the blob's tasks as ``rt_info["npu_tasks"]`` (one
        "node:op" entry each)."""
        import openvino.opset13 as ops

        params = []
        for p in self.inputs:
            param = ops.parameter(p.partial_shape, p.element_type, name=p.any_name or f"input_{p.index}")
            param.output(0).get_tensor().set_names(set(p.names))
            params.append(param)
        results = []
        for p in self.outputs:
            zero = ops.constant(np.zeros((), dtype=p.element_type.to_dtype()))
            fill = ops.broadcast(zero, np.array(list(p.partial_shape.to_shape()), dtype=np.int64))
            fill.output(0).get_tensor().set_names(set(p.names))
            results.append(ops.result(fill, name=p.any_name or f"output_{p.index}"))
        model = ov.Model(results, params, str(self.parsed.meta.get("model_name", "")))
        model.set_rt_info([f"{node}:{op}" for node, op in self.task_names.values()], "npu_tasks")
        return model

    #: CACHE_MODE=OPTIMIZE_SIZE at compile: export writes a weightless container referring to this
    #: IR .bin ("" when the model was not read from an IR; export then fails, naming WEIGHTS_PATH)
    weightless_bin: str | None = None

    def export_model(self) -> bytes:
        if self.weightless_bin is None:
            return self.parsed.blob
        from ov_npu_emu_npu.weightless import export_weightless

        if not self.weightless_bin:
            raise ConfigError(
                "CACHE_MODE=OPTIMIZE_SIZE needs the IR's weights file to refer to, but this model was not "
                "read from an IR file; pass WEIGHTS_PATH=<model>.bin or use CACHE_MODE=OPTIMIZE_SPEED",
                key="CACHE_MODE",
            )
        return export_weightless(self.parsed.blob_chunks(), self.weightless_bin,
                                 str(self.parsed.meta.get("model_name", "")))

    def get_property(self, name: str) -> Any:
        meta = self.parsed.meta
        table = {
            "NETWORK_NAME": meta.get("model_name", ""),
            "INFERENCE_PRECISION_HINT": meta.get("precision", "f32"),
            "OPTIMAL_NUMBER_OF_INFER_REQUESTS": optimal_infer_requests(self.config),
            "PERFORMANCE_HINT": NPU_OPTIONS.get(self.config, "PERFORMANCE_HINT"),
            "PERFORMANCE_HINT_NUM_REQUESTS": NPU_OPTIONS.get(self.config, "PERFORMANCE_HINT_NUM_REQUESTS"),
            "MODEL_NAME": meta.get("model_name", ""),
            "EXECUTION_DEVICES": ["NPU"],
            "NPU_EMU_CMX_SIZE": meta["hw"]["cmx_size"],
            "NPU_EMU_FENCE_MODE": self.fence_mode,
            "NPU_EMU_QUEUE_MODE": self.queue_mode,
            "NPU_EMU_BARRIER_WALK": "EVERY_INFERENCE" if self.walk_every_inference else "ONCE",
            "NPU_EMU_HOST_FUSION": "YES" if self.host_fusion else "NO",
            "NPU_EMU_SKIP_PADDED_ROWS": "YES" if self.skip_padded_rows else "NO",
            "PERF_COUNT": "YES" if self.profile else "NO",
            "NPU_COMPILER_VERSION": meta["compiler"]["version"],
            "NPU_EMU_WEIGHTS_BANK": "YES" if self.parsed.banked is not None else "NO",
            "NPUW_WEIGHTS_BANK": self.bank_name,
            "DEVICE_ID": "NPU",
            "CACHE_MODE": "OPTIMIZE_SPEED" if self.weightless_bin is None else "OPTIMIZE_SIZE",
        }
        if name == "SUPPORTED_PROPERTIES":
            return sorted([*table, *NPU_OPTIONS.properties("compiled-model"), "SUPPORTED_PROPERTIES"])
        if name in table:
            return table[name]
        if name == "NPU_EMU_COST_MODEL_US":
            # device time of one inference predicted by the cost model (barrier-graph replay of
            # the command list, nothing runs): what `ov-npu-emu estimate` adds up
            tl = NpuInferRequest(self).timeline()
            return float(tl.makespan / tl.clock_mhz)
        raise ConfigError(f"Unsupported property {name} by NPU compiled model", key=name)


class NpuDevice(Device):
    """Device "NPU": the emulated NPU (compiler, ELF blob, driver, barrier-scheduled engines)."""

    NAME = "NPU"
    FULL_DEVICE_NAME = "Intel(R) AI Boost (ov-npu-emu emulated NPU)"
    MODEL_CACHE = True  # CACHE_DIR: Core stores the exported ELF blob and imports it next time
    #: derived from NPU_OPTIONS: its device-scope keys (options.py)
    DEFAULT_PROPERTIES: ClassVar[Mapping[str, Any]] = device_defaults()
    READ_ONLY_PROPERTIES: ClassVar[frozenset[str]] = frozenset(o.name for o in NPU_OPTIONS if o.read_only)

    def __init__(self) -> None:
        super().__init__()
        self._queue: CommandQueue | None = None
        #: device-level weights bank: constants shared by every compiled model holding them
        self.bank = WeightsBank()

    def get_property(self, name: str) -> Any:
        if name == "OPTIMAL_NUMBER_OF_INFER_REQUESTS":
            return optimal_infer_requests(self._properties)
        if name not in self._properties and name in NPU_OPTIONS.properties("compile"):
            return self._compile_default(name)
        if name == "NPU_EMU_PLATFORMS":
            # the calibrated generation presets NPU_EMU_PLATFORM selects, by name (read-only)
            from ov_npu_emu_npu.platforms import PLATFORMS

            return {key: p.to_dict() for key, p in PLATFORMS.items()}
        if name == "SUPPORTED_PROPERTIES":
            return sorted({*super().get_property(name), *device_properties()})
        return super().get_property(name)

    def _compile_default(self, name: str) -> Any:
        """What a compile key is when a compilation does not set it: the hardware field of the
        device's configuration, else the option's default ("" for none), as a real device answers
        every key it lists."""
        from ov_npu_emu_npu.arch import HardwareConfig

        if name in HardwareConfig.KEYS:
            field = HardwareConfig.KEYS[name]
            return getattr(HardwareConfig.from_config(self._properties), field)
        value = NPU_OPTIONS.get(self._properties, name)
        if isinstance(value, bool):
            return "YES" if value else "NO"
        return "" if value is None else value

    def memory_stats(self) -> dict[str, int]:
        """Device bytes held by the weights bank (shared constants and decompressed weights)."""
        return self.bank.stats()

    def set_property(self, properties: Mapping[str, Any]) -> None:
        # validate now: a bad stored value would otherwise fail every later compile_model
        from ov_npu_emu_npu.arch import HardwareConfig

        merged = self.merged_config(properties)
        HardwareConfig.from_config(merged)
        NpuOptions.parse(merged)  # every key of NPU_OPTIONS, INFERENCE_PRECISION_HINT included
        super().set_property(properties)

    @property
    def queue(self) -> CommandQueue:
        if self._queue is None:
            self._queue = CommandQueue()
        return self._queue

    def compile_model(self, model: ov.Model, config: Mapping[str, Any]) -> NpuCompiledModel:
        # imported lazily: the runtime path (import_model) must not need the compiler
        from ov_npu_emu_npu.compiler import compile_to_blob

        # banked (the default): the blob comes split, its weights left in the model's constants,
        # which the bank adopts (no copy of the weights between the IR and the device)
        o = NPU_OPTIONS.parse(config)
        with collector_paused():  # the compiler and the driver's parse build many small objects
            blob = compile_to_blob(model, config, split=o["NPU_EMU_WEIGHTS_BANK"])
            cm = NpuCompiledModel(blob, self, config)
        if o["CACHE_MODE"] == "OPTIMIZE_SIZE":
            # the IR .bin the weightless export refers to: WEIGHTS_PATH, else the file it was read from
            cm.weightless_bin = str(o["WEIGHTS_PATH"] or ir_weights_path(model))
        return cm

    def query_model(self, model: ov.Model, config: Mapping[str, Any]) -> dict[str, str]:
        """The ops the compiler lowers (folded and lifted ones included), per op: a model with an
        op the NPU refuses gets the rest, as from the real NPU plugin (HETERO splits by it)."""
        # imported lazily, as for compile_model
        from ov_npu_emu_npu.compiler.query import query

        supported, _ = query(model, config)
        return {op.get_friendly_name(): self.NAME for op in model.get_ops() if op.get_friendly_name() in supported}

    def import_model(self, blob: bytes, config: Mapping[str, Any]) -> NpuCompiledModel:
        from ov_npu_emu_npu.weightless import import_weightless, is_weightless

        if is_weightless(blob):  # exported with CACHE_MODE=OPTIMIZE_SIZE: WEIGHTS_PATH / MODEL_PTR
            restored = import_weightless(bytes(blob), config)  # from MODEL_PTR: a split blob (no copy)
            return NpuCompiledModel(restored if isinstance(restored, SplitBlob) else bytes(restored), self, config)
        return NpuCompiledModel(bytes(blob), self, config)


@hookimpl
def ovnpu_register_devices(registry: DeviceRegistry) -> None:
    registry.add(NpuDevice)
