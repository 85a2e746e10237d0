"""The CPU features a package may use and the loader can check: which extensions a compiler
emits for a -march, probed through the compiler, with the names package_contract.json gives."""

from __future__ import annotations

import os
import subprocess

from ..contract.package_contract import CpuFeature
from .contract import load_contract
from .errors import ExportError, first_line


def target_macros() -> dict[str, str]:
    """The targets a package can be exported for, as manifest.json names them.

    Each with the macro by which a compiler says it compiles for that target.
    """
    return load_contract().target_macros


def read_cpu_features() -> tuple[CpuFeature, ...]:
    """The CPU features the loader can check, every target's, in the contract's order."""
    return load_contract().cpu_features


def check_target(target: str) -> None:
    known = target_macros()
    if target not in known:
        raise ExportError(f"unknown target {target!r}; one of {', '.join(sorted(known))}")


def cpu_features(cxx: str, march: str, target: str = "linux-x86_64") -> list[str]:
    """The instruction-set extensions `cxx -march=MARCH` may emit, by loader name.

    For native that is this host's CPU as the compiler sees it, which is what
    the package then needs wherever it runs. `cxx` must compile for `target`.
    """
    check_target(target)
    try:
        proc = subprocess.run(
            [cxx, f"-march={march}", "-dM", "-E", "-x", "c++", os.devnull],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        # The compiler's own first line says which of cxx and march it refused.
        stderr = getattr(e, "stderr", None) or ""
        why = stderr.strip().splitlines()[0] if stderr.strip() else first_line(e)
        raise ExportError(f"cannot ask {cxx} what -march={march} enables: {why}") from e
    defined = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")}
    # Another architecture's compiler would match none of the target's macros
    # and so ask for nothing.
    macro = target_macros()[target]
    if macro not in defined:
        raise ExportError(f"{cxx} does not compile for {target}: it does not define {macro}")
    return sorted(
        row.name
        for row in read_cpu_features()
        if row.target == target and row.macro is not None and row.macro in defined
    )


def cpu_levels(target: str) -> list[str]:
    """The -march levels the loader for `target` can check, besides native."""
    check_target(target)
    return [row.name for row in read_cpu_features() if row.target == target and row.macro is None]


# The namespaces of torch's own operators and higher-order operators, which LibTorch and
# AOTInductor provide without an op library. "prims" is registered from Python only, and
# Inductor lowers it into the package's own code.
