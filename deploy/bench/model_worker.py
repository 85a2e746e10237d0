"""Python runners of //deploy:bench_models, one long-lived process each.

``python -m deploy.bench.model_worker onnx-export MODEL LENGTH OUT``
    exports the original (unpatched) model at LENGTH to OUT with ``torch.onnx.export(...,
    dynamo=True)``, weights inside the file.
``python -m deploy.bench.model_worker ort-quantize SCHEME IN OUT``
    writes OUT, the ONNX model IN quantized with ONNX Runtime's documented recipe for SCHEME:
    ``int8``, ``quant_pre_process`` then ``quantize_dynamic`` (int8 weights, per channel;
    activations quantized per call); ``int4``, ``MatMulNBitsQuantizer`` (blocks of 32,
    symmetric, accuracy_level 4: the products in int8).
``python -m deploy.bench.model_worker executorch-export MODEL LENGTH SCHEME OUT``
    writes OUT, the original model at LENGTH as an ExecuTorch program (``.pte``) delegated to
    XNNPACK, by ExecuTorch's documented recipe for SCHEME: ``float``, fp32 as it is; ``int8``,
    the PT2E flow with ``XNNPACKQuantizer`` (int8 weights, symmetric per channel; activations
    quantized per call), which with a dynamic configuration quantizes linear layers (and
    convolutions, which these models lack) only;
    ``int4``, its LLM export's ``8da4w`` (torchao's ``Int8DynamicActivationIntxWeightConfig`` on
    every linear layer before the export: int4 weights, symmetric in groups of 32, scales by
    HQQ; activations int8 per token, quantized per call).
``python -m deploy.bench.model_worker ort`` / ``executorch THREADS`` / ``eager MODEL``
    answers requests on standard input, one a line, so that a model is loaded once and timed in
    many rounds between the other runners' processes:
    ``time THREADS CALLS TARGET INPUT``  -> ``p50 X ms`` (TARGET: the .onnx file for ``ort``,
    the .pte file for ``executorch``, ``-`` for ``eager``); ``run TARGET INPUT OUTPUT`` ->
    ``ok`` (the output torch.save'd). INPUT is a torch.save'd tuple of tensors, as the
    exporter's sample_input.pt. ExecuTorch's thread pool is one per process, sized before its
    first program loads, so an ``executorch`` worker runs at THREADS only.

Each request pins the calling thread to the last CPU at THREADS 1 and to every CPU otherwise,
as the driver pins the C++ runners.
"""

from __future__ import annotations

import os
import sys
import time

import torch

WARMUP = 3


# The CPUs this process may use, read before any request pins it.
_ALL = frozenset(os.sched_getaffinity(0))


def cpus_for(threads: int, cpus: frozenset[int]) -> set[int]:
    """The CPUs a runner at `threads` intra-op threads is pinned to: the last one alone at
    one thread, all of them otherwise (bench_models pins the C++ runners the same way)."""
    return {max(cpus)} if threads == 1 else set(cpus)


def _p50(fn, calls: int) -> float:
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


class OnnxRuntime:
    def __init__(self) -> None:
        import onnxruntime

        self.ort = onnxruntime
        self.sessions: dict[tuple[str, int], object] = {}

    def session(self, path: str, threads: int):
        key = (path, threads)
        if key not in self.sessions:
            options = self.ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            self.sessions[key] = self.ort.InferenceSession(
                path, options, providers=["CPUExecutionProvider"]
            )
        return self.sessions[key]

    def call(self, target: str, threads: int, inputs: tuple[torch.Tensor, ...]):
        session = self.session(target, threads)
        feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs, strict=True)}
        return lambda: session.run(None, feed)

    def output(self, target: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return torch.from_numpy(self.call(target, 1, inputs)()[0])


class ExecuTorch:
    def __init__(self, threads: int) -> None:
        from executorch.extension.pybindings import portable_lib

        # XNNPACK runs on ExecuTorch's global thread pool, which takes its size before the first
        # program loads or never. Its threads start here, before any request pins the process,
        # on every CPU: where a request at more than one thread pins the process too.
        portable_lib._unsafe_reset_threadpool(threads)
        self.threads = threads
        self.load = portable_lib._load_for_executorch
        self.programs: dict[str, object] = {}

    def program(self, path: str):
        if path not in self.programs:
            self.programs[path] = self.load(path)
        return self.programs[path]

    def call(self, target: str, threads: int, inputs: tuple[torch.Tensor, ...]):
        if threads != self.threads:
            sys.exit(
                f"model_worker: error: an executorch worker of {self.threads} thread(s) "
                f"asked to time at {threads}"
            )
        program = self.program(target)
        return lambda: program.forward(inputs)

    def output(self, target: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.program(target).forward(inputs)[0]


class Eager:
    def __init__(self, model: str) -> None:
        from deploy.bench import real_models

        self.module = real_models.module(model, "inductor")

    def call(self, target: str, threads: int, inputs: tuple[torch.Tensor, ...]):
        torch.set_num_threads(threads)

        def run():
            with torch.inference_mode():
                return self.module(*inputs)

        return run

    def output(self, target: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.call(target, 1, inputs)()


def serve(runner) -> None:
    for line in sys.stdin:
        words = line.split()
        if words[0] == "time":
            threads, calls, target, path = int(words[1]), int(words[2]), words[3], words[4]
            os.sched_setaffinity(0, cpus_for(threads, _ALL))
            fn = runner.call(target, threads, tuple(torch.load(path)))
            print(f"p50 {_p50(fn, calls):.4f} ms", flush=True)
        elif words[0] == "run":
            target, path, out = words[1], words[2], words[3]
            torch.save(runner.output(target, tuple(torch.load(path))), out)
            print("ok", flush=True)
        else:
            sys.exit(f"model_worker: error: unknown request {words[0]!r}")


def onnx_export(model: str, length: int, out: str) -> None:
    from deploy.bench import real_models

    module = real_models.module(model, "inductor")
    tmp = f"{out}.partial"
    with torch.no_grad():
        torch.onnx.export(
            module, real_models.inputs(model, length), tmp, dynamo=True, external_data=False
        )
    os.replace(tmp, out)


def _xnnpack_dynamic_int8(program, inputs: tuple[torch.Tensor, ...]):
    """The exported `program` through the PT2E flow for XNNPACK's dynamic int8 linear layers,
    calibrated on `inputs`."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    class DynamicLinearQuantizer(XNNPACKQuantizer):
        """XNNPACKQuantizer without its scalar-to-tensor pass. The pass makes the scalar operand
        of every add and mul a float tensor, for static add/mul quantization, which a dynamic
        configuration never annotates; on a transformers model it also makes the integer
        arithmetic of the attention mask's code float, whose results then fail as indices."""

        def transform_for_annotation(self, model):
            return model

    quantizer = DynamicLinearQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    )
    prepared = prepare_pt2e(program.module(), quantizer)
    prepared(*inputs)
    return torch.export.export(convert_pt2e(prepared), inputs)


def executorch_export(model: str, length: int, scheme: str, out: str) -> None:
    if scheme not in ("float", "int8", "int4"):
        sys.exit(f"model_worker: error: unknown scheme {scheme!r}")
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from deploy.bench import real_models

    module = real_models.module(model, "inductor")
    inputs = real_models.inputs(model, length)
    with torch.no_grad():
        if scheme == "int4":
            from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
            from torchao.quantization.granularity import PerGroup

            # As ExecuTorch's LLM export quantizes for 8da4w (HQQ scales, its default), in
            # groups of 32 as the other runners' int4 recipes.
            quantize_(
                module,
                Int8DynamicActivationIntxWeightConfig(
                    weight_dtype=torch.int4,
                    weight_granularity=PerGroup(32),
                    intx_choose_qparams_algorithm="hqq_scale_only",
                ),
            )
        program = torch.export.export(module, inputs)
        if scheme == "int8":
            program = _xnnpack_dynamic_int8(program, inputs)
        lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        buffer = lowered.to_executorch().buffer
    tmp = f"{out}.partial"
    with open(tmp, "wb") as f:
        f.write(buffer)
    os.replace(tmp, out)


def ort_quantize(scheme: str, src: str, out: str) -> None:
    tmp = f"{out}.partial"
    if scheme == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.quantization.shape_inference import quant_pre_process

        # Without the pre-processing a tied LM head behind a Transpose stays fp32 and the
        # embedding table is dequantized on every call; symbolic shapes fail on a BERT export.
        pre = f"{out}.pre.partial"
        try:
            quant_pre_process(src, pre, skip_symbolic_shape=True)
            quantize_dynamic(pre, tmp, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            if os.path.exists(pre):
                os.remove(pre)
    elif scheme == "int4":
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(
            onnx.load(src), block_size=32, is_symmetric=True, accuracy_level=4
        )
        quantizer.process()
        quantizer.model.save_model_to_file(tmp, use_external_data_format=False)
    else:
        sys.exit(f"model_worker: error: unknown scheme {scheme!r}")
    os.replace(tmp, out)


def main(argv: list[str]) -> None:
    if argv[0] == "onnx-export":
        onnx_export(argv[1], int(argv[2]), argv[3])
    elif argv[0] == "ort-quantize":
        ort_quantize(argv[1], argv[2], argv[3])
    elif argv[0] == "executorch-export":
        executorch_export(argv[1], int(argv[2]), argv[3], argv[4])
    elif argv[0] == "ort":
        serve(OnnxRuntime())
    elif argv[0] == "executorch":
        serve(ExecuTorch(int(argv[1])))
    elif argv[0] == "eager":
        serve(Eager(argv[1]))
    else:
        sys.exit(f"model_worker: error: unknown command {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
