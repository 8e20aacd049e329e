#!/usr/bin/env bash
# What one ucp tag_bw message costs over rc_verbs, UCX 1.13 beside rucx with tag offload on and
# off, inside the Soft-RoCE VM: each configuration runs tag_bw (SIZE bytes, N iterations, server
# on vCPU 0, client on vCPU 1) once with every rxe0 hardware counter read before and after
# (packets both ways, RDMA READ requests and responses show as rdma_recvs/sent_pkts), and once
# with both processes under `strace -c -f` (on rxe every ibv_post_send is one write() to the
# uverbs fd; ibv_reg_mr/ibv_dereg_mr are ioctl() on it; polling is plain memory). Prints totals
# and totals divided by N (per message). It reports; it asserts nothing.
#
# Usage: tests/rdma-vm/count-ucx-tag-bw.sh [SIZE] [N]      (defaults 1048576 and 40)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              RUCX_VARIANTS="NAME=path ..." more perftest builds to count (rows rucxNAME_on/off)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SIZE=${1:-1048576}
N=${2:-40}
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 1800 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
STRACE="$(command -v strace || true)"
[[ -n "$STRACE" ]] || { echo "strace is needed on the host (apt-get install strace)" >&2; exit 1; }
WORK="$(mktemp -d /tmp/rdma-vm-count-bw.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
VARIANT_NAMES=""
VARIANT_FILES=()
for nv in ${RUCX_VARIANTS:-}; do
    name=${nv%%=*}
    [[ "$name" =~ ^[A-Za-z0-9]+$ && -x "${nv#*=}" ]] ||
        { echo "RUCX_VARIANTS: '$nv' is not NAME=executable" >&2; exit 1; }
    cp "${nv#*=}" "$WORK/perftest$name"
    VARIANT_NAMES+=" rucx${name}_on rucx${name}_off"
    VARIANT_FILES+=(-f "$WORK/perftest$name")
done
cat >"$WORK/count.sh" <<EOF
#!/bin/bash
N=$N
SIZE=$SIZE
source listen-port.sh
UCX_ENV="UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
RUCX_ENV="RUCX_TLS=rc_verbs,ud_verbs RUCX_NET_DEVICES=rxe0:1"
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
snap() { for f in \$C/*; do echo "\$(basename \$f) \$(cat \$f 2>/dev/null || echo 0)"; done; }
# pair LABEL ENV PROG WRAP: one server/client tag_bw pair, both under WRAP (with its output
# file suffixed .server/.client).
pair() {
    local label=\$1 envs=\$2 prog=\$3 wrap=\$4
    env \$envs timeout 600 taskset -c 0 \${wrap:+\$wrap.server} \$prog -p 0 >/tmp/server.out 2>&1 &
    local s=\$! port
    port=\$(listen_port \$s) || { tail -3 /tmp/server.out; kill \$s; wait \$s; return; }
    env \$envs timeout 600 taskset -c 1 \${wrap:+\$wrap.client} \$prog 10.83.0.1 -p \$port -t tag_bw -s \$SIZE -n \$N -w 2 >/tmp/client.out 2>&1
    wait \$s || { echo "\$label: server failed"; tail -3 /tmp/server.out; }
    grep "Final:" /tmp/client.out | tail -1 | sed "s/^/\$label /"
}
for t in ucx rucx_on rucx_off $VARIANT_NAMES; do
    case \$t in
        ucx) envs=\$UCX_ENV; prog=ucx_perftest ;;
        *_on) envs="\$RUCX_ENV RUCX_TM_ENABLE=y"; v=\${t%_on}; prog=perftest\${v#rucx} ;;
        *_off) envs="\$RUCX_ENV RUCX_TM_ENABLE=n"; v=\${t%_off}; prog=perftest\${v#rucx} ;;
    esac
    snap >/tmp/before
    pair \$t "\$envs" \$prog ""
    snap >/tmp/after
    echo "=== \$t: rxe0 counters (SIZE=\$SIZE N=\$N + 2 warm-up, both processes, wire-up included): total, per message"
    awk -v n=\$N 'NR == FNR { b[\$1] = \$2; next } { d = \$2 - b[\$1]; if (d) printf "  %-22s %8d  %.3f\n", \$1, d, d / n }' /tmp/before /tmp/after
    pair \$t-strace "\$envs" \$prog "strace -c -f -o /tmp/strace"
    for side in server client; do
        echo "=== \$t: \$side system calls (strace -c -f, all threads, setup included): total, per message"
        awk -v n=\$N '/^ *[0-9]/ && NF >= 5 { c = \$4; name = \$NF; if (c + 0 >= n / 4) printf "  %-18s %8d  %.3f\n", name, c, c / n }' /tmp/strace.\$side
    done
done
EOF
chmod +x "$WORK/count.sh"
cp "$RUCX_PERFTEST" "$WORK/perftest"
"$HERE/run.sh" -t 2400 -f "$WORK/perftest" "${VARIANT_FILES[@]}" -f "$STRACE" -f "$HERE/listen-port.sh" -f "$WORK/count.sh" -- count.sh
