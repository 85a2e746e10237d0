#!/bin/sh
# Runs the bundled model on the bundled sample input and checks the result
# against expected_output.pt. Works from any directory. The loader first
# checks model.pt2 and libmy_ops.so against manifest.json; add
# --public-key KEY to require the manifest's signature as well.
#
# usage: run.sh [LIBTORCH_LIB_DIR] [--weights DIR] [extra loader flags, e.g. --bench 100]
#        (LIBTORCH_LIB_DIR defaults to $LIBTORCH_LIB; an empty flag value is exit 2,
#        as in the loader)
#
# --weights DIR runs the bundled model with the weights file in DIR, which
# `export --weights-only --base` wrote for the bundled package (weights.bin,
# weights.json, and weights.sig when signed), on DIR's sample input against
# DIR's expected output: a fleet ships the bundle once, and weights files
# afterwards. The loader checks that the weights file is for this package.
#
# LIBTORCH_LIB_DIR needs libtorch_cpu.so and libc10.so, not libtorch.so: a
# CPU-only LibTorch works, and LibTorch's CUDA build loads none of its CUDA
# libraries for a CPU package but the CUDA runtime and CUPTI, which its
# libtorch_cpu.so NEEDs (pip's layout finds them; see BUNDLE_README.md).
#
# A linux-aarch64 bundle also needs libcudart.so.13 and libcupti.so.13 (the
# aarch64 wheels nvidia-cuda-runtime and nvidia-cuda-cupti), which the torch
# wheel's libtorch_cpu.so loads even for CPU work: in LIBTORCH_LIB_DIR, in
# LIBTORCH_LIB_DIR/../../nvidia/cu13/lib (pip's layout) or on LD_LIBRARY_PATH.
# MY_OPS_EMULATOR runs the loader under an emulator, for example to try an
# aarch64 bundle on an x86-64 machine: MY_OPS_EMULATOR="qemu-aarch64-static -L PREFIX".
set -eu

here=$(cd "$(dirname "$0")" && pwd)

lib=${LIBTORCH_LIB:-}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  lib=$1
  shift
fi
# --weights DIR is run.sh's own; every other argument goes to the loader as it is.
weights=
n=$#
while [ "$n" -gt 0 ]; do
  arg=$1
  shift
  n=$((n - 1))
  case $arg in
    --weights)
      if [ "$n" -eq 0 ]; then
        echo "run.sh: error: --weights needs a folder (a weights export)" >&2
        exit 2
      fi
      weights=$1
      shift
      n=$((n - 1))
      ;;
    --weights=*) weights=${arg#--weights=} ;;
    *)
      set -- "$@" "$arg"
      continue
      ;;
  esac
  # `--weights "$W"` with W unset: never the package's own weights instead.
  if [ -z "$weights" ]; then
    echo "run.sh: error: --weights needs a non-empty value" >&2
    exit 2
  fi
done
input="$here/sample_input.pt"
expect="$here/expected_output.pt"
if [ -n "$weights" ]; then
  # The folder, or its weights.bin.
  [ -d "$weights" ] || weights=$(dirname "$weights")
  for f in weights.bin weights.json sample_input.pt expected_output.pt; do
    if [ ! -f "$weights/$f" ]; then
      echo "run.sh: error: --weights $weights holds no $f (give the folder export --weights-only wrote)" >&2
      exit 2
    fi
  done
  input="$weights/sample_input.pt"
  expect="$weights/expected_output.pt"
  set -- --weights "$weights/weights.bin" "$@"
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

if [ ! -e "$lib/libc10.so" ]; then
  echo "run.sh: error: $lib does not contain libc10.so" >&2
  exit 2
fi

# The CUDA runtime libraries that the aarch64 torch wheel's libtorch_cpu.so
# NEEDs, looked for now: a loader that cannot start says less.
cuda_dir=
# found NAME: NAME is in $lib, $cuda_dir or a LD_LIBRARY_PATH folder.
found() {
  if [ -e "$lib/$1" ] || [ -e "$cuda_dir/$1" ]; then
    return 0
  fi
  old_ifs=$IFS
  IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do
    if [ -n "$d" ] && [ -e "$d/$1" ]; then
      IFS=$old_ifs
      return 0
    fi
  done
  IFS=$old_ifs
  return 1
}
if grep -q '"target": *"linux-aarch64"' "$here/manifest.json" 2>/dev/null; then
  cuda_dir="$lib/../../nvidia/cu13/lib"
  for need in libcudart.so.13 libcupti.so.13; do
    if ! found "$need"; then
      echo "run.sh: error: $need is not in $lib, $cuda_dir or LD_LIBRARY_PATH; the aarch64" \
        "LibTorch needs it (pip wheels nvidia-cuda-runtime==13.0.96, nvidia-cuda-cupti==13.0.85)" >&2
      exit 2
    fi
  done
fi

# The bundle dir is on the path too, so libraries shipped next to the loader
# (libmy_ops.so and anything it needs) resolve without installation.
LD_LIBRARY_PATH="$lib:$here${cuda_dir:+:$cuda_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

out=$(mktemp -d "${TMPDIR:-/tmp}/my_ops_run.XXXXXX")
trap 'rm -rf "$out"' EXIT
trap 'exit 130' INT TERM

status=0
# shellcheck disable=SC2086 # MY_OPS_EMULATOR is a command line
${MY_OPS_EMULATOR:-} "$here/loader" \
  --ops "$here/libmy_ops.so" \
  --package "$here/model.pt2" \
  --manifest "$here/manifest.json" \
  --input "$input" \
  --output "$out/output.pt" \
  --expect "$expect" \
  "$@" || status=$?
if [ "$status" -eq 0 ]; then
  echo "run.sh: OK"
else
  echo "run.sh: FAILED (loader exit status $status, see 'loader --help')" >&2
fi
exit "$status"
