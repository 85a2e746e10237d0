"""Rewrites tools/gpu_check/build_inputs.json from the build: after adding or removing a
source of the op library or the loader, or changing tools/torch/kernel_flags.bzl.

    tools/bazel run //tools/gpu_check:update_build_inputs
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

COMMITTED = "tools/gpu_check/build_inputs.json"


def main() -> int:
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not workspace:
        print("update_build_inputs: run it with tools/bazel run", file=sys.stderr)
        return 2
    generated = Path(sys.argv[1]).read_bytes()
    target = Path(workspace) / COMMITTED
    if target.is_file() and target.read_bytes() == generated:
        print(f"{COMMITTED} is up to date")
        return 0
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(generated)
    tmp.replace(target)
    print(f"wrote {COMMITTED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
