"""The check that makes a package publishable: it must match the model in eager."""

from __future__ import annotations

import dataclasses
from typing import Any

from .errors import ExportError, first_line
from .model import as_tuple, to_device


def agreement(got: tuple[Any, ...], want: tuple[Any, ...]) -> tuple[float, float]:
    """The cosine between all floating outputs taken as one vector, and the largest absolute
    difference of any element (NaN when an output is NaN where the other is not)."""
    import torch

    pairs = [
        (g.detach().double().flatten().cpu(), w.detach().double().flatten().cpu())
        for g, w in zip(got, want, strict=True)
        if isinstance(w, torch.Tensor) and w.is_floating_point()
    ]
    if not pairs:
        return 1.0, 0.0
    g = torch.cat([p[0] for p in pairs])
    w = torch.cat([p[1] for p in pairs])
    if g.numel() == 0:
        return 1.0, 0.0
    norms = g.norm() * w.norm()
    cosine = float(g @ w / norms) if norms > 0 else float(torch.equal(g, w))
    return cosine, float((g - w).abs().max())


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """How a quantized package is verified: against the float model it was quantized from, by
    the accuracy gate. Against the quantized model in eager an elementwise tolerance does not
    hold: a last-bit difference in the compiled code's float math before a quantized layer can
    move an activation across a rounding boundary, one quantization step."""

    float_module: Any
    min_cosine: float
    refusal: str  # what the error says after the figures, e.g. which flags to use
    exit_code: int


@dataclasses.dataclass(frozen=True)
class Verified:
    sample: tuple[Any, ...]  # batch 1's inputs
    outputs: tuple[Any, ...]  # the package's outputs for them; () when it did not run here
    note: str = ""  # for the verify stage's line: a quantized package's figures
    # The package's constants by the names it loads them by; None when it was not loaded here.
    constant_names: tuple[str, ...] | None = None


# Besides the spec's max batch, which verify always adds.
VERIFY_BATCHES = (1, 7)


def _batch_inputs(spec: Any, batch: int) -> tuple[Any, ...]:
    import torch

    make = getattr(spec, "make_inputs", None)
    if make is not None:
        return tuple(make(batch))
    g = torch.Generator().manual_seed(batch)
    out = []
    for t in spec.example_inputs:
        shape = (batch, *t.shape[1:])
        if t.is_floating_point():
            out.append(torch.randn(shape, generator=g, dtype=t.dtype))
        else:
            out.append(t[:1].expand(shape).clone())
    return tuple(out)


def verify_batches(spec: Any, max_batch: int) -> list[int]:
    """The batches a package is verified at, the bundled sample's first: 1, 7 and the max batch
    when its batch is dynamic. A package exported with static shapes serves its example's
    shapes only (its generated code is sized for them), so its example's batch is the one."""
    if getattr(spec, "dynamic_shapes", None) is None:
        first = next((t for t in spec.example_inputs if getattr(t, "ndim", 0)), None)
        return [int(first.shape[0]) if first is not None else 1]
    return sorted(b for b in {*VERIFY_BATCHES, max_batch} if b <= max_batch)


def sample_inputs(spec: Any, device: str) -> tuple[Any, ...]:
    """The bundled sample's inputs, as verify returns them, for a package that cannot be
    verified here."""
    return to_device(_batch_inputs(spec, verify_batches(spec, 1)[0]), device)


def _gate(got: tuple[Any, ...], want: tuple[Any, ...], accuracy: Accuracy, what: str):
    """(cosine, largest difference) of `got` against the float model's `want`, or ExportError
    when the cosine is below the gate."""
    cosine, largest = agreement(got, want)
    if not cosine >= accuracy.min_cosine:
        raise ExportError(
            f"{what}'s cosine against the float model is {cosine:.7g} (largest difference "
            f"{largest:.3g}), below {accuracy.min_cosine}; {accuracy.refusal}",
            accuracy.exit_code,
        )
    return cosine, largest


def package_outputs(
    package: str,
    constants: dict[str, Any],
    sample: tuple[Any, ...],
    accuracy: Accuracy,
) -> tuple[tuple[Any, ...], str]:
    """A quantized package's outputs for `sample` with its constants replaced by `constants`
    (every one it holds), gated against the float model as an export is; and the figures.

    A weights file's expected outputs for a quantized package are these, which the package
    reproduces, rather than the quantized model's in eager (see Accuracy)."""
    import torch

    try:
        compiled = torch._inductor.aoti_load_package(package)
        compiled.load_constants(constants, check_full_update=True)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"cannot load {package} with the new weights: {first_line(e)}") from e
    with torch.no_grad():
        got = as_tuple(compiled(*sample))
        want = as_tuple(accuracy.float_module(*sample))
    cosine, largest = _gate(got, want, accuracy, "the base package with these weights")
    return got, f"against the float model: cosine {cosine:.7g}, largest difference {largest:.3g}"


def verify(
    spec: Any,
    module: Any,
    package: str,
    max_batch: int,
    device: str,
    options: dict[str, Any] | None = None,
    accuracy: Accuracy | None = None,
    weights: dict[str, Any] | None = None,
) -> Verified:
    """Compare the package with `module` in eager at each verify batch (a quantized package:
    with `accuracy`'s float model, by its gate).

    `weights`: for a package compiled without its weights, the program's constants, of which it
    is given those it holds, as the runtime gives them: the tensors themselves, not copies.

    `options` are the Inductor options the package was compiled with. Loading
    checks the CPU's vector ISA by compiling a test program; under the same
    compiler and SIMD width as the compile, that check is the one the compile
    ran, already in Inductor's cache, instead of a new build (5 s on 2 cores).
    """
    import torch

    atol = float(getattr(spec, "atol", 1e-4))
    rtol = float(getattr(spec, "rtol", 1e-4))
    try:
        with torch._inductor.config.patch(options or {}):
            compiled = torch._inductor.aoti_load_package(package)
        if weights is not None:
            held = {name: weights[name] for name in compiled.get_constant_fqns()}
            compiled.load_constants(held, check_full_update=True, user_managed=True)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"cannot load the compiled package: {first_line(e)}") from e
    sample: tuple[Any, ...] = ()
    outputs: tuple[Any, ...] = ()
    worst: tuple[float, float] | None = None  # a quantized package's lowest cosine, its largest
    batches = verify_batches(spec, max_batch)
    for batch in batches:
        inputs = to_device(_batch_inputs(spec, batch), device)
        reference = module if accuracy is None else accuracy.float_module
        with torch.no_grad():
            want = as_tuple(reference(*inputs))
            try:
                got = as_tuple(compiled(*inputs))
            except Exception as e:  # noqa: BLE001
                raise ExportError(f"package failed at batch {batch}: {first_line(e)}") from e
        if len(got) != len(want):
            raise ExportError(
                f"batch {batch}: package returned {len(got)} outputs, eager {len(want)}"
            )
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if g.shape != w.shape or (
                accuracy is None and not torch.allclose(g, w, atol=atol, rtol=rtol)
            ):
                diff = (g - w).abs().max().item() if g.shape == w.shape else float("nan")
                raise ExportError(
                    f"batch {batch}: output {i} differs from eager (shape {tuple(g.shape)} vs "
                    f"{tuple(w.shape)}, max abs diff {diff:.3g})"
                )
        if accuracy is not None:
            cosine, largest = _gate(got, want, accuracy, f"batch {batch}: the quantized package")
            if worst is None or cosine < worst[0]:
                worst = (cosine, largest)
        if batch == batches[0]:
            # Batch 1 (where the batch is dynamic) is the edge use case, so it becomes the
            # bundled sample.
            sample, outputs = inputs, got
    note = (
        ""
        if worst is None
        else f"against the float model: cosine {worst[0]:.7g}, largest difference {worst[1]:.3g}"
    )
    return Verified(sample, outputs, note, tuple(compiled.get_constant_fqns()))
