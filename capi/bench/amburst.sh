#!/usr/bin/env bash
# Instructions per small active message for a receiver behind its sender (amburst.c: bursts of
# BURST sends, then the receiver drains them), for UCX 1.22 and rucx's libucp.so.0, counted with
# callgrind as (Ir(N2) - Ir(N1)) / ((N2 - N1) * BURST) over the whole thread, and per call of
# ucp_am_send_nbx and ucp_worker_progress (inclusive, --toggle-collect).
#   capi/bench/amburst.sh RUCX_LIBDIR
# Environment: SIZE (8), BURST (32), N1 (50), N2 (250) bursts, TLS (posix), UCX122 (UCX 1.22's
# folder with lib/; without it only rucx is counted).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$(cd "${1:?usage: amburst.sh RUCX_LIBDIR}" && pwd)
SIZE=${SIZE:-8}
BURST=${BURST:-32}
N1=${N1:-50}
N2=${N2:-250}
TLS=${TLS:-posix}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/amburst
${CC:-cc} -O2 -g -Wall -Wextra -Werror -o "$bin" "$here/amburst.c" -lucp -lucs

# ir LIBDIR N [VALGRIND ARGS...]: the main thread's instruction count.
ir() {
    local l=$1 n=$2
    shift 2
    rm -f "$work"/cg.raw*
    UCX_TLS=$TLS LD_LIBRARY_PATH=$l valgrind --tool=callgrind --separate-threads=yes \
        --callgrind-out-file="$work/cg.raw" --log-file="$work/cg.log" "$@" \
        "$bin" "$SIZE" "$n" "$BURST" >"$work/run.out"
    grep -q "libucp $l" "$work/run.out" || { echo "wrong libucp: $(head -1 "$work/run.out")" >&2; return 1; }
    grep "^summary:" "$work/cg.raw-01" | awk '{print $2}'
}

per_msg() {
    local l=$1
    shift
    local a b
    a=$(ir "$l" "$N1" "$@")
    b=$(ir "$l" "$N2" "$@")
    echo "scale=1; ($b - $a) / (($N2 - $N1) * $BURST)" | bc
}

printf "%-24s %8s %8s\n" "per 8 B message" "u122" "rucx"
for what in total ucp_am_send_nbx ucp_worker_progress; do
    row=()
    for l in "${UCX122:+$UCX122/lib}" "$lib"; do
        if [ -z "$l" ]; then
            row+=("-")
        elif [ "$what" = total ]; then
            row+=("$(per_msg "$l")")
        else
            row+=("$(per_msg "$l" --collect-atstart=no --toggle-collect="$what")")
        fi
    done
    printf "%-24s %8s %8s\n" "$what" "${row[@]}"
done
UCX_TLS=$TLS LD_LIBRARY_PATH=$lib "$bin" "$SIZE" 1000 "$BURST" | tail -1
