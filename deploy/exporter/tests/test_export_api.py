"""deploy.export, the exporter as a Python function: two exports in one process, each
package checked against the model in eager, the process left as it was, and bad
arguments refused before anything is written."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
import zipfile
from pathlib import Path

import bad_models
import pytest
import torch
from conftest import EXIT_CODES

import my_ops
from deploy import Exported, ExportError, export
from deploy.exporter.contract import load_contract
from deploy.exporter.loading import WeightsError, load
from my_ops.pack import pack_linear_weight
from my_ops.quantize import quantize_linear_layers

WIDTH = 32


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.bias = torch.nn.Parameter(torch.linspace(-1, 1, WIDTH))
        self.norm = my_ops.RMSNorm(WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(my_ops.fused_bias_gelu(self.linear(x), self.bias))


def _block(seed: int) -> Block:
    torch.manual_seed(seed)
    return Block()


def _batch(max_batch: int) -> tuple:
    return ({0: torch.export.Dim("batch", min=1, max=max_batch)},)


# What an export changes while it runs and must put back.
_LOGGERS = ("torch.utils.cpp_extension", "torch.export.pt2_archive._package")


def _process_state() -> dict:
    from torch._inductor import codecache

    return {
        "environ": dict(os.environ),
        "tempdir": tempfile.tempdir,
        "gettempdir": tempfile.gettempdir(),
        "loggers": [logging.getLogger(n).level for n in _LOGGERS],
        "headers": getattr(codecache, "_HEADER_DIR", None),
    }


def _check_against_eager(exported: Exported, model: torch.nn.Module, batches) -> None:
    compiled = load(str(exported.package))
    _check_against_eager_runner(compiled, model, batches)


def _check_against_eager_runner(compiled, model: torch.nn.Module, batches=(1, 4)) -> None:
    model = model.eval()
    for batch in batches:
        x = torch.randn(batch, WIDTH, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            got, want = compiled(x), model(x)
        got = got[0] if isinstance(got, (list, tuple)) else got
        # float32 through one product, GELU and a norm of 32: the exporter's own tolerance.
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_two_exports_in_one_process_leave_it_as_it_was(tmp_path: Path) -> None:
    before = _process_state()
    first, second = _block(0).train(), _block(1).train()
    # One through a cache (the precompiled headers' folder is set while it runs), one without;
    # different weights and batch ranges, so the second compiles too.
    a = export(
        first,
        (torch.randn(4, WIDTH),),
        tmp_path / "a",
        dynamic_shapes=_batch(8),
        max_batch=8,
        mode="no-autotune",
        cache_dir=tmp_path / "cache",
    )
    assert _process_state() == before
    b = export(
        second,
        (torch.randn(4, WIDTH),),
        tmp_path / "b",
        dynamic_shapes=_batch(5),
        max_batch=5,
        mode="no-autotune",
        cache=False,
    )
    assert _process_state() == before
    assert first.training and second.training
    assert a.out == tmp_path / "a" and b.out == tmp_path / "b"
    for exported in (a, b):
        assert set(exported.times) == {"pack", "export", "compile", "verify", "weights"}, (
            exported.times
        )
        assert json.loads(exported.manifest.read_text())["quantization"] == {
            "scheme": "none",
            "float_linear": "packed",
            "packed_layers": 1,
        }
    _check_against_eager(a, first, (1, 8))
    _check_against_eager(b, second, (1, 5))
    # No temporary folder left beside the outputs.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "cache"]


def _library_bytes(package: Path) -> bytes:
    """The shared libraries inside a package, one after the other."""
    with zipfile.ZipFile(package) as z:
        return b"".join(z.read(n) for n in z.namelist() if n.endswith(".so"))


def test_a_cpu_package_has_its_weights_beside_it_once(tmp_path: Path) -> None:
    model = _block(0)
    common = {"dynamic_shapes": _batch(4), "max_batch": 4, "mode": "no-autotune", "cache": False}
    beside = export(model, (torch.randn(4, WIDTH),), tmp_path / "beside", **common)
    inside = export(
        model, (torch.randn(4, WIDTH),), tmp_path / "inside", **common, weights_inside=True
    )
    # The bias, a parameter the package takes as it is (the linear layer's weight is packed).
    bias = model.bias.detach().numpy().tobytes()
    assert bias not in _library_bytes(beside.package)
    assert (beside.out / "weights.bin").read_bytes().count(bias) == 1
    assert bias in _library_bytes(inside.package)
    assert not (inside.out / "weights.bin").exists() and not (inside.out / "weights.json").exists()
    assert "weights" not in inside.times
    _check_against_eager(beside, model, (1, 4))
    _check_against_eager(inside, model, (1, 4))
    # Without the weights beside it, the package cannot be loaded with them.
    (beside.out / "weights.json").unlink()
    with pytest.raises(WeightsError, match="weights.json"):
        load(beside.package)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch": 0}, "max_batch must be >= 1"),
        ({"device": "tpu"}, "device must be one of 'cpu', 'cuda', got 'tpu'"),
        ({"mode": "fast"}, "mode must be one of 'max-autotune', 'no-autotune', got 'fast'"),
        ({"target": "linux-aarch64", "mode": "max-autotune"}, "mode max-autotune is for"),
        ({"cache": False, "cache_dir": "c"}, "cache=False and cache_dir contradict each other"),
        ({"inductor_options": {"max_autotune": object()}}, "inductor_options['max_autotune']"),
        ({"inductor_options": {"no_such_key": 1}}, "torch._inductor.config has no no_such_key"),
        ({"atol": -1.0}, "atol must be a number >= 0"),
        ({"signing_key": ""}, "signing_key must be a non-empty path"),
        ({"quantize": "int3"}, "quantize must be one of 'int8', 'int4', got 'int3'"),
        ({"quantize_skip": ["linear"]}, "quantize_skip is for quantize int8 or int4"),
        ({"quantize": "int8", "quantize_skip": "linear"}, "quantize_skip must be a sequence"),
        ({"quantize": "int8", "min_cosine": 2.0}, "min_cosine must be in (0, 1], got 2.0"),
        ({"smooth_alpha": 0.5}, "smooth_alpha is for quantize int8 or int4"),
        ({"quantize": "int8", "smooth_alpha": 1.5}, "smooth_alpha must be in [0, 1], got 1.5"),
        ({"quantize": "int4", "quantize_group_size": 48}, "quantize_group_size must be a"),
    ],
)
def test_a_bad_argument_is_refused_by_name(tmp_path: Path, kwargs: dict, message: str) -> None:
    before = _process_state()
    with pytest.raises(ExportError) as caught:
        export(_block(0), (torch.randn(2, WIDTH),), tmp_path / "out", **kwargs)
    assert caught.value.code == EXIT_CODES["usage"]
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    assert list(tmp_path.iterdir()) == []
    assert _process_state() == before


def test_the_model_and_its_inputs_are_checked_first(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="model must be a torch.nn.Module, got function"):
        export(bad_models.raises, (torch.randn(2, WIDTH),), tmp_path / "out")
    with pytest.raises(ExportError, match="example_inputs must be a tuple"):
        export(_block(0), torch.randn(2, WIDTH), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_an_out_that_may_not_be_replaced_is_left_untouched(tmp_path: Path) -> None:
    out = tmp_path / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(ExportError) as caught:
        export(_block(0), (torch.randn(2, WIDTH),), out)
    assert caught.value.code == EXIT_CODES["output_unwritable"]
    assert str(out) in str(caught.value)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert (out / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_a_model_that_does_not_export_leaves_nothing(tmp_path: Path) -> None:
    before = _process_state()
    spec = bad_models.data_dependent(max_batch=8)
    with pytest.raises(ExportError, match="^torch.export failed: "):
        export(
            spec.module,
            spec.example_inputs,
            tmp_path / "deep" / "out",
            dynamic_shapes=spec.dynamic_shapes,
            max_batch=8,
            cache=False,
        )
    # Not even the folders made for --out.
    assert list(tmp_path.iterdir()) == []
    assert _process_state() == before


def test_a_quantized_export_runs_the_quantized_ops_and_leaves_the_model_float(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _block(2)
    example = (torch.randn(4, WIDTH),)
    exported = export(
        model,
        example,
        tmp_path / "q",
        dynamic_shapes=_batch(4),
        max_batch=4,
        mode="no-autotune",
        cache=False,
        quantize="int8",
    )
    assert set(exported.times) == {"quantize", "export", "compile", "verify", "weights"}, (
        exported.times
    )
    assert type(model.linear) is torch.nn.Linear
    manifest = exported.manifest.read_text()
    assert '"my_ops::linear_int8"' in manifest and "aoti_torch_cpu_linear_int8" in manifest
    assert json.loads(manifest)["quantization"] == {
        "scheme": "int8",
        "layers": 1,
        "smooth_alpha": 0.5,
        "float_layers": [],
        "float_linear": "packed",
        "packed_layers": 0,
    }
    # Against a quantization of the same model by my_ops.quantize, in eager: int8 is smoothed
    # by default, by the example's ranges.
    quantized = _block(2)
    assert quantize_linear_layers(quantized, "int8", smooth_alpha=0.5, example_inputs=example) == [
        "linear"
    ]
    _check_against_eager(exported, quantized, (1, 4))
    # Verified against the float model by the accuracy gate, which the stage's line reports.
    assert re.search(
        r"^verify  \.\.\. [0-9.]+s, against the float model: cosine 0\.99[0-9]*, largest "
        r"difference [0-9.e-]+$",
        capsys.readouterr().out,
        re.MULTILINE,
    )
    # The sample's expected outputs are the package's own: the loader's --exact holds for them.
    compiled = load(str(exported.package))
    sample = torch.load(exported.package.parent / "sample_input.pt")
    expected = torch.load(exported.package.parent / "expected_output.pt")
    got = compiled(*sample)
    got = tuple(got) if isinstance(got, (list, tuple)) else (got,)
    assert len(got) == len(expected) and all(
        torch.equal(g, e) for g, e in zip(got, expected, strict=True)
    )


def test_a_static_shape_package_is_verified_at_its_examples_shape(tmp_path: Path) -> None:
    # Exported without dynamic_shapes, its generated code is sized for the example's batch of
    # 3: run at batch 1 (the default verify batch) its ReLU would read rows past the input.
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())
    exported = export(model, (torch.randn(3, WIDTH),), tmp_path / "out", cache=False)
    sample = torch.load(exported.package.parent / "sample_input.pt")
    (expected,) = torch.load(exported.package.parent / "expected_output.pt")
    assert [tuple(t.shape) for t in sample] == [(3, WIDTH)]
    with torch.no_grad():
        torch.testing.assert_close(expected, model(*sample), atol=1e-4, rtol=1e-4)


def test_a_quantized_package_is_verified_against_the_float_model(tmp_path: Path) -> None:
    # Inductor's norm reduces in another order than ATen's, so some of the compiled model's
    # activations differ from eager's in the last bit, and those on a rounding boundary of the
    # quantization land one step away: with weights this large, far past an elementwise
    # tolerance against the quantized model in eager, though the package is as accurate.
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.LayerNorm(1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    )
    with torch.no_grad():
        model[-1].weight.mul_(100)
    exported = export(
        model,
        (torch.randn(8, 128, 1024),),
        tmp_path / "q",
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=8)},),
        max_batch=8,
        mode="no-autotune",
        cache=False,
        quantize="int8",
    )
    assert exported.package.is_file()


def _weights_file(folder: Path) -> dict[str, torch.Tensor]:
    """The constants of a weights export, read from weights.bin as weights.json places them."""
    manifest = json.loads((folder / "weights.json").read_text())
    blob = (folder / "weights.bin").read_bytes()
    # The file's dtype names are c10's, as the package contract maps torch's to them.
    dtypes = {c10: getattr(torch, name) for name, c10 in load_contract().input_dtypes.items()}
    constants = {}
    for c in manifest["constants"]:
        dtype = dtypes[c["dtype"]]
        data = bytearray(blob[c["offset"] : c["offset"] + math.prod(c["shape"]) * dtype.itemsize])
        constants[c["name"]] = torch.frombuffer(data, dtype=dtype).reshape(c["shape"])
    return constants


def test_a_quantized_package_takes_a_weights_file_of_its_scheme(tmp_path: Path) -> None:
    example = (torch.randn(4, WIDTH),)

    def exported(model: torch.nn.Module, out: str, **kwargs) -> Exported:
        return export(model, example, tmp_path / out, dynamic_shapes=_batch(4),
                      max_batch=4, cache=False, quantize="int8", **kwargs)  # fmt: skip

    base = exported(_block(0), "base", mode="no-autotune", smooth_alpha=0.25)
    # Without smooth_alpha the weights file takes the base's.
    exported(_block(1), "weights", base=base.out)
    constants = _weights_file(tmp_path / "weights")
    # The int8 codes, scales and smoothing of my_ops.quantize's quantization of the new model.
    retrained = _block(1)
    assert quantize_linear_layers(retrained, "int8", smooth_alpha=0.25, example_inputs=example) == [
        "linear"
    ]
    assert constants["linear.weight"].dtype == torch.int8
    assert torch.equal(constants["linear.weight"], retrained.linear.weight)
    assert torch.equal(constants["linear.weight_scale"], retrained.linear.weight_scale)
    assert torch.equal(constants["linear.smooth_scale"], retrained.linear.smooth_scale)
    original = _block(0)
    quantize_linear_layers(original, "int8", smooth_alpha=0.25, example_inputs=example)
    assert not torch.equal(constants["linear.weight"], original.linear.weight)
    # The base package, its constants replaced by the file's, computes the new model.
    compiled = load(str(base.package))
    compiled.load_constants(constants, check_full_update=True)
    _check_against_eager_runner(compiled, retrained)


def test_the_default_cpu_package_runs_packed_linear_layers_and_takes_weights_files(
    tmp_path: Path,
) -> None:
    """The float linear layer is my_ops.linear_packed on the weight packed at export; a weights
    file carries the packed weight of the new model, which the base package computes."""
    base = export(_block(0), (torch.randn(4, WIDTH),), tmp_path / "base",
                  dynamic_shapes=_batch(4), max_batch=4, cache=False)  # fmt: skip
    assert "aoti_torch_cpu_linear_packed" in base.manifest.read_text()
    _check_against_eager(base, _block(0), (1, 4))
    export(_block(1), (torch.randn(4, WIDTH),), tmp_path / "weights", dynamic_shapes=_batch(4),
           max_batch=4, cache=False, base=base.out)  # fmt: skip
    constants = _weights_file(tmp_path / "weights")
    assert torch.equal(constants["linear.weight"], pack_linear_weight(_block(1).linear.weight))
    compiled = load(str(base.package))
    compiled.load_constants(constants, check_full_update=True)
    _check_against_eager_runner(compiled, _block(1))


class InPlaceBlock(torch.nn.Module):
    """A residual stream written in place (my_ops.fused_add_rms_norm_), as a decoder's layers
    may pass theirs."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.norm = torch.nn.Parameter(torch.linspace(0.5, 1.5, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, residual = self.linear(x), x * 2
        my_ops.fused_add_rms_norm_(h, residual, self.norm)
        return h + residual


def test_a_package_calls_an_in_place_op_through_its_c_shim(tmp_path: Path) -> None:
    """torch.export functionalizes the mutation, Inductor writes the buffers in place again,
    and the package calls the form's C shim (which takes the null result handle
    AOTInductor passes an op without results)."""
    torch.manual_seed(0)
    model = InPlaceBlock().eval()
    exported = export(model, (torch.randn(4, WIDTH),), tmp_path / "p", dynamic_shapes=_batch(4),
                      max_batch=4, cache=False)  # fmt: skip
    assert '"c_shim": "aoti_torch_cpu_fused_add_rms_norm_"' in exported.manifest.read_text()
    _check_against_eager(exported, model, (1, 4))


class TiedLM(torch.nn.Module):
    """An embedding and an output projection that share one weight, as LLaMA-family LLMs tie
    theirs (SmolLM2's is 113 MB): the compiled package holds the tensor once, by one name."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, WIDTH)
        self.norm = my_ops.RMSNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, 64, bias=False)
        self.head.weight = self.embed.weight
        # Read by no operation, as transformers' rotary embeddings keep original_inv_freq: the
        # package does not hold it.
        self.register_buffer("unread", torch.zeros(3), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.embed(ids)))


def _tied_lm(seed: int) -> TiedLM:
    torch.manual_seed(seed)
    return TiedLM().eval()


def _export_tied(model: TiedLM, ids: tuple, out: Path, **kwargs) -> Exported:
    return export(model, ids, out, dynamic_shapes=_batch(4), max_batch=4, cache=False, **kwargs)


def test_a_package_with_tied_weights_takes_a_weights_file(tmp_path: Path) -> None:
    """The weights file holds the tied tensor once, by the name the package holds it by, and
    leaves out the buffer the package does not hold: a file with a name the package lacks is
    refused by the loader."""
    ids = (torch.randint(0, 64, (2, 5)),)
    base = _export_tied(_tied_lm(0), ids, tmp_path / "base")
    _export_tied(_tied_lm(1), ids, tmp_path / "weights", base=base.out)
    constants = _weights_file(tmp_path / "weights")
    compiled = load(str(base.package))
    assert sorted(constants) == sorted(compiled.get_constant_fqns())
    (tied,) = (c for c in constants.values() if c.shape == (64, WIDTH))
    assert torch.equal(tied, _tied_lm(1).embed.weight.detach())
    # The base package, its constants replaced by the file's, computes the new model.
    compiled.load_constants(constants, check_full_update=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*ids), _tied_lm(1)(*ids), atol=1e-4, rtol=1e-4)


def test_a_model_that_unties_the_bases_tied_weights_is_refused(tmp_path: Path) -> None:
    ids = (torch.randint(0, 64, (2, 5)),)
    base = _export_tied(_tied_lm(0), ids, tmp_path / "base")
    untied = _tied_lm(1)
    untied.head.weight = torch.nn.Parameter(untied.embed.weight.detach().clone())
    with pytest.raises(ExportError, match="one tensor in the base") as caught:
        _export_tied(untied, ids, tmp_path / "weights", base=base.out)
    assert caught.value.code == EXIT_CODES["not_base_architecture"]
    assert not (tmp_path / "weights").exists()


class DeepBlock(torch.nn.Module):
    """Linear layers between layer norms, which Inductor compiles to code of its own: its float
    math differs from ATen's in the last bits, which the next layer's activation quantization
    can turn into a whole quantization step."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(6))
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(WIDTH) for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear, norm in zip(self.layers, self.norms, strict=True):
            x = norm(x + linear(x))
        return x


def _deep_block(seed: int) -> DeepBlock:
    torch.manual_seed(seed)
    return DeepBlock().eval()


def test_a_quantized_weights_file_expects_the_packages_own_outputs(tmp_path: Path) -> None:
    """What the loader's --expect compares with: the base package's outputs with the file's
    weights, which it reproduces to the bit, not the quantized model's in eager."""
    x = (torch.randn(4, WIDTH),)
    base = export(_deep_block(0), x, tmp_path / "base", dynamic_shapes=_batch(4), max_batch=4,
                  cache=False, quantize="int8")  # fmt: skip
    export(_deep_block(1), x, tmp_path / "weights", dynamic_shapes=_batch(4), max_batch=4,
           cache=False, quantize="int8", base=base.out)  # fmt: skip
    compiled = load(str(base.package))
    compiled.load_constants(_weights_file(tmp_path / "weights"), check_full_update=True)
    sample = torch.load(tmp_path / "weights" / "sample_input.pt")
    (expected,) = torch.load(tmp_path / "weights" / "expected_output.pt")
    with torch.no_grad():
        got = compiled(*sample)
    assert torch.equal(got[0] if isinstance(got, (list, tuple)) else got, expected)


@pytest.mark.parametrize(
    ("base_kwargs", "kwargs", "needle"),
    [
        (
            {"quantize": "int8"},
            {},
            "its package is int8 (quantize int8), this export float (no quantize)",
        ),
        ({}, {"quantize": "int8"}, "its package is float (no quantize), this export int8"),
        (
            {"quantize": "int4"},
            {"quantize": "int4", "quantize_group_size": 64},
            "its package is int4 (quantize int4, quantize_group_size 32), this export int4 "
            "(quantize int4, quantize_group_size 64)",
        ),
        (
            {"quantize": "int8"},
            {"quantize": "int8", "smooth_alpha": 0.0},
            "its package was quantized with smooth_alpha 0.5, this export asks for 0: a "
            "weights file's layers are smoothed as its base's are; leave smooth_alpha out to "
            "take the base's",
        ),
        (
            {"float_linear": "inductor"},
            {},
            "its package's float linear layers are float_linear inductor, this export's "
            "packed: a weights file holds the weights as its base's package does; export the "
            "weights with float_linear inductor",
        ),
    ],
    ids=[
        "int8-base-float-weights",
        "float-base-int8-weights",
        "int4-other-group-size",
        "int8-other-smooth-alpha",
        "inductor-base-packed-weights",
    ],
)
def test_a_weights_file_of_another_scheme_is_refused(
    tmp_path: Path, base_kwargs: dict, kwargs: dict, needle: str
) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    example = (torch.randn(2, 64),)
    base = export(model, example, tmp_path / "base", mode="no-autotune", cache=False,
                  **base_kwargs)  # fmt: skip
    before = sorted(p.name for p in base.out.iterdir())
    with pytest.raises(ExportError, match=re.escape(needle)) as caught:
        export(model, example, tmp_path / "weights", cache=False, base=base.out, **kwargs)
    assert caught.value.code == EXIT_CODES["not_base_architecture"]
    assert not (tmp_path / "weights").exists()
    assert sorted(p.name for p in base.out.iterdir()) == before


def test_a_base_whose_quantization_record_is_malformed_is_refused(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    example = (torch.randn(2, 64),)
    base = export(model, example, tmp_path / "base", cache=False, quantize="int8")
    manifest_path = base.out / "manifest.json"
    original = json.loads(manifest_path.read_text())
    for field, value, needle in (
        ("smooth_alpha", "0.5", "quantization.smooth_alpha is not a number in [0, 1]"),
        ("smooth_alpha", 1.5, "quantization.smooth_alpha is not a number in [0, 1]"),
        ("float_linear", "mkl", "quantization.float_linear is not one of"),
    ):
        edited = json.loads(json.dumps(original))
        edited["quantization"][field] = value
        manifest_path.write_text(json.dumps(edited))
        with pytest.raises(ExportError, match=re.escape(needle)):
            export(model, example, tmp_path / "weights", cache=False, quantize="int8",
                   base=base.out)  # fmt: skip
        assert not (tmp_path / "weights").exists()


def test_a_quantized_model_below_min_cosine_writes_nothing(tmp_path: Path) -> None:
    before = _process_state()
    # No quantized model is exactly the float one: a cosine of 1 cannot be met.
    with pytest.raises(ExportError, match=r"cosine against the float model is 0\.9") as caught:
        export(_block(0), (torch.randn(4, WIDTH),), tmp_path / "out", quantize="int8",
               min_cosine=1.0, cache=False)  # fmt: skip
    assert caught.value.code == EXIT_CODES["accuracy"]
    assert "below min_cosine 1.0" in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    assert _process_state() == before


def test_a_model_without_linear_layers_is_a_usage_error_under_quantize(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.ReLU())
    with pytest.raises(ExportError, match="has no nn.Linear layer to quantize") as caught:
        export(model, (torch.randn(4, WIDTH),), tmp_path / "out", quantize="int4", cache=False)
    assert caught.value.code == EXIT_CODES["usage"]
    assert list(tmp_path.iterdir()) == []
