#!/usr/bin/env bash
# Instructions and time per tagged message through libucp, over Debian's UCX 1.13 and over
# rucx's drop-in libucp.so.0, counted the same way for both (not a timed test: it reports).
#   capi/bench/instr-per-msg.sh [LIBDIR]
# msgcost.c sends from one worker to another in one thread (send, receive and both sides'
# progress), so callgrind's instruction count does not depend on timing. Each row runs msgcost
# under callgrind with N1 and N2 messages (3 runs each, medians) and prints (Ir(N2) - Ir(N1)) / (N2 - N1): the
# instructions one message costs on both sides together, start-up excluded. It also prints the
# median wall-clock ns per message over REPEATS plain runs pinned to one core (noisy on a
# shared machine; the instruction count is the figure to compare).
# LIBDIR holds rucx's libraries; without it they are built (release) into target/capi-lib.
# MODES: "expected" (receive posted first), "unexpected" (send first), "idle" (one
# ucp_worker_progress call with nothing to do, the cost of each spin of a waiting rank), "pml"
# ("expected" as Open MPI's pml ucx does it: caller-supplied request memory, completion found by
# ucp_request_test / ucp_request_check_status).
# Environment: TLS_LIST ("posix tcp"), SIZES ("8 4096"), MODES ("expected unexpected idle pml"),
# N1 (2000), N2 (4000), TIME_ITERS (200000), REPEATS (5), CORE (1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lib=${1:-}
if [ -z "$lib" ]; then
    lib=${CARGO_TARGET_DIR:-$root/target}/capi-lib
    "$root/capi/build.sh" "$lib" >&2
fi
lib=$(cd "$lib" && pwd)
[ -f "$lib/libucp.so.0" ] || { echo "no libucp.so.0 in $lib" >&2; exit 1; }
[ -f /usr/include/ucp/api/ucp.h ] || { echo "install libucx-dev (UCX 1.13 headers)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "install valgrind" >&2; exit 1; }

TLS_LIST=${TLS_LIST:-"posix tcp"}
SIZES=${SIZES:-"8 4096"}
MODES=${MODES:-"expected unexpected idle pml"}
N1=${N1:-2000}
N2=${N2:-4000}
TIME_ITERS=${TIME_ITERS:-200000}
REPEATS=${REPEATS:-5}
CORE=${CORE:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/msgcost
${CC:-cc} -O2 -Wall -Wextra -Werror -o "$bin" "$here/msgcost.c" -lucp -lucs

# run_with IMPL ARGS...: runs msgcost with UCX's library (IMPL=ucx) or rucx's (IMPL=rucx), and
# fails if the other library got loaded.
run_with() {
    local impl=$1 out
    shift
    if [ "$impl" = rucx ]; then
        out=$(LD_LIBRARY_PATH=$lib "$@")
    else
        out=$(env -u LD_LIBRARY_PATH "$@")
    fi
    case "$out" in
    *"libucp $lib/"*) [ "$impl" = rucx ] || { echo "UCX run loaded $lib" >&2; return 1; } ;;
    *) [ "$impl" = ucx ] || { echo "rucx run did not load $lib: $out" >&2; return 1; } ;;
    esac
    printf '%s\n' "$out"
}

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# instructions IMPL TLS SIZE MODE N: callgrind's instruction count in the main thread for N
# messages (UCX's progress thread is counted apart and left out; --fair-sched, or valgrind
# may starve that thread while the main one spins on its lock), the median of 3 runs.
instructions() {
    local impl=$1 tls=$2 size=$3 mode=$4 n=$5 i
    for i in 1 2 3; do
        rm -f "$work"/cg.out*
        UCX_TLS=$tls run_with "$impl" valgrind --tool=callgrind --separate-threads=yes --fair-sched=yes \
            --callgrind-out-file="$work/cg.out" --log-file="$work/cg.log" \
            "$bin" "$size" "$n" "$mode" >/dev/null
        sed -n 's/^totals: \([0-9]*\).*/\1/p' "$work/cg.out-01"
    done | median
}

printf '%-6s %-6s %-11s %12s %12s %7s %10s %10s %7s\n' tls size mode "ucx_instr" "rucx_instr" ratio \
    "ucx_ns" "rucx_ns" ratio
for tls in $TLS_LIST; do
    for size in $SIZES; do
        for mode in $MODES; do
            declare -A ins ns
            for impl in ucx rucx; do
                a=$(instructions "$impl" "$tls" "$size" "$mode" "$N1")
                b=$(instructions "$impl" "$tls" "$size" "$mode" "$N2")
                ins[$impl]=$(((b - a) / (N2 - N1)))
            done
            : >"$work/ns.ucx"
            : >"$work/ns.rucx"
            for _ in $(seq 1 "$REPEATS"); do
                for impl in ucx rucx; do
                    UCX_TLS=$tls run_with "$impl" taskset -c "$CORE" "$bin" "$size" "$TIME_ITERS" \
                        "$mode" | sed -n 's/^ns_per_msg [0-9]* //p' >>"$work/ns.$impl"
                done
            done
            ns[ucx]=$(median <"$work/ns.ucx")
            ns[rucx]=$(median <"$work/ns.rucx")
            printf '%-6s %-6s %-11s %12d %12d %7.2f %10.1f %10.1f %7.2f\n' "$tls" "$size" "$mode" \
                "${ins[ucx]}" "${ins[rucx]}" "$(echo "${ins[rucx]} / ${ins[ucx]}" | bc -l)" \
                "${ns[ucx]}" "${ns[rucx]}" "$(echo "${ns[rucx]} / ${ns[ucx]}" | bc -l)"
        done
    done
done
