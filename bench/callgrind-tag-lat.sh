#!/usr/bin/env bash
# Instructions per tag_lat iteration over posix shared memory, per function, for rucx's perftest
# and for UCX 1.13's ucx_perftest, counted the same way: the server runs natively on one core,
# the client under callgrind on the other, once with N1 and once with N2 = 2 * N1 iterations,
# and each row is a function's self cost difference divided by N1, so start-up and the final
# report drop out. Rows of at least 5 instructions per iteration are printed, then the sum over
# all functions and the progress calls per iteration. It reports; it asserts nothing.
#
# Under callgrind the client runs some fifty times slower than the server, so the reply is
# usually waiting by the time the client polls: both programs then take the same path (the
# receive is posted after the send and before the next progress call, as in ucx_perftest), and
# few empty polls enter the count. Those that do depend on timing, so compare per-function rows
# and the progress calls per iteration, not only the sums.
#   bench/callgrind-tag-lat.sh [N1]        (default 20000)
# Environment: RUCX_PERFTEST (path to a built perftest; default: cargo build --release),
#              SIZE (8), SERVER_CORE (0), CLIENT_CORE (1), NO_UCX (1: skip UCX),
#              UCX122 (the folder of UCX 1.22's release build, bench/fetch-ucx122.sh prints
#              it: its bin/ucx_perftest on its lib/ is counted too).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../capi/tests/ports.sh
source "$root/capi/tests/ports.sh"
N1=${1:-20000}
N2=$((2 * N1))
SIZE=${SIZE:-8}
command -v valgrind >/dev/null || { echo "install valgrind" >&2; exit 1; }
if [ -z "${RUCX_PERFTEST:-}" ]; then
    (cd "$root" && cargo build --release -q -p perftest)
    RUCX_PERFTEST=${CARGO_TARGET_DIR:-$root/target}/release/perftest
fi
UCX_PERFTEST=
if [ -z "${NO_UCX:-}" ]; then
    UCX_PERFTEST=$(command -v ucx_perftest || true)
    [ -n "$UCX_PERFTEST" ] || echo "# ucx_perftest not found (apt-get install ucx-utils): rucx only" >&2
fi
work=$(mktemp -d)
srv_pid=
trap '[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; rm -rf "$work"' EXIT

# count PROG ENVS N OUT: one server/client pair, the client under callgrind, profile in OUT.
count() {
    local prog=$1 envs=$2 n=$3 out=$4 port pid
    # The server listens on a port the kernel picks (-p 0), read back from its socket.
    # shellcheck disable=SC2086 # ENVS: NAME=VALUE words without spaces
    env $envs taskset -c "${SERVER_CORE:-0}" "$prog" -p 0 >"$work/server.log" 2>&1 &
    srv_pid=$!
    pid=$(program_pid "$srv_pid" "$prog") && port=$(wildcard_port "$pid") ||
        { cat "$work/server.log" >&2; echo "the server did not listen" >&2; exit 1; }
    # shellcheck disable=SC2086
    env $envs taskset -c "${CLIENT_CORE:-1}" valgrind --tool=callgrind --compress-strings=no \
        --callgrind-out-file="$out" --log-file="$out.log" \
        "$prog" 127.0.0.1 -p "$port" -t tag_lat -s "$SIZE" -n "$n" -w 0 \
        >"$work/client.log" 2>&1 || { cat "$work/client.log" "$work/server.log" >&2; exit 1; }
    wait "$srv_pid" || true
    srv_pid=
}

# report NAME PROGRESS_FN PROFILE_N1 PROFILE_N2
report() {
    python3 - "$@" "$N1" <<'EOF'
import collections, sys
name, progress_fn, p1, p2, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def load(path):
    cost, calls = collections.Counter(), collections.Counter()
    fn = cfn = None
    after_call = False
    for line in open(path):
        if line.startswith("fn="):
            fn = line[3:].strip()
        elif line.startswith("cfn="):
            cfn = line[4:].strip()
        elif line.startswith("calls="):
            calls[cfn] += int(line.split()[0][6:])
            after_call = True  # the next cost line is the call's inclusive cost, not self cost
        elif line[:1].isdigit() or line[:1] in "+-*":
            if after_call:
                after_call = False
                continue
            parts = line.split()
            if fn and len(parts) >= 2:
                cost[fn] += int(parts[1])
    return cost, calls
(c1, k1), (c2, k2) = load(p1), load(p2)
per = {f: (c2[f] - c1[f]) / n for f in set(c1) | set(c2)}
print(f"# {name}: client instructions per iteration (self cost, {2 * n} minus {n} iterations)")
for f, v in sorted(per.items(), key=lambda x: -x[1]):
    if v < 5:
        break
    print(f"{v:9.1f}  {f}")
polls = sum(k2[f] - k1[f] for f in k2 if f.endswith(progress_fn)) / n
print(f"{sum(per.values()):9.1f}  (all functions)")
print(f"{polls:9.2f}  progress calls per iteration ({progress_fn})")
EOF
}

count "$RUCX_PERFTEST" RUCX_TLS=posix,cma,self "$N1" "$work/rucx1"
count "$RUCX_PERFTEST" RUCX_TLS=posix,cma,self "$N2" "$work/rucx2"
report "rucx perftest -t tag_lat -s $SIZE" "Worker>::progress" "$work/rucx1" "$work/rucx2"
if [ -n "$UCX_PERFTEST" ]; then
    count "$UCX_PERFTEST" UCX_TLS=posix,cma,self "$N1" "$work/ucx1"
    count "$UCX_PERFTEST" UCX_TLS=posix,cma,self "$N2" "$work/ucx2"
    echo
    report "UCX ucx_perftest -t tag_lat -s $SIZE" "ucp_worker_progress" "$work/ucx1" "$work/ucx2"
fi
if [ -n "${UCX122:-}" ]; then
    e="UCX_TLS=posix,cma,self LD_LIBRARY_PATH=$UCX122/lib"
    count "$UCX122/bin/ucx_perftest" "$e" "$N1" "$work/ucx122_1"
    count "$UCX122/bin/ucx_perftest" "$e" "$N2" "$work/ucx122_2"
    echo
    report "UCX 1.22 ucx_perftest -t tag_lat -s $SIZE" "ucp_worker_progress" "$work/ucx122_1" \
        "$work/ucx122_2"
fi
