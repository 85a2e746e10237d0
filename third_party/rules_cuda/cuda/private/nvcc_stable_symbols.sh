#!/usr/bin/env bash
# Usage: nvcc_stable_symbols.sh NM OBJCOPY OBJECT NVCC [NVCC_ARGS...] -c SOURCE [NVCC_ARGS...]
#
# Runs nvcc so that OBJECT depends only on the action's inputs, not on where
# they lie or which process compiled them:
#
# - nvcc names anonymous namespaces _GLOBAL__N__<hash>_<n>_<file>_<hash>, and
#   the first hash follows the real path of SOURCE: a sandbox links the source
#   into the checkout, a remote worker stages a copy in a folder of its own, so
#   the same source gave different objects in different checkouts and on
#   workers. nvcc compiles a copy of SOURCE at a path that only its contents
#   decide, /tmp/nvcc_stable_src/<sha256>/<SOURCE>; -ffile-prefix-map gives
#   the host code's __FILE__ its original relative path back. Copies of the
#   same contents are the same file, so concurrent compiles may share one; they
#   are small and left in /tmp.
# - nvcc compiles the host code from a temporary file named
#   tmpxft_<pid>_<counter>-<n>_<source>.cudafe1.cpp, and GCC names the object's
#   FILE symbol and its static initializer (_GLOBAL__sub_I_tmpxft_...) after
#   it. The pid becomes zeros.
set -euo pipefail

nm="$1"
objcopy="$2"
object="$3"
shift 3

args=("$@")
source_index=-1
for i in "${!args[@]}"; do
  if [[ "${args[i]}" == -c ]]; then
    source_index=$((i + 1))
  fi
done
if ((source_index < 0 || source_index >= ${#args[@]})); then
  echo "nvcc_stable_symbols.sh: no -c SOURCE among nvcc's arguments" >&2
  exit 2
fi
source="${args[source_index]}"
digest="$(sha256sum "${source}" | cut -d' ' -f1)"
stable_root="/tmp/nvcc_stable_src/${digest}"
stable_source="${stable_root}/${source}"
if [[ ! -f "${stable_source}" ]]; then
  mkdir -p "$(dirname "${stable_source}")"
  copy="$(mktemp "${stable_source}.XXXXXX")"
  cp "${source}" "${copy}"
  mv -f "${copy}" "${stable_source}"
fi
args[source_index]="${stable_source}"

"${args[@]:0:source_index-1}" -Xcompiler "-ffile-prefix-map=${stable_root}/=" "${args[@]:source_index-1}"

renames=()
while IFS= read -r symbol; do
  renames+=(--redefine-sym "${symbol}=$(sed -E 's/tmpxft_[0-9a-f]{8}_/tmpxft_00000000_/' <<<"${symbol}")")
done < <("${nm}" -a "${object}" | grep -oE '[^ ]*tmpxft_[0-9a-f]{8}_[^ ]*' | sort -u)
if ((${#renames[@]} > 0)); then
  "${objcopy}" "${renames[@]}" "${object}"
fi
