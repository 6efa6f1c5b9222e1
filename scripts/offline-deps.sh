#!/usr/bin/env bash
# offline-deps.sh — build ember on a host that has a compiler (and CUDA) but
# no package access, such as an isolated GPU server.
#
#   scripts/offline-deps.sh fetch DIR      on a Debian 12 host with network:
#                                          downloads the library packages
#                                          ember links against into DIR
#   source <(scripts/offline-deps.sh env DIR SYSROOT)
#                                          on the offline host: unpacks them
#                                          under SYSROOT and prints the
#                                          exports that let CMake find them
#
# The packages are unpacked, never installed, so nothing on the offline host
# changes outside SYSROOT. Binaries built this way need LD_LIBRARY_PATH (set
# by the printed exports) to find the unpacked libraries at run time.
set -euo pipefail

PACKAGES=(libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
          libutf8proc-dev libutf8proc2 libmicrohttpd-dev libmicrohttpd12 pkgconf pkgconf-bin libpkgconf3
          libgnutls30 libnettle8 libhogweed6 libgmp10 libidn2-0 libunistring2 libtasn1-6 libp11-kit0 libffi8)

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

fetch() {
  local dir=$1
  mkdir -p "$dir"
  (cd "$dir" && apt-get download "${PACKAGES[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  ls "$dir"/*.deb >/dev/null
}

env_for() {
  local dir=$1 root=$2 f
  mkdir -p "$root"
  for f in "$dir"/*.deb; do dpkg -x "$f" "$root"; done
  local lib=$root/usr/lib/x86_64-linux-gnu
  # libmicrohttpd.pc names gnutls as a private requirement; the shared
  # library already records it, so an empty module satisfies pkg-config.
  if [ ! -f "$lib/pkgconfig/gnutls.pc" ]; then
    printf 'Name: gnutls\nDescription: placeholder for static requirement lists\nVersion: 3.7.9\n' \
      >"$lib/pkgconfig/gnutls.pc"
  fi
  local pc=pkg-config
  command -v pkg-config >/dev/null || pc=$root/usr/bin/pkgconf
  echo "export PKG_CONFIG='$pc'"
  echo "export PKG_CONFIG_EXECUTABLE='$pc'"
  echo "export PKG_CONFIG_PATH='$lib/pkgconfig'"
  echo "export PKG_CONFIG_SYSROOT_DIR='$root'"
  echo "export PKG_CONFIG_LIBDIR='$lib/pkgconfig'"
  echo "export CMAKE_PREFIX_PATH='$root/usr'"
  echo "export LD_LIBRARY_PATH='$lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
}

case "${1:-}" in
  fetch) [ $# -eq 2 ] || usage; fetch "$2" ;;
  env) [ $# -eq 3 ] || usage; env_for "$2" "$3" ;;
  *) usage ;;
esac
