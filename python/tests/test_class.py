"""The TorchBind class ``torch.classes.my_ops.RMSNorm`` and the ``my_ops.RMSNorm`` module."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch

import my_ops
from my_ops.nn import FakeRMSNorm, reference
from testing_utils import DEVICES, FLOAT_DTYPES, assert_close, make_input, run_this_file


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _obj(n=16, eps=1e-5, device="cpu", dtype=torch.float32):
    weight = make_input((n,), dtype, device)
    return torch.classes.my_ops.RMSNorm(weight, eps), weight


def _assert_same_state(a, b):
    assert a.eps() == b.eps()
    torch.testing.assert_close(a.weight(), b.weight(), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_forward_matches_reference(device, dtype, layout):
    obj, w = _obj(n=13, device=device, dtype=dtype)
    assert obj.eps() == 1e-5
    torch.testing.assert_close(obj.weight(), w, rtol=0, atol=0)
    x = make_input((3, 5, 13), dtype, device, layout)
    r = make_input((3, 5, 13), dtype, device)
    assert_close(obj.forward(x), reference(x, w, 1e-5))
    y, h = obj.forward_residual(x, r)
    y_ref, h_ref = reference(x, w, 1e-5, r)
    assert_close(y, y_ref)
    assert_close(h, h_ref)


def test_deepcopy_round_trip():
    obj, _ = _obj()
    clone = copy.deepcopy(obj)
    _assert_same_state(obj, clone)
    x = torch.randn(4, 16)
    torch.testing.assert_close(clone.forward(x), obj.forward(x), rtol=0, atol=0)


def test_getstate_is_weight_and_eps():
    obj, w = _obj(eps=0.25)
    # Python wraps the def_pickle state as (state, qualified class name).
    state, qualname = obj.__getstate__()
    assert qualname.endswith("my_ops.RMSNorm")
    assert len(state) == 2
    torch.testing.assert_close(state[0], w, rtol=0, atol=0)
    assert state[1] == 0.25


def test_torch_save_load_round_trip():
    obj, _ = _obj(eps=3e-3)
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    _assert_same_state(obj, loaded)
    x = torch.randn(2, 16)
    torch.testing.assert_close(loaded.forward(x), obj.forward(x), rtol=0, atol=0)


def test_pickle_round_trip():
    obj, _ = _obj(eps=0.5)
    loaded = pickle.loads(pickle.dumps(obj))
    _assert_same_state(obj, loaded)


def test_module_save_load_round_trip():
    module = my_ops.RMSNorm(torch.randn(16), eps=1e-4)
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    x = torch.randn(3, 16)
    torch.testing.assert_close(loaded(x), module(x), rtol=0, atol=0)
    _assert_same_state(loaded.rms_norm, module.rms_norm)


def test_obj_flatten_unflatten_agree():
    obj, w = _obj(eps=1e-3)
    flat = obj.__obj_flatten__()
    assert isinstance(flat, tuple) and all(isinstance(f, tuple) and len(f) == 2 for f in flat)
    assert [name for name, _ in flat] == ["weight", "eps"]
    fake = FakeRMSNorm.__obj_unflatten__(flat)
    torch.testing.assert_close(fake.weight(), w, rtol=0, atol=0)
    assert fake.eps() == obj.eps() == 1e-3
    # Every method a traced program can call on the object needs a fake of its own, stored
    # under names that do not shadow it. Construction, flattening and pickling act on the
    # real object only.
    real_only = {"__init__", "__obj_flatten__", "__getstate__", "__setstate__"}
    traced = [m for m in obj._method_names() if m not in real_only]
    for method in traced:
        assert method in vars(FakeRMSNorm), f"FakeRMSNorm has no {method}()"
        assert callable(getattr(fake, method, None)), f"FakeRMSNorm.{method} is shadowed"
    # The methods registration.cpp gives the class: one added there must be added here (and
    # to the fake), not go unchecked.
    assert sorted(traced) == ["eps", "forward", "forward_residual", "weight"], traced
    # Fake methods produce outputs with the real metadata.
    x = torch.randn(3, 16)
    for real, fake_out in (
        (obj.forward(x), fake.forward(x)),
        *zip(obj.forward_residual(x, x), fake.forward_residual(x, x), strict=True),
    ):
        assert (real.shape, real.dtype, real.device) == (
            fake_out.shape,
            fake_out.dtype,
            fake_out.device,
        )


def test_fake_class_is_registered():
    from torch._library.fake_class_registry import find_fake_class

    assert find_fake_class("__torch__.torch.classes.my_ops.RMSNorm") is FakeRMSNorm


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    w = make_input((24,), torch.float32, "cpu")
    module = my_ops.RMSNorm(w, eps=1e-4).to(device)
    assert module.weight.device.type == torch.device(device).type
    assert module.eps == 1e-4
    x = make_input((2, 3, 24), torch.float32, device)
    r = make_input((2, 3, 24), torch.float32, device)
    assert_close(module(x), reference(x, w.to(device), 1e-4))
    y, h = module(x, r)
    y_ref, h_ref = reference(x, w.to(device), 1e-4, r)
    assert_close(y, y_ref)
    assert_close(h, h_ref)
    # hidden_size constructor: weight of ones, default eps.
    plain = my_ops.RMSNorm(24).to(device)
    assert plain.eps == 1e-6
    torch.testing.assert_close(plain.weight, torch.ones(24, device=device))
    assert_close(plain(x), reference(x, torch.ones(24, device=device), 1e-6))
    # dtype conversion keeps the TorchBind weight in step.
    half = my_ops.RMSNorm(w).to(device=device, dtype=torch.bfloat16)
    assert half.weight.dtype == torch.bfloat16
    xb = x.bfloat16()
    assert_close(half(xb), reference(xb, w.to(device).bfloat16(), 1e-6))
    assert "24" in repr(module)


def test_module_does_not_alias_caller_weight():
    w = torch.ones(8)
    module = my_ops.RMSNorm(w)
    w.mul_(100)
    torch.testing.assert_close(module.weight, torch.ones(8))


class _Tiny(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.norm = my_ops.RMSNorm(torch.linspace(0.5, 1.5, n), eps=1e-5)
        self.bias = torch.nn.Parameter(torch.randn(n))

    def forward(self, x, residual):
        y = self.norm(x)
        y2, h = self.norm(y, residual)
        return torch.nn.functional.gelu(y2 + self.bias) + h


def test_export_contains_call_torchbind():
    module = _Tiny(32)
    args = (torch.randn(4, 32), torch.randn(4, 32))
    batch = torch.export.Dim("batch", min=1, max=1024)
    ep = torch.export.export(module, args, dynamic_shapes=({0: batch}, {0: batch}), strict=False)
    torchbind_calls = [
        n for n in ep.graph.nodes if n.target is torch.ops.higher_order.call_torchbind
    ]
    assert len(torchbind_calls) == 2, ep.graph
    assert {n.args[1] for n in torchbind_calls} == {"forward", "forward_residual"}
    # The object is a CUSTOM_OBJ input of the exported program.
    kinds = {spec.kind.name for spec in ep.graph_signature.input_specs}
    assert "CUSTOM_OBJ" in kinds, ep.graph_signature
    torch.testing.assert_close(ep.module()(*args), module(*args))
    # The batch stays symbolic through the fakes of both methods: the program runs other
    # batch sizes, and so does the class it calls.
    for n in (1, 7):
        other = (torch.randn(n, 32), torch.randn(n, 32))
        torch.testing.assert_close(ep.module()(*other), module(*other))


def test_compile_module_fullgraph():
    torch._dynamo.reset()
    module = _Tiny(16)
    args = (torch.randn(3, 16), torch.randn(3, 16))
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(*args), module(*args))


if __name__ == "__main__":
    run_this_file(__file__)
