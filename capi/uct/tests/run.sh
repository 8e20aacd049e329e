#!/usr/bin/env bash
# UCX's own programs on rucx's libuct.so.0 / libucs.so.0 / libucp.so.0 (made by
# capi/build.sh DIR):
#   capi/uct/tests/run.sh DIR [WORK]
#  1. capi/uct/tests/c/uct_api.c and capi/ucs/tests/c/ucs_api.c (ours, against Debian's UCX 1.13
#     headers): every uct call, the header-inline ones through the library's ops table;
#     capi/uct/tests/c/peer_death.c: a killed peer reaches the interface's error handler; and
#     Debian's ucx_info -d listing rucx's transports;
#  2. UCX's examples/uct_hello_world.c (Debian's `ucx` source, fetched into WORK) in its -i
#     (short), -b (bcopy) and -z (zcopy) modes over posix and tcp, server and client;
#  3. Debian's /usr/bin/ucx_perftest, unmodified: the uct tests am_lat, am_bw, put_bw -D zcopy
#     and get (UCX 1.13's name for get_bw) over posix, sysv, cma and tcp (what each transport
#     offers: cma has no active messages), put_lat and the atomics (add_lat, fadd, cswap), then
#     the ucp tests, of which those in UCP_TESTS_EXPECTED must pass and the others are
#     reported.
# Every process must have loaded DIR's libraries (LD_DEBUG=libs, checked per process).
# Ports: each server gets a port the kernel just picked (bound to 0, then released), because
# uct_hello_world and ucx_perftest take no port 0. Exit status: the number of failures.
set -uo pipefail
lib=$(cd "${1:?usage: run.sh DIR [WORK]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${2:-$root/target/uct-tests}
mkdir -p "$work"
work=$(cd "$work" && pwd)
# The ucp tests of ucx_perftest that must pass (the others are reported, not counted).
UCP_TESTS_EXPECTED=${UCP_TESTS_EXPECTED:-}
fails=0
passed=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
pass() {
    echo "ok: $*"
    passed=$((passed + 1))
}

for f in "$lib"/libuct.so.0 "$lib"/libucs.so.0 "$lib"/libucp.so.0; do
    [ -f "$f" ] || { echo "run.sh: $f is missing (capi/build.sh $lib)"; exit 1; }
done
[ -f /usr/include/uct/api/uct.h ] || { echo "run.sh: install libucx-dev (UCX 1.13's headers)"; exit 1; }
[ -x /usr/bin/ucx_perftest ] || { echo "run.sh: install ucx-utils (ucx_perftest)"; exit 1; }
export LD_LIBRARY_PATH=$lib

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The LD_DEBUG output of a process (file prefix $1) must show DIR's libuct/libucs (and
# libucp when $2 is set) initialized.
loaded_ours() {
    local out=$1 need=${2:-}
    local f
    for f in "$out".*; do
        [ -f "$f" ] || continue
        grep -q "calling init: $lib/libuct.so.0" "$f" &&
            grep -q "calling init: $lib/libucs.so.0" "$f" &&
            { [ -z "$need" ] || grep -q "calling init: $lib/libucp.so.0" "$f"; } && return 0
    done
    return 1
}

# traced LOG SECONDS PROGRAM ARGS...: runs the program under a time limit with the loader's
# library log in LOG.<pid>.
traced() {
    local log=$1 limit=$2
    shift 2
    timeout "$limit" env LD_DEBUG=libs LD_DEBUG_OUTPUT="$log" "$@"
}

# Waits until a process listens on TCP port $1 (or 20 s pass).
wait_listening() {
    for _ in $(seq 200); do
        [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    return 1
}

echo "=== 1. C programs against UCX 1.13's headers"
cc -O1 -Wall -o "$work/uct_api" "$here/c/uct_api.c" -L"$lib" -luct -lucs || fail "compile uct_api.c"
cc -O1 -Wall -o "$work/ucs_api" "$root/capi/ucs/tests/c/ucs_api.c" -L"$lib" -lucs ||
    fail "compile ucs_api.c"
rm -f "$work"/ld.api.*
out=$(RUCX_LOG_LEVEL=error traced "$work/ld.api" 120 \
    "$work/uct_api" self/memory0 posix/memory sysv/memory cma/memory tcp/lo 2>&1)
echo "$out" | grep -E 'uct_api|FAIL'
[ "$(echo "$out" | grep -c 'passed$')" = 5 ] && echo "$out" | grep -q '0 failures' &&
    loaded_ours "$work/ld.api" && pass "uct_api over self, posix, sysv, cma, tcp" || fail "uct_api"
out=$(UCX_LOG_LEVEL=info timeout 60 "$work/ucs_api" 2>&1)
echo "$out" | grep -E 'ucs_api|FAIL'
echo "$out" | grep -q 'all checks passed' && pass "ucs_api" || fail "ucs_api"

cc -O1 -Wall -o "$work/peer_death" "$here/c/peer_death.c" -L"$lib" -luct -lucs ||
    fail "compile peer_death.c"
out=$(RUCX_LOG_LEVEL=error timeout 180 "$work/peer_death" posix/memory sysv/memory tcp/lo 2>&1)
echo "$out" | grep -E 'peer_death|FAIL'
[ "$(echo "$out" | grep -c 'passed$')" = 3 ] && pass "peer_death over posix, sysv, tcp" ||
    fail "peer_death"
rm -f "$work"/ld.info.*
out=$(traced "$work/ld.info" 60 ucx_info -d 2>&1)
if echo "$out" | grep -q "Transport: posix" && echo "$out" | grep -q "Transport: tcp" &&
    echo "$out" | grep -q "Transport: cma" && loaded_ours "$work/ld.info"; then
    pass "ucx_info -d lists rucx's transports"
else
    fail "ucx_info -d"
    echo "$out" | tail -5
fi

echo "=== 2. UCX's uct_hello_world"
bash "$here/fetch-ucx-source.sh" "$work/src" >/dev/null || fail "fetching UCX's source"
ex="$work/src/ucx-1.13.1/examples"
cc -O2 -o "$work/uct_hello_world" "$ex/uct_hello_world.c" -I"$ex" -L"$lib" -luct -lucs ||
    fail "compile uct_hello_world.c"
hello() { # tl dev mode size
    local tl=$1 dev=$2 mode=$3 size=$4 port srv cli name="$1/$2 $3 -s $4"
    local s="$work/hello.srv.log" c="$work/hello.cli.log"
    rm -f "$work"/ld.hello.*
    port=$(free_port)
    traced "$work/ld.hello.srv" 60 \
        "$work/uct_hello_world" -d "$dev" -t "$tl" "$mode" -s "$size" -p "$port" >"$s" 2>&1 &
    srv=$!
    wait_listening "$port" || { fail "$name: server did not listen"; kill "$srv"; return; }
    traced "$work/ld.hello.cli" 60 \
        "$work/uct_hello_world" -d "$dev" -t "$tl" "$mode" -s "$size" -p "$port" -n 127.0.0.1 \
        >"$c" 2>&1
    cli=$?
    wait "$srv"
    srv=$?
    # The server prints the message twice (callback, then main); the client prints nothing
    # on success, and each side exits 0.
    if [ "$cli" = 0 ] && [ "$srv" = 0 ] && [ "$(grep -c 'UCT TEST SUCCESS' "$s")" = 2 ] &&
        grep -q "sent ABCDEF" "$s" && loaded_ours "$work/ld.hello.srv" &&
        loaded_ours "$work/ld.hello.cli"; then
        pass "uct_hello_world $name"
    else
        fail "uct_hello_world $name (client $cli, server $srv)"
        tail -5 "$s" "$c"
    fi
}
for tl in posix:memory tcp:lo; do
    hello "${tl%%:*}" "${tl#*:}" -i 16
    hello "${tl%%:*}" "${tl#*:}" -i 200
    hello "${tl%%:*}" "${tl#*:}" -b 16
    hello "${tl%%:*}" "${tl#*:}" -b 4000
    hello "${tl%%:*}" "${tl#*:}" -z 16
    hello "${tl%%:*}" "${tl#*:}" -z 4000
done

echo "=== 3. Debian's ucx_perftest"
perftest() { # expect(pass|report) name args...
    local expect=$1 name=$2 port srv cli
    shift 2
    local s="$work/perf.srv.log" c="$work/perf.cli.log"
    rm -f "$work"/ld.perf.*
    port=$(free_port)
    traced "$work/ld.perf.srv" 120 ucx_perftest -p "$port" >"$s" 2>&1 &
    srv=$!
    wait_listening "$port" || { fail "$name: server did not listen"; kill "$srv"; return; }
    traced "$work/ld.perf.cli" 120 \
        ucx_perftest 127.0.0.1 -p "$port" "$@" >"$c" 2>&1
    cli=$?
    wait "$srv"
    srv=$?
    local need=
    [[ " $* " == *" -x "* ]] || need=ucp
    if [ "$cli" = 0 ] && [ "$srv" = 0 ] && grep -q '^Final:' "$c" &&
        loaded_ours "$work/ld.perf.srv" $need && loaded_ours "$work/ld.perf.cli" $need; then
        pass "ucx_perftest $name: $(grep '^Final:' "$c" | tr -s ' ')"
    elif [ "$expect" = pass ]; then
        fail "ucx_perftest $name (client $cli, server $srv)"
        grep -hi 'error\|fail' "$c" "$s" | head -3
    else
        echo "report: ucx_perftest $name does not run yet on rucx's libucp (client $cli," \
            "server $srv): $(grep -hi 'error\|warn\|fail' "$c" "$s" | head -1 |
                sed 's/\x1b\[[0-9;]*m//g')"
    fi
}
for tl in posix sysv cma tcp; do
    dev=memory
    [ "$tl" = tcp ] && dev=lo
    if [ "$tl" != cma ]; then
        perftest pass "am_lat $tl" -t am_lat -x "$tl" -d "$dev" -n 10000
        perftest pass "am_bw bcopy $tl" -t am_bw -x "$tl" -d "$dev" -D bcopy -s 4096 -n 10000
        perftest pass "am_bw zcopy $tl" -t am_bw -x "$tl" -d "$dev" -D zcopy -s 8000 -n 2000
    fi
    perftest pass "put_bw zcopy $tl" -t put_bw -x "$tl" -d "$dev" -D zcopy -s 65536 -n 1000
    perftest pass "get zcopy $tl" -t get -x "$tl" -d "$dev" -D zcopy -s 65536 -n 1000
done
perftest pass "put_bw short posix" -t put_bw -x posix -d memory -s 8 -n 10000
perftest pass "get bcopy sysv" -t get -x sysv -d memory -D bcopy -s 4096 -n 2000
perftest pass "put_lat bcopy sysv" -t put_lat -x sysv -d memory -D bcopy -s 2048 -n 5000
for tl in posix:memory tcp:lo; do
    perftest pass "add_lat ${tl%%:*}" -t add_lat -x "${tl%%:*}" -d "${tl#*:}" -n 5000
    perftest pass "fadd ${tl%%:*}" -t fadd -x "${tl%%:*}" -d "${tl#*:}" -n 5000
    perftest pass "cswap ${tl%%:*}" -t cswap -x "${tl%%:*}" -d "${tl#*:}" -n 5000
done
for t in tag_lat tag_bw ucp_put_bw ucp_get ucp_am_lat stream_bw; do
    expect=report
    [[ " $UCP_TESTS_EXPECTED " == *" $t "* ]] && expect=pass
    for tls in shm,self tcp; do
        UCX_TLS=$tls perftest "$expect" "$t UCX_TLS=$tls" -t "$t" -s 8 -n 10000
    done
done

echo "=== $passed passed, $fails failed"
exit "$fails"
