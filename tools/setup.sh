#!/usr/bin/env bash
# Installs the Debian packages in tools/packages.txt, idempotently.
#
#   sudo tools/setup.sh        # or as root: bash tools/setup.sh
#
# Runs apt-get only when something is missing, so it is cheap to call before
# every build (the README's commands and .ci/run do). Checks each installed
# version against the pinned upstream version and fails loudly on a mismatch.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
list="${here}/packages.txt"

installed_version() {
  dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null |
    awk '$3 == "installed" { print $4 }'
}

missing=()
while read -r pkg _; do
  [[ -z "${pkg}" || "${pkg}" == \#* ]] && continue
  [[ -n "$(installed_version "${pkg}")" ]] || missing+=("${pkg}")
done <"${list}"

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}" >&2
  if [[ "$(id -u)" != 0 ]]; then
    echo "setup: run as root (or with sudo) to install packages" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

status=0
while read -r pkg want; do
  [[ -z "${pkg}" || "${pkg}" == \#* ]] && continue
  have="$(installed_version "${pkg}")"
  if [[ "${have}" != "${want}"* ]]; then
    echo "setup: ${pkg} is ${have:-missing}, chunkzero was checked with ${want}*" >&2
    status=1
  fi
done <"${list}"
exit "${status}"
