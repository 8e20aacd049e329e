#!/usr/bin/env bash
# The kill campaign (tests/kill-campaign.sh, a report, not a timed test) over rc_verbs inside the
# Soft-RoCE VM: N perftest transfers with one side SIGKILLed at a random point, then a
# long-lived ucp_client_server server facing N clients killed mid-transfer. Servers listen on
# veth0's 10.83.0.1 and run as UCX is run over verbs (RUCX_TLS=rc_verbs RUCX_NET_DEVICES=rxe0:1;
# tcp joins by itself for wire-up). The VM has no SysV `ipcs`, so that column reads n/a.
#
# Usage: tests/rdma-vm/kill-campaign.sh [N]   (default 100; under TCG a run takes a few seconds)
# Environment: TIMEOUT (VM wall-clock limit in seconds, default 3600), HANG_S (default 60: the
# emulated VM is slow, and the peer-failure bound over rc_verbs is the transport's retry
# timeout).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
N=${1:-100}
cd "$ROOT"
"$HERE/build.sh" >&2
cargo build -q -p perftest -p rucx-examples --bin perftest --bin ucp_client_server
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
exec "$HERE/run.sh" -t "${TIMEOUT:-3600}" -f "$BIN/perftest" -f "$BIN/ucp_client_server" \
    -f "$ROOT/tests/kill-campaign.sh" -- \
    env BIN=/opt/rdmavm/bin SHOW_HANGS=1 PARTS="transfers drift" TRANSPORTS=rc_verbs HOST=10.83.0.1 RUCX_NET_DEVICES=rxe0:1 \
    HANG_S="${HANG_S:-60}" bash /opt/rdmavm/bin/kill-campaign.sh "$N"
