"""InferRequest: openvino.InferRequest's API over a device's DeviceInferRequest."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov

from ov_npu_emu.api.ports import Port, ResultDict, numpy_dtype, resolve_port
from ov_npu_emu.errors import ExecutionError, HostMemoryError, NpuEmuError, UserInputError, UserTypeError
from ov_npu_emu.runtime.device import DeviceInferRequest, ProfilingInfo, VariableState

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel

__all__ = ["InferRequest"]


def _bounds(ps: ov.PartialShape) -> tuple[tuple[int, int], ...] | None:
    """Per-dimension (min, max) of a partial shape (max −1: unbounded); None for a dynamic rank."""
    if ps.rank.is_dynamic:
        return None
    return tuple((d.get_min_length(), d.get_max_length()) for d in ps)


def _compatible(bounds: tuple[tuple[int, int], ...] | None, shape: tuple[int, ...]) -> bool:
    """``PartialShape.compatible`` for a static shape, in pure Python (no pybind objects per call)."""
    if bounds is None:
        return True
    if len(bounds) != len(shape):
        return False
    for (lo, hi), v in zip(bounds, shape, strict=False):
        if v < lo or (hi >= 0 and v > hi):
            return False
    return True


def _check_shape(port: Port, shape: tuple[int, ...]) -> None:
    ps = port.partial_shape
    if not ps.compatible(ov.PartialShape(list(shape))):
        raise UserInputError(
            f"{'Input' if port.is_input else 'Output'} {port.info.any_name!r} expects shape {ps}, got {list(shape)}. "
            "Reshape the model (model.reshape) or pass a tensor of the expected shape."
        )


def _worker(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
    """A request's inference thread: runs its jobs until told to stop (it holds the queue, not
    the request, so a request nobody references is collected and stops it)."""
    while (job := jobs.get()) is not None:
        job()


class InferRequest:
    """One inference request; same methods and semantics as ``openvino.InferRequest``.

    ``share_inputs`` / ``share_outputs`` (documented once here): with ``share_inputs=True`` numpy
    inputs of the right dtype and layout are bound without copying, so the caller must not modify
    them until inference ends; with ``share_outputs=True`` the returned arrays are views of the
    request's output tensors and are overwritten by the next inference.
    """

    def __init__(self, impl: DeviceInferRequest, compiled_model: CompiledModel) -> None:
        self._impl = impl
        self._compiled = compiled_model
        # Per-request caches for the per-call fast path (ports never change after compilation):
        # key → port, port index → shape bounds and numpy dtype.
        self._inputs: list[Port] = compiled_model.inputs
        self._outputs: list[Port] = compiled_model.outputs
        self._in_ports: dict[Any, Port] = {}
        self._in_bounds = [_bounds(p.partial_shape) for p in self._inputs]
        self._in_dtypes: list[np.dtype | None] = [None] * len(self._inputs)
        self._out_index: dict[Any, int] = {}
        self._by_name: dict[str, Port] = {}
        self._results: ResultDict | None = None
        # start_async runs on one worker thread per request, made on first use: a new thread
        # per call cost more than a small model's whole inference
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] | None = None
        self._done = threading.Event()
        self._pending = False
        self._error: BaseException | None = None
        self._callback: tuple[Callable[[Any], None], Any] | None = None
        self._latency_ms = 0.0
        self.userdata: Any = None
        #: input index -> the tensors set_input_tensors(list) gave for its batch, gathered per inference
        self._batched: dict[int, list[ov.Tensor]] = {}

    # -- ports -------------------------------------------------------------------------
    @property
    def model_inputs(self) -> list[Port]:
        return list(self._inputs)

    @property
    def model_outputs(self) -> list[Port]:
        return list(self._outputs)

    def get_compiled_model(self) -> CompiledModel:
        return self._compiled

    def _find(self, key: Any) -> Port:
        """Look a key up among inputs first, then outputs (tensor names are unique per model)."""
        if isinstance(key, Port):
            return resolve_port(key, self._inputs if key.is_input else self._outputs, "port")
        named = type(key) is str  # names are memoised (ints are cheap and input-only)
        if named:
            port = self._by_name.get(key)
            if port is not None:
                return port
        try:
            port = resolve_port(key, self._inputs, "input")
        except UserInputError:
            if isinstance(key, (int, np.integer)):
                raise
            port = resolve_port(key, self._outputs, "output")
        if named:
            self._by_name[key] = port
        return port

    # -- tensors -----------------------------------------------------------------------
    def get_tensor(self, key: Any) -> ov.Tensor:
        port = self._find(key)
        if port.is_input:
            self._not_batched(port)
        return self._impl.get_tensor(port.index, port.is_input)

    def get_input_tensor(self, index: int | None = None) -> ov.Tensor:
        port = self._single(self.model_inputs, index, "input")
        self._not_batched(port)
        return self._impl.get_tensor(port.index, True)

    def _not_batched(self, port: Port) -> None:
        if port.index in self._batched:
            raise UserInputError(
                f"get_tensor shall not be used together with batched set_tensors/set_input_tensors: input "
                f"{port.info.any_name!r} reads the {len(self._batched[port.index])} tensors given; use them"
            )

    def get_output_tensor(self, index: int | None = None) -> ov.Tensor:
        return self._impl.get_tensor(self._single(self.model_outputs, index, "output").index, False)

    @property
    def input_tensors(self) -> list[ov.Tensor]:
        return [self._impl.get_tensor(p.index, True) for p in self.model_inputs]

    @property
    def output_tensors(self) -> list[ov.Tensor]:
        return [self._impl.get_tensor(p.index, False) for p in self.model_outputs]

    def set_tensor(self, key: Any, tensor: ov.Tensor) -> None:
        self._bind(self._find(key), tensor)

    def set_input_tensor(self, *args: Any) -> None:
        index, tensor = (None, args[0]) if len(args) == 1 else args
        self._bind(self._single(self.model_inputs, index, "input"), tensor)

    def set_output_tensor(self, *args: Any) -> None:
        index, tensor = (None, args[0]) if len(args) == 1 else args
        self._bind(self._single(self.model_outputs, index, "output"), tensor)

    def set_tensors(self, inputs: Mapping[Any, ov.Tensor]) -> None:
        for k, t in inputs.items():
            self.set_tensor(k, t)

    def set_input_tensors(self, inputs: Mapping[int, ov.Tensor] | Iterable[ov.Tensor]) -> None:
        """A dict: a tensor per input; a list: the batch of the model's only input, one tensor per
        item (or per slice of the batch), gathered into it at each inference (openvino's
        "batched" set_input_tensors)."""
        if isinstance(inputs, Mapping):
            for k, t in inputs.items():
                self._bind(resolve_port(k, self.model_inputs, "input"), t)
            return
        self._set_batched(self._single(self.model_inputs, None, "input"), list(inputs))

    def _set_batched(self, port: Port, tensors: list[ov.Tensor]) -> None:
        if not tensors or not all(isinstance(t, ov.Tensor) for t in tensors):
            raise UserInputError("set_input_tensors(list) needs a non-empty list of openvino.Tensor")
        if len(tensors) == 1:
            self._bind(port, tensors[0])
            return
        shapes = [tuple(t.shape) for t in tensors]
        batch = sum(sh[0] if sh else 0 for sh in shapes)
        full = (batch, *shapes[0][1:]) if shapes[0] else ()
        if any(sh[1:] != shapes[0][1:] for sh in shapes) or any(t.get_element_type() != port.element_type
                                                                for t in tensors):
            raise UserInputError(f"Input {port.info.any_name!r}: the batched tensors must share their type "
                                 f"({port.element_type}) and their shape but the batch axis, got {shapes}")
        _check_shape(port, full)
        self._batched[port.index] = tensors
        current = self._impl.get_tensor(port.index, True)
        if tuple(current.shape) != full:
            self._impl.set_tensor(port.index, True, ov.Tensor(port.element_type, list(full)))

    def set_output_tensors(self, outputs: Mapping[int, ov.Tensor]) -> None:
        for k, t in outputs.items():
            self._bind(resolve_port(k, self.model_outputs, "output"), t)

    @staticmethod
    def _single(ports: list[Port], index: int | str | None, what: str) -> Port:
        if index is None:
            if len(ports) != 1:
                raise UserInputError(f"the model has {len(ports)} {what}s; pass an index")
            return ports[0]
        return resolve_port(index, ports, what)

    def _bind(self, port: Port, tensor: Any) -> None:
        if not isinstance(tensor, ov.Tensor):
            raise UserInputError(f"set_tensor expects an openvino.Tensor, got {type(tensor).__name__}")
        if tensor.get_element_type() != port.element_type:
            raise UserInputError(
                f"Tensor for {port.info.any_name!r} has element type {tensor.get_element_type()}, "
                f"the port expects {port.element_type}"
            )
        _check_shape(port, tuple(tensor.shape))
        if port.is_input:
            self._batched.pop(port.index, None)
        self._impl.set_tensor(port.index, port.is_input, tensor)

    def _input_port(self, key: Any) -> Port:
        """resolve_port over the inputs, memoised for name and index keys (the per-step case)."""
        hashable = isinstance(key, (str, int)) and not isinstance(key, bool)
        if hashable:
            port = self._in_ports.get(key)
            if port is not None:
                return port
        port = resolve_port(key, self._inputs, "input")
        if hashable:
            self._in_ports[key] = port
        return port

    def _input_dtype(self, port: Port) -> np.dtype:
        want = self._in_dtypes[port.index]
        if want is None:
            want = self._in_dtypes[port.index] = numpy_dtype(port.element_type)
        return want

    def _items(self, inputs: Any) -> list[tuple[Any, Any]]:
        """(key, value) pairs of the inputs as given: a dict, a list / tuple, or one value."""
        if isinstance(inputs, dict) or isinstance(inputs, Mapping):
            return list(inputs.items())
        if isinstance(inputs, (list, tuple)):
            return list(enumerate(inputs))
        if not isinstance(inputs, (np.ndarray, ov.Tensor, np.generic, int, float, bool)) and \
                not hasattr(inputs, "__array__"):
            raise UserTypeError(f"Incompatible inputs of type: {type(inputs)}; pass a dict, list or tuple of "
                                "arrays or tensors, or one array or tensor")
        if len(self.model_inputs) != 1:
            raise UserInputError(
                f"a single input value was given but the model has {len(self.model_inputs)} inputs; pass a dict"
            )
        return [(0, inputs)]

    def _feed(self, inputs: Any, share_inputs: bool) -> None:
        """Bind or copy user inputs (dict / list / single value) into the request's input tensors."""
        if inputs is None:
            return
        for key, value in self._items(inputs):
            port = self._input_port(key)
            if self._batched:
                self._batched.pop(port.index, None)
            if isinstance(value, ov.Tensor):
                if share_inputs:
                    self._bind(port, value)
                    continue
                value = value.data
            want = self._input_dtype(port)
            if type(value) is np.ndarray:
                arr = value
            else:
                try:
                    arr = np.asarray(value)
                except (ValueError, TypeError) as e:  # ragged nested lists and the like
                    raise UserInputError(f"Input {port.info.any_name!r}: cannot make a tensor of this "
                                         f"{type(value).__name__}: {e}") from e
            if arr.dtype.kind in "OSUV" and want.kind not in "OSUV":  # numpy would raise ValueError mid-copy
                raise UserInputError(f"Input {port.info.any_name!r} expects {port.element_type.get_type_name()} "
                                     f"numbers, got an array of dtype {arr.dtype}")
            if not _compatible(self._in_bounds[port.index], arr.shape):
                _check_shape(port, arr.shape)  # raises the typed error with the full message
            # shared: a writable, contiguous ndarray of the port's type (a scalar, a list or an
            # array-like converted above, and a read-only array are copied, as by openvino)
            if share_inputs and arr is value and arr.dtype == want and arr.flags.c_contiguous and arr.flags.writeable:
                shared = ov.Tensor(arr, shared_memory=True)
                # bf16 and the like have a numpy container of another type: copied below instead
                if shared.get_element_type() == port.element_type:
                    self._impl.set_tensor(port.index, True, shared)
                    continue
            current = self._impl.get_tensor(port.index, True)
            # dtype first: `.data` of the bound tensor then has its shape (ov.Shape is slow to read)
            if current.get_element_type() == port.element_type and current.data.shape == arr.shape:
                np.copyto(current.data, arr, casting="unsafe")  # keeps the bound buffer (and its address)
            else:
                self._impl.set_tensor(port.index, True, ov.Tensor(np.asarray(arr, dtype=want, order="C")))

    # -- inference ---------------------------------------------------------------------
    def infer(
        self, inputs: Any = None, share_inputs: bool = False, share_outputs: bool = False, **_: Any
    ) -> ResultDict:
        """Run synchronously and return the outputs (see the class doc for ``share_*``)."""
        self._wait_idle()
        self._feed(inputs, share_inputs)
        self._run()
        return self._collect(share_outputs)

    def _run(self) -> None:
        t0 = time.perf_counter()
        for index, tensors in self._batched.items():  # gather the batch from the tensors given
            np.concatenate([t.data for t in tensors], axis=0, out=self._impl.get_tensor(index, True).data)
        try:
            self._impl.infer()
        except NpuEmuError:
            raise
        except MemoryError as e:  # the host's, not the device's: say so
            raise HostMemoryError("inference") from e
        except Exception as e:  # a device bug must still surface as our error type
            raise ExecutionError(f"inference failed: {e}") from e
        finally:
            self._latency_ms = (time.perf_counter() - t0) * 1e3

    def _collect(self, share_outputs: bool) -> ResultDict:
        values = []
        get = self._impl.get_tensor
        for i in range(len(self._outputs)):
            data = get(i, False).data
            values.append(data if share_outputs else np.array(data, copy=True))
        self._results = ResultDict(self._outputs, values, self._out_index)
        return self._results

    def start_async(self, inputs: Any = None, userdata: Any = None, share_inputs: bool = False, **_: Any) -> None:
        """Start inference in the background; ``wait()`` joins it and re-raises its error."""
        self._wait_idle()
        self._feed(inputs, share_inputs)
        self.userdata = userdata
        self._error = None

        def job() -> None:
            try:
                try:
                    self._run()
                    self._collect(False)
                except BaseException as e:  # handed to wait()
                    self._error = e
                if self._callback is not None:
                    cb, data = self._callback
                    try:
                        cb(data if data is not None else self.userdata)
                    except BaseException as e:  # the callback's error, too, is wait()'s to raise
                        self._error = self._error or e
            finally:
                self._done.set()

        if self._jobs is None:
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=_worker, args=(self._jobs,), name="ov_npu_emu-infer", daemon=True).start()
        self._done.clear()
        self._pending = True
        self._jobs.put(job)

    def wait(self) -> None:
        self._wait_idle()

    def wait_for(self, timeout: int) -> bool:
        """Wait up to ``timeout`` ms (-1: forever); True when the request is done."""
        if self._pending and not self._done.wait(None if timeout < 0 else timeout / 1000):
            return False
        self._wait_idle()
        return True

    def _wait_idle(self) -> None:
        if self._pending:
            self._done.wait()
            self._pending = False
            err, self._error = self._error, None
            if err is not None:
                raise err

    def __del__(self) -> None:
        jobs = getattr(self, "_jobs", None)
        if jobs is not None:
            jobs.put(None)  # the worker ends

    def set_callback(self, callback: Callable[[Any], None], userdata: Any = None) -> None:
        self._callback = (callback, userdata)

    def cancel(self) -> None:
        """Requests cannot be interrupted mid-inference here; waits for completion instead."""
        self._wait_idle()

    @property
    def results(self) -> ResultDict:
        if self._results is None:
            raise UserInputError("no results yet: run infer() first")
        return self._results

    @property
    def latency(self) -> float:
        """Wall time of the last inference in milliseconds."""
        return self._latency_ms

    # -- state & profiling -------------------------------------------------------------
    def query_state(self) -> list[VariableState]:
        return self._impl.query_state()

    def reset_state(self) -> None:
        self._impl.reset_state()

    def get_profiling_info(self) -> list[ProfilingInfo]:
        return self._impl.get_profiling_info()

    @property
    def profiling_info(self) -> list[ProfilingInfo]:
        return self.get_profiling_info()

    @property
    def impl(self) -> DeviceInferRequest:
        """The device-level request (for tools and tests: counters, traces)."""
        return self._impl
