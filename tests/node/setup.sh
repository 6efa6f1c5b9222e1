#!/usr/bin/env bash
# Installs the npm packages of tests/node/package.json into a cache
# directory keyed by the hash of package.json, and prints that directory
# (its node_modules holds the packages). The cache is
# $EMBER_TEST_CACHE/node-<hash>, default ~/.cache/ember-test/node-<hash>;
# an install that completed is never repeated. Exit 77 when the registry
# cannot be reached and nothing is cached, 1 on any other failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "setup: node/npm not installed" >&2; exit 77; }
hash=$(sha256sum "$here/package.json" | cut -c1-16)
root="${EMBER_TEST_CACHE:-$HOME/.cache/ember-test}"
dir="$root/node-$hash"
if [ -f "$dir/.complete" ] && [ -d "$dir/node_modules" ]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$root"
# Install into a fresh temporary directory and rename it into place, so a
# concurrent or interrupted install never leaves a half-filled cache.
tmp=$(mktemp -d "$root/.node-$hash.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$tmp/package.json"
if ! (cd "$tmp" && npm install --no-audit --no-fund --silent --no-package-lock >"$tmp/npm.log" 2>&1); then
  if grep -qiE 'ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|ENETUNREACH|network' "$tmp/npm.log"; then
    echo "setup: the npm registry is unreachable and nothing is cached in $dir" >&2
    exit 77
  fi
  cat "$tmp/npm.log" >&2
  exit 1
fi
touch "$tmp/.complete"
if ! mv -T "$tmp" "$dir" 2>/dev/null; then
  # Another run finished first; its copy is as good as ours.
  [ -f "$dir/.complete" ] || { echo "setup: cannot create $dir" >&2; exit 1; }
fi
trap - EXIT
rm -rf "$tmp"
echo "$dir"
