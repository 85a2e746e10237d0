"""Compiles Python sources to unchecked-hash bytecode (third_party/python/bytecode.bzl).

    python3 -I -B compile_bytecode.py CACHE_TAG PAIRS_FILE

PAIRS_FILE lists a source and the .pyc to write for it, one path a line. A source that does
not compile (some wheels ship Python 2 examples) gets an empty .pyc, which Python rejects for
its missing header and then compiles the source, as without bytecode.
"""

from __future__ import annotations

import py_compile
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    cache_tag, pairs_file = argv
    if sys.implementation.cache_tag != cache_tag:
        print(
            f"compile_bytecode: this Python's cache tag is {sys.implementation.cache_tag}, "
            f"not {cache_tag}: the bytecode would be ignored (set py_bytecode's cache_tag)",
            file=sys.stderr,
        )
        return 1
    with open(pairs_file, encoding="utf-8") as f:
        paths = f.read().splitlines()
    for source, target in zip(paths[::2], paths[1::2], strict=True):
        try:
            py_compile.compile(
                source,
                cfile=target,
                dfile=source,
                doraise=True,
                optimize=0,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        except (py_compile.PyCompileError, SyntaxError, ValueError):
            open(target, "wb").close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
