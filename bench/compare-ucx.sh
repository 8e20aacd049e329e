#!/usr/bin/env bash
# Side by side with UCX: runs UCX 1.13's ucx_perftest and rucx's perftest on the same transport
# class, test, size and iteration count, server pinned to core 0 and client to core 1,
# alternating the two programs and repeating, and prints the median of each and the ratio
# rucx/UCX per row. It reports; it never asserts a speed (the machine is shared and noisy).
# Before each pair of runs it measures the cores' cache-line hand-over time (bench/c2c.c): on a
# virtual machine the host may move the vCPUs between cores that share a cache ("near", tens
# of ns) and cores that do not ("far", hundreds), minutes apart, and shared-memory rows follow.
# Each row then also gives the median of the per-pair ratios, and that median over near and
# over far pairs (the probe runs again after the pair; a pair whose two probes disagree counts
# in neither), with the hand-over times seen.
#
# Usage: bench/compare-ucx.sh [-r REPS] [-q] [-R] [ROW_FILTER]
#   -r REPS     repetitions per program and row (default 5)
#   -q          quick: a tenth of the iterations (for a smoke run)
#   -R          run both programs under SCHED_FIFO (chrt -f 10; needs root): on a machine that
#               other jobs keep busy they then take their cores whole, and the rows show the
#               programs rather than the load (the other jobs wait while a run lasts)
#   ROW_FILTER  only rows whose name contains this text (e.g. "tag_lat", "tcp")
# Environment: SERVER_CORE (0), CLIENT_CORE (1), RUCX_PERFTEST (path to a built perftest),
#   UCX_DIR (a UCX installation with bin/ucx_perftest and lib/, e.g. UCX 1.22's unpacked
#   libucx-cu12 wheel from bench/fetch-ucx122.sh; default: Debian's ucx_perftest on its UCX).

set -u

REPS=5
SCALE=1
RT=()
while getopts "r:qRh" opt; do
    case "$opt" in
        r) REPS=$OPTARG ;;
        q) SCALE=10 ;;
        R) RT=(chrt -f 10) ;;
        h) sed -n '2,15p' "$0"; exit 0 ;;
        *) exit 1 ;;
    esac
done
shift $((OPTIND - 1))
FILTER=${1:-}
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/compare-ucx.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# --- prerequisites -----------------------------------------------------------------------------
if ! command -v ucx_perftest >/dev/null 2>&1; then
    echo "# ucx_perftest not found: installing Debian's ucx-utils" >&2
    apt-get install -y ucx-utils >/dev/null 2>&1 ||
        { apt-get update >/dev/null 2>&1 && apt-get install -y ucx-utils >/dev/null 2>&1; } ||
        { echo "cannot install ucx-utils (apt-get install -y ucx-utils failed)" >&2; exit 1; }
fi
if [ -z "${RUCX_PERFTEST:-}" ]; then
    echo "# building rucx perftest (release)" >&2
    (cd "$ROOT" && cargo build --release -q -p perftest) || { echo "cargo build failed" >&2; exit 1; }
    RUCX_PERFTEST="$ROOT/target/release/perftest"
fi
UCX_PERFTEST=$(command -v ucx_perftest)
UCX_LIBENV=
if [ -n "${UCX_DIR:-}" ]; then
    UCX_PERFTEST=$UCX_DIR/bin/ucx_perftest
    UCX_LIBENV="LD_LIBRARY_PATH=$UCX_DIR/lib"
fi
C2C="$WORK/c2c"
${CC:-cc} -O2 -pthread -o "$C2C" "$ROOT/bench/c2c.c" || { echo "cannot build bench/c2c.c" >&2; exit 1; }
# Pairs whose hand-over time is below this many ns count as near.
NEAR_NS=${NEAR_NS:-100}
UCX_VERSION=$(env $UCX_LIBENV "${UCX_DIR:+$UCX_DIR/bin/}ucx_info" -v 2>/dev/null | sed -n -e 's/^# Version //p' -e 's/^# Library version: //p' | head -1)
# Servers listen on a port the kernel picks (-p 0), read back from its socket table.
source "$ROOT/capi/tests/ports.sh"

# run_one PROG ENV_ASSIGNMENTS ARGS... : runs a server and a client; prints the CSV result line,
# or "ERR <message>" on failure.
run_one() {
    local prog=$1 envs=$2
    shift 2
    local out="$WORK/out" err="$WORK/err" srv="$WORK/srv" port
    env $envs "${RT[@]}" taskset -c "$SERVER_CORE" "$prog" -p 0 >"$srv" 2>&1 &
    local spid=$!
    if ! port=$(wildcard_port "$(program_pid "$spid" "$prog")"); then
        kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
        echo "ERR server did not start: $(tail -1 "$srv")"
        return
    fi
    env $envs timeout 120 "${RT[@]}" taskset -c "$CLIENT_CORE" "$prog" 127.0.0.1 -p "$port" "$@" -v \
        >"$out" 2>"$err"
    local rc=$?
    # The server exits after one test; give it a moment, then make sure it is gone.
    for _ in $(seq 1 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.02; done
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    if [ $rc -ne 0 ]; then
        local msg
        msg=$(grep -v '^\s*$' "$err" | tail -1)
        [ -z "$msg" ] && msg="exit code $rc"
        echo "ERR ${msg#perftest: error: }"
        return
    fi
    # UCX pads the iteration count with spaces; progress lines start with "[thread N]".
    grep -E '^ *[0-9]+,' "$out" | tail -1 | tr -d ' '
}

median() {
    sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'
}

# A median read from stdin as a two-decimal ratio, or "-" when there is none.
ratio_fmt() { awk '{ if ($1 == "nan" || $1 == "") print "-"; else printf "%.2f\n", $1 }'; }

# CSV columns: 1 iterations, 2 pct lat, 3 avg lat, 4 overall lat, 5 avg bw, 6 overall bw,
# 7 avg mr, 8 overall mr.
field() { cut -d, -f"$1"; }

printf "# rucx perftest vs UCX %s ucx_perftest; server core %s, client core %s; median of %s runs each, alternating\n" \
    "${UCX_VERSION:-?}" "$SERVER_CORE" "$CLIENT_CORE" "$REPS"
printf "# latency rows: 50th percentile µs (lower is better), then the overall average µs;\n"
printf "# bw rows: overall MB/s or msg/s (higher is better), then the 50th percentile time per message µs\n"
printf "# (on a loaded machine the percentile is the robust number; averages include preemption)\n"
[ ${#RT[@]} -gt 0 ] && printf "# both programs ran under SCHED_FIFO (-R)\n"
printf "# pairs: median of per-pair ratios (all; near, far: both probes, before and after the pair, agree; '-' when none), then the hand-over ns seen (min-max)\n"
printf "%-38s %8s %12s %12s %8s %10s %10s %6s %6s %6s %9s   %s\n" "row" "iters" "UCX" "rucx" "rucx/UCX" "UCX 2nd" "rucx 2nd" "pairs" "near" "far" "c2c ns" "note"

# row NAME METRIC ITERS UCX_ENV RUCX_ENV -- ARGS (UCX) -- ARGS (rucx, default: same)
#   METRIC: lat (p50 µs) | bw (MB/s) | mr (msg/s)
row() {
    local name=$1 metric=$2 iters=$3 uenv=$4 renv=$5
    shift 5
    if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then return; fi
    iters=$(( iters / SCALE )); [ "$iters" -lt 10 ] && iters=10
    local warm=$(( iters / 10 ))
    local args=("$@")
    local col col2
    case "$metric" in lat) col=2; col2=4 ;; bw) col=6; col2=2 ;; mr) col=8; col2=2 ;; esac
    local ucx_vals="" rucx_vals="" ucx_vals2="" rucx_vals2="" note="" rucx_na=""
    local r first second pair_all="" pair_near="" pair_far="" c2c_seen="" c2c c2c_after u_one r_one
    for r in $(seq 1 "$REPS"); do
        c2c=$("$C2C" "$SERVER_CORE" "$CLIENT_CORE" 2>/dev/null || echo nan)
        c2c_seen+="$c2c"$'\n'
        u_one=""; r_one=""
        # Alternate which program goes first.
        if [ $((r % 2)) -eq 1 ]; then first=ucx; second=rucx; else first=rucx; second=ucx; fi
        for who in $first $second; do
            if [ "$who" = ucx ]; then
                res=$(run_one "$UCX_PERFTEST" "$UCX_LIBENV $uenv" "${args[@]}" -n "$iters" -w "$warm")
                if [[ "$res" == ERR* || -z "$res" ]]; then
                    note="UCX failed: ${res#ERR }"
                else
                    u_one=$(echo "$res" | field $col)
                    ucx_vals+="$u_one"$'\n'
                    ucx_vals2+="$(echo "$res" | field $col2)"$'\n'
                fi
            else
                [ -n "$rucx_na" ] && continue
                res=$(run_one "$RUCX_PERFTEST" "$renv" "${args[@]}" -n "$iters" -w "$warm")
                if [[ "$res" == ERR* || -z "$res" ]]; then
                    # A test rucx cannot run yet fails the same way every time: stop trying.
                    rucx_na="n/a: ${res#ERR }"
                else
                    r_one=$(echo "$res" | field $col)
                    rucx_vals+="$r_one"$'\n'
                    rucx_vals2+="$(echo "$res" | field $col2)"$'\n'
                fi
            fi
        done
        # The hand-over again after the pair: a pair counts as near or far only when both
        # probes agree (the host may move the vCPUs between the two runs).
        c2c_after=$("$C2C" "$SERVER_CORE" "$CLIENT_CORE" 2>/dev/null || echo nan)
        c2c_seen+="$c2c_after"$'\n'
        if [ -n "$u_one" ] && [ -n "$r_one" ]; then
            local q
            q=$(awk -v a="$r_one" -v b="$u_one" 'BEGIN { if (b+0 > 0) printf "%.3f", a/b }')
            if [ -n "$q" ]; then
                pair_all+="$q"$'\n'
                if awk -v c="$c2c" -v d="$c2c_after" -v n="$NEAR_NS" \
                    'BEGIN { exit !(c+0 > 0 && c+0 < n && d+0 > 0 && d+0 < n) }'; then
                    pair_near+="$q"$'\n'
                elif awk -v c="$c2c" -v d="$c2c_after" -v n="$NEAR_NS" \
                    'BEGIN { exit !(c+0 >= n && d+0 >= n) }'; then
                    pair_far+="$q"$'\n'
                fi
            fi
        fi
    done
    local pa pn pf cr
    pa=$(printf "%s" "$pair_all" | grep . | median | ratio_fmt)
    pn=$(printf "%s" "$pair_near" | grep . | median | ratio_fmt)
    pf=$(printf "%s" "$pair_far" | grep . | median | ratio_fmt)
    cr=$(printf "%s" "$c2c_seen" | grep -v nan | grep . | sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {if (NR) printf "%.0f-%.0f", lo, hi; else print "-"}')
    local um rm ratio um2 rm2
    um=$(printf "%s" "$ucx_vals" | grep . | median)
    um2=$(printf "%s" "$ucx_vals2" | grep . | median)
    if [ -n "$rucx_na" ]; then
        printf "%-38s %8s %12s %12s %8s %10s %10s %6s %6s %6s %9s   %s\n" "$name" "$iters" "$um" "-" "-" "$um2" "-" "-" "-" "-" "$cr" "$rucx_na"
        return
    fi
    rm=$(printf "%s" "$rucx_vals" | grep . | median)
    rm2=$(printf "%s" "$rucx_vals2" | grep . | median)
    ratio=$(awk -v a="$rm" -v b="$um" 'BEGIN { if (b+0 > 0 && a != "nan") printf "%.2f", a/b; else print "-" }')
    printf "%-38s %8s %12s %12s %8s %10s %10s %6s %6s %6s %9s   %s\n" "$name" "$iters" "$um" "$rm" "$ratio" "$um2" "$rm2" "$pa" "$pn" "$pf" "$cr" "$note"
}

SHM_UCX="UCX_TLS=posix,cma,self"
SHM_RUCX="RUCX_TLS=posix,cma,self"
TCP_UCX="UCX_TLS=tcp UCX_NET_DEVICES=lo"
TCP_RUCX="RUCX_TLS=tcp RUCX_NET_DEVICES=lo"

sizes=(8 4096 65536 1048576 16777216)
lat_iters=(20000 10000 5000 500 30)
bw_iters=(200000 50000 10000 1000 40)
names=(8B 4KiB 64KiB 1MiB 16MiB)

for cls in shm tcp; do
    if [ $cls = shm ]; then ue=$SHM_UCX; re=$SHM_RUCX; else ue=$TCP_UCX; re=$TCP_RUCX; fi
    for i in "${!sizes[@]}"; do
        it=${lat_iters[$i]}
        [ $cls = tcp ] && it=$(( it / 4 ))
        row "$cls tag_lat ${names[$i]} (us p50)" lat "$it" "$ue" "$re" -t tag_lat -s "${sizes[$i]}"
    done
    for i in "${!sizes[@]}"; do
        it=${bw_iters[$i]}
        [ $cls = tcp ] && it=$(( it / 4 ))
        m=bw; [ "${sizes[$i]}" -eq 8 ] && m=mr
        unit="MB/s"; [ $m = mr ] && unit="msg/s"
        row "$cls tag_bw ${names[$i]} ($unit)" $m "$it" "$ue" "$re" -t tag_bw -s "${sizes[$i]}"
    done
done

row "shm ucp_am_lat 8B (us p50)" lat 20000 "$SHM_UCX" "$SHM_RUCX" -t ucp_am_lat -s 8
row "shm ucp_am_bw 8B (msg/s)" mr 200000 "$SHM_UCX" "$SHM_RUCX" -t ucp_am_bw -s 8
row "shm stream_bw 64KiB (MB/s)" bw 10000 "$SHM_UCX" "$SHM_RUCX" -t stream_bw -s 65536
row "shm ucp_put_lat 8B (us p50)" lat 20000 "$SHM_UCX" "$SHM_RUCX" -t ucp_put_lat -s 8
row "shm ucp_put_bw 64KiB (MB/s)" bw 10000 "$SHM_UCX" "$SHM_RUCX" -t ucp_put_bw -s 65536 -O 16
row "shm ucp_get 64KiB (MB/s)" bw 10000 "$SHM_UCX" "$SHM_RUCX" -t ucp_get -s 65536 -O 16
row "uct am_lat posix short 8B (us p50)" lat 50000 "" "" -t am_lat -x posix -d memory -D short -s 8
row "uct am_lat posix bcopy 1KiB (us p50)" lat 50000 "" "" -t am_lat -x posix -d memory -D bcopy -s 1024
row "uct am_lat tcp short 8B (us p50)" lat 10000 "" "" -t am_lat -x tcp -d lo -D short -s 8
row "uct am_lat tcp bcopy 1KiB (us p50)" lat 10000 "" "" -t am_lat -x tcp -d lo -D bcopy -s 1024
row "uct put_bw posix short 8B (msg/s)" mr 500000 "" "" -t put_bw -x posix -d memory -D short -s 8
row "uct put_bw posix bcopy 8KiB (MB/s)" bw 50000 "" "" -t put_bw -x posix -d memory -D bcopy -s 8192
row "uct put_bw cma zcopy 64KiB (MB/s)" bw 10000 "" "" -t put_bw -x cma -d memory -D zcopy -s 65536
