#!/usr/bin/env bash
# Kill campaign (a report, not a timed test): for each transport, N perftest transfers with one
# side killed (SIGKILL) at a random point, then a long-lived ucp_client_server server facing
# clients killed mid-transfer.
#
# For each transport it reports: how long the surviving side took to exit with an error after the
# kill (p50 and max), survivors that hung (no exit within HANG_S) or exited 0, what was left in
# /dev/shm and in SysV shared memory (`ipcs -m`) after the runs, and the RSS and descriptor drift
# of the long-lived server between its first and its last client.
#
# Usage: tests/kill-campaign.sh [N]          (N runs per transport, default 100)
# Environment: TRANSPORTS (default "posix sysv tcp"), BIN (binary directory, default
# target/debug; built first if missing), HOST (the address servers listen on and clients dial,
# default 127.0.0.1), CLIENTS (long-lived server's clients, default N),
# HANG_S (default 30), KEEP (where the outputs of hung runs are kept, default
# /tmp/kill-campaign-hangs), SHOW_HANGS=1 (also print the last lines of those outputs).
set -u
N=${1:-100}
TRANSPORTS=${TRANSPORTS:-posix sysv tcp}
HANG_S=${HANG_S:-30}
KEEP=${KEEP:-/tmp/kill-campaign-hangs}
CLIENTS=${CLIENTS:-$N}
HOST=${HOST:-127.0.0.1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/debug}
if [[ ! -x $BIN/perftest || ! -x $BIN/ucp_client_server ]]; then
    (cd "$ROOT" && cargo build -q -p perftest -p rucx-examples) || exit 1
fi
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT

now() { echo "$EPOCHREALTIME"; }
# Leftovers: rucx files in /dev/shm made since the transport's runs began, and SysV segments
# whose creator is one of the processes this script started (others' tests run alongside).
shm_count() { find /dev/shm -maxdepth 1 -name '*rucx*' -newer "$WORK/stamp" 2>/dev/null | wc -l; }
ipcs_count() {
    command -v ipcs >/dev/null || { echo n/a; return; }
    ipcs -m -p 2>/dev/null | awk 'NR == FNR {mine[$1] = 1; next} ($3 in mine)' "$WORK/pids" - | wc -l
}
rand_ms() { echo $(( $1 + RANDOM % ($2 - $1 + 1) )); }

# Waits up to HANG_S for pid $1; prints "<seconds> <exit code>" or "hang -".
wait_exit() {
    local pid=$1 t0=$2 rc
    while kill -0 "$pid" 2>/dev/null; do
        if (( $(echo "$(now) - $t0 > $HANG_S" | bc) )); then
            kill -9 "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            echo "hang -"
            return
        fi
        sleep 0.01
    done
    wait "$pid"
    rc=$?
    echo "$(echo "$(now) - $t0" | bc) $rc"
}

# p50 and max of the numbers on stdin.
stats() {
    sort -g | awk '{a[NR]=$1} END {if (NR == 0) {print "- -"} else {printf "%.3f %.3f\n", a[int((NR+1)/2)], a[NR]}}'
}

# One perftest transfer over transport $1, one side killed at a random point.
one_run() {
    local tl=$1 side port="" srv cli victim survivor t0 out
    # Emptied here, not by the server's redirection (which may come after the first read).
    : >"$WORK/srv.out"
    RUCX_TLS=$tl "$BIN/perftest" --local-server -p 0 >"$WORK/srv.out" 2>"$WORK/srv.err" &
    srv=$!
    echo "$srv" >>"$WORK/pids"
    for _ in $(seq 200); do
        port=$(head -1 "$WORK/srv.out" 2>/dev/null)
        [[ -n $port ]] && break
        sleep 0.01
    done
    RUCX_TLS=$tl "$BIN/perftest" "$HOST" -p "$port" -t tag_bw -s 1m -n 10000000 \
        >"$WORK/cli.out" 2>"$WORK/cli.err" &
    cli=$!
    echo "$cli" >>"$WORK/pids"
    # The random point is counted from the start of the transfer (the client prints its table
    # header then), so a slow start-up (the emulated VM) does not turn kills into start-up kills.
    for _ in $(seq $((HANG_S * 100))); do
        grep -q Stage "$WORK/cli.out" 2>/dev/null && break
        kill -0 "$cli" 2>/dev/null || break
        sleep 0.01
    done
    sleep "$(echo "scale=3; $(rand_ms 300 2000) / 1000" | bc)"
    if (( RANDOM % 2 )); then side=server; victim=$srv; survivor=$cli
    else side=client; victim=$cli; survivor=$srv; fi
    t0=$(now)
    kill -9 "$victim" 2>/dev/null
    wait "$victim" 2>/dev/null
    out=$(wait_exit "$survivor" "$t0")
    if [[ $out == hang* ]]; then
        local keep=$KEEP/$tl-$side-killed-$EPOCHREALTIME
        mkdir -p "$keep" && cp "$WORK"/srv.* "$WORK"/cli.* "$keep"/
    fi
    echo "$side $out"
}

# RSS (kB) and descriptor count of pid $1.
rss_fds() {
    echo "$(awk '/VmRSS/ {print $2}' "/proc/$1/status") $(ls "/proc/$1/fd" | wc -l)"
}

# A long-lived ucp_client_server server over $1 facing CLIENTS clients, each killed at a random
# point of a large transfer; prints "rss0 fds0 rss1 fds1" (after the first client, after the last).
drift() {
    local tl=$1 srv port="" first last
    : >"$WORK/ld.err"
    RUCX_TLS=$tl "$BIN/ucp_client_server" -p 0 -l "$HOST" -s 4m -i 1000000 -t 10 \
        2>"$WORK/ld.err" &
    srv=$!
    for _ in $(seq 200); do
        port=$(awk 'match($0, /[0-9]+$/) { print substr($0, RSTART); exit }' "$WORK/ld.err" 2>/dev/null || true)
        [[ -n $port ]] && break
        sleep 0.01
    done
    for i in $(seq "$CLIENTS"); do
        RUCX_TLS=$tl "$BIN/ucp_client_server" -a "$HOST" -p "$port" -s 4m -i 1000000 -t 10 \
            >/dev/null 2>&1 &
        local cli=$!
        sleep "$(echo "scale=3; $(rand_ms 100 600) / 1000" | bc)"
        kill -9 "$cli" 2>/dev/null
        wait "$cli" 2>/dev/null
        # Let the server notice and get back to its listener.
        sleep 0.3
        if (( i == 1 )); then first=$(rss_fds "$srv"); fi
    done
    last=$(rss_fds "$srv")
    kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    echo "$first $last"
}

printf '%-8s %5s %7s %7s %10s %10s %5s %6s %6s %6s\n' transport runs k_srv k_cli p50_s max_s hangs rc0 shm ipcs
for tl in $TRANSPORTS; do
    touch "$WORK/stamp"
    : >"$WORK/pids"
    : >"$WORK/times"
    ks=0 kc=0 hangs=0 rc0=0 hung=
    for _ in $(seq "$N"); do
        read -r side secs rc < <(one_run "$tl")
        if [[ $side == server ]]; then ks=$((ks + 1)); else kc=$((kc + 1)); fi
        if [[ $secs == hang ]]; then hangs=$((hangs + 1)); hung="$hung $side-killed"; continue; fi
        [[ $rc == 0 ]] && rc0=$((rc0 + 1))
        echo "$secs" >>"$WORK/times"
    done
    sleep 0.5
    read -r p50 max < <(stats <"$WORK/times")
    printf '%-8s %5d %7d %7d %10s %10s %5d %6d %6s %6s\n' "$tl" "$N" "$ks" "$kc" "$p50" "$max" \
        "$hangs" "$rc0" "$(shm_count)" "$(ipcs_count)"
    if [[ -n $hung ]]; then
        echo "  hung survivors:$hung (outputs in $KEEP)"
        if [[ ${SHOW_HANGS:-0} == 1 ]]; then
            for f in "$KEEP/$tl"-*/*; do echo "  --- $f"; tail -n 15 "$f" | sed 's/^/  | /'; done
        fi
    fi
done
echo
echo "long-lived ucp_client_server server, $CLIENTS clients killed mid-transfer each:"
printf '%-8s %12s %12s %8s %8s\n' transport rss_first_kB rss_last_kB fds_first fds_last
for tl in $TRANSPORTS; do
    read -r r0 f0 r1 f1 < <(drift "$tl")
    printf '%-8s %12s %12s %8s %8s\n' "$tl" "$r0" "$r1" "$f0" "$f1"
done
