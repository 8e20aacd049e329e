#!/usr/bin/env bash
# Where the time of both processes of a ucx_perftest run goes, by function and by instruction,
# with rucx's libraries (or any UCX build): `perf record -e cpu-clock` on the server (core 0)
# and the client (core 1). This VM has no hardware counters, but the timer-driven samples still
# land where a core waits, so a stall shows as one instruction holding most of its function's
# samples (perf attributes a sample to the instruction after the one that waited). Found this
# way: a read of the FIFO line the sender was about to write, a stack reload that could not be
# served from the stores before it, the receiver's wait for each next element (see
# uct/src/mm/fifo.rs BufArea, ucp EpHandle, MmIface::take). A report, not a timed test: the
# sampling slows the run.
#   capi/bench/perf-both-sides.sh LIBDIR PERFTEST_ARGS...
# e.g. capi/bench/perf-both-sides.sh target/capi-lib -t tag_bw -s 8 -n 20000000
# Environment: PERFTEST (the ucx_perftest binary; default UCX 1.22's from UCX122, else
# Debian's), UCX122 (UCX 1.22's folder, bench/fetch-ucx122.sh), TLS (UCX_TLS, default
# shm,self; empty for uct tests, which name their transport), SERVER_ARGS (given to the server
# too: uct tests need "-x posix -d memory"), TOP (functions per side, 10), HOT (functions per
# side whose hottest instructions are shown, 3), PERIOD (sampling period in ns, 250000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
libdir=${1:?usage: perf-both-sides.sh LIBDIR PERFTEST_ARGS...}
shift
[ $# -gt 0 ] || { echo "usage: perf-both-sides.sh LIBDIR PERFTEST_ARGS..." >&2; exit 2; }
libdir=$(realpath "$libdir")
command -v perf >/dev/null || { echo "perf not found (apt-get install linux-perf)" >&2; exit 1; }
bin=${PERFTEST:-}
if [ -z "$bin" ]; then
    if [ -n "${UCX122:-}" ] && [ -x "$UCX122/bin/ucx_perftest" ]; then
        bin=$UCX122/bin/ucx_perftest
    else
        bin=$(command -v ucx_perftest) || { echo "no ucx_perftest (set PERFTEST)" >&2; exit 1; }
    fi
fi
# shellcheck source=capi/tests/ports.sh
. "$here/../tests/ports.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tls=${TLS-shm,self}
period=${PERIOD:-250000}
envs=(LD_LIBRARY_PATH="$libdir")
[ -z "$tls" ] || envs+=(UCX_TLS="$tls")
# shellcheck disable=SC2086
env "${envs[@]}" taskset -c 0 perf record -q -e cpu-clock -c "$period" -o "$work/srv.data" \
    "$bin" -p 0 ${SERVER_ARGS:-} >"$work/srv.out" 2>&1 &
srv=$!
port=$(wildcard_port "$(program_pid "$srv" "$bin")")
[ -n "$port" ] || { echo "the server did not listen:" >&2; cat "$work/srv.out" >&2; exit 1; }
env "${envs[@]}" taskset -c 1 perf record -q -e cpu-clock -c "$period" -o "$work/cli.data" \
    "$bin" 127.0.0.1 -p "$port" "$@" >"$work/cli.out" 2>&1 || true
wait "$srv" || true
grep -q '^Final' "$work/cli.out" || { echo "the run failed:" >&2; tail -20 "$work/cli.out" >&2; exit 1; }
echo "# $bin $* on $libdir (UCX_TLS=${tls:-unset})"
grep '^Final' "$work/cli.out"
for side in srv cli; do
    name=server
    [ $side = cli ] && name=client
    echo
    echo "## $name: share of samples by function"
    perf report -i "$work/$side.data" --stdio --sort sym 2>/dev/null |
        grep -v '^#' | grep -v '^$' | head -"${TOP:-10}"
    # The hottest functions from the libraries under test: their hottest instructions.
    perf report -i "$work/$side.data" --stdio --sort dso,sym 2>/dev/null |
        awk -v d="$libdir" '$1 ~ /%/ && index($0, d) == 0 && $2 ~ /^lib(ucp|uct|ucs)\.so/ {
            sub(/^ *[0-9.]+% +[^ ]+ +\[\.\] /, ""); print }' |
        head -"${HOT:-3}" | while IFS= read -r fn; do
            echo
            echo "### $name: $fn (percent of its samples, hottest instructions, source lines)"
            perf annotate -i "$work/$side.data" --stdio "$fn" </dev/null 2>/dev/null |
                grep -E '^ +[0-9]+\.[0-9]+ :' | sort -rn | head -5 || true
            perf annotate -i "$work/$side.data" --stdio -l "$fn" </dev/null 2>/dev/null |
                grep -A8 'Sorted summary' | sed -n '4,8p' || true
        done
done
