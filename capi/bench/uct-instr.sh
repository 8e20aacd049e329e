#!/usr/bin/env bash
# Instructions per iteration of Debian's ucx_perftest uct tests and of its ucp tests (AM,
# stream, tag), rucx's libraries against UCX 1.13's (callgrind; a count, so it can be taken on
# a busy machine):
#   capi/bench/uct-instr.sh DIR        (DIR from capi/build.sh, release profile)
# With UCX122=FOLDER (UCX 1.22's unpacked wheel: bin/ucx_perftest, lib/; see
# bench/fetch-ucx122.sh) a third column counts UCX 1.22's own ucx_perftest on its own lib/.
# ROWS=REGEX keeps the rows whose label matches (e.g. ROWS='^(ucp_am|stream)').
# The client runs under callgrind twice, with N1 and N2 iterations; (I(N2) - I(N1)) / (N2 - N1)
# is what one iteration costs it, setup excluded. The server runs natively (it answers at
# once next to the slowed-down client, so the client's polling loops spin little). The latency
# rows still count the client's spinning while it waits for the server, which depends on
# scheduling: on a loaded machine they swing widely (even below zero); take them on a quiet
# one. The bandwidth rows are steadier.
set -uo pipefail
lib=$(cd "${1:?usage: uct-instr.sh DIR}" && pwd)
n1=${N1:-2000}
n2=${N2:-12000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v valgrind >/dev/null || { echo "install valgrind"; exit 1; }

# Servers listen on port 0; program_pid and wildcard_port read the port they got.
# shellcheck source=../tests/ports.sh
. "$(dirname "$0")/../tests/ports.sh"

# instr LIBDIR N ARGS...: instructions of the client's whole run (UCX_TLS from `tls`, the
# row's transports, for the ucp tests).
tls=
perftest=ucx_perftest
instr() {
    local ldp=$1 n=$2
    shift 2
    local port srv
    [ -n "$tls" ] && export UCX_TLS=$tls UCX_NET_DEVICES=lo
    [ -z "$tls" ] && unset UCX_TLS UCX_NET_DEVICES
    LD_LIBRARY_PATH=$ldp timeout 600 "$perftest" -p 0 >"$work/srv" 2>&1 &
    srv=$!
    port=$(wildcard_port "$(program_pid "$srv" ucx_perftest)") || { kill "$srv"; echo -; return; }
    LD_LIBRARY_PATH=$ldp timeout 600 valgrind --tool=callgrind --callgrind-out-file="$work/cg" \
        "$perftest" 127.0.0.1 -p "$port" -n "$n" -w 0 "$@" >"$work/cli" 2>&1
    wait "$srv"
    grep -q '^Final:' "$work/cli" || { echo -; return; }
    sed -n 's/^summary: //p; s/^totals: //p' "$work/cg" | head -1
}

per_iter() {
    local a b
    a=$(instr "$@" "$n1" "${args[@]}") b=$(instr "$@" "$n2" "${args[@]}")
    if [ "$a" = - ] || [ "$b" = - ]; then
        echo -
    else
        echo $(((b - a) / (n2 - n1)))
    fi
}

ucx122=${UCX122:-}
printf '%-28s %10s %10s %7s' test rucx ucx113 ratio
[ -n "$ucx122" ] && printf ' %10s %7s' ucx122 ratio
echo
while IFS='|' read -r label tls line; do
    [[ "$label" =~ ${ROWS:-.} ]] || continue
    read -r -a args <<<"$line"
    perftest=ucx_perftest
    r=$(per_iter "$lib")
    u=$(per_iter "")
    ratio=$(awk -v r="$r" -v u="$u" 'BEGIN { if (r == "-" || u == "-" || u == 0) print "-"; else printf "%.2f", r / u }')
    printf '%-28s %10s %10s %7s' "$label" "$r" "$u" "$ratio"
    if [ -n "$ucx122" ]; then
        perftest=$ucx122/bin/ucx_perftest
        u=$(per_iter "$ucx122/lib")
        ratio=$(awk -v r="$r" -v u="$u" 'BEGIN { if (r == "-" || u == "-" || u == 0) print "-"; else printf "%.2f", r / u }')
        printf ' %10s %7s' "$u" "$ratio"
    fi
    echo
done <<'EOF'
am_lat posix 8B||-t am_lat -x posix -d memory -s 8
am_bw posix 8B||-t am_bw -x posix -d memory -s 8
am_bw posix bcopy 1KiB||-t am_bw -x posix -d memory -D bcopy -s 1024
put_bw posix short 8B||-t put_bw -x posix -d memory -s 8
put_bw posix bcopy 4KiB||-t put_bw -x posix -d memory -D bcopy -s 4096
am_lat tcp 8B||-t am_lat -x tcp -d lo -s 8
ucp_am_lat shm 8B|shm,self|-t ucp_am_lat -s 8
ucp_am_bw shm 8B|shm,self|-t ucp_am_bw -s 8
stream_bw shm 8B|shm,self|-t stream_bw -s 8
tag_lat shm 8B|shm,self|-t tag_lat -s 8
ucp_am_lat tcp 8B|tcp|-t ucp_am_lat -s 8
stream_bw tcp 8B|tcp|-t stream_bw -s 8
EOF
