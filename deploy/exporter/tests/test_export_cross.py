"""The pieces of --target linux-aarch64 that run on this machine, without compiling a model.

The whole path (generate, cross-compile, run under qemu) is
test_aarch64_export.py; these pin the parts that patch or rewrite torch's output.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from deploy.exporter import cross as export_cross

AARCH64 = export_cross.TARGETS["linux-aarch64"]


def test_forced_vec_isa_is_neon_inside_and_restored_after() -> None:
    import torch._inductor.compile_fx  # noqa: F401
    from torch._inductor import codecache, cpu_vec_isa
    from torch._inductor.codegen import cpp_micro_gemm

    modules = (cpu_vec_isa, codecache, cpp_micro_gemm)
    before = [m.pick_vec_isa for m in modules]
    with export_cross.forced_vec_isa(AARCH64):
        for m in modules:
            isa = m.pick_vec_isa()
            assert isinstance(isa, cpu_vec_isa.VecNEON), m.__name__
            # What the generated code is compiled with, and what the package's
            # metadata (AOTI_CPU_ISA) records.
            assert "CPU_CAPABILITY_NEON" in isa.build_macro()
            assert str(isa).upper() == "ASIMD"
        # The probe build would compile NEON code for this x86-64 host.
        assert bool(cpu_vec_isa.pick_vec_isa())
    assert [m.pick_vec_isa for m in modules] == before


def test_forced_vec_isa_is_restored_after_an_error() -> None:
    from torch._inductor import cpu_vec_isa

    before = cpu_vec_isa.pick_vec_isa
    with pytest.raises(RuntimeError, match="boom"), export_cross.forced_vec_isa(AARCH64):
        raise RuntimeError("boom")
    assert cpu_vec_isa.pick_vec_isa is before


def test_target_compile_flags_replace_the_host_march() -> None:
    flags_file = {
        "definitions": ["TORCH_INDUCTOR_CPP_WRAPPER", " C10_USING_CUSTOM_GENERATED_MACROS"],
        "cflags": ["O3", "g1", "march=native", "shared", "fPIC", "std=c++20", "fopenmp"],
        "include_dirs": ["/usr/include/python3.11", "/host/torch/include"],
    }
    assert export_cross.target_compile_flags(flags_file, "armv8-a") == [
        "-DTORCH_INDUCTOR_CPP_WRAPPER",
        "-DC10_USING_CUSTOM_GENERATED_MACROS",
        "-O3",
        "-march=armv8-a",
        "-fPIC",
        "-std=c++20",
        "-fopenmp",
    ]


def test_repackage_swaps_sources_for_the_library(tmp_path: Path) -> None:
    model = "gen/data/aotinductor/model"
    generated = tmp_path / "gen.pt2"
    metadata = {"AOTI_DEVICE_KEY": "cpu", "AOTI_MACHINE": "x86_64", "AOTI_CPU_ISA": "ASIMD"}
    with zipfile.ZipFile(generated, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{model}/model.wrapper.cpp", "int x;")
        z.writestr(f"{model}/model.wrapper_compile_flags.json", "{}")
        z.writestr(f"{model}/model.wrapper_linker_flags.json", "{}")
        z.writestr(f"{model}/CMakeLists.txt", "")
        z.writestr(f"{model}/script.ld", "")
        z.writestr(f"{model}/model.weights.o", b"\x7fELF")
        z.writestr(f"{model}/model.wrapper_metadata.json", json.dumps(metadata))
        z.writestr("gen/data/constants/custom_obj_0", b"pickle")
        z.writestr("gen/archive_format", "pt2")
    so = tmp_path / "model.wrapper.so"
    so.write_bytes(b"\x7fELF aarch64")
    package = tmp_path / "model.pt2"
    export_cross._repackage(str(generated), str(package), model, str(so), AARCH64)
    with zipfile.ZipFile(package) as z:
        names = sorted(z.namelist())
        assert names == sorted(
            [
                f"{model}/model.wrapper_metadata.json",
                "gen/data/constants/custom_obj_0",
                "gen/archive_format",
                f"{model}/model.wrapper.so",
            ]
        )
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        assert z.read(f"{model}/model.wrapper.so") == b"\x7fELF aarch64"
        assert z.read("gen/data/constants/custom_obj_0") == b"pickle"
        got = json.loads(z.read(f"{model}/model.wrapper_metadata.json"))
    assert got == metadata | {"AOTI_MACHINE": "aarch64"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--device", "cuda"], "CPU only"),
        (["--isa", "native"], "uses its baseline"),
    ],
)
def test_cross_target_refuses_host_only_flags(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploy.exporter",
            "--target",
            "linux-aarch64",
            *flags,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not out.exists()
