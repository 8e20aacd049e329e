#!/usr/bin/env bash
# What one ucp tag_lat round trip or one tag_bw message costs over rc_verbs, UCX 1.13 beside
# rucx with tag offload on and off, wired up as compare-ucx-tag.sh runs them
# (UCX_TLS=rc_verbs,ud_verbs; rucx RUCX_TLS=rc_verbs,ud_verbs): inside the Soft-RoCE VM each
# configuration runs TEST with SIZE bytes x N and x 3N (server on vCPU 0, client on vCPU 1)
# once with rxe0's hardware counters read before and after (packets both ways; RDMA READ
# requests and responses show as rdma_recvs/sent_pkts), and once with both processes under
# `strace -c -f` (on rxe every ibv_post_send is one write() to the uverbs fd, the doorbell;
# ibv_post_recv and ibv_poll_cq make none; ibv_reg_mr/ibv_dereg_mr are ioctl()). Prints totals
# and totals per message (per round trip for tag_lat); a count that grows from N to 3N by
# 2N x its per-message rate is per message, one that stays put is set-up. Under strace every
# call costs about a millisecond, so counts of polling calls (epoll_wait, sched_yield,
# perftest's peer checks) grow with that time, not with the messages. It reports; it asserts
# nothing.
#
# Usage: tests/rdma-vm/count-ucx-tag.sh tag_lat|tag_bw [N] [SIZE]
#        (defaults: tag_lat 2000 x 8 B; tag_bw 40 x 1 MiB, 2 warm-up iterations)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              RUCX_VARIANTS="NAME=path ..." more perftest builds to count (rows rucxNAME_on/off)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
TEST=${1:-}
case "$TEST" in
    tag_lat) N=${2:-2000}; SIZE=${3:-8}; WARMUP=0 ;;
    tag_bw) N=${2:-40}; SIZE=${3:-1048576}; WARMUP=2 ;;
    *) echo "usage: $0 tag_lat|tag_bw [N] [SIZE]" >&2; exit 2 ;;
esac
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 1800 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
STRACE="$(command -v strace || true)"
[[ -n "$STRACE" ]] || { echo "strace is needed on the host (apt-get install strace)" >&2; exit 1; }
WORK="$(mktemp -d /tmp/rdma-vm-count-tag.XXXXXX)"
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
SIZE=$SIZE
source listen-port.sh
UCX_ENV="UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
RUCX_ENV="RUCX_TLS=rc_verbs,ud_verbs RUCX_NET_DEVICES=rxe0:1"
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
snap() { for f in \$C/*; do echo "\$(basename \$f) \$(cat \$f 2>/dev/null || echo 0)"; done; }
# pair LABEL ENV PROG ITERS WRAP: one server/client $TEST pair, both under WRAP (with its
# output file suffixed .server/.client).
pair() {
    local label=\$1 envs=\$2 prog=\$3 n=\$4 wrap=\$5
    env \$envs timeout 600 taskset -c 0 \${wrap:+\$wrap.server} \$prog -p 0 >/tmp/server.out 2>&1 &
    local s=\$! port
    port=\$(listen_port \$s) || { tail -3 /tmp/server.out; kill \$s; wait \$s; return; }
    env \$envs timeout 600 taskset -c 1 \${wrap:+\$wrap.client} \$prog 10.83.0.1 -p \$port -t $TEST -s \$SIZE -n \$n -w $WARMUP >/tmp/client.out 2>&1
    wait \$s || { echo "\$label: server failed"; tail -3 /tmp/server.out; }
    grep "Final:" /tmp/client.out | tail -1 | sed "s/^/\$label /"
}
for t in ucx rucx_on rucx_off $VARIANT_NAMES; do
    case \$t in
        ucx) envs=\$UCX_ENV; prog=ucx_perftest ;;
        *_on) envs="\$RUCX_ENV RUCX_TM_ENABLE=y"; v=\${t%_on}; prog=perftest\${v#rucx} ;;
        *_off) envs="\$RUCX_ENV RUCX_TM_ENABLE=n"; v=\${t%_off}; prog=perftest\${v#rucx} ;;
    esac
    for n in $N $((3 * N)); do
        snap >/tmp/before
        pair \$t "\$envs" \$prog \$n ""
        snap >/tmp/after
        echo "=== \$t N=\$n: rxe0 counters (both processes, wire-up included): total, per message"
        awk -v n=\$n 'NR == FNR { b[\$1] = \$2; next } { d = \$2 - b[\$1]; if (d) printf "  %-22s %8d  %.3f\n", \$1, d, d / n }' /tmp/before /tmp/after
        pair \$t-strace "\$envs" \$prog \$n "strace -c -f -o /tmp/strace"
        for side in server client; do
            echo "=== \$t N=\$n: \$side system calls (strace -c -f, all threads, setup included): total, per message"
            awk -v n=\$n '/^ *[0-9]/ && NF >= 5 { c = \$4; name = \$NF; if (c + 0 >= n / 50) printf "  %-18s %8d  %.3f\n", name, c, c / n }' /tmp/strace.\$side
        done
    done
done
EOF
chmod +x "$WORK/count.sh"
cp "$RUCX_PERFTEST" "$WORK/perftest"
"$HERE/run.sh" -t 2400 -f "$WORK/perftest" "${VARIANT_FILES[@]}" -f "$STRACE" -f "$HERE/listen-port.sh" -f "$WORK/count.sh" -- count.sh
