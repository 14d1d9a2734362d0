"""``AsyncInferQueue``: a pool of asynchronous infer requests, as ``openvino.AsyncInferQueue``.

The real's semantics: ``jobs=0`` takes the compiled model's ``OPTIMAL_NUMBER_OF_INFER_REQUESTS``
(which the performance hint decides); ``start_async`` blocks until a request of the pool is idle,
binds the inputs on it (a wrong shape or type raises right there, in the caller), and starts it;
the callback set with ``set_callback`` gets ``(request, userdata)`` on the request's own thread
when it completes; ``wait_all`` blocks until every request is idle.

What the real gets wrong and we do not copy (openvino 2026.4.1, see docs/conformance.md): an
exception raised by the callback aborts the process after it is re-raised ("restore() called a
second time"), and an index past the pool (``queue[5]`` of two) segfaults.  Here an error of an
inference or of the callback is raised once, by the next ``start_async``, ``get_idle_request_id``
or ``wait_all``, and a bad index is a typed error.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ov_npu_emu.errors import NpuEmuError, UserInputError

if TYPE_CHECKING:
    from ov_npu_emu.api.compiled_model import CompiledModel
    from ov_npu_emu.api.infer_request import InferRequest

__all__ = ["AsyncInferQueue"]


def _optimal_jobs(compiled_model: CompiledModel) -> int:
    """``OPTIMAL_NUMBER_OF_INFER_REQUESTS`` of the compiled model (1 if the device has no answer)."""
    try:
        return max(1, int(compiled_model.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
    except (NpuEmuError, TypeError, ValueError):
        return 1


class AsyncInferQueue:
    """A pool of ``jobs`` infer requests of one compiled model (``jobs=0``: the device's optimum)."""

    def __init__(self, compiled_model: CompiledModel, jobs: int = 0) -> None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
            raise UserInputError(f"AsyncInferQueue(jobs={jobs!r}): jobs is a number of requests >= 0 "
                                 "(0: the compiled model's OPTIMAL_NUMBER_OF_INFER_REQUESTS)")
        n = jobs or _optimal_jobs(compiled_model)
        self._requests = [compiled_model.create_infer_request() for _ in range(n)]
        self._userdata: list[Any] = [None] * n
        self._idle: deque[int] = deque(range(n))
        self._running: set[int] = set()  # started and not yet joined
        self._cond = threading.Condition()
        self._callback: Callable[[InferRequest, Any], None] | None = None
        self._errors: list[BaseException] = []
        for i, request in enumerate(self._requests):
            request.set_callback(self._completion(i))

    def _completion(self, i: int) -> Callable[[Any], None]:
        def done(_: Any) -> None:  # runs on request i's thread, its outputs already collected
            callback = self._callback
            if callback is not None:
                try:
                    callback(self._requests[i], self._userdata[i])
                except BaseException as e:  # raised by the queue's next flow-control call
                    with self._cond:
                        self._errors.append(e)
            with self._cond:
                self._idle.append(i)
                self._cond.notify_all()

        return done

    # -- the pool ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._requests)

    def __iter__(self) -> Iterator[InferRequest]:
        return iter(list(self._requests))

    def __getitem__(self, i: int) -> InferRequest:
        if isinstance(i, bool) or not isinstance(i, int) or not -len(self._requests) <= i < len(self._requests):
            raise UserInputError(f"AsyncInferQueue has {len(self._requests)} requests; index {i!r} is out of range")
        return self._requests[i]

    @property
    def userdata(self) -> list[Any]:
        """The userdata last passed with each request (None where none was passed yet)."""
        return list(self._userdata)

    def set_callback(self, callback: Callable[[InferRequest, Any], None]) -> None:
        """``callback(request, userdata)`` after each completed inference, on its thread."""
        if not callable(callback):
            raise UserInputError(f"AsyncInferQueue.set_callback needs a callable, got {type(callback).__name__}")
        self._callback = callback

    # -- flow control ------------------------------------------------------------------
    def _join(self, i: int) -> None:
        """Join request i's finished thread; its inference error, if any, is recorded."""
        if i in self._running:
            self._running.discard(i)
            try:
                self._requests[i].wait()
            except BaseException as e:
                self._errors.append(e)

    def _raise_pending(self) -> None:
        if self._errors:
            first, self._errors = self._errors[0], []
            raise first

    def is_ready(self) -> bool:
        """Whether a request of the pool is idle now."""
        with self._cond:
            return bool(self._idle)

    def get_idle_request_id(self) -> int:
        """The id of an idle request, waiting for one to complete if none is."""
        with self._cond:
            while not self._idle:
                self._cond.wait()
            i = self._idle[0]
            self._join(i)
            self._raise_pending()
            return i

    def start_async(self, inputs: Any = None, userdata: Any = None, share_inputs: bool = False) -> None:
        """Run the next idle request on ``inputs``; ``userdata`` goes to the callback."""
        i = self.get_idle_request_id()
        with self._cond:
            self._idle.remove(i)
            self._running.add(i)
        try:
            self._userdata[i] = userdata
            self._requests[i].start_async(inputs, userdata, share_inputs)
        except BaseException:  # bad inputs: nothing started, the request stays idle
            with self._cond:
                self._running.discard(i)
                self._idle.appendleft(i)
            raise

    def wait_all(self) -> None:
        """Wait until every request of the pool is idle; raise the first error since last asked."""
        with self._cond:
            while len(self._idle) < len(self._requests):
                self._cond.wait()
            for i in list(self._running):
                self._join(i)
            self._raise_pending()

    def __repr__(self) -> str:
        return f"<AsyncInferQueue: {len(self._requests)} requests>"
