#!/usr/bin/env bash
# Instructions of rucx's ucp tag_lat 8 B client over rc_verbs inside the Soft-RoCE VM, counted by
# callgrind (the server runs plainly): under TCG every guest instruction is expensive, so the
# instructions of one progress call (the polling loop that bounds how soon a message is seen) and
# of the send path are what the VM's latency row moves with. Prints, per build: the client's
# total, its Worker::progress calls and instructions per call (inclusive), the rc_verbs
# interface's progress per call, and the send path (am_short_iov) per call. Counts of calls per
# round trip depend on timing (the client polls until the reply is in); per-call costs do not.
# It reports; it asserts nothing.
#
# Usage: tests/rdma-vm/callgrind-ucp.sh [N]      (default 150 iterations)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              RUCX_VARIANTS="NAME=path ..." more perftest builds to count
#              CG_KEEP=dir  keep the callgrind files there (DIR/perftestNAME.cg)
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
    RUCX_PERFTEST="$ROOT/target/release/perftest"
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
cat >"$WORK/cg.sh" <<EOF
#!/bin/bash
export VALGRIND_LIB=/opt/rdmavm/bin
RUCX_ENV="RUCX_TLS=rc_verbs,tcp RUCX_NET_DEVICES=rxe0:1,veth0"
for p in $NAMES; do
    port=\$((14000 + RANDOM % 1000))
    env \$RUCX_ENV timeout 600 taskset -c 0 \$p -p \$port >/tmp/s.out 2>&1 &
    sleep 1
    env \$RUCX_ENV timeout 1200 taskset -c 1 valgrind.bin --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.\$p --log-file=/tmp/cg.log \\
        \$p 10.83.0.1 -p \$port -t tag_lat -s 8 -n $N -w 0 >/tmp/c.out 2>&1
    wait
    if [ -s /tmp/cg.\$p ]; then
        echo "@@B64BEGIN \$p"; gzip -c /tmp/cg.\$p | base64; echo "@@B64END"
    else
        echo "\$p: no callgrind output"; tail -5 /tmp/cg.log /tmp/c.out
    fi
done
EOF
chmod +x "$WORK/cg.sh"
"$HERE/run.sh" -t 2400 "${FILES[@]}" -f /usr/bin/valgrind.bin -f "$VGLIB/callgrind-amd64-linux" \
    -f "$VGLIB/vgpreload_core-amd64-linux.so" -f "$WORK/default.supp" -f "$WORK/cg.sh" -- cg.sh \
    >"$WORK/out"
grep -v '^@@B64\|^[A-Za-z0-9+/=]*$' "$WORK/out" || true
echo "=== rucx tag_lat 8 B client over rc_verbs under callgrind in the VM ($N iterations)"
for p in $NAMES; do
    awk -v p="$p" '$0 == "@@B64BEGIN " p { f = 1; next } /^@@B64END/ { f = 0 } f' "$WORK/out" |
        base64 -d | gunzip >"$WORK/$p.cg" 2>/dev/null || { echo "$p: no result"; continue; }
    callgrind_annotate --inclusive=yes --tree=caller "$WORK/$p.cg" 2>/dev/null >"$WORK/$p.txt"
    total=$(sed -n 's/^totals: //p' "$WORK/$p.cg")
    # per_call PATTERN: the largest "=> ...PATTERN (Nx)" caller edge, as "instr calls instr/call".
    per_call() {
        grep -E "=> .*$1 \([0-9,]+x\)" "$WORK/$p.txt" | tr -d , |
            awk '{ c = $NF; gsub(/[()x]/, "", c); if ($1 > best) { best = $1; n = c } }
                 END { if (n) printf "%d calls, %.0f instr/call", n, best / n; else printf "-" }'
    }
    echo "$p: total $total instructions"
    echo "  Worker::progress     $(per_call 'ucp::worker::Worker>::progress')"
    echo "  rc_verbs progress    $(per_call 'RcVerbsIface as uct::iface::Iface>::progress')"
    echo "  rc_verbs am_short_iov $(per_call 'RcVerbsEp as uct::ep::Endpoint>::am_short_iov')"
    if [[ -n "${CG_KEEP:-}" ]]; then
        mkdir -p "$CG_KEEP" && cp "$WORK/$p.cg" "$CG_KEEP/$p.cg"
    fi
done
