"""The vector ISA a portable x86-64 export is compiled for without Inductor's probe."""

from __future__ import annotations

import platform

import pytest
import torch

from deploy.exporter import vec_isa


@pytest.mark.parametrize(
    ("capability", "expected"),
    [("AVX512", "VecAVX2"), ("AVX2", "VecAVX2"), ("DEFAULT", None)],
)
def test_a_portable_package_is_avx2_where_the_host_runs_avx2(monkeypatch, capability, expected):
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert vec_isa.portable_host_isa() == expected


def test_another_machine_is_probed(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert vec_isa.portable_host_isa() is None


def test_the_forced_isa_is_what_inductor_picks_and_what_a_256_bit_probe_picks():
    import torch._inductor.compile_fx  # noqa: F401  (first: the others import it circularly)
    from torch._inductor import codecache, config, cpu_vec_isa
    from torch._inductor.codegen import cpp_micro_gemm

    if vec_isa.portable_host_isa() is None:
        pytest.skip("this host's ATen runs below AVX2: the exporter probes it")
    modules = (cpu_vec_isa, codecache, cpp_micro_gemm)
    before = [m.pick_vec_isa for m in modules]
    with vec_isa.forced_vec_isa("VecAVX2"):
        assert all(type(m.pick_vec_isa()) is cpu_vec_isa.VecAVX2 for m in modules)
        assert config.cpp.vec_isa_ok is True
    assert [m.pick_vec_isa for m in modules] == before
    # Inductor's own choice for cpp.simdlen 256 (the compile option of a portable export),
    # by its probe: the same ISA.
    with config.patch({"cpp.simdlen": 256}):
        assert type(cpu_vec_isa.pick_vec_isa()) is cpu_vec_isa.VecAVX2
