#!/usr/bin/env bash
# Tag offload on against off: rucx perftest --local (server on core 0, client on core 1) with
# RUCX_TM_ENABLE=y and =n alternating, for tag_lat and tag_bw at 16 KiB, 64 KiB and 1 MiB over
# one transport set; prints each run, the medians and the ratio on/off per row. It reports; it
# never asserts a speed (the machine is shared and noisy).
#
# Usage: perftest/bench/tm-on-off.sh [-r REPS] [-t TLS]     (defaults: 5 repetitions, tcp)
# Columns: tag_lat is the 50th percentile latency in µs (lower is better), tag_bw the overall
# bandwidth in MB/s (higher is better).
# Environment: RUCX_PERFTEST (default target/release/perftest, built if missing); ROWS to
# choose rows, e.g. ROWS="tag_bw 1048576 2000;tag_lat 65536 10000" (test, size, iterations).
set -u
REPS=5
TLS=tcp
while getopts "r:t:h" opt; do
    case "$opt" in
        r) REPS=$OPTARG ;;
        t) TLS=$OPTARG ;;
        h) sed -n '2,10p' "$0"; exit 0 ;;
        *) exit 1 ;;
    esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUCX=${RUCX_PERFTEST:-$ROOT/target/release/perftest}
if [ ! -x "$RUCX" ]; then
    (cd "$ROOT" && cargo build --release -q -p perftest) || exit 1
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
one() { # TM TEST SIZE ITERS -> the number
    local col=6
    [ "$2" = tag_lat ] && col=2
    RUCX_TLS=$TLS RUCX_TM_ENABLE=$1 timeout 120 "$RUCX" --local -t "$2" -s "$3" -n "$4" -v 2>/dev/null |
        grep -E '^ *[0-9]+,' | tail -1 | tr -d ' ' | cut -d, -f"$col"
}
printf '%-8s %8s  %10s %10s  %s\n' test size "on" "off" "on/off"
ROWS=${ROWS:-"tag_lat 16384 20000;tag_lat 65536 10000;tag_lat 1048576 2000;tag_bw 16384 40000;tag_bw 65536 20000;tag_bw 1048576 2000"}
IFS=';' read -r -a ROW_LIST <<<"$ROWS"
for row in "${ROW_LIST[@]}"; do
    set -- $row
    on="" off=""
    for _ in $(seq 1 "$REPS"); do
        on+="$(one y "$1" "$2" "$3")"$'\n'
        off+="$(one n "$1" "$2" "$3")"$'\n'
    done
    echo "  runs on:  $(echo $on)" >&2
    echo "  runs off: $(echo $off)" >&2
    mon=$(printf '%s' "$on" | median)
    moff=$(printf '%s' "$off" | median)
    printf '%-8s %8s  %10s %10s  %s\n' "$1" "$2" "$mon" "$moff" \
        "$(awk -v a="$mon" -v b="$moff" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "nan"}')"
done
