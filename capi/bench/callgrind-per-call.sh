#!/usr/bin/env bash
# Instructions per tagged message through libucp, call by call and function by function, for
# Debian's UCX 1.13, UCX 1.22's release build (bench/fetch-ucx122.sh) and rucx's drop-in
# libucp.so.0, counted the same way for all three (callgrind; a report, not a timed test).
#   capi/bench/callgrind-per-call.sh [RUCX_LIBDIR]
# It runs msgcost.c (both sides in one thread, so the count does not depend on timing) with N1
# and N2 messages and prints (Ir(N2) - Ir(N1)) / (N2 - N1), start-up excluded, the median of
# RUNS such differences (UCX does time-driven work in progress, so a single run can be off):
# - "per call": the inclusive cost of each API call a message makes, measured by collecting
#   only inside that function (callgrind --toggle-collect), so a library without symbols for
#   its internal functions is counted as exactly as one with them; "total" is the whole thread;
# - "by function": the self cost of the functions that cost most per message (names as
#   callgrind sees them; UCX 1.22's wheel is stripped of its static functions, so some of its
#   cost lands on the nearest exported name or an address).
# RUCX_LIBDIR holds rucx's libraries; without it they are built (release) into
# target/capi-lib. Environment: MODE (pml: as Open MPI's pml ucx calls libucp; see msgcost.c
# for expected, unexpected, am: ucp_am_send_nbx to a ucp_worker_set_am_recv_handler handler,
# stream: ucp_stream_send_nbx / ucp_stream_recv_nbx), CALLS (the API calls to count; by
# MODE), SIZE (8), TLS (posix), N1 (2000), N2 (6000), RUNS (3), TOP (14),
# UCX122 (the folder with UCX 1.22's lib/; fetched when unset), IMPLS ("u113 u122 rucx").
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
command -v callgrind_annotate >/dev/null || { echo "install valgrind (callgrind_annotate)" >&2; exit 1; }
IMPLS=${IMPLS:-"u113 u122 rucx"}
ucx122=${UCX122:-}
if [ -z "$ucx122" ] && [[ " $IMPLS " == *" u122 "* ]]; then
    ucx122=$("$root/bench/fetch-ucx122.sh")
fi
MODE=${MODE:-pml}
SIZE=${SIZE:-8}
TLS=${TLS:-posix}
N1=${N1:-2000}
N2=${N2:-6000}
RUNS=${RUNS:-3}
TOP=${TOP:-14}
case $MODE in
am) default_calls="ucp_am_send_nbx ucp_worker_progress ucp_request_free" ;;
stream) default_calls="ucp_stream_send_nbx ucp_stream_recv_nbx ucp_worker_progress ucp_request_free" ;;
*) default_calls="ucp_tag_send_nbx ucp_tag_recv_nbx ucp_worker_progress ucp_request_check_status ucp_request_test ucp_request_free" ;;
esac
CALLS=${CALLS:-$default_calls}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/msgcost
${CC:-cc} -O2 -g -Wall -Wextra -Werror -o "$bin" "$here/msgcost.c" -lucp -lucs

# libdir IMPL: the LD_LIBRARY_PATH that loads IMPL's libucp ("" for Debian's).
libdir() {
    case $1 in
    u113) echo "" ;;
    u122) echo "$ucx122/lib" ;;
    rucx) echo "$lib" ;;
    esac
}

# grind IMPL N OUT [VALGRIND ARGS...]: msgcost under callgrind, main thread's profile in OUT;
# fails when the wrong libucp got loaded.
grind() {
    local impl=$1 n=$2 out=$3 l
    shift 3
    l=$(libdir "$impl")
    rm -f "$work"/cg.raw*
    UCX_TLS=$TLS LD_LIBRARY_PATH=$l valgrind --tool=callgrind --separate-threads=yes \
        --fair-sched=yes --callgrind-out-file="$work/cg.raw" --log-file="$work/cg.log" "$@" \
        "$bin" "$SIZE" "$n" "$MODE" >"$work/run.out"
    case "$(cat "$work/run.out")" in
    *"libucp ${l:-/usr/lib}"*) ;;
    *) echo "$impl run loaded the wrong libucp: $(head -1 "$work/run.out")" >&2; return 1 ;;
    esac
    mv "$work/cg.raw-01" "$out"
}

total() { sed -n 's/^totals: \([0-9]*\).*/\1/p' "$1"; }

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : int((v[NR/2]+v[NR/2+1])/2)}'; }

# per_message IMPL [VALGRIND ARGS...]: the median over RUNS of (Ir(N2) - Ir(N1)) / (N2 - N1);
# the profiles of the last pair stay in $work/last.a and $work/last.b.
per_message() {
    local impl=$1 r
    shift
    for r in $(seq 1 "$RUNS"); do
        grind "$impl" "$N1" "$work/last.a" "$@"
        grind "$impl" "$N2" "$work/last.b" "$@"
        echo $((($(total "$work/last.b") - $(total "$work/last.a")) / (N2 - N1)))
    done | median
}

# Self cost per function per message between two profiles, the TOP largest.
by_function() {
    python3 - "$1" "$2" "$((N2 - N1))" "$TOP" <<'EOF'
import re, subprocess, sys
def load(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no",
                          path], capture_output=True, text=True, check=True).stdout
    cost = {}
    for line in out.splitlines():
        m = re.match(r'\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$', line)
        if not m or 'PROGRAM TOTALS' in line:
            continue
        name = m.group(2).split(':', 1)[-1]
        name = re.sub(r'\s*\[[^\]]*\]$', '', name)
        cost[name] = cost.get(name, 0) + int(m.group(1).replace(',', ''))
    return cost
a, b = load(sys.argv[1]), load(sys.argv[2])
n, top = int(sys.argv[3]), int(sys.argv[4])
rows = sorted(((b.get(k, 0) - a.get(k, 0)) / n, k) for k in set(a) | set(b))[::-1][:top]
for v, k in rows:
    if v >= 0.5:
        print("    %8.1f  %s" % (v, k[:110]))
EOF
}

declare -A cost
for impl in $IMPLS; do
    cost[$impl.total]=$(per_message "$impl")
    mv "$work/last.a" "$work/$impl.a"
    mv "$work/last.b" "$work/$impl.b"
    for call in $CALLS; do
        cost[$impl.$call]=$(per_message "$impl" --collect-atstart=no --toggle-collect="$call")
    done
done

echo "instructions per $SIZE B message, mode $MODE, UCX_TLS=$TLS (N $N1 -> $N2, median of $RUNS)"
printf '%-26s' "per call (inclusive)"
for impl in $IMPLS; do printf ' %9s' "$impl"; done
echo
for call in $CALLS total; do
    printf '%-26s' "$call"
    for impl in $IMPLS; do printf ' %9d' "${cost[$impl.$call]}"; done
    echo
done
for impl in $IMPLS; do
    [ "$impl" = rucx ] && continue
    printf 'rucx/%s total: %.2f\n' "$impl" "$(echo "${cost[rucx.total]} / ${cost[$impl.total]}" | bc -l)"
done
for impl in $IMPLS; do
    echo "by function, self cost ($impl, the last run):"
    by_function "$work/$impl.a" "$work/$impl.b"
done
