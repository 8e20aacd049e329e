#!/usr/bin/env bash
# What one ucp tag_lat 8 B message costs the emulated NIC, rucx next to UCX 1.13, inside the
# Soft-RoCE VM: runs each tool's tag_lat (N iterations, server pinned to vCPU 0 and client to
# vCPU 1) once with rxe0's hardware counters read before and after (packets sent and received,
# including ACKs and credit writes), and once with the client under `strace -c -f` (system
# calls: on rxe every ibv_post_send is one write() to the uverbs fd, the doorbell; ibv_post_recv
# and ibv_poll_cq are plain memory accesses). Prints the totals divided by N (per round trip,
# i.e. per message sent by each side). It reports; it asserts nothing.
#
# Usage: tests/rdma-vm/count-ucx-ucp.sh [N]      (default 2000)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              RUCX_VARIANTS="NAME=path ..." more perftest builds to count (rows rucxNAME)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
N=${1:-2000}
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 1800 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
STRACE="$(command -v strace || true)"
[[ -n "$STRACE" ]] || { echo "strace is needed on the host (apt-get install strace)" >&2; exit 1; }
WORK="$(mktemp -d /tmp/rdma-vm-count.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
VARIANT_NAMES=""
VARIANT_FILES=()
for nv in ${RUCX_VARIANTS:-}; do
    name=${nv%%=*}
    [[ "$name" =~ ^[A-Za-z0-9]+$ && -x "${nv#*=}" ]] ||
        { echo "RUCX_VARIANTS: '$nv' is not NAME=executable" >&2; exit 1; }
    cp "${nv#*=}" "$WORK/perftest$name"
    VARIANT_NAMES+=" rucx$name"
    VARIANT_FILES+=(-f "$WORK/perftest$name")
done
cat >"$WORK/count.sh" <<EOF
#!/bin/bash
N=$N
source listen-port.sh
UCX_ENV="UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
RUCX_ENV="RUCX_TLS=rc_verbs,tcp RUCX_NET_DEVICES=rxe0:1,veth0"
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
snap() { for f in sent_pkts rcvd_pkts ack_deferred duplicate_request send_rnr_err rcvd_rnr_err retry_exceeded_err completer_retry_err; do echo "\$f \$(cat \$C/\$f 2>/dev/null || echo 0)"; done; }
# pair LABEL ENV PROG WRAP: one server/client tag_lat pair, the client under WRAP.
pair() {
    local label=\$1 envs=\$2 prog=\$3 wrap=\$4
    env \$envs timeout 300 taskset -c 0 \$prog -p 0 >/tmp/server.out 2>&1 &
    local s=\$! port
    port=\$(listen_port \$s) || { tail -3 /tmp/server.out; kill \$s; wait \$s; return; }
    env \$envs timeout 300 taskset -c 1 \$wrap \$prog 10.83.0.1 -p \$port -t tag_lat -s 8 -n \$N -w 0 >/tmp/client.out 2>&1
    wait \$s || { echo "\$label: server failed"; tail -3 /tmp/server.out; }
    grep "Final:" /tmp/client.out | tail -1 | sed "s/^/\$label /"
}
for t in ucx rucx $VARIANT_NAMES; do
    if [ \$t = ucx ]; then envs=\$UCX_ENV; prog=ucx_perftest; else envs=\$RUCX_ENV; prog=perftest\${t#rucx}; fi
    snap >/tmp/before
    pair \$t "\$envs" \$prog ""
    snap >/tmp/after
    echo "=== \$t: rxe0 counters per round trip (N=\$N, both processes, wire-up included)"
    awk -v n=\$N 'NR == FNR { b[\$1] = \$2; next } { d = \$2 - b[\$1]; if (d) printf "  %-22s %8d  %.3f\n", \$1, d, d / n }' /tmp/before /tmp/after
    pair \$t-strace "\$envs" \$prog "strace -c -f -o /tmp/strace.out"
    echo "=== \$t: client system calls per round trip (strace -c -f, all threads, setup included)"
    awk -v n=\$N '/^ *[0-9]/ && NF >= 5 { c = \$4; name = \$NF; if (c + 0 >= n / 20) printf "  %-18s %8d  %.3f\n", name, c, c / n }' /tmp/strace.out
done
EOF
chmod +x "$WORK/count.sh"
cp "$RUCX_PERFTEST" "$WORK/perftest"
"$HERE/run.sh" -t 2400 -f "$WORK/perftest" "${VARIANT_FILES[@]}" -f "$STRACE" -f "$HERE/listen-port.sh" -f "$WORK/count.sh" -- count.sh
