"""What the tokenizer IR decides, made adjustable per call as openvino_genai does.

An openvino_tokenizers IR truncates and pads by itself: ``Truncate`` cuts the main token
sequence(s) to a constant length (minus the special tokens added around them), on the side and
with the pair strategy the original tokenizer had, and ``RaggedToDense`` pads the batch to its
longest row on the original's padding side. openvino_genai turns those constants into state
variables when it loads the IR (``max_length``, ``truncation``) and pads on the IR's side unless
the call names one. Here the truncation length becomes a ``max_length`` variable the same way (so
the IR's own ``Truncate`` keeps doing the cutting) and the padding is redone on the host from the
attention mask, which gives the same dense tensors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset6 as opset6
from openvino import opset13 as ops
from openvino.op.util import Variable, VariableInfo

from ov_npu_emu.errors import ConfigError

#: the variables' names, as openvino_genai names them in its stateful tokenizer
MAX_LENGTH_VAR = "max_length"
TRUNCATION_VAR = "truncation"
#: "no truncation": openvino_tokenizers' Truncate misreads values within 64 of INT32_MAX
NO_TRUNCATION = np.iinfo(np.int32).max - 64


@dataclass(frozen=True)
class EncoderLayout:
    """What encode() needs to know of one tokenizer IR."""

    #: the IR's own max_length (the original's model_max_length): pad_to_max_length's default
    default_max_length: int | None
    #: the IR pads on the right (the original's padding_side) unless a call names a side
    pad_right: bool
    #: the id the IR pads with
    pad_value: int
    #: the IR takes a second string input (paired prompts)
    paired: bool


def _const(value: ov.Output) -> np.ndarray | None:
    node = value.get_node()
    return np.asarray(node.get_data()) if node.get_type_name() == "Constant" else None


def _find(model: ov.Model, type_name: str) -> list[ov.Node]:
    return [op for op in model.get_ordered_ops() if op.get_type_name() == type_name]


def special_segment(combine: ov.Node, index: int) -> bool:
    """Whether segment ``index`` of a CombineSegments adds special tokens (BOS, EOS, SEP...).

    Its begin and data are constants; its end too, except in a segment a second input added
    (``add_second_input`` / ``number_of_inputs=2``), whose end is zeroed when that input is
    empty (a Multiply of constants).
    """
    begin, data = combine.input_value(3 * index), combine.input_value(3 * index + 2)
    return _const(begin) is not None and _const(data) is not None


def _segments(model: ov.Model) -> tuple[int, int]:
    """(segments, main-sequence segments) of the IR's CombineSegments; (0, 0) without one."""
    combine = _find(model, "CombineSegments")
    if not combine:
        return 0, 0
    op = combine[-1]
    n = (op.get_input_size() - 1) // 3
    main = sum(1 for i in range(n) if not special_segment(op, i))
    return n, main


def layout(model: ov.Model) -> EncoderLayout:
    """Read the padding side, pad value and default max_length off a tokenizer IR."""
    pad_right, pad_value = True, 0
    dense = _find(model, "RaggedToDense")
    if dense:
        pad_right = bool(dense[0].get_attributes().get("pad_right", True))
        value = _const(dense[0].input_value(4)) if dense[0].get_input_size() > 4 else None
        pad_value = int(np.ravel(value)[0]) if value is not None and value.size else 0
    limit = _truncation_limit(model)
    default = None
    if limit is not None:
        segments, main = _segments(model)
        default = int(np.ravel(limit[1])[0]) + (segments - main)
    return EncoderLayout(default, pad_right, pad_value, len(model.get_parameters()) == 2)


def _truncation_limit(model: ov.Model) -> tuple[ov.Input, np.ndarray] | None:
    """The Truncate input that holds the main sequence's length, and that constant.

    The IR passes either ``Select(ReadValue("truncation"), limit, no-limit)`` or the constant
    itself (tokenizers converted before truncation became switchable).
    """
    trunc = _find(model, "Truncate")
    if not trunc:
        return None
    op = trunc[0]
    index = 3 * int(op.get_attributes().get("m_num_inputs", 1))
    if index >= op.get_input_size():
        return None
    src = op.input_value(index).get_node()
    if src.get_type_name() == "Select":
        value = _const(src.input_value(1))
        return (src.input(1), value) if value is not None else None
    value = _const(op.input_value(index))
    return (op.input(index), value) if value is not None else None


def make_max_length_stateful(model: ov.Model, special_tokens_added: bool) -> bool:
    """Give ``model`` the ``max_length`` (and, for old IRs, ``truncation``) state variables.

    :param special_tokens_added: this copy of the IR adds the special tokens, so they count
        against max_length (the copy without them gives the main sequence all of it).
    :returns: whether the IR has a Truncate to steer (False leaves the model as it was).
    """
    found = _truncation_limit(model)
    if found is None:
        return False
    target, value = found
    segments, main = _segments(model)
    added = segments - main
    default = np.asarray(value, dtype=np.int32) + np.int32(added)
    max_length = _variable(MAX_LENGTH_VAR, default)
    read = opset6.read_value(ops.constant(default), max_length)
    limit = ops.subtract(read, ops.constant(np.array(added if special_tokens_added else 0, dtype=np.int32)))
    # a max_length below the special tokens' count leaves no prompt token; a negative length
    # crashes openvino_tokenizers' Truncate (the real openvino_genai 2026.4.1 segfaults there)
    limit = ops.maximum(limit, ops.constant(np.zeros(default.shape, dtype=np.int32)))
    sinks = [opset6.assign(read, max_length)]
    variables = [max_length]
    owner = target.get_node()
    if owner.get_type_name() == "Truncate":  # an old IR: truncation was always on
        switch = _variable(TRUNCATION_VAR, np.array(False))
        on = opset6.read_value(ops.constant(np.array(False)), switch)
        limit = ops.select(on, limit, ops.constant(np.array(NO_TRUNCATION, dtype=np.int32)))
        sinks.append(opset6.assign(on, switch))
        variables.append(switch)
    target.replace_source_output(limit.output(0))
    model.add_sinks(sinks)
    model.add_variables(variables)
    model.validate_nodes_and_infer_types()
    return True


def _variable(name: str, default: np.ndarray) -> Variable:
    info = VariableInfo()
    info.data_shape = ov.PartialShape(list(default.shape))
    info.data_type = ov.Type(default.dtype)
    info.variable_id = name
    return Variable(info)


def set_states(request: ov.InferRequest, max_length: int | None, truncation: bool) -> None:
    """Set (or reset to the IR's defaults) the truncation states of one request."""
    for state in request.query_state():
        if state.name == TRUNCATION_VAR:
            state.state = ov.Tensor(np.array(bool(truncation)).reshape(state.state.shape))
        elif state.name == MAX_LENGTH_VAR:
            if max_length is None:
                state.reset()
            else:
                state.state = ov.Tensor(np.array(max_length, dtype=np.int32).reshape(state.state.shape))


def repad(
    ids: np.ndarray, mask: np.ndarray, width: int, pad_right: bool, pad_value: int
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a padded batch (``mask`` marks them) padded again to ``width`` on one side."""
    rows = [r[m.astype(bool)] for r, m in zip(ids, mask, strict=True)]
    width = max([width, *(len(r) for r in rows)])
    out_ids = np.full((len(rows), width), pad_value, dtype=np.int64)
    out_mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        at = slice(0, len(r)) if pad_right else slice(width - len(r), width)
        out_ids[i, at], out_mask[i, at] = r, 1
    return out_ids, out_mask


def bool_property(key: str, value: Any) -> bool:
    """A boolean load property as openvino's ``Any::as<bool>`` reads it (the real's)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("yes", "true", "1", "no", "false", "0", ""):
        return value.lower() in ("yes", "true", "1")
    raise ConfigError(
        f"{key} must be a bool (or YES/NO, true/false, 1/0 as a string), got {value!r}", key=key
    )


@contextmanager
def _log_lines(name: str) -> Iterator[list[str]]:
    """The messages a library logger emits meanwhile (openvino_tokenizers' passes log why they
    leave a model unchanged)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log, handler = logging.getLogger(name), Keep(logging.DEBUG)
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def add_second_input(model: ov.Model) -> None:
    """Give a one-input tokenizer IR a second string input (paired prompts), in place.

    The real openvino_genai runs its ``AddSecondInputPass`` when the tokenizer is loaded with
    ``add_second_input=True``; openvino_tokenizers ships the same transformation (the one its
    ``convert_tokenizer(number_of_inputs=2)`` runs), which is used here. An IR with two inputs
    is left as it is; one the transformation cannot extend (no ``CombineSegments``, no pair
    template in rt_info ...) is a ``ConfigError`` with the transformation's reasons, as the real
    refuses it ("Two input requested but AddSecondInputPass failed").
    """
    if len(model.get_parameters()) == 2:
        return
    from openvino_tokenizers import tokenizer_transformations

    with _log_lines(tokenizer_transformations.__name__) as reasons:
        tokenizer_transformations.add_second_input(model)
    if len(model.get_parameters()) != 2:
        raise ConfigError(
            "Two input requested but AddSecondInputPass failed with "
            + (" ".join(reasons) or "an unchanged model")
            + " (add_second_input needs a tokenizer IR whose rt_info holds a pair template; "
            "convert the tokenizer with openvino_tokenizers' number_of_inputs=2 or load it "
            "without add_second_input)",
            key="add_second_input",
        )
