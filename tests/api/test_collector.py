"""collector_paused: the cyclic GC off inside the block, as it was after it."""

from __future__ import annotations

import gc

import pytest

from ov_npu_emu.runtime.collector import collector_paused


@pytest.fixture(autouse=True)
def _restore_gc():
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_inside_and_enabled_after_even_on_error():
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_nested_blocks_reenable_only_at_the_outermost():
    gc.enable()
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_callers_own_disable_is_kept():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
