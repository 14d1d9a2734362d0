"""The installed package's version: the one place it is looked up (blobs and NPUW artefacts
record it, ``ov_npu_emu.__version__`` and ``Device.version()`` report it)."""

from __future__ import annotations

import functools

__all__ = ["package_version"]


@functools.cache
def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ov-npu-emu")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"
