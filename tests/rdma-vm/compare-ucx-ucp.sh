#!/usr/bin/env bash
# ucp over rc_verbs side by side with UCX 1.13 inside the Soft-RoCE VM: two processes (server
# and client), pinned to the VM's two vCPUs (server on 0, client on 1), alternating UCX's
# ucx_perftest and rucx's perftest on tag_lat 8 B and ucp_put_bw 64 KiB, REPS times each; then
# prints each run's result, the medians and the ratio rucx/UCX.
#   UCX:  UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1
#   rucx: RUCX_TLS=rc_verbs,tcp RUCX_NET_DEVICES=rxe0:1,veth0
# (each with its wire-up helper transport: UCX's ud_verbs, rucx's tcp on rxe0's netdev; the data
# path of both is rc_verbs: rucx moves its AM lane to rc_verbs after wire-up, which the
# protocol table printed once below shows). Numbers under TCG are for ratios, not absolute RDMA
# speed, and single runs are noisy: compare the medians. It reports; it asserts nothing.
# A loaded host (load average well above its core count) stalls the VM's vCPUs for whole host
# time slices: round trips of UCX and rucx alike then take 2-4 ms (typical latency ~4000 us)
# with no stall counted by rxe (printed per run when there is one); the load is printed before
# and after, and only runs on a quiet host compare latencies.
#
# Usage: tests/rdma-vm/compare-ucx-ucp.sh [REPS]      (default 5)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              LAT_ITERS (default 2000), BW_ITERS (default 300; 0 skips put_bw)
#              RUCX_VARIANTS="NAME=path ..." more perftest builds to alternate with (rows rucxNAME)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REPS=${1:-5}
LAT_ITERS=${LAT_ITERS:-2000}
BW_ITERS=${BW_ITERS:-300}
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 1800 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="$ROOT/target/release/perftest"
fi
WORK="$(mktemp -d /tmp/rdma-vm-cmp.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
VARIANT_NAMES=""
VARIANT_FILES=()
for nv in ${RUCX_VARIANTS:-}; do
    name=${nv%%=*}
    [[ "$name" =~ ^[A-Za-z0-9]+$ && -x "${nv#*=}" ]] ||
        { echo "RUCX_VARIANTS: '$nv' is not NAME=executable" >&2; exit 1; }
    cp "${nv#*=}" "$WORK/perftest$name"
    VARIANT_NAMES+=" $name"
    VARIANT_FILES+=(-f "$WORK/perftest$name")
done
cat >"$WORK/compare.sh" <<EOF
#!/bin/bash
UCX_ENV="UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
RUCX_ENV="RUCX_TLS=rc_verbs,tcp RUCX_NET_DEVICES=rxe0:1,veth0"
ncpu=\$(nproc)
pin() { if [ "\$ncpu" -ge 2 ]; then echo "taskset -c \$1"; fi; }
# rxe0's counters of stalls (receiver-not-ready NAKs, retransmissions), one "name value" a line.
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
snap() { for f in send_rnr_err rcvd_rnr_err completer_retry_err duplicate_request out_of_seq_request; do echo "\$f \$(cat \$C/\$f 2>/dev/null || echo 0)"; done; }
# run LABEL ENV PROG ARGS...: one server/client pair; prints "@@R LABEL <Final line fields>".
run() {
    local label=\$1 envs=\$2 prog=\$3; shift 3
    local port=\$((14000 + RANDOM % 1000))
    snap >/tmp/before
    env \$envs timeout 150 \$(pin 0) \$prog -p \$port >/tmp/server.out 2>&1 &
    local s=\$!
    sleep 1
    local out
    out=\$(env \$envs timeout 150 \$(pin 1) \$prog 10.83.0.1 -p \$port "\$@" 2>&1)
    wait \$s || { echo "\$label: server failed:"; tail -3 /tmp/server.out; }
    # Any stall counted by rxe during the run (none is the normal case).
    snap | paste /tmp/before - | awk -v l="\$label" '\$4 != \$2 { printf "%s: rxe %s +%d\\n", l, \$1, \$4 - \$2 }'
    local fin
    fin=\$(echo "\$out" | grep "Final:" | tail -1)
    if [ -n "\$fin" ]; then echo "@@R \$label \${fin#*Final:}"; else echo "\$label: no result:"; echo "\$out" | tail -5; fi
}
echo "vCPUs: \$ncpu (server pinned to 0, client to 1 when 2 or more)"
echo "--- rucx protocol table (client side):"
env \$RUCX_ENV RUCX_PROTO_INFO=y timeout 60 \$(pin 0) perftest -p 13999 >/dev/null 2>&1 &
sleep 1
env \$RUCX_ENV RUCX_PROTO_INFO=y timeout 60 \$(pin 1) perftest 10.83.0.1 -p 13999 -t tag_lat -s 8 -n 10 2>&1 | grep -A12 "AM and RMA lanes moved" | head -12
wait
for rep in \$(seq 1 $REPS); do
    run ucx_tag_lat "\$UCX_ENV" ucx_perftest -t tag_lat -s 8 -n $LAT_ITERS -w 100
    for v in "" $VARIANT_NAMES; do
        run rucx\${v}_tag_lat "\$RUCX_ENV" perftest\$v -t tag_lat -s 8 -n $LAT_ITERS -w 100
    done
    [ $BW_ITERS -gt 0 ] || continue
    run ucx_put_bw "\$UCX_ENV" ucx_perftest -t ucp_put_bw -s 65536 -n $BW_ITERS -w 20
    for v in "" $VARIANT_NAMES; do
        run rucx\${v}_put_bw "\$RUCX_ENV" perftest\$v -t ucp_put_bw -s 65536 -n $BW_ITERS -w 20
    done
done
EOF
chmod +x "$WORK/compare.sh"
cp "$RUCX_PERFTEST" "$WORK/perftest"
echo "host load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$HERE/run.sh" -t 2400 -f "$WORK/perftest" "${VARIANT_FILES[@]}" -f "$WORK/compare.sh" -- compare.sh | tee "$WORK/out"
echo "host load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "=== ucp over rc_verbs in the Soft-RoCE VM, medians of $REPS runs"
echo "Final line columns: iterations, typical latency (us), avg latency (us), overall latency (us), avg MB/s, overall MB/s, avg msg/s, overall msg/s"
python3 - "$WORK/out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("@@R "):
        f = line.split()
        try:
            runs.setdefault(f[1], []).append([float(x) for x in f[2:]])
        except ValueError:
            pass
def med(label, col):
    v = [r[col] for r in runs.get(label, []) if len(r) > col]
    return (statistics.median(v), v) if v else (None, v)
names = sorted({l[len("rucx"):].rsplit("_", 2)[0] for l in runs if l.startswith("rucx")})
for test, col, unit, better in (("tag_lat", 1, "us typical latency", "lower"), ("put_bw", 5, "MB/s overall bandwidth", "higher")):
    u, uv = med("ucx_" + test, col)
    if u is None:
        continue
    print(f"{test}: UCX runs {uv}")
    for n in names:
        r, rv = med(f"rucx{n}_" + test, col)
        if r is None:
            print(f"{test}: rucx{n}: missing results")
            continue
        print(f"{test}: rucx{n} runs {rv}")
        print(f"{test}: median UCX {u:.2f} {unit}, rucx{n} {r:.2f} ({better} is better); ratio rucx{n}/UCX {r / u:.2f}")
PY
