"""The graphs openvino.genai's text-embedding pipeline adds to an embedding model
(src/cpp/src/rag/text_embedding_utils.cpp): pooling (CLS, MEAN, LAST_TOKEN) and L2 normalisation
fused as output post-processing, the static reshape to ``batch_size`` x ``max_length``, and the
same ops as a separate post model (for the real's NPUW path).  Built with openvino's own graph
API, op for op as the real builds them, so the CPU plugin computes the same numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset8 as op8
from openvino import opset1 as op1
from openvino import opset3 as op3

from genai_shim.rag.config import PoolingType, TextEmbeddingConfig

__all__ = ["apply_postprocessing", "create_post_model", "has_token_type_ids", "reshape_model"]


def _i64(values: list[int]) -> Any:
    return op1.constant(np.array(values, dtype=np.int64))


def _squeeze_axis1(node: Any) -> Any:
    # the real's v15::Squeeze with axis 1 (the sliced dimension is 1)
    import openvino.opset15 as op15

    return op15.squeeze(node, _i64([1]))


def _cls_pooling(hidden: Any) -> Any:
    """[batch, seq, hidden] -> [batch, hidden]: the first token."""
    return _squeeze_axis1(op8.slice(hidden, _i64([0]), _i64([1]), _i64([1]), _i64([1])))


def _mean_pooling(hidden: Any, mask: Any) -> Any:
    """Masked mean over the sequence; the count is at least 1e-12 (the real's guard)."""
    shape = op3.shape_of(hidden)
    expanded = op3.broadcast(op1.unsqueeze(mask, _i64([-1])), shape)
    expanded_f = op1.convert(expanded, hidden.get_element_type())
    total = op1.reduce_sum(op1.multiply(hidden, expanded_f), _i64([1]))
    count = op1.reduce_sum(expanded_f, _i64([1]))
    count = op1.maximum(count, op1.constant(np.array([1e-12], dtype=np.float32)))
    return op1.divide(total, count)


def _last_token_pooling(hidden: Any, mask: Any, config: TextEmbeddingConfig) -> Any:
    """The last real token: the last column when padded on the left, else at sum(mask) - 1."""
    if config.padding_side == "left":
        stop = _i64([np.iinfo(np.int64).max])
        return _squeeze_axis1(op8.slice(hidden, _i64([-1]), stop, _i64([1]), _i64([1])))
    last = op1.subtract(op1.reduce_sum(mask, _i64([1])), _i64([1]))
    return op8.gather(hidden, last, _i64([1]), 1)


def _post_ops(hidden: Any, mask: Any, config: TextEmbeddingConfig) -> Any:
    if config.pooling_type == PoolingType.CLS:
        return _cls_pooling(hidden)
    if config.pooling_type == PoolingType.MEAN:
        return _mean_pooling(hidden, mask)
    return _last_token_pooling(hidden, mask, config)


def _normalize(node: Any) -> Any:
    return op1.normalize_l2(node, op1.constant(np.array([1], dtype=np.int32)), 1e-12, "max")


def apply_postprocessing(model: ov.Model, config: TextEmbeddingConfig) -> ov.Model:
    """The model with pooling (and normalisation) fused on its first output, as the real's
    ``utils::apply_postprocessing`` (a PrePostProcessor custom step there: the output's tensor
    names move to the new last op)."""
    mask = model.input("attention_mask").get_node().output(0)
    result = model.get_results()[0]
    source = result.input_value(0)
    names = source.get_names()
    node = _post_ops(source, mask, config)
    if config.normalize:
        node = _normalize(node)
    source.get_tensor().set_names(set())
    node.output(0).get_tensor().set_names(names)
    result.input(0).replace_source_output(node.output(0))
    model.validate_nodes_and_infer_types()
    return model


def create_post_model(model: ov.Model, config: TextEmbeddingConfig) -> ov.Model:
    """Pooling and normalisation as a model of their own: inputs ``embedding_hidden_state``
    [1, ?, hidden] and ``attention_mask`` [1, ?], output ``last_hidden_state``."""
    out = model.outputs[0]
    hidden_size = out.get_partial_shape()[2]
    hidden = op1.parameter(ov.PartialShape([1, -1, hidden_size]), out.get_element_type(),
                           name="embedding_hidden_state")
    hidden.output(0).set_names({"embedding_hidden_state"})
    mask = op1.parameter(ov.PartialShape([1, -1]), ov.Type.i64, name="attention_mask")
    mask.output(0).set_names({"attention_mask"})
    node = _post_ops(hidden.output(0), mask.output(0), config)
    if config.normalize:
        node = _normalize(node)
    result = op1.result(node)
    result.set_friendly_name("last_hidden_state")
    result.output(0).set_names({"last_hidden_state"})
    post = ov.Model([result], [hidden, mask], f"{model.get_friendly_name()}_post_process")
    post.validate_nodes_and_infer_types()
    return post


def has_token_type_ids(model: Any) -> bool:
    return any("token_type_ids" in port.get_names() for port in model.inputs)


def reshape_model(model: ov.Model, config: TextEmbeddingConfig) -> None:
    """Fix the batch to ``batch_size`` and the sequence to ``max_length`` (padded to it) or
    bound it to 1..max_length, as the real's ``utils::reshape_model``."""
    batch = ov.Dimension(config.batch_size) if config.batch_size is not None else ov.Dimension()
    seq = ov.Dimension()
    if config.max_length is not None:
        seq = (ov.Dimension(config.max_length) if config.pad_to_max_length
               else ov.Dimension(1, config.max_length))
    shape = ov.PartialShape([batch, seq])
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if has_token_type_ids(model) else [])
    model.reshape({name: shape for name in names})
