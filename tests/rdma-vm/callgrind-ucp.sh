#!/usr/bin/env bash
# Instructions of the tag_lat 8 B client over rc_verbs inside the Soft-RoCE VM, rucx's perftest
# beside Debian's UCX 1.13 ucx_perftest, each counted by callgrind the same way (the server runs
# plainly): under TCG every guest instruction is expensive, so the instructions of one progress
# call (the polling loop that bounds how soon a message is seen) and of the send call are what
# the VM's latency row moves with. Prints, per program, the client's total and the inclusive
# instructions per call of:
#   progress  Worker::progress             | ucp_worker_progress
#   send      tag_send_mapped_nb           | ucp_tag_send_nbx
#   recv      tag_recv_queue (library)     | ucp_tag_recv_nbx
# Counts of calls per round trip depend on timing (the client polls until the reply
# is in); per-call costs do not. It reports; it asserts nothing.
#
# Usage: tests/rdma-vm/callgrind-ucp.sh [N]      (default 150 iterations)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              RUCX_VARIANTS="NAME=path ..." more perftest builds to count
#              NO_UCX=1  count rucx only
#              CG_KEEP=dir  keep the callgrind files there (DIR/perftestNAME.cg, DIR/ucx.cg)
#              CG_RUCX_ENV="..." rucx's environment (default RUCX_TLS=rc_verbs,tcp
#                           RUCX_NET_DEVICES=rxe0:1,veth0; compare-ucx-tag.sh's rows run
#                           RUCX_TLS=rc_verbs,ud_verbs RUCX_NET_DEVICES=rxe0:1 RUCX_TM_ENABLE=y|n)
#              CG_OPTS="..." more callgrind options (e.g. --dump-instr=yes, for per-instruction
#                           counts in the kept files)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
N=${1:-150}
VGLIB=/usr/libexec/valgrind
for f in /usr/bin/valgrind.bin "$VGLIB/callgrind-amd64-linux" "$VGLIB/vgpreload_core-amd64-linux.so"; do
    [[ -e "$f" ]] || { echo "valgrind is needed on the host (apt-get install valgrind): no $f" >&2; exit 1; }
done
command -v callgrind_annotate >/dev/null || { echo "callgrind_annotate is needed on the host" >&2; exit 1; }
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 1800 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
WORK="$(mktemp -d /tmp/rdma-vm-cg.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cp "$RUCX_PERFTEST" "$WORK/perftest"
NAMES="perftest"
FILES=(-f "$WORK/perftest")
for nv in ${RUCX_VARIANTS:-}; do
    name=${nv%%=*}
    [[ "$name" =~ ^[A-Za-z0-9]+$ && -x "${nv#*=}" ]] ||
        { echo "RUCX_VARIANTS: '$nv' is not NAME=executable" >&2; exit 1; }
    cp "${nv#*=}" "$WORK/perftest$name"
    NAMES+=" perftest$name"
    FILES+=(-f "$WORK/perftest$name")
done
cp "$VGLIB/default.supp" "$WORK/default.supp" 2>/dev/null || : >"$WORK/default.supp"
UCX_RUN=0
[[ -z "${NO_UCX:-}" && -x /usr/bin/ucx_perftest ]] && UCX_RUN=1
cat >"$WORK/cg.sh" <<EOF
#!/bin/bash
export VALGRIND_LIB=/opt/rdmavm/bin
source listen-port.sh
RUCX_ENV="${CG_RUCX_ENV:-RUCX_TLS=rc_verbs,tcp RUCX_NET_DEVICES=rxe0:1,veth0}"
UCX_ENV="UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
# count NAME ENV PROG: one server/client pair, the client under callgrind.
count() {
    local name=\$1 envs=\$2 prog=\$3
    env \$envs timeout 600 taskset -c 0 \$prog -p 0 >/tmp/s.out 2>&1 &
    local s=\$! port
    port=\$(listen_port \$s) || { tail -3 /tmp/s.out; kill \$s; wait \$s; return; }
    env \$envs timeout 1200 taskset -c 1 valgrind.bin --tool=callgrind ${CG_OPTS:-} \\
        --callgrind-out-file=/tmp/cg.\$name --log-file=/tmp/cg.log \\
        \$prog 10.83.0.1 -p \$port -t tag_lat -s 8 -n $N -w 0 >/tmp/c.out 2>&1
    wait
    if [ -s /tmp/cg.\$name ]; then
        echo "@@B64BEGIN \$name"; gzip -c /tmp/cg.\$name | base64; echo "@@B64END"
    else
        echo "\$name: no callgrind output"; tail -5 /tmp/cg.log /tmp/c.out
    fi
}
for p in $NAMES; do
    count \$p "\$RUCX_ENV" \$p
done
if [ $UCX_RUN = 1 ]; then
    count ucx "\$UCX_ENV" ucx_perftest
fi
EOF
chmod +x "$WORK/cg.sh"
"$HERE/run.sh" -t 2400 "${FILES[@]}" -f /usr/bin/valgrind.bin -f "$VGLIB/callgrind-amd64-linux" \
    -f "$VGLIB/vgpreload_core-amd64-linux.so" -f "$WORK/default.supp" -f "$HERE/listen-port.sh" -f "$WORK/cg.sh" -- cg.sh \
    >"$WORK/out"
grep -v '^@@B64\|^[A-Za-z0-9+/=]*$' "$WORK/out" || true
echo "=== tag_lat 8 B client over rc_verbs under callgrind in the VM ($N iterations)"
echo "    instructions per call, inclusive (calls in brackets: the busiest caller's)"
printf '%-16s %10s %16s %16s %16s\n' program total progress send recv
REPORT_NAMES="$NAMES"
[[ $UCX_RUN = 1 ]] && REPORT_NAMES+=" ucx"
for p in $REPORT_NAMES; do
    awk -v p="$p" '$0 == "@@B64BEGIN " p { f = 1; next } /^@@B64END/ { f = 0 } f' "$WORK/out" |
        base64 -d | gunzip >"$WORK/$p.cg" 2>/dev/null || { echo "$p: no result"; continue; }
    callgrind_annotate --inclusive=yes --tree=calling "$WORK/$p.cg" 2>/dev/null >"$WORK/$p.txt"
    total=$(sed -n 's/^totals: //p' "$WORK/$p.cg")
    # per_call PATTERN: the largest "> ...PATTERN (Nx)" call edge (UCX's libraries have no
    # sources, so no inlined-call lines), as "instr/call (calls)".
    per_call() {
        grep -E "^ *[0-9,]+ .*> .*$1 \([0-9,]+x\)" "$WORK/$p.txt" | tr -d , |
            awk '{ c = $0; sub(/.*\(/, "", c); sub(/x\).*/, "", c);
                   if ($1 > best) { best = $1; n = c } }
                 END { if (n) printf "%.0f (%d)", best / n, n; else printf "-" }'
    }
    if [[ $p = ucx ]]; then
        printf '%-16s %10s %16s %16s %16s\n' "$p" "$total" "$(per_call 'ucp_worker_progress')" \
            "$(per_call 'ucp_tag_send_nbx')" "$(per_call 'ucp_tag_recv_nbx')"
    else
        printf '%-16s %10s %16s %16s %16s\n' "$p" "$total" \
            "$(per_call 'ucp::worker::Worker>::progress')" \
            "$(per_call 'Worker>::tag_send_mapped_nb')" "$(per_call 'Worker>::tag_recv_queue')"
    fi
    if [[ -n "${CG_KEEP:-}" ]]; then
        mkdir -p "$CG_KEEP" && cp "$WORK/$p.cg" "$CG_KEEP/$p.cg"
    fi
done
