#!/usr/bin/env bash
# Instructions per tag_lat iteration of rucx's perftest over posix shared memory, per function:
# the server runs natively on one core, the client under callgrind on the other, and the script
# prints the client's self cost of each function divided by the iteration count (functions of at
# least 5 instructions per iteration), then the sum over all functions. It reports; it asserts
# nothing. The count of the code on the message path does not depend on timing; the count of
# the waiting loop does (how many empty polls a reply takes), so compare per-function rows.
#   bench/callgrind-tag-lat.sh [ITERS]        (default 20000)
# Environment: RUCX_PERFTEST (path to a built perftest; default: cargo build --release),
#              SIZE (8), WARMUP (0), SERVER_CORE (0), CLIENT_CORE (1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ITERS=${1:-20000}
SIZE=${SIZE:-8}
WARMUP=${WARMUP:-0}
command -v valgrind >/dev/null || { echo "install valgrind" >&2; exit 1; }
if [ -z "${RUCX_PERFTEST:-}" ]; then
    (cd "$root" && cargo build --release -q -p perftest)
    RUCX_PERFTEST=${CARGO_TARGET_DIR:-$root/target}/release/perftest
fi
work=$(mktemp -d)
srv_pid=
trap '[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + ($$ % 20000)))
export RUCX_TLS=posix,cma,self
taskset -c "${SERVER_CORE:-0}" "$RUCX_PERFTEST" -p "$port" >"$work/server.log" 2>&1 &
srv_pid=$!
for _ in $(seq 1 200); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    sleep 0.025
done
taskset -c "${CLIENT_CORE:-1}" valgrind --tool=callgrind --compress-strings=no \
    --callgrind-out-file="$work/cg.out" --log-file="$work/cg.log" \
    "$RUCX_PERFTEST" 127.0.0.1 -p "$port" -t tag_lat -s "$SIZE" -n "$ITERS" -w "$WARMUP" \
    >"$work/client.log" 2>&1 || { cat "$work/client.log" "$work/server.log" >&2; exit 1; }
wait "$srv_pid" || true
srv_pid=
echo "# perftest -t tag_lat -s $SIZE -n $ITERS -w $WARMUP over posix: client instructions per iteration (self cost)"
python3 - "$work/cg.out" "$ITERS" <<'EOF'
import collections, sys
path, iters = sys.argv[1], int(sys.argv[2])
cost = collections.Counter()
fn = None
after_call = False
for line in open(path):
    if line.startswith("fn="):
        fn = line[3:].strip()
    elif line.startswith("calls="):
        after_call = True  # the next cost line is the call's inclusive cost, not self cost
    elif line[:1].isdigit() or line[:1] in "+-*":
        if after_call:
            after_call = False
            continue
        parts = line.split()
        if fn and len(parts) >= 2:
            cost[fn] += int(parts[1])
total = sum(cost.values())
for f, c in cost.most_common():
    if c / iters < 5:
        break
    print(f"{c / iters:9.1f}  {f}")
print(f"{total / iters:9.1f}  (all functions, start-up included)")
EOF
