"""A host failure inside an inference is told apart from a device failure: a kernel that raises an
ordinary exception is an ExecutionError naming its task; a MemoryError is a HostMemoryError (still
a MemoryError, never an ExecutionError); a KeyboardInterrupt passes through untouched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ov_npu_emu as ov
from ov_npu_emu.errors import ExecutionError, HostMemoryError
from ov_npu_emu.testing import make_add_model
from ov_npu_emu_npu.device.kernels.registry import KERNELS

pytestmark = pytest.mark.filterwarnings("ignore")


def _raising_kernels(monkeypatch: pytest.MonkeyPatch, exc: BaseException, at_run: bool) -> None:
    """Every kernel raises ``exc`` when its runner runs (``at_run``) or when it is bound."""
    for name, maker in list(KERNELS.items()):
        def wrapped(ins: Any, outs: Any, params: Any, maker: Callable[..., Any] = maker) -> Any:
            if not at_run:
                raise exc
            maker(ins, outs, params)

            def run() -> None:
                raise exc
            return run
        monkeypatch.setitem(KERNELS, name, wrapped)


def _infer(device: str) -> None:
    cm = ov.Core().compile_model(make_add_model(), device)
    cm.create_infer_request().infer([np.ones(list(p.get_shape()), np.float32) for p in cm.inputs])


@pytest.mark.parametrize("at_run", [True, False], ids=["run", "bind"])
def test_kernel_failures_on_the_npu(monkeypatch: pytest.MonkeyPatch, at_run: bool) -> None:
    _raising_kernels(monkeypatch, ZeroDivisionError("k"), at_run)
    with pytest.raises(ExecutionError, match=r"^task \d+ \(\w+\)") as e:
        _infer("NPU")
    assert not isinstance(e.value, MemoryError) and isinstance(e.value.__cause__, ZeroDivisionError)

    _raising_kernels(monkeypatch, MemoryError(), at_run)
    with pytest.raises(HostMemoryError, match="host ran out of memory") as m:
        _infer("NPU")
    assert isinstance(m.value, MemoryError) and not isinstance(m.value, ExecutionError)

    _raising_kernels(monkeypatch, KeyboardInterrupt(), at_run)
    with pytest.raises(KeyboardInterrupt):
        _infer("NPU")


@pytest.mark.parametrize("exc, want", [(ZeroDivisionError("d"), ExecutionError),
                                       (MemoryError(), HostMemoryError),
                                       (KeyboardInterrupt(), KeyboardInterrupt)],
                         ids=["error", "memory", "interrupt"])
def test_infer_request_tells_host_from_device(exc: BaseException, want: type[BaseException]) -> None:
    cm = ov.Core().compile_model(make_add_model(), "CPU")
    req = cm.create_infer_request()

    def boom() -> None:
        raise exc
    req._impl.infer = boom  # type: ignore[method-assign]
    with pytest.raises(want) as e:
        req.infer([np.ones(list(p.get_shape()), np.float32) for p in cm.inputs])
    assert type(e.value) is want
