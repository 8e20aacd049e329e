#!/usr/bin/env bash
# Fetches UCX 1.22's release build (bin/ucx_perftest, lib/libucp.so.0 ...) from PyPI's
# libucx-cu12 wheel into bench/cache/ucx122 (gitignored) and prints that folder. The wheel's
# libraries are configured without logging, assertions or parameter checks; its CUDA parts
# load only where CUDA exists, so the host-memory transports work on any x86-64 Linux.
#   bench/fetch-ucx122.sh            # prints the folder holding bin/ and lib/
# Environment: UCX122_WHEEL_VERSION (default 1.22.*: the newest 1.22 release on PyPI).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=$root/bench/cache/ucx122
if [ -x "$cache/libucx/bin/ucx_perftest" ] && [ -e "$cache/libucx/lib/libucp.so.0" ]; then
    echo "$cache/libucx"
    exit 0
fi
pip=$(command -v pip3 || command -v pip || true)
[ -n "$pip" ] || { echo "fetch-ucx122.sh: needs pip (apt-get install python3-pip)" >&2; exit 1; }
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version=${UCX122_WHEEL_VERSION:-1.22.*}
"$pip" download --no-deps --only-binary=:all: --dest "$work" "libucx-cu12==$version" >&2 ||
    { echo "fetch-ucx122.sh: pip download libucx-cu12==$version failed" >&2; exit 1; }
wheel=$(ls "$work"/libucx_cu12-*.whl | head -1)
python3 -m zipfile -e "$wheel" "$cache" >&2
chmod +x "$cache"/libucx/bin/* 2>/dev/null || true
[ -e "$cache/libucx/lib/libucp.so.0" ] ||
    { echo "fetch-ucx122.sh: $wheel has no libucx/lib/libucp.so.0" >&2; exit 1; }
echo "$cache/libucx"
