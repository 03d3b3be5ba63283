#!/usr/bin/env bash
# Installs the system tools the test suite needs that Go cannot build:
# shellcheck (checks every rendered startup script), from Debian's packages.
set -euo pipefail
if command -v shellcheck >/dev/null 2>&1; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "shellcheck is missing: install it (Debian/Ubuntu: apt-get install shellcheck)" >&2
    exit 1
  fi
fi
echo "installing shellcheck (first run only)" >&2
${SUDO:-} apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive ${SUDO:-} apt-get install -y -qq shellcheck >/dev/null
