#!/usr/bin/env bash
# Compiles abi_layout.c, onesided.c, full_api.c and unhandled_failure.c against UCX 1.13's installed headers (Debian:
# libucx-dev) and runs them on rucx's libucp.so.0 from LIBDIR, over shared memory and over tcp on
# loopback (onesided with multi-thread and with single-thread workers; full_api, a forked client
# and its server, also over posix and sysv alone):
#   capi/tests/c/run.sh LIBDIR      (LIBDIR from capi/build.sh, or holding libucp.so.0)
set -euo pipefail
lib=${1:?usage: run.sh LIBDIR}
lib=$(cd "$lib" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f /usr/include/ucp/api/ucp.h ]; then
    echo "FAIL: /usr/include/ucp/api/ucp.h is missing: install libucx-dev (apt-get install libucx-dev)" >&2
    exit 1
fi
[ -f "$lib/libucp.so.0" ] || { echo "FAIL: no libucp.so.0 in $lib" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$lib/libucp.so.0" "$tmp/libucp.so"
for prog in abi_layout onesided full_api unhandled_failure; do
    ${CC:-cc} -O1 -g -Wall -Wextra -Werror -pthread -o "$tmp/$prog" "$here/$prog.c" \
        -I/usr/include -L"$tmp" -lucp -Wl,-rpath,"$lib"
done
echo "== constants of UCX 1.13's headers"
bash "$here/constants.sh" "$lib" /usr/include
if [ -n "${UCX122_INCLUDE:-}" ]; then
    echo "== constants of the headers in $UCX122_INCLUDE"
    bash "$here/constants.sh" "$lib" "$UCX122_INCLUDE"
fi
for tls in "shm,self" "tcp" "posix" "sysv"; do
    echo "== full_api, UCX_TLS=$tls"
    env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$lib" UCX_TLS="$tls" UCX_NET_DEVICES=lo \
        timeout 300 "$tmp/full_api"
done
for tls in "posix" "tcp"; do
    echo "== unhandled_failure, UCX_TLS=$tls"
    # The receiver's abort is expected: its core dump is not wanted.
    (ulimit -c 0; env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$lib" UCX_TLS="$tls" \
        UCX_NET_DEVICES=lo timeout 120 "$tmp/unhandled_failure")
done
for tls in "shm,self" "tcp"; do
    echo "== UCX_TLS=$tls"
    # A short keepalive, so a killed peer is detected quickly even where nothing else reports it.
    env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$lib" UCX_TLS="$tls" UCX_NET_DEVICES=lo \
        RUCX_KEEPALIVE_INTERVAL=200ms RUCX_KEEPALIVE_TIMEOUT=5s \
        timeout 300 "$tmp/abi_layout"
    for mode in multi single; do
        echo "== onesided, workers of thread mode $mode"
        env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$lib" UCX_TLS="$tls" UCX_NET_DEVICES=lo \
            ONESIDED_THREAD_MODE=$mode timeout 300 "$tmp/onesided"
    done
done
