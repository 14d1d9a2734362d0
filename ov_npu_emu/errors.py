"""One exception tree for everything ov_npu_emu raises.

Every error derives from :class:`NpuEmuError`.  Where the matching built-in
meaning exists (bad value, missing key, not implemented) the subclass also
derives from it, so ``except ValueError`` style code written for openvino keeps
working.  Foreign errors (openvino RuntimeError, pyelftools ELFError, ...) are
wrapped at the module that touches them, with ``raise ... from e``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "NpuEmuError",
    "UserInputError",
    "ConfigError",
    "DeviceNotFoundError",
    "PluginError",
    "IRReadError",
    "DynamicShapeError",
    "UnsupportedOpError",
    "CompileError",
    "MemoryPlanError",
    "RelocationError",
    "BlobFormatError",
    "KernelParamsError",
    "BlobFieldError",
    "MemoryBudgetError",
    "ArtefactConfigError",
    "ExecutionError",
    "BarrierDeadlockError",
    "PromptTooLongError",
    "KVCacheFullError",
    "UnsupportedFeatureError",
    "KVBlockError",
    "HostMemoryError",
    "check",
]


class NpuEmuError(RuntimeError):
    """Base class; every error raised by ov_npu_emu derives from it.

    It derives from RuntimeError because that is what openvino raises, so code
    written against openvino that catches RuntimeError keeps working.
    """


class UserInputError(NpuEmuError, ValueError):
    """Bad input from the caller: wrong tensor shape/type, unknown port, bad argument."""


class UserTypeError(UserInputError, TypeError):
    """An argument of a type that cannot be used: a key that cannot name an input or output (a
    float ...), a model that is no path, XML or openvino.Model; a TypeError as openvino raises it."""


class ConfigError(UserInputError):
    """A configuration key or value is invalid; ``key`` names it."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class DeviceNotFoundError(NpuEmuError, KeyError):
    """No device plugin is registered under that name."""

    def __init__(self, name: str, known: list[str], suggestion: str | None = None) -> None:
        self.name = name
        self.known = list(known)
        self.suggestion = suggestion
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        msg = f"Device {name!r} is not registered{hint} Available devices: {', '.join(known) or '(none)'}"
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class PluginError(NpuEmuError):
    """A plugin failed to load or broke the plugin contract."""


class IRReadError(NpuEmuError):
    """A model file could not be read (missing, malformed XML/bin, unknown extension op)."""


class DynamicShapeError(UserInputError):
    """A static-shape device was given a model with dynamic dimensions; ``input_name`` names it."""

    def __init__(self, message: str, *, input_name: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name


class UnsupportedOpError(NpuEmuError, NotImplementedError):
    """The device cannot execute an operation; ``op_type`` and ``node_name`` say which."""

    def __init__(self, message: str, *, op_type: str | None = None, node_name: str | None = None) -> None:
        super().__init__(message)
        self.op_type = op_type
        self.node_name = node_name


class CompileError(NpuEmuError):
    """Compilation failed in a compiler stage; ``stage`` names it (lower, schedule, memory, reloc, ...)."""

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage


class MemoryPlanError(CompileError):
    """The memory planner could not place a buffer (CMX/DDR overflow, overlap)."""


class RelocationError(NpuEmuError):
    """A relocation could not be applied; ``section``, ``offset`` and ``symbol`` say where."""

    def __init__(
        self, message: str, *, section: str | None = None, offset: int | None = None, symbol: str | None = None
    ) -> None:
        super().__init__(message)
        self.section = section
        self.offset = offset
        self.symbol = symbol


class BlobFormatError(NpuEmuError):
    """A blob or exported artefact is corrupt, truncated, foreign or from another version."""


class KernelParamsError(BlobFormatError):
    """A task's parameter block does not fit its kernel's record (npu/blob/kernel_params.py)."""

    def __init__(self, message: str, *, kernel: str) -> None:
        super().__init__(message)
        self.kernel = kernel


class BlobFieldError(BlobFormatError):
    """One declared field of a blob or artefact is inconsistent with the rest; ``field`` names it
    (``"variables[0].shape"``, ``"section .npu.scratch"``, ``"config.max_prompt_len"``)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class MemoryBudgetError(BlobFieldError):
    """What a blob or artefact declares (ports, states, scratch, ...) exceeds the memory budget
    (``NPU_EMU_DEVICE_MEMORY_MB``); raised before anything is allocated. ``field`` is the largest
    item, ``size`` its bytes, ``total`` / ``budget`` the declared total and the limit in bytes."""

    def __init__(self, message: str, *, field: str, size: int, total: int, budget: int) -> None:
        super().__init__(message, field=field)
        self.size = size
        self.total = total
        self.budget = budget


class ArtefactConfigError(BlobFieldError):
    """The configuration stored in an imported NPUW artefact breaks a rule ``parse_config``
    enforces at compile time, or disagrees with the artefact's sub-models; ``key`` names the
    configuration key (``NPUW_LLM_MAX_PROMPT_LEN``), ``field`` the stored field."""

    def __init__(self, message: str, *, key: str, field: str) -> None:
        super().__init__(message, field=field)
        self.key = key


class ExecutionError(NpuEmuError):
    """Inference failed on the device; ``task_index`` names the task when known."""

    def __init__(self, message: str, *, task_index: int | None = None) -> None:
        super().__init__(message)
        self.task_index = task_index


class BarrierDeadlockError(ExecutionError):
    """The management core found no runnable task while tasks remained (barrier graph broken)."""


class PromptTooLongError(UserInputError):
    """The prompt does not fit the configured static prompt length (MAX_PROMPT_LEN)."""


class KVCacheFullError(NpuEmuError):
    """The largest static KV cache is full; no more tokens can be generated."""


class UnsupportedFeatureError(ConfigError, AttributeError):
    """A public name of the real openvino_genai that genai_shim does not implement (an
    AttributeError too, so ``hasattr`` and ``getattr(mod, name, default)`` keep working)."""


class KVBlockError(ExecutionError):
    """A paged-KV block table names a block that is out of range, free, or owned by another
    sequence (the block-status check of the continuous-batching block manager)."""


class HostMemoryError(NpuEmuError, MemoryError):
    """The host ran out of memory during an inference (a MemoryError too, never disguised as an
    ExecutionError: nothing on the device failed)."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"{where}: the host ran out of memory; free host memory, or lower the sizes that "
            "allocate (MAX_PROMPT_LEN, the batch, NPU_EMU_DEVICE_MEMORY_MB so that an oversized "
            "blob is refused at import)"
        )


def check(cond: Any, message: str, exc: type[NpuEmuError] = UserInputError) -> None:
    """Raise ``exc(message)`` unless ``cond`` holds.

    Used instead of ``assert`` for validation, because asserts vanish under ``python -O``.
    """
    if not cond:
        raise exc(message)
