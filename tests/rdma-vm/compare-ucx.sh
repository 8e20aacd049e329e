#!/usr/bin/env bash
# rc_verbs side by side with UCX 1.13 inside the Soft-RoCE VM: alternates UCX's ucx_perftest and
# rucx's perftest (uct level, `-x rc_verbs -d rxe0:1`) on am_lat 8 B and put_bw 64 KiB zcopy and
# prints each run's final line. Numbers under TCG are for ratios, not absolute RDMA speed, and
# they are noisy (the guest's 2 vCPUs are shared by two busy-polling processes and rxe's kernel
# threads): compare the medians over the repetitions. It reports; it asserts nothing.
#
# Usage: tests/rdma-vm/compare-ucx.sh [REPS]      (default 3)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REPS=${1:-3}
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 1800 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
WORK="$(mktemp -d /tmp/rdma-vm-cmp.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/compare.sh" <<EOF
#!/bin/bash
source listen-port.sh
run() {
    local prog=\$1; shift
    timeout 150 \$prog -p 0 >/tmp/server.out 2>&1 &
    local s=\$! port
    port=\$(listen_port \$s) || { tail -3 /tmp/server.out; kill \$s; wait \$s; return; }
    echo "### \$prog \$*"
    timeout 150 \$prog 10.83.0.1 -p \$port "\$@" 2>&1 | grep -E "Final:|ERROR|error" | tail -2
    wait \$s || { echo "server failed:"; tail -3 /tmp/server.out; }
}
echo "columns: iterations, typical latency (us), avg latency (us), overall latency (us), avg MB/s, overall MB/s, avg msg/s, overall msg/s"
for rep in \$(seq 1 $REPS); do
    run ucx_perftest -x rc_verbs -d rxe0:1 -t am_lat -s 8 -n 500 -w 50
    run perftest -x rc_verbs -d rxe0:1 -t am_lat -s 8 -n 500 -w 50
    run ucx_perftest -x rc_verbs -d rxe0:1 -t put_bw -D zcopy -s 65536 -n 200 -w 20
    run perftest -x rc_verbs -d rxe0:1 -t put_bw -D zcopy -s 65536 -n 200 -w 20
done
EOF
chmod +x "$WORK/compare.sh"
cp "$RUCX_PERFTEST" "$WORK/perftest"
"$HERE/run.sh" -t 900 -f "$WORK/perftest" -f "$HERE/listen-port.sh" -f "$WORK/compare.sh" -- compare.sh
