#!/usr/bin/env bash
# Usage: nvcc_stable_symbols.sh NM OBJCOPY OBJECT NVCC [NVCC_ARGS...]
#
# Runs nvcc, then renames the symbols of OBJECT that carry nvcc's process id.
# nvcc compiles the host code from a temporary file named
# tmpxft_<pid>_<counter>-<n>_<source>.cudafe1.cpp, and GCC names the object's
# FILE symbol and its static initializer (_GLOBAL__sub_I_tmpxft_...) after
# it, so the object would differ on every build. The pid becomes zeros.
set -euo pipefail

nm="$1"
objcopy="$2"
object="$3"
shift 3

"$@"

renames=()
while IFS= read -r symbol; do
  renames+=(--redefine-sym "${symbol}=$(sed -E 's/tmpxft_[0-9a-f]{8}_/tmpxft_00000000_/' <<<"${symbol}")")
done < <("${nm}" -a "${object}" | grep -oE '[^ ]*tmpxft_[0-9a-f]{8}_[^ ]*' | sort -u)
if ((${#renames[@]} > 0)); then
  "${objcopy}" "${renames[@]}" "${object}"
fi
