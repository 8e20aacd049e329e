#!/usr/bin/env bash
# tcp over loopback, rucx perftest vs UCX 1.13 ucx_perftest, alternating, server pinned to
# core 0 and client to core 1; prints each run and the median of each program and the ratio.
# It reports; it never asserts a speed (the machine is shared and noisy).
#
# Usage: perftest/bench/tcp-vs-ucx.sh [-r REPS] -- PERFTEST_ARGS...
#   e.g. perftest/bench/tcp-vs-ucx.sh -r 5 -- -t am_lat -x tcp -d lo -D short -s 8 -n 100000
#        perftest/bench/tcp-vs-ucx.sh -r 5 -- -t tag_bw -s 1048576 -n 2000
#        perftest/bench/tcp-vs-ucx.sh -r 5 -- -t put_bw -x tcp -d lo -D zcopy -s 1048576 -n 2000
# Column: latency tests report the 50th percentile (µs), bandwidth tests the overall MB/s.
# Environment: RUCX_PERFTEST (default target/release/perftest, built if missing),
# SERVER_CORE (0), CLIENT_CORE (1).
set -u
REPS=5
while getopts "r:h" opt; do
    case "$opt" in
        r) REPS=$OPTARG ;;
        h) sed -n '2,13p' "$0"; exit 0 ;;
        *) exit 1 ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUCX=${RUCX_PERFTEST:-$ROOT/target/release/perftest}
if [ ! -x "$RUCX" ]; then
    (cd "$ROOT" && cargo build --release -q -p perftest) || exit 1
fi
SC=${SERVER_CORE:-0}
CC=${CLIENT_CORE:-1}
case " $* " in
    *_lat*) COL=2 ;;
    *) COL=6 ;;
esac
PORT=$((20000 + ($$ % 20000)))
one() { # PROG ENV...
    local prog=$1
    shift
    PORT=$((PORT + 1))
    env "$@" taskset -c "$SC" "$prog" -p "$PORT" >/dev/null 2>&1 &
    local spid=$!
    for _ in $(seq 1 200); do
        ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q . && break
        sleep 0.025
    done
    env "$@" timeout 120 taskset -c "$CC" "$prog" 127.0.0.1 -p "$PORT" "${ARGS[@]}" -v 2>/dev/null |
        grep -E '^ *[0-9]+,' | tail -1 | tr -d ' ' | cut -d, -f"$COL"
    for _ in $(seq 1 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.02; done
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ARGS=("$@")
u="" r=""
for i in $(seq 1 "$REPS"); do
    a=$(one "$(command -v ucx_perftest)" UCX_TLS=tcp UCX_NET_DEVICES=lo)
    b=$(one "$RUCX" RUCX_TLS=tcp RUCX_NET_DEVICES=lo)
    echo "run $i: UCX $a  rucx $b"
    u+="$a"$'\n'
    r+="$b"$'\n'
done
um=$(printf "%s" "$u" | grep . | median)
rm=$(printf "%s" "$r" | grep . | median)
echo "args: ${ARGS[*]}"
echo "median UCX $um  rucx $rm  rucx/UCX $(awk -v a="$rm" -v b="$um" 'BEGIN{if (b+0>0) printf "%.2f", a/b; else print "-"}')"
