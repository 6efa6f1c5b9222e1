#!/usr/bin/env bash
# `make install PREFIX=...` installs the binary, libember (static and
# shared), the header, a relocatable pkg-config file and the demo model; the
# example program builds against the installed library and runs.
set -eu
: "${EMBER_BUILD:?}" "${EMBER_SRC:?}"
# A sanitizer build of libember cannot be linked by a plain cc.
[ -n "${EMBER_SANITIZED:-}" ] && exit 77
P=$(mktemp -d)
trap 'rm -rf "$P"' EXIT
cmake --install "$EMBER_BUILD" --prefix "$P" >/dev/null
for f in bin/ember include/ember/ember.h lib/libember.a lib/libember.so lib/pkgconfig/ember.pc \
         share/ember/models/demo/config.json; do
  [ -e "$P/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
cc "$EMBER_SRC/examples/generate.c" $(pkg-config --cflags --libs ember) -o "$P/generate"
out=$(LD_LIBRARY_PATH="$P/lib" "$P/generate" "$P/share/ember/models/demo" 1,2,3)
[ -n "$out" ] || { echo "FAIL: the example printed nothing"; exit 1; }
# the installed binary finds its demo model
"$P/bin/ember" generate "Hello" --max-tokens 4 >/dev/null
echo "install ok"
