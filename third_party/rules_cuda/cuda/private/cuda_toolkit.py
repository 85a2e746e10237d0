"""Finds the CUDA toolkit on this machine and writes the rsqrt header overlay where it needs one.

usage: cuda_toolkit.py [--overlay DIR] [--site-packages DIR ...] [--default-root DIR]

Search order: $CUDA_PATH, $CUDA_HOME, nvcc on PATH, --default-root (/usr/local/cuda), then
the nvidia-cuda-nvcc wheel (nvidia/cu<N>/bin/nvcc, or nvidia/cuda_nvcc/bin/nvcc as older
wheels lay it out) in each --site-packages DIR, if any are given.

Prints one JSON object: root (null without a toolkit), how it was found, nvcc, version, the
host's glibc, overlay (DIR, or null when this nvcc needs none), overlay_min_glibc,
host_needs_overlay (whether a compile against the host's glibc needs it), warnings.

@cuda's repository rule (repositories.bzl) runs it with the host's python3, and
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
from collections.abc import Mapping, Sequence
from pathlib import Path

# glibc 2.42 declares rsqrt/rsqrtf noexcept in <math.h>; CUDA 13.0's crt/math_functions.h
# declares them without, and nvcc rejects the pair. Which glibc nvcc's host compiler sees
# depends on the C++ toolchain (a sysroot's or the host's), so the overlay is written for
# every CUDA 13.0 and each build uses it only where that glibc is at least this.
OVERLAY_MIN_GLIBC = "2.42"
DEFAULT_ROOT = Path("/usr/local/cuda")
_OVERLAY_VERSIONS = ("13.0",)
_RSQRT_DECLS = {
    "double rsqrt(double a)": ");",
    "float rsqrtf(float a)": ");",
    "double                 rsqrt(double x)": ";",
    "float                  rsqrtf(float x)": ";",
}


def _nvcc_top(nvcc: str) -> Path | None:
    """The toolkit whose bin/ holds nvcc: the folder above it (as named, then with symlinks
    resolved) when it has include/cuda_runtime.h, else where nvcc's dry run says it lives
    (nvcc on PATH may be a wrapper script)."""
    for bin_nvcc in (Path(os.path.abspath(nvcc)), Path(nvcc).resolve()):
        if (bin_nvcc.parent.parent / "include/cuda_runtime.h").exists():
            return bin_nvcc.parent.parent
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


def _wheel_nvcc(site_packages: Path) -> Path | None:
    """The nvidia-cuda-nvcc wheel's toolkit in site_packages: nvidia/cu<N> (the newest N),
    else nvidia/cuda_nvcc."""
    tops = sorted(
        (d for d in site_packages.glob("nvidia/cu*") if re.fullmatch(r"cu\d+", d.name)),
        key=lambda d: -int(d.name[2:]),
    )
    tops.append(site_packages / "nvidia/cuda_nvcc")
    return next((top for top in tops if (top / "bin/nvcc").is_file()), None)


def find_root(
    warnings: list[str],
    env: Mapping[str, str] = os.environ,
    default_root: Path = DEFAULT_ROOT,
    site_packages: Sequence[Path] = (),
) -> tuple[Path | None, str | None]:
    """The toolkit: $CUDA_PATH, $CUDA_HOME, nvcc on PATH, default_root, then the
    nvidia-cuda-nvcc wheel in site_packages."""
    for var in ("CUDA_PATH", "CUDA_HOME"):
        value = env.get(var)
        if value and (Path(value) / "bin/nvcc").exists():
            return Path(value), "$" + var
        if value:
            warnings.append(f"${var}={value} has no bin/nvcc; looking elsewhere")
    nvcc = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    top = _nvcc_top(nvcc) if nvcc else None
    if top:
        return top, "nvcc on PATH"
    if (default_root / "bin/nvcc").exists():
        return default_root, str(default_root)
    for sp in site_packages:
        top = _wheel_nvcc(sp)
        if top:
            return top, f"nvidia-cuda-nvcc wheel in {sp}"
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
            "update third_party/rules_cuda/cuda/private/cuda_toolkit.py"
        )
    (overlay / "crt/math_functions.h").write_text(patched)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--overlay", type=Path, help="where to write the overlay, if nvcc needs one")
    p.add_argument(
        "--site-packages",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="look for the nvidia-cuda-nvcc wheel here, last (repeatable)",
    )
    p.add_argument(
        "--default-root", type=Path, default=DEFAULT_ROOT, help=f"default: {DEFAULT_ROOT}"
    )
    p.add_argument(
        "--toolkit-path",
        type=Path,
        help="this toolkit only, no search (the toolchain extension's toolkit_path)",
    )
    args = p.parse_args(argv)
    warnings: list[str] = []
    if args.toolkit_path:
        found = (args.toolkit_path / "bin/nvcc").exists()
        if not found:
            warnings.append(f"toolkit_path {args.toolkit_path} has no bin/nvcc")
        root, how = (args.toolkit_path, "toolkit_path") if found else (None, None)
    else:
        root, how = find_root(
            warnings, default_root=args.default_root, site_packages=args.site_packages
        )
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
