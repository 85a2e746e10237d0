"""What differs between an export for this machine and one for another CPU.

HostBuild compiles with Inductor, verifies the package against eager and
vouches for the op library this process loaded. CrossBuild (--target
linux-aarch64) generates C++ here and compiles it with the target's
toolchain (see cross.py); its package cannot run here, so it is not verified,
and its manifest names the target's op library.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from . import vec_isa
from .compile import MARCH
from .cross import (
    HOST_TARGET,
    TARGETS,
    CrossTarget,
    TargetFiles,
    cpp_only_options,
    cross_compile,
    forced_vec_isa,
    target_files,
)
from .errors import ExportError, first_line
from .verify import Accuracy, Verified, sample_inputs, verify

# A stage line of the export's output, as a context around the work.
# A stage's name, and what its line says after the time (called when it ends).
Stage = Callable[[str, Callable[[], str] | None], AbstractContextManager[None]]


def _known_vec_isa(options: dict[str, Any]) -> AbstractContextManager[None]:
    """A portable package's vector ISA, forced where the host runs it (vec_isa.py); a native
    one's is the host's best, which only Inductor's probe finds."""
    portable = options.get("cpp.march") == MARCH["portable"]
    isa = vec_isa.portable_host_isa() if portable else None
    return vec_isa.forced_vec_isa(isa) if isa else nullcontext()


class HostBuild:
    name = HOST_TARGET
    cross = False
    # Besides the host's toolchain, nothing else goes into the cache key.
    files: TargetFiles | None = None

    def announce(self) -> None:
        pass

    def compile(self, ep: Any, package: str, options: dict[str, Any], work: str) -> None:
        import torch

        try:
            with _known_vec_isa(options):
                torch._inductor.aoti_compile_and_package(
                    ep, package_path=package, inductor_configs=options
                )
        except Exception as e:  # noqa: BLE001
            raise ExportError(f"AOTInductor compile failed: {first_line(e)}") from e

    def verify(
        self,
        spec: Any,
        module: Any,
        package: str,
        max_batch: int,
        device: str,
        options: dict[str, Any],
        stage: Stage,
        accuracy: Accuracy | None = None,
        weights: dict[str, Any] | None = None,
    ) -> Verified:
        # Loading the package checks the host's vector ISA against the package's, by the
        # same probe.
        verified: list[Verified] = []
        with stage("verify", lambda: verified[0].note), _known_vec_isa(options):
            verified.append(
                verify(spec, module, package, max_batch, device, options, accuracy, weights)
            )
        return verified[0]

    def manifest_target(self) -> dict[str, Any]:
        """write_manifest's target arguments: this machine's, its defaults."""
        return {}


@dataclasses.dataclass(frozen=True)
class CrossBuild:
    target: CrossTarget
    files: TargetFiles
    cross = True

    @property
    def name(self) -> str:
        return self.target.name

    def announce(self) -> None:
        t = self.target
        print(f"target:  {t.name}, compiled by {self.files.compiler} -march={t.march}")

    def compile(self, ep: Any, package: str, options: dict[str, Any], work: str) -> None:
        import torch

        # Named as the final package: the archive's top folder comes from it.
        os.makedirs(os.path.join(work, "cpp"))
        generated = os.path.join(work, "cpp", "model.pt2")
        try:
            with forced_vec_isa(self.target):
                torch._inductor.aoti_compile_and_package(
                    ep,
                    package_path=generated,
                    inductor_configs=options | cpp_only_options(),
                )
        except Exception as e:  # noqa: BLE001
            raise ExportError(f"AOTInductor code generation failed: {first_line(e)}") from e
        cross_compile(generated, package, self.target, self.files, work)

    def verify(
        self,
        spec: Any,
        module: Any,
        package: str,
        max_batch: int,
        device: str,
        options: dict[str, Any],
        stage: Stage,
        accuracy: Accuracy | None = None,
        weights: dict[str, Any] | None = None,
    ) -> Verified:
        print(
            f"verify  ... skipped: a {self.target.name} package cannot run on this machine",
            flush=True,
        )
        return Verified(sample_inputs(spec, device), ())

    def manifest_target(self) -> dict[str, Any]:
        """write_manifest's target arguments: the target's, its compiler and op library."""
        return {
            "target": self.target.name,
            "march": self.target.march,
            "cxx": self.files.compiler,
            "op_library": self.files.op_library,
        }


Build = HostBuild | CrossBuild


def build_for(target: str) -> Build:
    """The build for --target; a cross target's toolchain must be in the runfiles."""
    cross = TARGETS.get(target)
    return CrossBuild(cross, target_files(cross)) if cross else HostBuild()
