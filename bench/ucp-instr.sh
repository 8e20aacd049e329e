#!/usr/bin/env bash
# Instructions per tagged message through ucp's Rust API (ucp/examples/msgcost.rs), beside
# Debian's UCX 1.13 running the same loop in C (capi/bench/msgcost.c), both counted by callgrind
# with both sides in one thread, so the count does not depend on timing (not a timed test: it
# reports). Each row prints (Ir(N2) - Ir(N1)) / (N2 - N1), start-up excluded, and the median
# wall-clock ns per message over REPEATS plain runs pinned to one core.
#   bench/ucp-instr.sh
# Environment: TLS_LIST ("posix tcp"), SIZES ("8 4096"), MODES ("expected unexpected idle";
# also "am": one active message per iteration, no user header),
# N1 (2000), N2 (4000), TIME_ITERS (200000), REPEATS (3), CORE (1), NO_UCX (1: skip UCX).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
TLS_LIST=${TLS_LIST:-"posix tcp"}
SIZES=${SIZES:-"8 4096"}
MODES=${MODES:-"expected unexpected idle"}
N1=${N1:-2000}
N2=${N2:-4000}
TIME_ITERS=${TIME_ITERS:-200000}
REPEATS=${REPEATS:-3}
CORE=${CORE:-1}
NO_UCX=${NO_UCX:-}
command -v valgrind >/dev/null || { echo "install valgrind" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && cargo build --release -q --example msgcost -p ucp)
rust=${CARGO_TARGET_DIR:-$root/target}/release/examples/msgcost
ucx=
if [ -z "$NO_UCX" ] && [ -f /usr/include/ucp/api/ucp.h ]; then
    ucx=$work/msgcost-ucx
    ${CC:-cc} -O2 -o "$ucx" "$root/capi/bench/msgcost.c" -lucp -lucs
fi

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# count PROG TLS SIZE MODE N: instructions of the main thread for N messages.
count() {
    local prog=$1 tls=$2 size=$3 mode=$4 n=$5
    rm -f "$work"/cg.out*
    if [ "$prog" = "$rust" ]; then
        valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.out" \
            --log-file="$work/cg.log" "$prog" "$size" "$n" "$mode" "$tls" >/dev/null
    else
        env -u LD_LIBRARY_PATH UCX_TLS="$tls" valgrind --tool=callgrind --separate-threads=yes \
            --fair-sched=yes --callgrind-out-file="$work/cg.out" --log-file="$work/cg.log" \
            "$prog" "$size" "$n" "$mode" >/dev/null
    fi
    sed -n 's/^totals: \([0-9]*\).*/\1/p' "$work/cg.out-01"
}

# ns PROG TLS SIZE MODE: wall-clock ns per message.
ns() {
    local prog=$1 tls=$2 size=$3 mode=$4
    if [ "$prog" = "$rust" ]; then
        taskset -c "$CORE" "$prog" "$size" "$TIME_ITERS" "$mode" "$tls"
    else
        env -u LD_LIBRARY_PATH UCX_TLS="$tls" taskset -c "$CORE" "$prog" "$size" "$TIME_ITERS" "$mode"
    fi | sed -n 's/^ns_per_msg [0-9]* //p'
}

printf '%-6s %-6s %-11s %10s %10s %7s %9s %9s %7s\n' tls size mode ucx_instr rust_instr ratio \
    ucx_ns rust_ns ratio
for tls in $TLS_LIST; do
    for size in $SIZES; do
        for mode in $MODES; do
            ri=$(( ($(count "$rust" "$tls" "$size" "$mode" "$N2") - $(count "$rust" "$tls" "$size" "$mode" "$N1")) / (N2 - N1) ))
            rn=$(for _ in $(seq 1 "$REPEATS"); do ns "$rust" "$tls" "$size" "$mode"; done | median)
            ui=- un=- ir=- nr=-
            if [ -n "$ucx" ]; then
                ui=$(( ($(count "$ucx" "$tls" "$size" "$mode" "$N2") - $(count "$ucx" "$tls" "$size" "$mode" "$N1")) / (N2 - N1) ))
                un=$(for _ in $(seq 1 "$REPEATS"); do ns "$ucx" "$tls" "$size" "$mode"; done | median)
                ir=$(awk -v a="$ri" -v b="$ui" 'BEGIN {printf "%.2f", a/b}')
                nr=$(awk -v a="$rn" -v b="$un" 'BEGIN {printf "%.2f", a/b}')
            fi
            printf '%-6s %-6s %-11s %10s %10s %7s %9s %9s %7s\n' "$tls" "$size" "$mode" "$ui" "$ri" "$ir" \
                "$un" "$rn" "$nr"
        done
    done
done
