"""The linux-aarch64 bundle, unpacked and run under qemu-aarch64 on this x86-64 machine.

Environment (set by the Bazel rule): AARCH64_BUNDLE_TAR (//deploy:bundle_linux_aarch64),
AARCH64_INT8_PACKAGE (//deploy:int8_package_linux_aarch64), AARCH64_RETRAINED_WEIGHTS,
MY_OPS_DEFAULT_PACKAGE (the x86-64 //deploy:default_package), and those of qemu_aarch64.py.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import qemu_aarch64
import torch
from conftest import BUNDLE_FILES, EXIT_CODES, absolute_from_env, package_folder

from deploy import default_model
from my_ops.quantize import quantize_linear_layers

# Emulated start-up of a program linked to libtorch_cpu takes seconds.
TIMEOUT = 600


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(absolute_from_env(os.environ["AARCH64_BUNDLE_TAR"])) as tar:
        tar.extractall(where, filter="data")
    return where / "my_ops_bundle"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qemu_aarch64.make_prefix(tmp_path_factory.mktemp("qemu"))


def _copy(bundle: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    return copy


def _loader(
    prefix: Path, bundle: Path, args: list[str], tmp_path: Path, cpu: str = qemu_aarch64.CPU
):
    argv = qemu_aarch64.command(prefix, [str(bundle / "loader"), *args], cpu)
    return subprocess.run(
        argv,
        env=qemu_aarch64.environment(tmp_path / "tmp"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _loader_args(
    bundle: Path, out: Path, package: Path | None = None, manifest: Path | None = None
) -> list[str]:
    return [
        "--output",
        str(out),
        "--ops",
        str(bundle / "libmy_ops.so"),
        "--package",
        str(package or bundle / "model.pt2"),
        "--manifest",
        str(manifest or bundle / "manifest.json"),
        "--input",
        str(bundle / "sample_input.pt"),
    ]


def test_bundle_contents(bundle: Path) -> None:
    names = sorted(p.name for p in bundle.iterdir())
    assert names == sorted(BUNDLE_FILES)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["target"] == "linux-aarch64"
    assert manifest["isa"] == "armv8-a"
    assert "asimd" in manifest["cpu_features"]


def _elf_files(bundle: Path, tmp_path: Path) -> dict[str, Path]:
    """Every binary that ships: the loader, the op library and the model's .so inside model.pt2."""
    files = {"loader": bundle / "loader", "libmy_ops.so": bundle / "libmy_ops.so"}
    with zipfile.ZipFile(bundle / "model.pt2") as z:
        sos = [n for n in z.namelist() if n.endswith(".so")]
        assert len(sos) == 1, sos
        files["model.pt2:" + sos[0]] = Path(z.extract(sos[0], tmp_path / "pt2"))
    return files


def _readelf(*args: str) -> str:
    return subprocess.run(["readelf", *args], capture_output=True, text=True, check=True).stdout


def test_every_shipped_binary_is_aarch64_without_python_or_cuda(
    bundle: Path, tmp_path: Path
) -> None:
    for name, path in _elf_files(bundle, tmp_path).items():
        assert "AArch64" in _readelf("-h", str(path)), f"{name} is not an aarch64 ELF file"
        needed = [
            line.split("[", 1)[1].rstrip("]")
            for line in _readelf("-d", str(path)).splitlines()
            if "(NEEDED)" in line
        ]
        assert needed, f"{name} needs no library at all?"
        for lib in needed:
            assert not lib.startswith("libpython"), f"{name} needs {lib}"
            assert not lib.startswith("libtorch_cuda"), f"{name} needs {lib}"
            # libtorch.so NEEDs libtorch_cuda; torch_cpu and c10 suffice.
            assert lib != "libtorch.so", f"{name} needs {lib}"
        # The stack must not be executable, or glibc >= 2.41 refuses to load it.
        stack = [ln for ln in _readelf("-lW", str(path)).splitlines() if "GNU_STACK" in ln]
        assert stack and "RWE" not in stack[0], f"{name}: {stack}"


def test_run_sh_under_qemu(bundle: Path, prefix: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # env -i: no Python, no Bazel; only LibTorch's folder, as on an edge host.
    result = subprocess.run(
        [
            "env",
            "-i",
            f"TMPDIR={scratch}",
            f"MY_OPS_EMULATOR={qemu_aarch64.emulator(prefix)}",
            "/bin/sh",
            str(bundle / "run.sh"),
            str(qemu_aarch64.libtorch_lib()),
        ],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert "run.sh: OK" in result.stdout
    assert list(scratch.iterdir()) == [], "run.sh left files behind"


def test_outputs_match_eager_on_this_machine(bundle: Path, prefix: Path, tmp_path: Path) -> None:
    out = tmp_path / "output.pt"
    result = _loader(prefix, bundle, _loader_args(bundle, out), tmp_path)
    assert result.returncode == 0, result.stderr
    got = torch.load(out)
    # The reference: the same model in eager on this x86-64 machine, with the
    # x86-64 op library.
    spec = default_model.make_model(max_batch=16)
    sample = torch.load(bundle / "sample_input.pt")
    with torch.no_grad():
        want = spec.module.eval()(*sample)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        # float32 on both sides, but NEON (4 lanes, no FMA contraction in
        # Inductor's code) and AVX2 (8 lanes) sum in different orders: the
        # block's norms sum 64 values, about sqrt(64) * 6e-8 relative each,
        # through a few layers. 2e-5 relative (~170 ulp) with 1e-5 absolute for
        # values near zero is the suite's float32 tolerance.
        torch.testing.assert_close(g, w, rtol=2e-5, atol=1e-5)


def test_a_weights_file_gives_the_retrained_models_outputs(
    bundle: Path, prefix: Path, tmp_path: Path
) -> None:
    """The aarch64 package with another training run's weights (export --weights-only against
    it): the retrained model's eager outputs on this machine, at the tolerance above."""
    weights = package_folder(
        "AARCH64_RETRAINED_WEIGHTS", "//deploy:retrained_weights_linux_aarch64", "weights.bin"
    )
    out = tmp_path / "output.pt"
    args = _loader_args(bundle, out)
    args[args.index("--input") + 1] = str(weights / "sample_input.pt")
    args += ["--weights", str(weights / "weights.bin")]
    result = _loader(prefix, bundle, args, tmp_path)
    assert result.returncode == 0, result.stderr
    got = torch.load(out)
    want = torch.load(weights / "expected_output.pt")
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=2e-5, atol=1e-5)
    # The original model's outputs on that input are far from these: the tolerance above tells
    # the two sets of weights apart.
    with torch.no_grad():
        original = default_model.make_model(max_batch=16).module.eval()(
            *torch.load(weights / "sample_input.pt")
        )
    assert not torch.allclose(original, want[0], rtol=2e-5, atol=1e-5)


def test_an_int8_package_runs_with_the_bundles_op_library(
    bundle: Path, prefix: Path, tmp_path: Path
) -> None:
    """The default model exported with --target linux-aarch64 --quantize int8, run by the
    bundle's loader and op library (the quantized ops' aarch64 kernels) under qemu."""
    package = package_folder("AARCH64_INT8_PACKAGE", "//deploy:int8_package_linux_aarch64")
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["target"] == "linux-aarch64"
    assert manifest["quantization"]["scheme"] == "int8"
    assert "my_ops::linear_int8" in {op["name"] for op in manifest["ops"]}
    out = tmp_path / "output.pt"
    args = _loader_args(bundle, out, package / "model.pt2", package / "manifest.json")
    args[args.index("--input") + 1] = str(package / "sample_input.pt")
    result = _loader(prefix, bundle, args, tmp_path)
    assert result.returncode == 0, result.stderr
    (got,) = torch.load(out)
    sample = torch.load(package / "sample_input.pt")
    # The reference: the model quantized the same way (smoothed as the manifest records, by
    # the export's example inputs), in eager on this x86-64 machine with the x86-64 op
    # library. The integer sums are exact on both; the float math around them differs in the
    # last bits (see above), which could move an activation across a rounding boundary of
    # its quantization: the exporter's own tolerance for a package, 1e-4, holds for this
    # model, and the float model is far further away than that.
    spec = default_model.make_model(max_batch=16)
    model = spec.module.eval()
    quantized = copy.deepcopy(model)
    quantize_linear_layers(
        quantized,
        "int8",
        smooth_alpha=manifest["quantization"]["smooth_alpha"],
        example_inputs=tuple(spec.example_inputs),
    )
    with torch.no_grad():
        want, float_outputs = quantized(*sample), model(*sample)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, float_outputs, rtol=1e-4, atol=1e-4)


def test_tampered_package_is_refused(bundle: Path, prefix: Path, tmp_path: Path) -> None:
    copy = _copy(bundle, tmp_path)
    data = bytearray((copy / "model.pt2").read_bytes())
    data[len(data) // 2] ^= 0x01
    (copy / "model.pt2").write_bytes(bytes(data))
    result = _loader(prefix, copy, _loader_args(copy, tmp_path / "out.pt"), tmp_path)
    assert result.returncode == EXIT_CODES["integrity"], result.stderr
    assert "does not match manifest" in result.stderr, result.stderr


def test_x86_package_is_refused(bundle: Path, prefix: Path, tmp_path: Path) -> None:
    value = os.environ["MY_OPS_DEFAULT_PACKAGE"]
    x86 = [Path(absolute_from_env(v)) for v in value.split() if v.endswith("model.pt2")][0]
    x86 = Path(os.path.realpath(x86)).parent
    result = _loader(
        prefix,
        bundle,
        _loader_args(bundle, tmp_path / "out.pt", x86 / "model.pt2", x86 / "manifest.json"),
        tmp_path,
    )
    assert result.returncode == EXIT_CODES["integrity"], result.stderr
    assert "exported for linux-x86_64" in result.stderr, result.stderr
    assert "linux-aarch64" in result.stderr, result.stderr


def test_missing_cpu_feature_is_refused(bundle: Path, prefix: Path, tmp_path: Path) -> None:
    # Neoverse-N1 has no SVE: the loader must read that from AT_HWCAP, not
    # trust the manifest.
    copy = _copy(bundle, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["cpu_features"].append("sve")
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    result = _loader(prefix, copy, _loader_args(copy, tmp_path / "out.pt"), tmp_path)
    assert result.returncode == EXIT_CODES["integrity"], result.stderr
    assert "sve" in result.stderr and "lacks" in result.stderr, result.stderr
    # ... and the same manifest passes that check on a CPU that has SVE.
    result = _loader(prefix, copy, _loader_args(copy, tmp_path / "out.pt"), tmp_path, cpu="max")
    assert result.returncode == 0, result.stderr


def test_run_sh_names_a_missing_cuda_runtime(bundle: Path, tmp_path: Path) -> None:
    # A LibTorch folder with torch's libraries but no CUDA runtime beside it.
    lib = tmp_path / "site-packages" / "torch" / "lib"
    lib.mkdir(parents=True)
    for name in ("libtorch_cpu.so", "libc10.so"):
        (lib / name).symlink_to(qemu_aarch64.libtorch_lib() / name)
    result = subprocess.run(
        ["env", "-i", f"TMPDIR={tmp_path}", "/bin/sh", str(bundle / "run.sh"), str(lib)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "libcudart.so.13" in result.stderr, result.stderr
