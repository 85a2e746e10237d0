"""What a cached package is keyed on (see cache.py for the cache itself)."""

from __future__ import annotations

import glob
import hashlib
import io
import os
import sys
from dataclasses import dataclass
from typing import Any

from ..contract.package_contract import CONTRACT_PATH
from .cache import CACHE_FORMAT, digest
from .compile import compiler_identity, program_version
from .cross import TargetFiles
from .hashing import sha256_file

_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class CacheKeys:
    toolchain: dict[str, Any]
    """Everything but the model: op library, torch, compiler, target and ISA."""
    program_sha256: str
    """The serialized ExportedProgram: graph, weights, constants, custom objects."""
    exporter_sha256: str
    """This exporter's own sources, which decide how the package is put together."""

    def package(
        self,
        options: dict[str, Any],
        inductor_config: dict[str, Any],
        cpp_gemm_template_first: bool = False,
    ) -> str:
        # cpp.cxx is a path inside the toolchain folder; the toolchain key
        # already covers the compiler behind it.
        # Dict options keyed by objects (custom_ops_to_c_shims: OpOverload -> declarations)
        # by their names, which JSON can sort.
        mine = {
            k: {str(key): value for key, value in v.items()} if isinstance(v, dict) else v
            for k, v in options.items()
            if k != "cpp.cxx"
        }
        return digest(
            {
                "format": CACHE_FORMAT,
                "toolchain": digest(self.toolchain),
                "options": mine,
                "inductor_config": inductor_config,
                "cpp_gemm_template_first": cpp_gemm_template_first,
                "program": self.program_sha256,
                "exporter": self.exporter_sha256,
            }
        )


def _host_cpu() -> str:
    # -march=native compiles for the CPU's feature flags, not its model name.
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def toolchain_parts(
    *, device: str, isa: str, target: str, op_library: str, cross: TargetFiles | None
) -> dict[str, Any]:
    import torch

    parts: dict[str, Any] = {
        "format": CACHE_FORMAT,
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "python": sys.version,
        "op_library_sha256": sha256_file(op_library),
        "compiler": compiler_identity(),
        "target": target,
        "device": device,
        "isa": isa,
    }
    if isa == "native":
        parts["host_cpu"] = _host_cpu()
        # Caps under which the compiler's -march=native (CPUID hidden by libcpuid_cap.so) or
        # Inductor's vector code see a lower tier than /proc/cpuinfo lists.
        for cap in ("MY_OPS_CPUID_CAP", "ATEN_CPU_CAPABILITY"):
            if os.environ.get(cap):
                parts[cap] = os.environ[cap]
    if device == "cuda":
        home = os.environ.get("CUDA_HOME", "")
        nvcc = os.path.join(home, "bin", "nvcc")
        parts["cuda"] = {
            "home": home,
            "nvcc": program_version(nvcc) if os.path.exists(nvcc) else None,
            "gpu": torch.cuda.get_device_name(),
            "capability": list(torch.cuda.get_device_capability()),
            "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
        }
    if cross is not None:
        parts["cross"] = {
            "compiler": cross.compiler,
            "version": program_version(cross.compiler),
            "compile_flags": cross.compile_flags,
            "link_flags": cross.link_flags,
            "op_library_sha256": sha256_file(cross.op_library),
        }
    return parts


def program_sha256(ep: Any) -> str:
    import torch

    buf = io.BytesIO()
    torch.export.save(ep, buf)
    return hashlib.sha256(buf.getvalue()).hexdigest()


def exporter_sha256() -> str:
    h = hashlib.sha256()
    names = sorted(glob.glob(os.path.join(_HERE, "*.py")))
    names.append(CONTRACT_PATH)
    for path in names:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def inductor_config() -> dict[str, Any]:
    """Inductor's settings as its own cache keys them, environment variables included."""
    import torch._inductor.config as config

    return config.save_config_portable()
