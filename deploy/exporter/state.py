"""A package's state: the buffers its model updates in place, which a package keeps between
runs (a decoder's KV cache).

torch.export keeps a module's in-place update of one of its buffers (``self.k_cache.index_copy_(
...)``) and AOTInductor compiles it as a write into that constant, so the package's next run
sees it. The exporter finds those buffers in the program, records them in the package metadata
(the contract's state.metadata_key: {name: {dtype, shape}}) for the runtime, which gives each
session its own copy, and in manifest.json for the reader. A decoder (my_ops.llama, exported
with --kv-cache) also records its cache length and vocabulary (state.decoder_key), which is
what the token loops need to check a prompt before running it.
"""

from __future__ import annotations

import json
from typing import Any

from .contract import load_contract
from .errors import EXIT_USAGE, ExportError
from .weights import program_constants, tensor_spec


def mutated_buffers(ep: Any) -> list[str]:
    """The fully qualified names of the buffers the program writes in place, directly or
    through a view of them."""
    import torch

    buffers = ep.graph_signature.inputs_to_buffers  # placeholder name -> buffer name
    found = set(ep.graph_signature.buffers_to_mutate.values())
    for node in ep.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            continue
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = node.args[i] if i < len(node.args) else node.kwargs.get(argument.name)
            while (
                isinstance(value, torch.fx.Node)
                and value.op == "call_function"
                and getattr(value.target, "is_view", False)
            ):
                value = value.args[0]
            if isinstance(value, torch.fx.Node) and value.op == "placeholder":
                if value.name in buffers:
                    found.add(buffers[value.name])
    return sorted(found)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def state_specs(ep: Any) -> dict[str, dict[str, Any]]:
    """{name: {"dtype", "shape"}} of the program's state; empty for a stateless program."""
    constants = program_constants(ep)
    return {
        name: tensor_spec(constants[name], f"state buffer {name}") for name in mutated_buffers(ep)
    }


def decoder_record(spec: Any, ep: Any, state: dict[str, Any]) -> dict[str, int] | None:
    """{"cache_length", "vocab_size"} of a decoder (a spec or module that names both, as
    my_ops.llama's do), checked against its inputs and state; None for another model."""
    source = spec if hasattr(spec, "cache_length") else spec.module
    length = getattr(source, "cache_length", None)
    vocab = getattr(source, "vocab_size", None)
    if length is None and vocab is None:
        return None
    for name, value in (("cache_length", length), ("vocab_size", vocab)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ExportError(f"the decoder's {name} must be a positive int, got {value!r}")
    if not state:
        raise ExportError(
            "the model names a cache_length but updates no buffer in place: a decoder keeps its "
            "KV cache in buffers its forward writes (see my_ops.llama)",
            EXIT_USAGE,
        )
    inputs = [
        node.meta.get("val")
        for node in ep.graph.nodes
        if node.op == "placeholder" and node.name in ep.graph_signature.user_inputs
    ]
    import torch

    if (
        len(inputs) != 2
        or any(getattr(t, "dtype", None) != torch.int64 for t in inputs)
        or inputs[0].dim() != 2
        or inputs[1].dim() != 1
    ):
        raise ExportError(
            "a decoder takes two int64 inputs, the new tokens' ids [1, T] and their positions "
            "[T] (see my_ops.llama)",
            EXIT_USAGE,
        )
    return {"cache_length": length, "vocab_size": vocab}


def state_metadata(state: dict[str, Any], decoder: dict[str, int] | None) -> dict[str, str]:
    """The package metadata entries of a package with state (none without)."""
    if not state:
        return {}
    contract = load_contract()
    entries = {contract.state_metadata_key: _json(state)}
    if decoder is not None:
        entries[contract.decoder_metadata_key] = _json(decoder)
    return entries


def manifest_record(state: dict[str, Any], decoder: dict[str, int] | None) -> dict[str, Any]:
    """manifest.json's "state", for the reader: what the package's runs update."""
    record: dict[str, Any] = {"tensors": state}
    if decoder is not None:
        record["decoder"] = decoder
    return record


def buffers_as_given(module: Any) -> dict[str, Any]:
    """A copy of every buffer of the model as the factory gave it: the state a package starts
    from, before any eager run (the exporter's pack and verify stages run the model) updates it."""
    return {name: b.detach().clone() for name, b in module.named_buffers()}


def restore(modules: list[Any], ep: Any, names: list[str], given: dict[str, Any]) -> None:
    """Puts the state's buffers back to their values as given, in the modules (the caller's and
    the exporter's copy) and in the program's constants (a package verified on the program's
    own tensors updates those)."""
    import torch

    targets = [dict(m.named_buffers()) for m in modules] + [program_constants(ep)]
    with torch.no_grad():
        for name in names:
            for tensors in targets:
                if name in tensors and name in given:
                    tensors[name].copy_(given[name])
