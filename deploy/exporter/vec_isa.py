"""The vector ISA Inductor generates CPU code for, when the exporter already knows it.

Inductor asks pick_vec_isa(), which test-builds and runs a small program with the
host's compiler for each candidate ISA: on the default model that took 22 of the
compile stage's 41 s (`--profile-compile`, "isa check"), in every export that starts
without Inductor's caches, as every build-time export does. The exporter needs no
probe where the ISA follows from what it was asked for: an aarch64 package's is NEON,
and a portable x86-64 package's is AVX2 (x86-64-v3, cpp.simdlen 256), the ISA the probe
picks on any host that runs AVX2, as the verify stage needs. A host whose ATen runs
below AVX2 (an old CPU, or ATEN_CPU_CAPABILITY=default) is probed as before.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Iterator

# The ISAs that run a portable x86-64 package (x86-64-v3).
_RUNS_AVX2 = ("AVX2", "AVX512")


def portable_host_isa() -> str | None:
    """The ISA class of a portable x86-64 package where this host runs its code (VecAVX2),
    else None: Inductor probes."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    import torch

    return "VecAVX2" if torch.backends.cpu.get_cpu_capability() in _RUNS_AVX2 else None


@contextlib.contextmanager
def forced_vec_isa(name: str) -> Iterator[None]:
    """Inductor generates code for cpu_vec_isa.<name> (VecNEON, VecAVX2), without a probe.

    Inductor has no option for this: the name pick_vec_isa is replaced where it is
    looked up (cpu_vec_isa, and the two modules that import it by name), and
    cpp.vec_isa_ok skips the test build. Restored on the way out, error or not.
    """
    import torch._inductor.compile_fx  # noqa: F401  (imported first: the others import it circularly)
    from torch._inductor import codecache, config, cpu_vec_isa
    from torch._inductor.codegen import cpp_micro_gemm

    isa = getattr(cpu_vec_isa, name)()
    modules = (cpu_vec_isa, codecache, cpp_micro_gemm)
    saved = [m.pick_vec_isa for m in modules]
    try:
        for m in modules:
            m.pick_vec_isa = lambda: isa
        with config.patch({"cpp.vec_isa_ok": True}):
            yield
    finally:
        for m, original in zip(modules, saved, strict=True):
            m.pick_vec_isa = original
