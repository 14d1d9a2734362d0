"""The paged-attention model: OpenVINO's own ``paged_attention_transformation`` applied to the
stateful export, compiled by the device plugin, fed the way openvino.genai's continuous-batching
model runner feeds it (facts read from its sources, code written anew).

Model inputs after the transformation (checked on stories260K and optimum exports):
``input_ids [T]``, ``position_ids [T]`` (all scheduled tokens of all sequences, concatenated),
``past_lens [S]`` (tokens already in the cache per sequence), ``subsequence_begins [S+1]`` and
``block_indices_begins [S+1]`` (prefix sums), ``block_indices [B]`` (the sequences' block tables
concatenated), ``max_context_len []``, ``score_aggregation_window [S]`` and per layer
``key_cache.N`` / ``value_cache.N`` whose shape and precision the plugin chooses at compile time
(CPU: ``[blocks, kv_heads, 32, head_size]`` f32/f16, or u8 with by-channel key scales in extra
rows).  ``sampled_tokens_indices [K]`` is ours/the real's gather before the LM head, so only the
rows that are sampled are projected onto the vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import ConfigError, ExecutionError, HostMemoryError, KVBlockError, NpuEmuError

__all__ = ["PagedModel", "prepare_paged_model"]

#: KV block size the real continuous-batching pipeline uses on CPU (kv_cache_manager.hpp)
CPU_BLOCK_SIZE = 32


def _llm_matmul(model: ov.Model) -> tuple[Any, int] | tuple[None, int]:
    """The LM-head MatMul feeding the logits (directly or through Add / Transpose / softcap)."""
    last = model.output(0).get_node().input_value(0).get_node()
    axis = 0  # paged models carry all tokens in dimension 0
    t = last.get_type_name()
    if t == "MatMul":
        return last, axis
    if t == "Add":
        n = last.input_value(0).get_node()
        return (n, axis) if n.get_type_name() == "MatMul" else (None, axis)
    if t == "Transpose":
        n = last.input_value(0).get_node()
        order = last.input_value(1).get_node().get_vector()
        return (n, int(order[axis])) if n.get_type_name() == "MatMul" else (None, axis)
    if t == "Multiply":
        tanh = last.input_value(0).get_node()
        if tanh.get_type_name() == "Tanh":
            div = tanh.input_value(0).get_node()
            if div.get_type_name() == "Divide":
                n = div.input_value(0).get_node()
                if n.get_type_name() == "MatMul":
                    return n, axis
    return None, axis


def prepare_paged_model(model: ov.Model) -> bool:
    """Transform a stateful LLM in place into its paged-attention form; True when a
    ``sampled_tokens_indices`` gather was added before the LM head."""
    from openvino._offline_transformations import paged_attention_transformation

    names = {n for p in model.inputs for n in p.get_names()}
    if "input_ids" not in names and "inputs_embeds" not in names:
        raise ConfigError(
            "the paged-attention backend needs an LLM with an input_ids (or a VLM language model "
            "with an inputs_embeds) input; use ATTENTION_BACKEND='SDPA'",
            key="ATTENTION_BACKEND",
        )
    # the real's flags: per-layer block indices off, score outputs off, score aggregation on
    paged_attention_transformation(model, False, False, True)
    model.validate_nodes_and_infer_types()
    matmul, axis = _llm_matmul(model)
    if matmul is None or matmul.input(0).get_partial_shape().rank.get_length() != 3:
        return False
    from openvino import opset8

    idx = opset8.parameter(ov.PartialShape([-1]), ov.Type.i64, name="sampled_tokens_indices")
    idx.output(0).get_tensor().set_names({"sampled_tokens_indices"})
    gather = opset8.gather(matmul.input_value(0), idx, opset8.constant(np.array([axis], dtype=np.int64)))
    matmul.input(0).replace_source_output(gather.output(0))
    model.add_parameters([idx])
    model.validate_nodes_and_infer_types()
    return True


class PagedModel:
    """A compiled paged-attention LLM plus its KV cache tensors (one pair per layer)."""

    def __init__(self, core: Any, model: ov.Model, device: str, props: dict[str, Any]) -> None:
        self.has_gather = prepare_paged_model(model)
        self.compiled = core.compile_model(model, device, props)
        self.request = self.compiled.create_infer_request()
        names = {n for p in self.compiled.inputs for n in p.get_names()}
        #: a VLM language model: fed embeddings, positions and its extra inputs (``forward``'s rows)
        self.takes_embeds = "inputs_embeds" in names and "input_ids" not in names
        self._has_score_window = "score_aggregation_window" in names
        self.key_ports: list[tuple[str, ov.Type, list[int]]] = []
        self.value_ports: list[tuple[str, ov.Type, list[int]]] = []
        for port in self.compiled.inputs:
            for name in port.get_names():
                if name.startswith(("key_cache.", "value_cache.")):
                    ps = port.get_partial_shape()
                    dims = [ps[i].get_length() for i in range(1, 4)]
                    entry = (name, port.get_element_type(), dims)
                    (self.key_ports if name.startswith("key") else self.value_ports).append(entry)
                    break
        def layer(e: tuple[str, Any, list[int]]) -> int:
            return int(e[0].split(".")[1])

        self.key_ports.sort(key=layer)
        self.value_ports.sort(key=layer)
        if not self.key_ports or len(self.key_ports) != len(self.value_ports):
            raise ConfigError("the paged model has no (or unpaired) key_cache / value_cache inputs")
        # block size: the CPU value cache's token axis (32), as the real assumes for CPU
        self.block_size = int(self.value_ports[0][2][1])
        self.block_bytes = 0
        for _, t, dims in self.key_ports + self.value_ports:
            self.block_bytes += int(np.prod(dims)) * t.size
        self.num_blocks = 0
        self._caches: list[ov.Tensor] = []

    @property
    def num_layers(self) -> int:
        return len(self.key_ports)

    @property
    def cache_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    def allocate(self, num_blocks: int) -> None:
        """Grow every cache tensor to ``num_blocks`` blocks, keeping the blocks already written."""
        if num_blocks <= self.num_blocks:
            return
        new: list[ov.Tensor] = []
        for i, (name, t, dims) in enumerate(self.key_ports + self.value_ports):
            tensor = ov.Tensor(t, [num_blocks, *dims])
            raw = np.asarray(tensor.data).view(np.uint8).reshape(-1)
            if self._caches:
                old = np.asarray(self._caches[i].data).view(np.uint8).reshape(-1)
                raw[: old.size] = old
                raw[old.size :] = 0
            else:
                raw[:] = 0
            self.request.set_tensor(name, tensor)
            new.append(tensor)
        self._caches = new
        self.num_blocks = int(num_blocks)
        # byte views [blocks, bytes per block] of the caches, for copy_blocks
        self._raw = [np.asarray(t.data).view(np.uint8).reshape(self.num_blocks, -1) for t in new]

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        """Copy-on-write: block ``dst`` of every layer's key and value cache becomes a copy of
        block ``src`` (raw bytes, so any cache precision and its scale rows come along)."""
        if not copies:
            return
        src = np.asarray([c[0] for c in copies], dtype=np.int64)
        dst = np.asarray([c[1] for c in copies], dtype=np.int64)
        if min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.num_blocks:
            raise KVBlockError(f"block copy outside 0..{self.num_blocks - 1}; refused")
        for raw in self._raw:
            raw[dst] = raw[src]

    def _bind_ports(self) -> None:
        """Input/output indices of the device request, for the per-step fast path."""
        self._impl = self.request.impl
        self._in_idx = {}
        for i, port in enumerate(self.compiled.inputs):
            for name in port.get_names():
                self._in_idx[name] = i
        self._logits_idx = 0
        for i, port in enumerate(self.compiled.outputs):
            if "logits" in port.get_names():
                self._logits_idx = i
        # one numpy buffer per per-step input, wrapped once in an ov.Tensor bound to the request;
        # a step only sets the tensor's shape and writes the values (no tensor objects per step)
        self._bufs: dict[str, tuple[np.ndarray, ov.Tensor]] = {}
        dtypes = {
            "input_ids": np.int64,
            "position_ids": np.int64,
            "past_lens": np.int32,
            "subsequence_begins": np.int32,
            "block_indices_begins": np.int32,
            "block_indices": np.int32,
            "score_aggregation_window": np.int32,
            "sampled_tokens_indices": np.int64,
        }
        for name, dt in dtypes.items():
            if name in self._in_idx and not (self.takes_embeds and name == "position_ids"):
                self._new_buf(name, dt, 256)
        ctx = np.zeros((), dtype=np.int32)
        self._ctx = (ctx, ov.Tensor(ctx, shared_memory=True))
        self._impl.set_tensor(self._in_idx["max_context_len"], True, self._ctx[1])

    def _new_buf(self, name: str, dtype: Any, capacity: int) -> None:
        buf = np.zeros(capacity, dtype=dtype)
        tensor = ov.Tensor(buf, shared_memory=True)
        self._impl.set_tensor(self._in_idx[name], True, tensor)
        self._bufs[name] = (buf, tensor)

    def _put(self, name: str, values: list[int]) -> None:
        buf, tensor = self._bufs[name]
        n = len(values)
        if n > buf.size:
            self._new_buf(name, buf.dtype, max(n, 2 * buf.size))
            buf, tensor = self._bufs[name]
        tensor.shape = [n]
        buf[:n] = values

    def forward(
        self,
        entries: list[tuple[list[int], int, list[int], bool | int]],
        rows: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """One model call.  ``entries``: per sequence (its scheduled token ids, tokens already
        cached, its block table, whether its last token's logits are wanted, or how many of its
        last rows).  Returns the logits
        rows of the wanted sequences, in order.

        A VLM language model (``takes_embeds``) takes ``rows`` instead of the token ids and
        plain positions: ``inputs_embeds`` [T, hidden], ``position_ids`` ([T], or M-RoPE's
        [3, T]) and the family's extra inputs, for the same scheduled tokens in the same order.

        The arrays are built from Python lists (a handful of numpy calls per step) and bound to
        the device request directly: every value is made here with the port's dtype, so the
        generic per-input checks of ``InferRequest.infer`` are not needed on this hot path."""
        if not hasattr(self, "_impl"):
            self._bind_ports()
        bs = self.block_size
        ids: list[int] = []
        pos: list[int] = []
        past_l: list[int] = []
        sub = [0]
        bib = [0]
        blocks: list[int] = []
        want: list[int] = []
        max_ctx = 0
        for toks, past, table, sample in entries:
            n = len(toks)
            ctx = past + n
            ids.extend(toks)
            if n == 1:
                pos.append(past)
            else:
                pos.extend(range(past, ctx))
            past_l.append(past)
            sub.append(sub[-1] + n)
            k = -(-ctx // bs)
            blocks.extend(table[:k])
            bib.append(bib[-1] + k)
            if sample:  # True: the last row; n: the last n rows (speculative validation)
                want.extend(range(sub[-1] - int(sample), sub[-1]))
            max_ctx = max(max_ctx, ctx)
        if blocks and (min(blocks) < 0 or max(blocks) >= self.num_blocks):
            raise KVBlockError(
                f"block index outside 0..{self.num_blocks - 1} reached the model call; refused"
            )
        put = self._put
        if self.takes_embeds:
            if rows is None:
                raise ExecutionError("this paged model takes inputs_embeds: pass forward(entries, rows)")
            for name, value in rows.items():
                self._impl.set_tensor(self._in_idx[name], True, ov.Tensor(np.ascontiguousarray(value)))
        else:
            put("input_ids", ids)
            put("position_ids", pos)
        put("past_lens", past_l)
        put("subsequence_begins", sub)
        put("block_indices_begins", bib)
        put("block_indices", blocks)
        self._ctx[0][()] = max_ctx
        if self._has_score_window:
            put("score_aggregation_window", [1] * len(entries))
        if self.has_gather:
            put("sampled_tokens_indices", want)
        impl = self._impl
        try:
            impl.infer()
        except NpuEmuError:
            raise
        except MemoryError as e:  # the host's, not the device's: say so
            raise HostMemoryError("paged-attention inference") from e
        except Exception as e:  # a device bug must still surface as our error type
            raise ExecutionError(f"paged-attention inference failed: {e}") from e
        logits = np.asarray(impl.get_tensor(self._logits_idx, False).data)
        logits = logits.reshape(-1, logits.shape[-1])
        if self.has_gather:
            return logits
        return logits[want]
