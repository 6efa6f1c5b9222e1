#!/usr/bin/env bash
# Installs the npm packages of tests/node/anthropic/package.json into a
# cache directory (never into the repository) and prints the directory that
# holds node_modules. The install is keyed by the package.json contents, so
# a changed pin installs afresh.
#   usage: setup.sh [CACHE_ROOT]
# Exit 77 (skip) when the registry cannot be reached and nothing is cached.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${1:-${EMBER_TEST_CACHE:-$HOME/.cache/ember-test}}
key=$(sha256sum "$HERE/package.json" | cut -c1-16)
DIR="$ROOT/node-anthropic-$key"
if [ -f "$DIR/.installed" ]; then echo "$DIR"; exit 0; fi
command -v npm >/dev/null || { echo "setup: npm is not installed" >&2; exit 77; }
rm -rf "$DIR.part" && mkdir -p "$DIR.part"
cp "$HERE/package.json" "$DIR.part/"
if ! (cd "$DIR.part" && npm install --silent --no-audit --no-fund --no-package-lock >/dev/null 2>&1); then
  echo "setup: cannot install the npm packages (registry unreachable?)" >&2
  rm -rf "$DIR.part"
  exit 77
fi
touch "$DIR.part/.installed"
rm -rf "$DIR" && mv "$DIR.part" "$DIR"
echo "$DIR"
