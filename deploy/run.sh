#!/bin/sh
# Runs the bundled model on the bundled sample input and checks the result
# against expected_output.pt. Works from any directory. The loader first
# checks model.pt2 and libmy_ops.so against manifest.json; add
# --public-key KEY to require the manifest's signature as well.
#
# usage: run.sh [LIBTORCH_LIB_DIR] [extra loader flags, e.g. --bench 100]
#        (LIBTORCH_LIB_DIR defaults to $LIBTORCH_LIB)
set -eu

here=$(cd "$(dirname "$0")" && pwd)

lib=${LIBTORCH_LIB:-}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  lib=$1
  shift
fi
if [ -z "$lib" ]; then
  echo "run.sh: error: give the LibTorch lib directory as the first argument or in LIBTORCH_LIB" >&2
  exit 2
fi
if [ ! -e "$lib/libtorch_cpu.so" ]; then
  echo "run.sh: error: $lib does not contain libtorch_cpu.so" >&2
  exit 2
fi
# The smoke test vouches for the bundle, so it never runs it unverified.
for arg in "$@"; do
  case $arg in
    --no-verify | --manifest | --manifest=*)
      echo "run.sh: error: $arg is not allowed: run.sh always checks the bundled manifest.json" >&2
      exit 2
      ;;
  esac
done

# The bundle dir is on the path too, so libraries shipped next to the loader
# (libmy_ops.so and anything it needs) resolve without installation.
LD_LIBRARY_PATH="$lib:$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

out=$(mktemp -d "${TMPDIR:-/tmp}/my_ops_run.XXXXXX")
trap 'rm -rf "$out"' EXIT
trap 'exit 130' INT TERM

status=0
"$here/loader" \
  --ops "$here/libmy_ops.so" \
  --package "$here/model.pt2" \
  --manifest "$here/manifest.json" \
  --input "$here/sample_input.pt" \
  --output "$out/output.pt" \
  --expect "$here/expected_output.pt" \
  "$@" || status=$?
if [ "$status" -eq 0 ]; then
  echo "run.sh: OK"
else
  echo "run.sh: FAILED (loader exit status $status, see 'loader --help')" >&2
fi
exit "$status"
