#!/usr/bin/env bash
# Usage: glibc_floor_test.sh MAX_GLIBC REFERENCE_LIB FILE...
# Fails when a FILE (ELF, or the shared objects in a .pt2 package) needs a GLIBC_ version newer than
# max(MAX_GLIBC, the newest one REFERENCE_LIB needs). See glibc_floor_test.bzl.
set -euo pipefail

max_glibc="$1"
reference="$2"
shift 2

command -v objdump >/dev/null || { echo "objdump (binutils) is not on PATH" >&2; exit 2; }

# The newest GLIBC_x.y a file needs: its dynamic symbols' versions and its
# version references (which also cover versions no symbol names).
newest_glibc() {
  { objdump -T "$1"; objdump -p "$1"; } 2>/dev/null |
    grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sed 's/^GLIBC_//' | sort -V | tail -n 1
}

# version_gt A B: A > B in version order.
version_gt() {
  [[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" == "$1" ]]
}

reference_glibc="$(newest_glibc "${reference}")"
[[ -n "${reference_glibc}" ]] || { echo "no GLIBC_ versions found in ${reference}" >&2; exit 2; }
floor="${max_glibc}"
if version_gt "${reference_glibc}" "${floor}"; then
  floor="${reference_glibc}"
fi
echo "glibc floor: ${floor} (edge machines: ${max_glibc}; $(basename "${reference}"): ${reference_glibc})"

is_elf() { [[ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" == '177ELF' ]]; }

# An AOTInductor package (.pt2, a zip) ships compiled shared objects too:
# check those instead of the archive.
files=()
declare -A shown_as
unpacked="${TEST_TMPDIR:-$(mktemp -d)}/unpacked"
for file in "$@"; do
  if [[ "${file}" == *.pt2 ]]; then
    dir="${unpacked}/$(basename "${file}")"
    python3 -m zipfile -e "${file}" "${dir}" ||
      { echo "FAIL  ${file}: not a readable zip archive"; exit 1; }
    found="$(find "${dir}" -name '*.so' -type f | sort)"
    [[ -n "${found}" ]] || { echo "FAIL  ${file}: no shared object inside"; exit 1; }
    while IFS= read -r so; do
      files+=("${so}")
      shown_as["${so}"]="${file}:${so#"${dir}/"}"
    done <<<"${found}"
  else
    files+=("${file}")
  fi
done

checked=0
failed=0
for file in "${files[@]}"; do
  # $(rootpaths) of a cc_test or of a package names more than binaries.
  is_elf "${file}" || continue
  name="${shown_as["${file}"]:-${file}}"
  need="$(newest_glibc "${file}")"
  checked=$((checked + 1))
  if [[ -z "${need}" ]]; then
    echo "ok    ${name}: needs no GLIBC_ version"
  elif version_gt "${need}" "${floor}"; then
    echo "FAIL  ${name}: needs GLIBC_${need} > ${floor}:"
    { objdump -T "${file}"; objdump -p "${file}"; } 2>/dev/null |
      grep -E "GLIBC_[0-9.]+" | awk -v floor="${floor}" '
        { if (match($0, /GLIBC_[0-9.]+/)) { v = substr($0, RSTART + 6, RLENGTH - 6); print v "\t" $0 } }' |
      while IFS=$'\t' read -r v line; do
        if version_gt "${v}" "${floor}"; then echo "        ${line}"; fi
      done | sort -u
    failed=$((failed + 1))
  else
    echo "ok    ${name}: needs GLIBC_${need}"
  fi
done
[[ "${checked}" -gt 0 ]] || { echo "no ELF files among: $*" >&2; exit 2; }
if [[ "${failed}" -gt 0 ]]; then
  echo "${failed} of ${checked} binaries need a glibc newer than ${floor}"
  exit 1
fi
echo "all ${checked} binaries run on glibc ${floor}"
