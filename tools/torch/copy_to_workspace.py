"""Copies a generated file (a runfiles path) into the source tree.

Used by `tools/bazel run` targets that refresh committed generated files.
usage: copy_to_workspace SOURCE DEST (DEST relative to the workspace root)
"""

import os
import shutil
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not workspace:
        print("copy_to_workspace: run this with 'tools/bazel run'", file=sys.stderr)
        return 2
    source, dest = argv
    shutil.copyfile(source, os.path.join(workspace, dest))
    print(f"updated {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
