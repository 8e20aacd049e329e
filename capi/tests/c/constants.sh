#!/usr/bin/env bash
# Checks every constant of UCX's public ucp/ucs headers in INCLUDE_DIR against rucx's values
# (generated from the headers now, by constants.py; see there):
#   capi/tests/c/constants.sh LIBDIR INCLUDE_DIR
set -euo pipefail
lib=$(cd "${1:?usage: constants.sh LIBDIR INCLUDE_DIR}" && pwd)
inc=${2:?usage: constants.sh LIBDIR INCLUDE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/constants.py" "$inc" "$tmp/constants.c"
ln -s "$lib/libucp.so.0" "$tmp/libucp.so"
${CC:-cc} -O0 -Wall -Werror -o "$tmp/constants" "$tmp/constants.c" -I"$inc" -L"$tmp" -lucp \
    -Wl,-rpath,"$lib"
LD_LIBRARY_PATH="$lib" "$tmp/constants"
