"""Numerics of every op against its independent float64 reference."""

from __future__ import annotations

import ctypes
import os
import threading

import pytest
import torch

import my_ops
from op_table import (
    SPECS,
    as_tuple,
    assert_matches_reference,
    by_op,
    make_args,
    scalar_variants,
    tensor_args,
)
from testing_utils import (
    DEVICES,
    FLOAT_DTYPES,
    HAS_COMPANION,
    LAYOUTS,
    SHAPES,
    make_input,
    run_this_file,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@by_op()
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_matches_reference(spec, device, dtype, layout, shape):
    for scalars in scalar_variants(spec):
        args = make_args(spec, SHAPES[shape], dtype, device, layout, scalars, scale=3.0)
        assert_matches_reference(spec, args, spec.wrapper(*args), f"{shape} {layout}")


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns, as integers of its element size."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()])


@by_op()
@pytest.mark.parametrize("device", DEVICES)
def test_edge_values(spec, device):
    # Magnitudes where a naive formula overflows, underflows or divides by zero; the
    # reference decides what is right (NaN included, for 0/0), and an output the reference
    # finds finite must be.
    samples = spec.edge_samples(device)
    if not samples:
        pytest.skip(f"{spec.name}: its SPEC has no edge_samples")
    for args in samples:
        out = as_tuple(spec.wrapper(*args))
        for o, e in zip(out, as_tuple(spec.reference(*args)), strict=True):
            assert torch.isfinite(o[torch.isfinite(e)]).all(), (spec.name, args)
            tol = spec.tolerances[o.dtype]
            if tol["rtol"] == 0 and tol["atol"] == 0:
                # An exact op is exact bit for bit: the comparison above takes -0.0 for 0.0
                # and any NaN for any other.
                assert torch.equal(_bits(o), _bits(e)), (spec.name, "bits differ", args)
        assert_matches_reference(spec, args, out, equal_nan=True)
        if tensor_args(args)[0].dtype != torch.float64:
            # Below float64 the kernels compute in float32, scalars included, as eager's
            # float math does: NaN (0/0) exactly where eager has NaN.
            for o, e in zip(out, as_tuple(spec.eager(*args)), strict=True):
                assert torch.equal(o.isnan(), e.isnan()), (spec.name, "NaN unlike eager", args)


@by_op()
@pytest.mark.parametrize("device", DEVICES)
def test_defaults_come_from_the_schema(spec, device):
    # The schema's defaults are the literals the op's SPEC states, and omitting a trailing
    # argument, through the wrapper or the raw op, means that literal: the same result as
    # passing it explicitly.
    schema = spec.op._schema
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    assert defaults == dict(spec.defaults), schema
    if not defaults:
        pytest.skip(f"{spec.name}: its schema has no defaulted argument")
    literals = spec.defaults
    names = [a.name for a in schema.arguments]
    args = make_args(spec, (3, 24), torch.float64, device)
    omitted = [n for i, n in enumerate(names) if all(m in literals for m in names[i:])]
    assert omitted, f"{spec.name}: a defaulted argument is followed by one without a default"
    for i in range(len(names) - len(omitted), len(names)):
        explicit = (*args[:i], *(literals[n] for n in names[i:]))
        want = as_tuple(spec.wrapper(*explicit))
        for call in (spec.wrapper, spec.op):
            for g, w in zip(as_tuple(call(*args[:i])), want, strict=True):
                torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_ops_from_eight_threads(device):
    n_threads, iters = 8, 10
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def worker(tid: int) -> None:
        try:
            g = torch.Generator().manual_seed(1000 + tid)
            barrier.wait()
            for i in range(iters):
                shape = (3 + tid, 17 + i)
                for spec in SPECS:
                    variants = scalar_variants(spec)
                    scalars = variants[(tid + i) % len(variants)]
                    layout = LAYOUTS[i % len(LAYOUTS)]
                    args = make_args(
                        spec, shape, torch.float32, device, layout, scalars, generator=g
                    )
                    assert_matches_reference(spec, args, spec.wrapper(*args))
                if not HAS_COMPANION:
                    continue
                x = make_input(shape, torch.float32, device, generator=g)
                w = make_input(shape[-1:], torch.float32, device, generator=g)
                obj = torch.classes.my_ops.RMSNorm(w, 1e-6)
                assert torch.allclose(
                    obj.forward(x), my_ops.nn.reference(x, w, 1e-6), rtol=2e-5, atol=1e-5
                )
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]


def test_every_op_in_the_library_has_a_spec_and_a_c_shim():
    # A schema in registration.cpp without a Python module would escape every suite.
    schemas = {
        s.name.split("::")[1]
        for s in torch._C._jit_get_all_schemas()
        if s.name.startswith("my_ops::")
    }
    # An out= companion (<op>_out) is its op's: test_out_companions covers it through the spec.
    companions = {f"{spec.name}_out" for spec in SPECS} & schemas
    assert companions, "no op has an out= companion"
    # So is an in-place form (<op>_), which test_in_place covers through the spec, and only
    # one the spec names.
    in_place = {spec.in_place_name for spec in SPECS if spec.in_place is not None}
    assert in_place <= schemas
    assert schemas - companions - in_place == {spec.name for spec in SPECS}
    assert all(tensor_args(make_args(spec, (2, 3), torch.float32, "cpu")) for spec in SPECS)
    # ... and without the C function an exported package calls it through (AOTInductor names
    # it aoti_torch_<device>_<op>), every package would fall back to the ProxyExecutor.
    library = ctypes.CDLL(my_ops.load_library(), mode=os.RTLD_NOLOAD)
    missing = sorted(op for op in schemas if not hasattr(library, f"aoti_torch_cpu_{op}"))
    assert not missing, f"libmy_ops.so has no C shim for {missing}"


if __name__ == "__main__":
    run_this_file(__file__)
