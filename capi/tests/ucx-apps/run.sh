#!/usr/bin/env bash
# UCX's own programs on rucx's libraries in LIBDIR (made by capi/build.sh):
#   - ucp_hello_world and ucp_client_server from Debian's ucx 1.13.1 source, compiled against
#     Debian's headers (libucx-dev) and linked against Debian's libucp/libucs, then run with
#     LD_LIBRARY_PATH=LIBDIR: hello_world in modes -b -w -f -c, -s 1000000, -e send/recv/
#     keepalive; client_server with -c tag/stream/am, alone and with -s 1000000 -i 3 -v 4;
#     each over shared memory (UCX_TLS=shm) and tcp on loopback;
#   - UCX 1.22's io_demo (from its wheel) in tag and AM modes with its data checks on (-q);
#   - UCX 1.22's ucx_perftest (same wheel), unmodified, its ucp tests (tag, put, get, AM,
#     stream; eager and rendezvous sizes);
#   - every constant of UCX 1.22's headers checked against rucx's values;
#   - capi/tests/c/sgl_put.c, built against UCX 1.22's headers: IOV and SGL puts.
# Every process must have loaded LIBDIR/libucp.so.0 (LD_DEBUG=libs shows the file the loader
# initialised). Ports (capi/tests/ports.sh): ucp_client_server and io_demo listen on port 0
# (the first prints its port, the second's is read from the kernel's socket table);
# ucp_hello_world takes no port 0, so its server gets a port the kernel just handed out and is
# started again on another when it lost that one.
#   capi/tests/ucx-apps/run.sh LIBDIR [CACHE]   (CACHE: see fetch.sh; default target/ucx-apps)
set -uo pipefail
lib=$(cd "${1:?usage: run.sh LIBDIR [CACHE]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cache=${2:-$root/target/ucx-apps}
bash "$here/fetch.sh" "$cache" || { echo "FAIL: fetching UCX's sources and io_demo"; exit 1; }
src=$cache/ucx-src/examples
iodemo=$cache/ucx122/libucx/bin/io_demo
perftest122=$cache/ucx122/libucx/bin/ucx_perftest
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

for p in ucp_hello_world ucp_client_server; do
    ${CC:-cc} -O1 -g -o "$tmp/$p" "$src/$p.c" -I"$src" -I/usr/include -lucp -lucs \
        || { echo "FAIL: compiling $p against /usr/include (install libucx-dev)"; exit 1; }
done
# io_demo links libuct.so.0 but calls none of its functions; capi/build.sh puts rucx's in
# LIBDIR, and for a LIBDIR without one an empty library of that name satisfies the loader (the
# system's libuct would need UCX's own libucs).
extra=
if [ ! -f "$lib/libuct.so.0" ]; then
    mkdir -p "$tmp/uct"
    echo "" | ${CC:-cc} -shared -x c - -o "$tmp/uct/libuct.so.0" -Wl,-soname,libuct.so.0
    extra=:$tmp/uct
fi

# shellcheck source=../ports.sh
. "$here/../ports.sh"

# Runs a command with rucx's libraries and a record of the libraries the loader initialised.
# $1: a name for the record; $2: the output file; the rest: the command.
rucx() {
    local tag=$1 out=$2
    shift 2
    # In a subshell whose own report of a program killed on purpose (-e modes) is dropped
    # (the `exit` keeps bash from exec'ing the program in the subshell itself).
    (env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$lib$extra" LD_DEBUG=libs \
        LD_DEBUG_OUTPUT="$tmp/ld.$tag" "$@" > "$out" 2>&1; exit $?) 2>/dev/null
}

# As rucx, in the background: `spid` is a subshell that waits for the server (and drops the
# shell's report of a server killed on purpose, as `rucx` does); `stop_server SIGNAL` signals
# the server's timeout wrapper, which passes the signal on to the server.
rucx_bg() {
    local tag=$1 out=$2
    shift 2
    # A fresh log: the wait for the server's line must not read the last server's.
    rm -f "$out"
    (env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$lib$extra" LD_DEBUG=libs \
        LD_DEBUG_OUTPUT="$tmp/ld.$tag" "$@" > "$out" 2>&1; exit $?) 2>/dev/null &
    spid=$!
}
stop_server() {
    local t
    t=$(program_pid "$spid" timeout) && kill "-$1" "$t" 2>/dev/null
}

# True when the processes recorded under $1 that loaded a libucp.so.0 (the wrappers, timeout
# and stdbuf, load none) all initialised LIBDIR's, and there were at least $2 of them.
loaded_rucx() {
    local f n=0
    for f in "$tmp"/ld."$1".*; do
        grep -q "calling init: .*libucp.so.0" "$f" 2>/dev/null || continue
        grep -q "calling init: $lib/libucp.so.0" "$f" || return 1
        n=$((n + 1))
    done
    [ "$n" -ge "${2:-2}" ]
}

# The payload lines an example printed (letters and dots), as one digest.
payload() {
    grep -E '^[A-Z.]+$' "$1" | md5sum | cut -c1-32
}

# Waits up to 10 s for a server to print its "listening"/"Waiting" line into $1.
wait_line() {
    local i
    for i in $(seq 100); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# Every constant of UCX 1.22's headers against rucx's values (1.13's: capi/tests/c/run.sh).
if out=$(bash "$here/../c/constants.sh" "$lib" "$cache/ucx122/libucx/include" 2>&1); then
    ok "constants of UCX 1.22's headers (${out##*: })"
else
    bad "constants of UCX 1.22's headers:"
    echo "$out" | sed 's/^/    | /'
fi

# ucp_put_nbx with IOV and UCX 1.20's scatter-gather lists (capi/tests/c/sgl_put.c), built
# against UCX 1.22's headers.
if ${CC:-cc} -O1 -g -Wall -Wextra -Werror -Wno-sign-compare -o "$tmp/sgl_put" \
    "$root/capi/tests/c/sgl_put.c" -I"$cache/ucx122/libucx/include" -L"$lib" -lucp -lucs; then
    for tls in shm,self tcp; do
        tag=sgl$RANDOM
        if UCX_TLS=$tls UCX_NET_DEVICES=lo rucx "$tag" "$tmp/sgl.log" timeout 120 "$tmp/sgl_put" &&
            grep -q "sgl_put: OK" "$tmp/sgl.log" && loaded_rucx "$tag" 1; then
            ok "sgl_put $tls (IOV and SGL puts, UCX 1.22 headers)"
        else
            bad "sgl_put $tls:"
            grep -v WARN "$tmp/sgl.log" | tail -n 8 | cut -c1-200 | sed 's/^/    | /'
        fi
    done
else
    bad "compiling capi/tests/c/sgl_put.c against UCX 1.22's headers"
fi

for tls in shm tcp; do
    export UCX_TLS=$tls UCX_NET_DEVICES=lo
    # ---- ucp_hello_world ----
    for mode in -b -w -f -c "-s 1000000" "-e send" "-e recv" "-e keepalive"; do
        name="hello_world $tls ${mode// /}"
        tag=hw$RANDOM
        ekeep=()
        case "$mode" in -e*) ekeep=(UCX_KEEPALIVE_INTERVAL=200ms RUCX_KEEPALIVE_TIMEOUT=3s) ;; esac
        for try in 1 2 3 4 5; do
            port=$(kernel_port)
            args=($mode -p "$port")
            rucx_bg "$tag" "$tmp/srv.log" env "${ekeep[@]}" timeout 120 stdbuf -oL \
                "$tmp/ucp_hello_world" "${args[@]}"
            listens_on "$(program_pid "$spid" ucp_hello_world)" "$port" && break
            # Another process took the port first: the server could not bind it and exits.
            stop_server TERM
            wait $spid 2>/dev/null
            echo "    ($name: port $port was taken, try $try: $(tail -n 1 "$tmp/srv.log"))"
            rm -f "$tmp"/ld."$tag".*
        done
        rucx "$tag" "$tmp/cli.log" env "${ekeep[@]}" timeout 120 stdbuf -oL \
            "$tmp/ucp_hello_world" "${args[@]}" -n 127.0.0.1
        crc=$?
        wait $spid 2>/dev/null
        src=$?
        why=
        case "$mode" in
            "-e send")
                # The server kills itself before sending; the client sees the failure.
                [ $src = 137 ] || why="server status $src (expected its own SIGKILL)"
                [ $crc = 124 ] || [ $crc -gt 128 -a $crc != 255 ] &&
                    why="client status $crc (hang or crash)"
                grep -qE "failure handler called|Failed to receive" "$tmp/cli.log" ||
                    why="${why:+$why; }the client did not report the failure" ;;
            "-e recv")
                # The client kills itself before receiving; the server's send to it fails.
                [ $crc = 137 ] || why="client status $crc (expected its own SIGKILL)"
                [ $src = 124 ] || [ $src -gt 128 -a $src != 255 ] &&
                    why="${why:+$why; }server status $src (hang or crash)" ;;
            "-e keepalive")
                # The client dies after the exchange; the server's keepalive notices.
                [ $crc = 137 ] || why="client status $crc (expected its own SIGKILL)"
                [ $src = 0 ] || why="server status $src"
                grep -q "failure handler called" "$tmp/srv.log" ||
                    why="${why:+$why; }the server's error handler did not run" ;;
            *)
                [ $crc = 0 ] && [ $src = 0 ] || why="client $crc, server $src"
                grep -q "UCP TEST SUCCESS" "$tmp/cli.log" "$tmp/srv.log" ||
                    why="${why:+$why; }no UCP TEST SUCCESS"
                # The side that received printed what the other sent.
                grep -qE '^[A-Z]{10}' "$tmp/cli.log" "$tmp/srv.log" ||
                    why="${why:+$why; }no payload printed" ;;
        esac
        loaded_rucx "$tag" || why="${why:+$why; }a process did not load $lib/libucp.so.0"
        if [ -z "$why" ]; then ok "$name"; else
            bad "$name: $why"
            tail -n 5 "$tmp/cli.log" "$tmp/srv.log" | cut -c1-200 | sed 's/^/    | /'
        fi
    done
    # ---- ucp_client_server (the server serves clients until killed) ----
    for c in tag stream am; do
        for size in "" "-s 1000000 -i 3 -v 4"; do
            name="client_server $tls -c $c ${size:+$size}"
            tag=cs$RANDOM
            rucx_bg "$tag" "$tmp/srv.log" timeout 120 stdbuf -oL "$tmp/ucp_client_server" \
                -c $c -p 0 $size
            why=
            if wait_line "$tmp/srv.log" "listening on .* port [0-9]+"; then
                port=$(grep -oE "port [0-9]+" "$tmp/srv.log" | head -1 | awk '{print $2}')
                rucx "$tag" "$tmp/cli.log" timeout 120 stdbuf -oL "$tmp/ucp_client_server" \
                    -a 127.0.0.1 -p "$port" -c $c $size || why="client status $?"
                # The server prints the first and the last message it received.
                want=1
                [ -n "$size" ] && want=2
                for i in $(seq 50); do
                    [ "$(grep -c 'UCP TEST SUCCESS' "$tmp/srv.log")" -ge "$want" ] && break
                    sleep 0.1
                done
                got=$(grep -c "UCP TEST SUCCESS" "$tmp/srv.log")
                [ "$got" -ge "$want" ] || why="${why:+$why; }server printed $got of $want messages"
                [ "$(payload "$tmp/srv.log")" = "$(payload "$tmp/cli.log")" ] ||
                    why="${why:+$why; }the server received other data than the client sent"
            else
                why="the server printed no port"
            fi
            stop_server TERM
            wait $spid 2>/dev/null
            loaded_rucx "$tag" || why="${why:+$why; }a process did not load $lib/libucp.so.0"
            if [ -z "$why" ]; then ok "$name"; else
                bad "$name: $why"
                tail -n 5 "$tmp/cli.log" "$tmp/srv.log" | cut -c1-200 | sed 's/^/    | /'
            fi
        done
    done
    # ---- UCX 1.22's ucx_perftest, its ucp tests (Debian's 1.13 one: capi/uct/tests) ----
    for t in "tag_lat -s 8 -n 5000" "tag_bw -s 65536 -n 1000" "ucp_put_lat -s 8 -n 5000" \
        "ucp_get -s 65536 -n 200" "ucp_am_lat -s 8 -n 5000" "ucp_am_bw -s 1048576 -n 100" \
        "stream_bw -s 65536 -n 1000"; do
        name="ucx_perftest 1.22 $tls $t"
        tag=pt$RANDOM
        rucx_bg "$tag" "$tmp/srv.log" timeout 120 "$perftest122" -p 0
        port=$(wildcard_port "$(program_pid "$spid" ucx_perftest)") || port=0
        # shellcheck disable=SC2086 # the test's name and arguments are words
        rucx "$tag" "$tmp/cli.log" timeout 120 "$perftest122" 127.0.0.1 -p "$port" -t $t
        crc=$?
        wait $spid 2>/dev/null
        src=$?
        why=
        [ $crc = 0 ] && [ $src = 0 ] || why="client $crc, server $src"
        grep -q '^Final:' "$tmp/cli.log" || why="${why:+$why; }no final result"
        loaded_rucx "$tag" || why="${why:+$why; }a process did not load $lib/libucp.so.0"
        if [ -z "$why" ]; then ok "$name: $(grep '^Final:' "$tmp/cli.log" | tr -s ' ')"; else
            bad "$name: $why"
            tail -n 5 "$tmp/cli.log" "$tmp/srv.log" | cut -c1-200 | sed 's/^/    | /'
        fi
    done
    # ---- io_demo (UCX 1.22) with its data checks ----
    for am in "" -A; do
        name="io_demo $tls ${am:+AM }(tag${am:+ and AM} API, -q)"
        tag=io$RANDOM
        opts=(-q $am -d 1K:256K -o read,write)
        rucx_bg "$tag" "$tmp/srv.log" timeout 180 "$iodemo" "${opts[@]}" -p 0
        # io_demo's listener is the server's one socket on a wildcard address.
        port=$(wildcard_port "$(program_pid "$spid" io_demo)") || port=0
        opts+=(-p "$port")
        rucx "$tag" "$tmp/cli.log" timeout 180 "$iodemo" "${opts[@]}" -i 300 127.0.0.1
        crc=$?
        stop_server INT
        wait $spid 2>/dev/null
        why=
        [ $crc = 0 ] || why="client status $crc"
        grep -q "Client exit with status 'OK'" "$tmp/cli.log" || why="${why:+$why; }no OK exit"
        grep -qiE "data corruption|validation failed|Assertion" "$tmp/cli.log" "$tmp/srv.log" &&
            why="${why:+$why; }a data check failed"
        loaded_rucx "$tag" || why="${why:+$why; }a process did not load $lib/libucp.so.0"
        if [ -z "$why" ]; then ok "$name"; else
            bad "$name: $why"
            tail -n 5 "$tmp/cli.log" "$tmp/srv.log" | cut -c1-200 | sed 's/^/    | /'
        fi
    done
done
echo "ucx-apps: $pass passed, $fail failed"
[ $fail = 0 ]
