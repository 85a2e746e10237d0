"""Finds the CUDA toolkit on this machine and writes the rsqrt header overlay where it needs one.

usage: cuda_toolkit.py [--overlay DIR]

Prints one JSON object: root (null without a toolkit), how it was found, nvcc, version, the
host's glibc, overlay (DIR, or null when this nvcc needs none), overlay_min_glibc,
host_needs_overlay (whether a compile against the host's glibc needs it), warnings.

@local_cuda's repository rule (toolkit.bzl) runs it with the build's Python, and
tools/gpu_check, which builds without Bazel, runs it with its own, so both find the same
toolkit and patch the same header. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

# glibc 2.42 declares rsqrt/rsqrtf noexcept in <math.h>; CUDA 13.0's crt/math_functions.h
# declares them without, and nvcc rejects the pair. Which glibc nvcc's host compiler sees
# depends on the C++ toolchain (a sysroot's or the host's), so the overlay is written for
# every CUDA 13.0 and each build uses it only where that glibc is at least this.
OVERLAY_MIN_GLIBC = "2.42"
_OVERLAY_VERSIONS = ("13.0",)
_RSQRT_DECLS = {
    "double rsqrt(double a)": ");",
    "float rsqrtf(float a)": ");",
    "double                 rsqrt(double x)": ";",
    "float                  rsqrtf(float x)": ";",
}


def _nvcc_top(nvcc: str) -> Path | None:
    # nvcc on PATH may be a symlink or a wrapper script; its dry run names its real bin dir.
    try:
        out = subprocess.run([nvcc, "--dryrun", "--version"], capture_output=True, text=True)
    except OSError:
        return None
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("#$ _HERE_="):
            top = Path(line.split("=", 1)[1].strip()).parent
            if (top / "include/cuda_runtime.h").exists():
                return top
    return None


def find_root(warnings: list[str]) -> tuple[Path | None, str | None]:
    """The toolkit: $CUDA_PATH, $CUDA_HOME, nvcc on PATH, then /usr/local/cuda."""
    for var in ("CUDA_PATH", "CUDA_HOME"):
        value = os.environ.get(var)
        if value and (Path(value) / "bin/nvcc").exists():
            return Path(value), "$" + var
        if value:
            warnings.append(f"${var}={value} has no bin/nvcc; looking elsewhere")
    nvcc = shutil.which("nvcc")
    top = _nvcc_top(nvcc) if nvcc else None
    if top:
        return top, "nvcc on PATH"
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return Path("/usr/local/cuda"), "/usr/local/cuda"
    return None, None


def nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
    m = re.search(r"release (\d+\.\d+)", out.stdout)
    if out.returncode != 0 or not m:
        raise SystemExit(f"cannot read the version from '{nvcc} --version': {out.stderr.strip()}")
    return m.group(1)


def host_glibc() -> str | None:
    m = re.search(r"(\d+\.\d+)", os.confstr("CS_GNU_LIBC_VERSION") or "")
    return m.group(1) if m else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def write_rsqrt_overlay(include_dir: Path, overlay: Path) -> None:
    """Mirrors the toolkit's include dir with symlinks, crt/math_functions.h patched.

    Quoted includes resolve beside the including file, so every header that reaches
    crt/math_functions.h must be seen through the overlay as well.
    """
    (overlay / "crt").mkdir(parents=True)
    for src, dst, patched_here in [
        (include_dir, overlay, "crt"),
        (include_dir / "crt", overlay / "crt", "math_functions.h"),
    ]:
        for entry in src.iterdir():
            if entry.name != patched_here:
                (dst / entry.name).symlink_to(entry)
    original = (include_dir / "crt/math_functions.h").read_text()
    patched = original
    for decl, end in _RSQRT_DECLS.items():
        patched = patched.replace(decl + end, decl + " __THROW" + end)
    if patched.count("__THROW") < original.count("__THROW") + len(_RSQRT_DECLS):
        raise SystemExit(
            "crt/math_functions.h no longer matches the rsqrt patch; "
            "update tools/cuda/private/cuda_toolkit.py"
        )
    (overlay / "crt/math_functions.h").write_text(patched)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--overlay", type=Path, help="where to write the overlay, if nvcc needs one")
    args = p.parse_args(argv)
    warnings: list[str] = []
    root, how = find_root(warnings)
    info = {"root": None, "how": None, "nvcc": None, "version": None, "overlay": None}
    if root is not None:
        nvcc = root / "bin/nvcc"
        info.update(root=str(root), how=how, nvcc=str(nvcc), version=nvcc_version(nvcc))
        if info["version"] in _OVERLAY_VERSIONS and args.overlay:
            write_rsqrt_overlay(root / "include", args.overlay)
            info["overlay"] = str(args.overlay)
    glibc = host_glibc()
    info.update(glibc=glibc, overlay_min_glibc=OVERLAY_MIN_GLIBC, warnings=warnings)
    # An unknown glibc gets the overlay wherever there is one, as in cuda_library.
    newer = glibc is None or _version(glibc) >= _version(OVERLAY_MIN_GLIBC)
    info["host_needs_overlay"] = bool(info["overlay"]) and newer
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
