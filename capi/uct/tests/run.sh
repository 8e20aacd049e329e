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
#     the ucp tests (tag, rma, am, stream, atomics) over shm and tcp, which must all pass.
# Every process must have loaded DIR's libraries (LD_DEBUG=libs, checked per process).
# Ports (capi/tests/ports.sh): ucx_perftest's server listens on port 0 and its port is read
# from the kernel's socket table; uct_hello_world takes no port 0, so its server gets a port
# the kernel just handed out and is started again on another when it lost that one.
# Exit status: the number of failures.
set -uo pipefail
lib=$(cd "${1:?usage: run.sh DIR [WORK]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${2:-$root/target/uct-tests}
mkdir -p "$work"
work=$(cd "$work" && pwd)
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
# shellcheck source=../../tests/ports.sh
. "$root/capi/tests/ports.sh"

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
    local tl=$1 dev=$2 mode=$3 size=$4 port srv cli name="$1/$2 $3 -s $4" try
    local s="$work/hello.srv.log" c="$work/hello.cli.log"
    for try in 1 2 3 4 5; do
        rm -f "$work"/ld.hello.*
        port=$(kernel_port)
        traced "$work/ld.hello.srv" 60 \
            "$work/uct_hello_world" -d "$dev" -t "$tl" "$mode" -s "$size" -p "$port" >"$s" 2>&1 &
        srv=$!
        listens_on "$(program_pid "$srv" uct_hello_world)" "$port" && break
        # Another process took the port first: the server could not bind it and exits.
        kill "$srv" 2>/dev/null
        wait "$srv"
        echo "uct_hello_world $name: port $port was taken (try $try): $(tail -n 1 "$s")"
        srv=
    done
    [ -n "$srv" ] || { fail "$name: the server listened on none of 5 ports"; return; }
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
perftest() { # name args...
    local name=$1 port srv cli
    shift
    local s="$work/perf.srv.log" c="$work/perf.cli.log"
    rm -f "$work"/ld.perf.*
    traced "$work/ld.perf.srv" 120 ucx_perftest -p 0 >"$s" 2>&1 &
    srv=$!
    port=$(wildcard_port "$(program_pid "$srv" ucx_perftest)") ||
        { fail "$name: the server did not listen"; kill "$srv"; return; }
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
    else
        fail "ucx_perftest $name (client $cli, server $srv)"
        grep -hi 'error\|fail' "$c" "$s" | head -3
        return 1
    fi
}
for tl in posix sysv cma tcp; do
    dev=memory
    [ "$tl" = tcp ] && dev=lo
    if [ "$tl" != cma ]; then
        perftest "am_lat $tl" -t am_lat -x "$tl" -d "$dev" -n 10000
        perftest "am_bw bcopy $tl" -t am_bw -x "$tl" -d "$dev" -D bcopy -s 4096 -n 10000
        perftest "am_bw zcopy $tl" -t am_bw -x "$tl" -d "$dev" -D zcopy -s 8000 -n 2000
    fi
    perftest "put_bw zcopy $tl" -t put_bw -x "$tl" -d "$dev" -D zcopy -s 65536 -n 1000
    perftest "get zcopy $tl" -t get -x "$tl" -d "$dev" -D zcopy -s 65536 -n 1000
done
perftest "put_bw short posix" -t put_bw -x posix -d memory -s 8 -n 10000
perftest "get bcopy sysv" -t get -x sysv -d memory -D bcopy -s 4096 -n 2000
perftest "put_lat bcopy sysv" -t put_lat -x sysv -d memory -D bcopy -s 2048 -n 5000
for tl in posix:memory tcp:lo; do
    perftest "add_lat ${tl%%:*}" -t add_lat -x "${tl%%:*}" -d "${tl#*:}" -n 5000
    perftest "fadd ${tl%%:*}" -t fadd -x "${tl%%:*}" -d "${tl#*:}" -n 5000
    perftest "cswap ${tl%%:*}" -t cswap -x "${tl%%:*}" -d "${tl#*:}" -n 5000
done
# The ucp tests, over shared memory and tcp: eager and rendezvous sizes; ucp_put_lat waits
# for each sequence number to land in the peer's memory (a data check), tag_sync_lat for each
# acknowledgement.
ucp_tests=(
    "tag_lat -s 8 -n 10000" "tag_lat -s 1048576 -n 100" "tag_bw -s 65536 -n 2000"
    "tag_sync_lat -s 8 -n 2000" "ucp_put_lat -s 8 -n 5000" "ucp_put_lat -s 65536 -n 500"
    "ucp_put_bw -s 8 -n 10000" "ucp_put_bw -s 65536 -n 2000" "ucp_get -s 8 -n 2000"
    "ucp_get -s 65536 -n 200" "ucp_am_lat -s 8 -n 10000" "ucp_am_lat -s 65536 -n 1000"
    "ucp_am_bw -s 1048576 -n 100" "stream_lat -s 8 -n 5000" "stream_bw -s 8 -n 10000"
    "stream_bw -s 65536 -n 1000" "stream_bw -s 8 -n 10000 -r recv_data"
    "stream_bw -s 65536 -n 1000 -r recv_data" "ucp_fadd -n 2000" "ucp_cswap -n 2000"
)
for tls in shm,self tcp; do
    for t in "${ucp_tests[@]}"; do
        # shellcheck disable=SC2086 # the test's name and arguments are words
        UCX_TLS=$tls perftest "$t UCX_TLS=$tls" -t $t </dev/null
    done
done

echo "=== $passed passed, $fails failed"
exit "$fails"
