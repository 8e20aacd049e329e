#!/usr/bin/env bash
# Kill campaign: for each transport, N perftest transfers with one side killed (SIGKILL) at a
# random point, then a long-lived ucp_client_server server facing clients killed mid-transfer
# (a report), then sends to a peer killed before, during and after the endpoint to it is created
# (a test: fails on any silent loss or hang).
#
# For each transport the transfers report: how long the surviving side took to exit with an
# error after the kill (p50 and max), survivors that hung (no exit within HANG_S) or exited 0,
# what was left in /dev/shm and in SysV shared memory (`ipcs -m`) after the runs, and the RSS and
# descriptor drift of the long-lived server between its first and its last client.
#
# The hello part (tests/kill/send_to_dead.c on UCX's C API, on rucx's libucp.so.0): per transport
# (posix, sysv, cma under posix with a rendezvous-sized message, tcp; self is exempt) and message
# size, N runs of each of
#   before  the receiver is sent SIGKILL (not waited for), then the sender creates its endpoint
#           and sends;
#   hello   UCX's ucp_hello_world with `-e recv`: the receiver connects to the sender, greets it
#           and SIGKILLs itself once its send completed; the sender then creates its endpoint
#           to the receiver and sends;
#   during  a thread of the sender kills the receiver 0..HELLO_DELAY_US us (random) after the
#           sender starts creating the endpoint;
#   after   the endpoint is wired up (a first message arrived), the receiver is killed, then the
#           sender sends.
# The sender must see an error (from ucp_ep_create, the send, the flush or the endpoint's error
# handler within HELLO_GRACE_S); a run where it saw only UCS_OK and the receiver did not record
# the message is a silent loss. The table counts errors, deliveries (only possible "during"),
# silent losses and hangs; the script exits 1 if there was any loss or hang.
#
# Usage: tests/kill-campaign.sh [N]          (N runs per transport and case, default 100)
# Environment: PARTS (default "transfers drift hello"), TRANSPORTS (transfers and drift, default
# "posix sysv tcp"), BIN (binary directory, default target/debug; built first if missing), HOST
# (the address servers listen on and clients dial, default 127.0.0.1), CLIENTS (long-lived
# server's clients, default N), HANG_S (default 30), KEEP (where the outputs of hung runs are
# kept, default /tmp/kill-campaign-hangs), SHOW_HANGS=1 (also print the last lines of those
# outputs); for the hello part UCX_LIB (rucx's libraries from capi/build.sh, default
# target/rucx-ucx, built with PROFILE=dev if missing; `system` for Debian's UCX), HELLO_TLS
# (default "posix sysv cma tcp"), HELLO_DELAY_US (default 1500), HELLO_GRACE_S (default 5).
set -u
N=${1:-100}
TRANSPORTS=${TRANSPORTS:-posix sysv tcp}
HANG_S=${HANG_S:-30}
KEEP=${KEEP:-/tmp/kill-campaign-hangs}
CLIENTS=${CLIENTS:-$N}
HOST=${HOST:-127.0.0.1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/debug}
PARTS=${PARTS:-transfers drift hello}
part() { [[ " $PARTS " == *" $1 "* ]]; }
if (part transfers || part drift) && [[ ! -x $BIN/perftest || ! -x $BIN/ucp_client_server ]]; then
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

transfers() {
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
}

drift_table() {
    echo
    echo "long-lived ucp_client_server server, $CLIENTS clients killed mid-transfer each:"
    printf '%-8s %12s %12s %8s %8s\n' transport rss_first_kB rss_last_kB fds_first fds_last
    for tl in $TRANSPORTS; do
        read -r r0 f0 r1 f1 < <(drift "$tl")
        printf '%-8s %12s %12s %8s %8s\n' "$tl" "$r0" "$r1" "$f0" "$f1"
    done
}

# The hello part's library folder and sender/receiver program (built once).
hello_setup() {
    HELLO_TLS=${HELLO_TLS:-posix sysv cma tcp}
    HELLO_DELAY_US=${HELLO_DELAY_US:-1500}
    HELLO_GRACE_S=${HELLO_GRACE_S:-5}
    UCX_LIB=${UCX_LIB:-$ROOT/target/rucx-ucx}
    if [[ $UCX_LIB == system ]]; then
        HELLO_LIBPATH=${LD_LIBRARY_PATH:-}
    else
        if [[ ! -e $UCX_LIB/libucp.so.0 ]]; then
            PROFILE=dev bash "$ROOT/capi/build.sh" "$UCX_LIB" >/dev/null || exit 1
        fi
        HELLO_LIBPATH=$(cd "$UCX_LIB" && pwd)
    fi
    [[ -f /usr/include/ucp/api/ucp.h ]] || { echo "hello: install libucx-dev (UCX's headers)" >&2; exit 1; }
    # Linked by SONAME (libucp.so.0, libucs.so.0); LD_LIBRARY_PATH picks whose at run time.
    ${CC:-cc} -O1 -g -Wall -Wextra -Werror -pthread -o "$WORK/send_to_dead" \
        "$ROOT/tests/kill/send_to_dead.c" -lucp -lucs || exit 1
}

# hello_env TL: the environment of both processes for transport TL.
hello_env() {
    local tls=$1
    [[ $1 == cma ]] && tls=posix,cma
    echo "LD_LIBRARY_PATH=$HELLO_LIBPATH UCX_TLS=$tls UCX_NET_DEVICES=lo RUCX_LOG_LEVEL=error"
}

# hello_run TL SIZE WHEN: one receiver, one sender; prints "error STAGE", "delivered", "loss",
# "hang STAGE" or "broken WHY".
hello_run() {
    local tl=$1 size=$2 when=$3 d rcv snd out line greet=
    [[ $when != hello ]] || greet=1
    d=$(mktemp -d "$WORK/hello.XXXXXX")
    # shellcheck disable=SC2046 # hello_env's words are VAR=VALUE pairs
    env $(hello_env "$tl") "$WORK/send_to_dead" recv "$d" ${greet:+hello} >"$d/recv.log" 2>&1 &
    rcv=$!
    echo "$rcv" >>"$WORK/pids"
    for _ in $(seq 1000); do [[ -f $d/addr ]] && break; kill -0 "$rcv" 2>/dev/null || break; sleep 0.01; done
    if [[ ! -f $d/addr ]]; then
        kill -9 "$rcv" 2>/dev/null; wait "$rcv" 2>/dev/null
        echo "broken receiver: $(tail -1 "$d/recv.log")"; return
    fi
    case $when in
        before)
            # Killed but not reaped yet: it may still be exiting, or a zombie, when the sender
            # looks it up (as when a peer dies just before a job connects to it).
            kill -9 "$rcv"
            # shellcheck disable=SC2046
            env $(hello_env "$tl") timeout -k 5 90 "$WORK/send_to_dead" send "$d" before "$size" \
                "$HELLO_GRACE_S" >"$d/send.out" 2>"$d/send.err"
            ;;
        during)
            # shellcheck disable=SC2046
            env $(hello_env "$tl") DELAY_US=$((RANDOM % (HELLO_DELAY_US + 1))) timeout -k 5 90 \
                "$WORK/send_to_dead" send "$d" during "$size" "$HELLO_GRACE_S" \
                >"$d/send.out" 2>"$d/send.err"
            ;;
        hello)
            # shellcheck disable=SC2046
            env $(hello_env "$tl") timeout -k 5 90 "$WORK/send_to_dead" send "$d" hello "$size" \
                "$HELLO_GRACE_S" >"$d/send.out" 2>"$d/send.err"
            if kill -0 "$rcv" 2>/dev/null && ! grep -q '^greeted\|^result nogreeting' "$d/send.out"; then
                kill -9 "$rcv"; wait "$rcv" 2>/dev/null
                echo "broken: the receiver never greeted: $(tail -1 "$d/recv.log")"; rm -rf "$d"; return
            fi
            ;;
        after)
            # shellcheck disable=SC2046
            env $(hello_env "$tl") timeout -k 5 90 "$WORK/send_to_dead" send "$d" after "$size" \
                "$HELLO_GRACE_S" >"$d/send.out" 2>"$d/send.err" &
            snd=$!
            # The endpoint is wired up once the sender flushed its first message and the
            # receiver has it.
            for _ in $(seq 6000); do
                grep -q '^ready' "$d/send.out" 2>/dev/null && grep -q '^got 1 ' "$d/got" 2>/dev/null && break
                kill -0 "$snd" 2>/dev/null || break
                sleep 0.01
            done
            kill -9 "$rcv"; wait "$rcv" 2>/dev/null
            : >"$d/go"
            wait "$snd"
            ;;
    esac
    kill -9 "$rcv" 2>/dev/null; wait "$rcv" 2>/dev/null
    line=$(grep '^result ' "$d/send.out" | tail -1)
    case $line in
        "result error "*) out="error ${line#result error }" ;;
        "result ok")
            if grep -q '^got 2 ' "$d/got" 2>/dev/null; then out=delivered; else out=loss; fi ;;
        "result hang "*) out="hang ${line#result hang }" ;;
        "result nogreeting")
            # The greeting's sender saw its send complete, then died: the greeting was lost.
            if grep -q '^sent Success' "$d/greeted" 2>/dev/null; then out="loss (of the greeting)"
            else out="broken: no greeting, the greeter saw: $(cat "$d/greeted" 2>/dev/null)"; fi ;;
        *) out="broken sender: $(tail -1 "$d/send.err" 2>/dev/null)" ;;
    esac
    if [[ $when == after ]] && ! grep -q '^ready' "$d/send.out"; then
        out="broken: the endpoint never wired up ($out)"
    fi
    if [[ $out != error* ]]; then
        mkdir -p "$KEEP" && cp -r "$d" "$KEEP/hello-$tl-$size-$when-$EPOCHREALTIME"
    fi
    rm -rf "$d"
    echo "$out"
}

hello_table() {
    hello_setup
    local tl size when sizes res errors delivered losses hangs broken stages bad=0
    echo
    echo "sends to a peer killed before/during/after endpoint creation ($N runs each, on ${UCX_LIB}):"
    printf '%-6s %8s %-7s %5s %6s %9s %6s %5s %6s  %s\n' transport size when runs errors delivered \
        losses hangs broken "error stages"
    for tl in $HELLO_TLS; do
        sizes="64 1048576"
        [[ $tl == cma ]] && sizes=1048576 # cma carries rendezvous data only
        for size in $sizes; do
            for when in before hello during after; do
                errors=0 delivered=0 losses=0 hangs=0 broken=0
                : >"$WORK/stages"
                for _ in $(seq "$N"); do
                    res=$(hello_run "$tl" "$size" "$when")
                    case $res in
                        error*) errors=$((errors + 1)); echo "${res#error }" | awk '{print $1}' >>"$WORK/stages" ;;
                        delivered) delivered=$((delivered + 1)) ;;
                        loss*) losses=$((losses + 1)) ;;
                        hang*) hangs=$((hangs + 1)) ;;
                        *) broken=$((broken + 1)); echo "  $tl $size $when: $res" >&2 ;;
                    esac
                done
                stages=$(sort "$WORK/stages" | uniq -c | awk '{printf "%s%s:%s", sep, $2, $1; sep=" "}')
                printf '%-6s %8s %-7s %5d %6d %9d %6d %5d %6d  %s\n' "$tl" "$size" "$when" "$N" \
                    "$errors" "$delivered" "$losses" "$hangs" "$broken" "$stages"
                bad=$((bad + losses + hangs + broken))
            done
        done
    done
    if ((bad > 0)); then
        echo "hello: FAIL: $bad runs lost a message silently, hung or broke (kept in $KEEP)"
        return 1
    fi
    echo "hello: every sender saw an error or its message delivered"
}

status=0
if part transfers; then transfers; fi
if part drift; then drift_table; fi
if part hello; then hello_table || status=1; fi
exit $status
