"""Instructions per output of each Arm64 kernel tier, counted under qemu, against the portable loop.

  tools/bazel run //deploy:kernel_insns_aarch64 [-- --shapes 1x576x64,16x576x64]

No Arm machine times the Arm kernels here; until one does, this is their proxy. For each op
(linear_int8, linear_int4, linear_packed), shape (ROWS x K x N) and tier, the cross-built
//ops:kernel_insns runs under qemu-aarch64 on a core that has the tier (-cpu max, capped with
MY_OPS_CPU_ISA), once with one call and once with three, traced one instruction at a time
(-singlestep -d exec,nochain); the difference over two is one call's instructions, start-up
cancelled. The table gives them per output (ROWS x N) and as a share of the scalar tier's.

Instruction counts are not times: a NEON instruction does 4 to 16 times the work of a scalar
one, and a wide core retires several a cycle. They show that a tier's code path runs and how
much work it saves; an Arm machine's timings decide.

Paths come from the environment, set by the Bazel target: AARCH64_KERNEL_INSNS (the program),
AARCH64_LIBTORCH_LIB (a file in the aarch64 LibTorch lib folder), AARCH64_SYSROOT_LD.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.bench.timing_table import print_table
from deploy.qemu import qemu

OPS = ("linear_int8", "linear_int4", "linear_packed")
# Each tier and the kernels it runs, by op: the quantized ops have no plain-NEON kernels (that
# tier runs the portable products); linear_packed has one NEON kernel for every Arm tier.
TIERS = ("scalar", "neon", "neon_dot", "neon_i8mm")
_QUANTIZED = {
    "scalar": "scalar",
    "neon": "scalar",
    "neon_dot": "neon_dot",
    "neon_i8mm": "neon_i8mm",
}
KERNELS = {
    "linear_int8": _QUANTIZED,
    "linear_int4": _QUANTIZED,
    "linear_packed": {"scalar": "scalar", "neon": "neon", "neon_dot": "neon", "neon_i8mm": "neon"},
}
# SmolLM2's hidden size, a decode row and a prefill block of rows; N kept small: the trace
# is one line per instruction.
DEFAULT_SHAPES = "1x576x64,16x576x64"


def _env_file(name: str) -> Path:
    return qemu.env_file("kernel_insns_aarch64", name)


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not ROWSxKxN (positive integers)")
    rows, k, n = map(int, parts)
    if k % 32 or n % 32:
        raise argparse.ArgumentTypeError(f"{text!r}: K and N must be multiples of 32")
    return rows, k, n


def count(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Instructions qemu executed in `argv` (already under qemu), and the program's stdout.
    qemu's trace (one 'Trace' line per instruction) is read as it comes, never stored."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        n, tail, last = 0, b"", b""
        while chunk := proc.stderr.read(1 << 20):
            block = tail + chunk
            n += block.count(b"\nTrace ") + (block.startswith(b"Trace ") and not tail)
            tail = block[-6:]
            last = (last + chunk)[-2000:]
        if proc.wait() != 0:
            text = last.decode(errors="replace")
            sys.exit(
                f"kernel_insns_aarch64: error: {' '.join(argv[-5:])} exited "
                f"{proc.returncode}: {text.strip().splitlines()[-1:] or ''}"
            )
        out.seek(0)
        return n, out.read().decode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kernel_insns_aarch64", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--shapes",
        default=DEFAULT_SHAPES,
        help="comma-separated ROWSxKxN, K and N multiples of 32 (default: %(default)s)",
    )
    p.add_argument(
        "--ops", default=",".join(OPS), help="comma-separated ops (default: %(default)s)"
    )
    args = p.parse_args(argv)
    try:
        shapes = [_shape(s) for s in args.shapes.split(",")]
    except argparse.ArgumentTypeError as e:
        p.error(f"--shapes: {e}")
    ops = args.ops.split(",")
    for op in ops:
        if op not in OPS:
            p.error(f"--ops: unknown op {op!r} (ops: {', '.join(OPS)})")

    program = _env_file("AARCH64_KERNEL_INSNS")
    lib = _env_file("AARCH64_LIBTORCH_LIB")
    lib = lib if lib.is_dir() else lib.parent
    sysroot = qemu.sysroot_of(_env_file("AARCH64_SYSROOT_LD"))
    rows_out = []
    with tempfile.TemporaryDirectory(prefix="kernel-insns-") as tmp:
        prefix = qemu.make_prefix(sysroot, Path(tmp))
        env = {"PATH": "/usr/bin:/bin", "TMPDIR": tmp, "LD_LIBRARY_PATH": qemu.library_path(lib)}
        for op in ops:
            for rows, k, n in shapes:
                per_output = {}
                for tier in TIERS:
                    kernels = KERNELS[op][tier]
                    counts = []
                    for calls in (1, 3):
                        cmd = qemu.command(
                            prefix,
                            [str(program), op, str(rows), str(k), str(n), str(calls)],
                            cpu="max",
                        )
                        cmd[1:1] = ["-singlestep", "-d", "exec,nochain"]
                        insns, stdout = count(cmd, dict(env, MY_OPS_CPU_ISA=tier))
                        if f"tier {kernels}\n" not in stdout:
                            sys.exit(
                                f"kernel_insns_aarch64: error: {op} at {tier} ran "
                                f"{stdout.splitlines()[:1]}, not {kernels}'s kernels"
                            )
                        counts.append(insns)
                    per_output[tier] = (counts[1] - counts[0]) / 2 / (rows * n)
                    print(
                        f"{op} {rows}x{k}x{n} {tier}: {per_output[tier]:.1f} per output",
                        file=sys.stderr,
                        flush=True,
                    )
                for tier in TIERS:
                    rows_out.append(
                        (
                            op,
                            f"{rows}x{k}x{n}",
                            tier,
                            KERNELS[op][tier],
                            per_output[tier],
                            per_output[tier] / per_output["scalar"],
                        )
                    )
    print_table(
        "Instructions per output under qemu-aarch64 -cpu max (one call, start-up cancelled)",
        ("op", "rows x K x N", "tier", "table", "insns/output", "of scalar"),
        [
            (op, shape, tier, table, f"{per:,.1f}", f"{share:.3f}")
            for op, shape, tier, table, per, share in rows_out
        ],
    )
    if "linear_int4" in ops:
        print("linear_int4's neon_i8mm table runs the dot product's int4 kernel (no smmla one).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
