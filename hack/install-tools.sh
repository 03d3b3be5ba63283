#!/usr/bin/env bash
# Installs the system tools the test suite needs that Go cannot build, from
# Debian's packages: shellcheck (checks every rendered startup script) and
# curl (the bootstrap stub's fetch, run against a TLS server by the tests).
set -euo pipefail
missing=()
for tool in shellcheck curl; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "${missing[*]} missing: install them (Debian/Ubuntu: apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
echo "installing ${missing[*]} (first run only)" >&2
${SUDO:-} apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive ${SUDO:-} apt-get install -y -qq "${missing[@]}" >/dev/null
