"""The check that makes a package publishable: it must match the model in eager."""

from __future__ import annotations

from typing import Any

from .errors import ExportError, first_line
from .model import as_tuple, to_device

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


def sample_inputs(spec: Any, device: str) -> tuple[Any, ...]:
    """Batch 1's inputs, as verify returns them, for a package that cannot be verified here."""
    return to_device(_batch_inputs(spec, 1), device)


def verify(
    spec: Any,
    module: Any,
    package: str,
    max_batch: int,
    device: str,
    options: dict[str, Any] | None = None,
) -> tuple[Any, ...]:
    """Compare the package with `module` in eager at each verify batch; returns batch 1's inputs.

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
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"cannot load the compiled package: {first_line(e)}") from e
    sample: tuple[Any, ...] = ()
    for batch in sorted({*VERIFY_BATCHES, max_batch}):
        if batch > max_batch:
            continue
        inputs = to_device(_batch_inputs(spec, batch), device)
        with torch.no_grad():
            want = as_tuple(module(*inputs))
            try:
                got = as_tuple(compiled(*inputs))
            except Exception as e:  # noqa: BLE001
                raise ExportError(f"package failed at batch {batch}: {first_line(e)}") from e
        if len(got) != len(want):
            raise ExportError(
                f"batch {batch}: package returned {len(got)} outputs, eager {len(want)}"
            )
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if g.shape != w.shape or not torch.allclose(g, w, atol=atol, rtol=rtol):
                diff = (g - w).abs().max().item() if g.shape == w.shape else float("nan")
                raise ExportError(
                    f"batch {batch}: output {i} differs from eager (shape {tuple(g.shape)} vs "
                    f"{tuple(w.shape)}, max abs diff {diff:.3g})"
                )
        if batch == 1:
            # Batch 1 is the edge use case, so it becomes the bundled sample.
            sample = inputs
    return sample
