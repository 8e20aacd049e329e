#!/usr/bin/env bash
# Instructions per fetch-add through libucp, over Debian's UCX 1.13 and over rucx's drop-in
# libucp.so.0, counted the same way for both (a benchmark that reports, not a timed test).
#   capi/bench/amo-instr.sh LIBDIR
# amocost.c does what OpenSHMEM's shmem_long_atomic_fetch_add does over UCX (ucp_atomic_op_nbx,
# then ucp_request_check_status + ucp_worker_progress until done, ucp_request_free), initiator
# and target being two workers progressed in turn by one thread, so callgrind's count does not
# depend on timing. Each row runs amocost under callgrind with N1 and N2 operations and prints
# (Ir(N2) - Ir(N1)) / (N2 - N1): the instructions of one fetch-add on both sides together,
# start-up excluded. "static" is a word of the program's private data (no shared-memory transport
# reaches it: both libraries emulate the atomic with a request to the target's worker and a
# reply), "heap" a word libucp allocated (a shared segment: one CPU atomic); "idle" counts
# one ucp_worker_progress on each worker with nothing to do (a static fetch-add here makes two
# such pairs of calls: one finds the request or reply, the other nothing).
# Environment: TLS (UCX_TLS, default shm), MODES ("static heap idle"), N1 (2000), N2 (4000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$(cd "${1:?usage: amo-instr.sh LIBDIR}" && pwd)
[ -f "$lib/libucp.so.0" ] || { echo "no libucp.so.0 in $lib" >&2; exit 1; }
[ -f /usr/include/ucp/api/ucp.h ] || { echo "install libucx-dev (UCX 1.13 headers)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "install valgrind" >&2; exit 1; }
tls=${TLS:-shm}
MODES=${MODES:-"static heap idle"}
N1=${N1:-2000}
N2=${N2:-4000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/amocost
${CC:-cc} -O2 -Wall -Wextra -Werror -o "$bin" "$here/amocost.c" -lucp -lucs

# count IMPL MODE N: instructions callgrind collects for one run (IMPL ucx|rucx); fails if the
# run loaded the other library.
count() {
    local impl=$1 mode=$2 n=$3 out=$work/cg.out log=$work/cg.log
    local -a env=(env -u LD_LIBRARY_PATH UCX_TLS="$tls")
    [ "$impl" = ucx ] || env=(env LD_LIBRARY_PATH="$lib" UCX_TLS="$tls")
    "${env[@]}" valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "$n" "$mode" \
        >"$work/stdout" 2>"$log"
    case "$(cat "$work/stdout")" in
    *"libucp $lib/"*) [ "$impl" = rucx ] || { echo "UCX run loaded $lib" >&2; return 1; } ;;
    *) [ "$impl" = ucx ] || { echo "rucx run did not load $lib" >&2; return 1; } ;;
    esac
    awk '/Collected :/ { print $NF }' "$log"
}

printf '%-6s %-7s %10s %10s %7s\n' tls mode ucx_instr rucx_instr ratio
for mode in $MODES; do
    declare -A per=()
    for impl in ucx rucx; do
        a=$(count "$impl" "$mode" "$N1")
        b=$(count "$impl" "$mode" "$N2")
        per[$impl]=$(((b - a) / (N2 - N1)))
    done
    awk -v t="$tls" -v m="$mode" -v u="${per[ucx]}" -v r="${per[rucx]}" \
        'BEGIN { printf "%-6s %-7s %10d %10d %7.2f\n", t, m, u, r, r / u }'
done
