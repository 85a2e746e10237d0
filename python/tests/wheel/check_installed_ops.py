"""Run by the venv's interpreter with the installed wheel: every op of the registry.

Each op passes torch.library.opcheck (with gradients where it has a formula),
matches its float64 reference within its dtype's tolerance, and a function that
calls every op compiles with torch.compile(fullgraph=True) and matches eager.
Prints one line per op and "ALL OK"; any failure raises.
"""

from __future__ import annotations

import torch

import my_ops
from my_ops.ops import SPECS
from my_ops.ops._spec import Autograd


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _opcheck(spec, args) -> None:
    failures = {k: v for k, v in torch.library.opcheck(spec.op, args).items() if v != "SUCCESS"}
    assert not failures, f"{spec.name}: {failures}"


def main() -> None:
    assert SPECS, "the installed registry has no ops"
    gen = torch.Generator().manual_seed(0)
    calls = []
    for spec in SPECS.values():
        args = spec.example_args((4, 9), torch.float32, "cpu", gen)
        _opcheck(spec, args)
        if isinstance(spec.autograd, Autograd):
            grad_args = tuple(
                a.requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in spec.example_args((4, 9), torch.float64, "cpu", gen)
            )
            _opcheck(spec, grad_args)
        got = _as_tuple(spec.wrapper(*args))
        want = _as_tuple(spec.reference(*args))
        assert len(got) == len(want), spec.name
        for g, w in zip(got, want, strict=True):
            assert w.dtype == torch.float32, f"{spec.name}: reference gave {w.dtype}"
            torch.testing.assert_close(g, w, **spec.tolerances[torch.float32])
        calls.append((spec, args))
        print(f"{spec.name}: opcheck and float64 reference OK")

    def every_op():
        return [out for spec, args in calls for out in _as_tuple(spec.wrapper(*args))]

    compiled = torch.compile(every_op, fullgraph=True, backend="inductor")
    for g, e in zip(compiled(), every_op(), strict=True):
        torch.testing.assert_close(g, e, rtol=2e-5, atol=1e-5)
    print(f"torch.compile(fullgraph=True) of all {len(calls)} ops OK")
    print(f"library: {my_ops.loaded_path()}")
    print("ALL OK")


if __name__ == "__main__":
    main()
