#!/usr/bin/env bash
# Checks that every C++ file follows the repository's .clang-format, with the
# pinned clang-format (Debian's clang-format-14). Prints the files that do
# not and exits 1; `bash tools/format_check.sh --fix` formats them instead.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
format=clang-format-14
if ! command -v "${format}" >/dev/null; then
  echo "format: ${format} is missing (tools/setup.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.inc' '*.cu')
if [[ "${1:-}" == --fix ]]; then
  "${format}" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "${format}" --dry-run -Werror "${f}" >/dev/null 2>&1; then
    echo "format: ${f} differs from .clang-format (bash tools/format_check.sh --fix)" >&2
    bad=$((bad + 1))
  fi
done
echo "format: ${#files[@]} files checked, ${bad} not formatted" >&2
((bad == 0))
