#!/usr/bin/env bash
# Installs every Debian package that building and testing ember needs.
# Idempotent; run as root on Debian 12. Packages already present are skipped.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libopenblas-dev
  python3 python3-jinja2 curl ca-certificates
  chromium
)
# Node.js drives the SDK tests; a machine may already carry a newer Node with
# its own npm (which conflicts with Debian's npm), so only add it when absent.
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
