#!/usr/bin/env bash
# The stream and active-message paths as users compare them: the same binaries on rucx's
# libraries, on UCX 1.13's (Debian) and on UCX 1.22's (its wheel): capi/bench/am_stream.c
# (am_lat, am_bw, stream_bw through the C API), Debian's ucx_perftest (stream_bw, ucp_am_lat,
# ucp_am_bw) and UCX 1.22's io_demo. Server on core 0, client on core 1, the programs
# alternating, REPEATS runs each; prints the medians and, per row, rucx over the best UCX
# (latency: lower is better, so the goal is <= 1.00; bandwidth: >= 1.00). It reports; it
# asserts nothing.
#   capi/bench/apis-vs-ucx.sh LIBDIR [REPEATS] [CACHE]
# SECTIONS="capi perftest iodemo" (the default) chooses the groups of rows.
# LIBDIR from capi/build.sh (release); CACHE as capi/tests/ucx-apps/fetch.sh (UCX 1.22).
# Debian's ucx_perftest imports libuct and libucs internals: on rucx it needs LIBDIR to hold
# rucx's libuct.so.0 and full libucs.so.0; rows it cannot run say n/a.
set -u
lib=$(cd "${1:?usage: apis-vs-ucx.sh LIBDIR [REPEATS] [CACHE]}" && pwd)
reps=${2:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${3:-$root/target/ucx-apps}
bash "$root/capi/tests/ucx-apps/fetch.sh" "$cache" >/dev/null || exit 1
u122=$cache/ucx122/libucx
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SERVER_CORE=${SERVER_CORE:-0}
CLIENT_CORE=${CLIENT_CORE:-1}

want() { [[ " ${SECTIONS:-capi perftest iodemo} " == *" $1 "* ]]; }

# Servers listen on port 0; program_pid and wildcard_port read the port they got.
# shellcheck source=../tests/ports.sh
. "$root/capi/tests/ports.sh"
median() {
    sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'
}

# perftest WHO TLS TEST SIZE ITERS: one server/client run; prints the client's final CSV line.
perftest() {
    local who=$1 tls=$2 test=$3 size=$4 iters=$5 bin envs
    case $who in
        ucx) bin=/usr/bin/ucx_perftest; envs=() ;;
        rucx) bin=/usr/bin/ucx_perftest; envs=(LD_LIBRARY_PATH="$lib") ;;
        ucx122) bin=$u122/bin/ucx_perftest; envs=(LD_LIBRARY_PATH="$u122/lib") ;;
    esac
    local port
    env "${envs[@]}" UCX_TLS="$tls" UCX_NET_DEVICES=lo timeout 120 \
        taskset -c "$SERVER_CORE" "$bin" -p 0 > "$work/srv" 2>&1 &
    local spid=$!
    port=$(wildcard_port "$(program_pid "$spid" "$bin")") ||
        { kill "$spid"; wait "$spid"; return; }
    env "${envs[@]}" UCX_TLS="$tls" UCX_NET_DEVICES=lo timeout 120 \
        taskset -c "$CLIENT_CORE" "$bin" 127.0.0.1 -p "$port" -t "$test" -s "$size" \
        -n "$iters" -w $((iters / 10 + 1)) -v > "$work/out" 2>&1
    wait "$spid" 2>/dev/null
    grep -E '^ *[0-9]+,' "$work/out" | tail -1 | tr -d ' '
}

# io_demo WHO TLS SIZE [-A]: 2 s of writes of SIZE bytes; prints the client's write MB/s.
iodemo() {
    local who=$1 tls=$2 size=$3 am=${4:-} envs
    case $who in
        rucx) envs=(LD_LIBRARY_PATH="$lib") ;;
        ucx122) envs=(LD_LIBRARY_PATH="$u122/lib") ;;
    esac
    local port
    env "${envs[@]}" UCX_TLS="$tls" UCX_NET_DEVICES=lo timeout 60 taskset -c "$SERVER_CORE" \
        "$u122/bin/io_demo" -p 0 -d "$size:$size" -o write $am > "$work/srv" 2>&1 &
    local spid=$!
    port=$(wildcard_port "$(program_pid "$spid" io_demo)") ||
        { kill "$spid"; wait "$spid"; return; }
    env "${envs[@]}" UCX_TLS="$tls" UCX_NET_DEVICES=lo timeout 60 taskset -c "$CLIENT_CORE" \
        "$u122/bin/io_demo" -p "$port" -d "$size:$size" -o write $am -l 2s -P 1 127.0.0.1 \
        > "$work/out" 2>&1
    kill -INT "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    grep -oE "write [0-9.]+ MBs" "$work/out" | tail -1 | awk '{print $2}'
}

${CC:-cc} -O2 -o "$work/am_stream" "$root/capi/bench/am_stream.c" -lucp -lucs || exit 1

# cprog WHO TLS TEST SIZE ITERS: am_stream on WHO's libraries; prints "<us per msg> <MB/s>".
cprog() {
    local who=$1 tls=$2 test=$3 size=$4 iters=$5 envs
    case $who in
        ucx) envs=() ;;
        rucx) envs=(LD_LIBRARY_PATH="$lib") ;;
        ucx122) envs=(LD_LIBRARY_PATH="$u122/lib") ;;
    esac
    env "${envs[@]}" UCX_TLS="$tls" UCX_NET_DEVICES=lo timeout 120 \
        taskset -c "$SERVER_CORE,$CLIENT_CORE" "$work/am_stream" "$test" "$size" "$iters" \
        2>/dev/null | awk '{print $3, $4}'
}

printf "# median of %s runs, alternating; server core %s, client core %s\n" "$reps" "$SERVER_CORE" "$CLIENT_CORE"
printf "# lat rows: typical latency us (lower is better); bw rows: MB/s (higher is better)\n"
printf "%-32s %12s %12s %12s %10s\n" row "UCX 1.13" "UCX 1.22" rucx "rucx/best"
for cls in shm tcp; do
    tls=$([ $cls = shm ] && echo posix,cma,self || echo tcp)
    for t in am_lat:lat am_bw:bw stream_bw:bw; do
        want capi || continue
        test=${t%%:*}
        kind=${t##*:}
        col=$([ "$kind" = lat ] && echo 1 || echo 2)
        for size in 8 65536 1048576; do
            iters=$([ "$size" -ge 1048576 ] && echo 300 || echo 10000)
            declare -A cv=([ucx]="" [ucx122]="" [rucx]="")
            for r in $(seq "$reps"); do
                order=(ucx ucx122 rucx)
                [ $((r % 2)) = 0 ] && order=(rucx ucx122 ucx)
                for who in "${order[@]}"; do
                    res=$(cprog "$who" "$tls" "$test" "$size" "$iters")
                    [ -n "$res" ] && cv[$who]+="$(echo "$res" | cut -d' ' -f$col)"$'\n'
                done
            done
            u=$(printf "%s" "${cv[ucx]}" | grep . | median)
            u2=$(printf "%s" "${cv[ucx122]}" | grep . | median)
            rc=$(printf "%s" "${cv[rucx]}" | grep . | median)
            ratio=$(awk -v r="$rc" -v a="$u" -v b="$u2" -v k="$kind" 'BEGIN {
                best = b
                if (a != "nan" && (b == "nan" || (k == "lat" && a+0 < b+0) || (k != "lat" && a+0 > b+0))) best = a
                if (r == "nan" || best == "nan" || best+0 == 0) print "n/a"; else printf "%.2f", r/best }')
            printf "%-32s %12s %12s %12s %10s\n" "$cls C-API $test $size" "$u" "$u2" "$rc" "$ratio"
        done
    done
done
for cls in shm tcp; do
    tls=$([ $cls = shm ] && echo posix,cma,self || echo tcp)
    for t in stream_bw:bw ucp_am_lat:lat ucp_am_bw:bw; do
        want perftest || continue
        test=${t%%:*}
        kind=${t##*:}
        col=$([ "$kind" = lat ] && echo 2 || echo 6)
        for size in 8 65536 1048576; do
            iters=$([ "$size" -ge 1048576 ] && echo 500 || echo 20000)
            declare -A vals=([ucx]="" [ucx122]="" [rucx]="")
            for r in $(seq "$reps"); do
                order=(ucx ucx122 rucx)
                [ $((r % 2)) = 0 ] && order=(rucx ucx122 ucx)
                for who in "${order[@]}"; do
                    res=$(perftest "$who" "$tls" "$test" "$size" "$iters")
                    [ -n "$res" ] && vals[$who]+="$(echo "$res" | cut -d, -f$col)"$'\n'
                done
            done
            u=$(printf "%s" "${vals[ucx]}" | grep . | median)
            u2=$(printf "%s" "${vals[ucx122]}" | grep . | median)
            rc=$(printf "%s" "${vals[rucx]}" | grep . | median)
            ratio=$(awk -v r="$rc" -v a="$u" -v b="$u2" -v k="$kind" 'BEGIN {
                best = b
                if (a != "nan" && (b == "nan" || (k == "lat" && a+0 < b+0) || (k != "lat" && a+0 > b+0))) best = a
                if (r == "nan" || best == "nan" || best+0 == 0) print "n/a"; else printf "%.2f", r/best }')
            printf "%-32s %12s %12s %12s %10s\n" "$cls $test $size" "$u" "$u2" "$rc" "$ratio"
        done
    done
    for am in "" -A; do
        want iodemo || continue
        for size in 65536 1048576; do
            declare -A io=([ucx122]="" [rucx]="")
            for r in $(seq "$reps"); do
                for who in ucx122 rucx; do
                    v=$(iodemo "$who" "$tls" "$size" "$am")
                    [ -n "$v" ] && io[$who]+="$v"$'\n'
                done
            done
            u2=$(printf "%s" "${io[ucx122]}" | grep . | median)
            rc=$(printf "%s" "${io[rucx]}" | grep . | median)
            ratio=$(awk -v r="$rc" -v b="$u2" 'BEGIN { if (r == "nan" || b == "nan" || b+0 == 0) print "n/a"; else printf "%.2f", r/b }')
            printf "%-32s %12s %12s %12s %10s\n" "$cls io_demo${am:+ AM} write $size" "-" "$u2" "$rc" "$ratio"
        done
    done
done
