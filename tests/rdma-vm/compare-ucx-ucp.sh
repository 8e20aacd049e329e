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
# Before each run the VM measures how long a cache line takes to cross its two vCPUs
# (bench/c2c.c, built static): the host moves between phases where that takes ~60-90 ns and
# ~240+ ns (in the VM), and both programs' round trips follow (26-31 us against 40-65 us on
# the 2-core EPYC host). The summary gives the medians over all runs, over the "near" runs
# (hand-over below NEAR_NS, default 150), and the median of the per-repetition ratios.
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
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
WORK="$(mktemp -d /tmp/rdma-vm-cmp.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
${CC:-cc} -O2 -static -pthread -o "$WORK/c2c" "$ROOT/bench/c2c.c" ||
    { echo "cannot build bench/c2c.c statically (glibc's static libraries: libc6-dev)" >&2; exit 1; }
NEAR_NS=${NEAR_NS:-150}
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
source listen-port.sh
# rxe0's counters of stalls (receiver-not-ready NAKs, retransmissions), one "name value" a line.
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
snap() { for f in send_rnr_err rcvd_rnr_err completer_retry_err duplicate_request out_of_seq_request; do echo "\$f \$(cat \$C/\$f 2>/dev/null || echo 0)"; done; }
# run LABEL ENV PROG ARGS...: one server/client pair; prints "@@R LABEL <Final line fields>".
run() {
    local label=\$1 envs=\$2 prog=\$3; shift 3
    snap >/tmp/before
    local c2c
    c2c=\$(c2c 0 1 20000 2>/dev/null || echo nan)
    env \$envs timeout 150 \$(pin 0) \$prog -p 0 >/tmp/server.out 2>&1 &
    local s=\$! port
    port=\$(listen_port \$s) || { tail -3 /tmp/server.out; kill \$s; wait \$s; return; }
    local out
    out=\$(env \$envs timeout 150 \$(pin 1) \$prog 10.83.0.1 -p \$port "\$@" 2>&1)
    wait \$s || { echo "\$label: server failed:"; tail -3 /tmp/server.out; }
    # Any stall counted by rxe during the run (none is the normal case).
    snap | paste /tmp/before - | awk -v l="\$label" '\$4 != \$2 { printf "%s: rxe %s +%d\\n", l, \$1, \$4 - \$2 }'
    local fin
    fin=\$(echo "\$out" | grep "Final:" | tail -1)
    if [ -n "\$fin" ]; then echo "@@R \$label \${fin#*Final:} c2c \$c2c"; else echo "\$label: no result:"; echo "\$out" | tail -5; fi
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
"$HERE/run.sh" -t 2400 -f "$WORK/perftest" "${VARIANT_FILES[@]}" -f "$WORK/c2c" -f "$HERE/listen-port.sh" -f "$WORK/compare.sh" -- compare.sh | tee "$WORK/out"
echo "host load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "=== ucp over rc_verbs in the Soft-RoCE VM, medians of $REPS runs"
echo "Final line columns: iterations, typical latency (us), avg latency (us), overall latency (us), avg MB/s, overall MB/s, avg msg/s, overall msg/s"
python3 - "$WORK/out" "$NEAR_NS" <<'PY'
import statistics, sys
near_ns = float(sys.argv[2])
# runs[label] = [(values, c2c ns or None)], in run order (one per repetition).
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("@@R "):
        f = line.split()
        c2c = None
        if "c2c" in f:
            i = f.index("c2c")
            try:
                c2c = float(f[i + 1])
            except (IndexError, ValueError):
                pass
            f = f[:i]
        try:
            runs.setdefault(f[1], []).append(([float(x) for x in f[2:]], c2c))
        except ValueError:
            pass
def vals(label, col, near_only=False):
    return [r[col] for r, c in runs.get(label, [])
            if len(r) > col and (not near_only or (c is not None and c == c and c < near_ns))]
def med(v):
    return statistics.median(v) if v else None
names = sorted({l[len("rucx"):].rsplit("_", 2)[0] for l in runs if l.startswith("rucx")})
for test, col, unit, better in (("tag_lat", 1, "us typical latency", "lower"), ("put_bw", 5, "MB/s overall bandwidth", "higher")):
    uv = vals("ucx_" + test, col)
    if not uv:
        continue
    u = med(uv)
    un = med(vals("ucx_" + test, col, True))
    print(f"{test}: UCX runs {uv}")
    print(f"{test}: hand-over ns before the UCX runs {[c for _, c in runs['ucx_' + test]]}")
    for n in names:
        rv = vals(f"rucx{n}_" + test, col)
        if not rv:
            print(f"{test}: rucx{n}: missing results")
            continue
        r = med(rv)
        print(f"{test}: rucx{n} runs {rv}")
        print(f"{test}: median UCX {u:.2f} {unit}, rucx{n} {r:.2f} ({better} is better); ratio rucx{n}/UCX {r / u:.2f}")
        pairs = [a / b for a, b in zip(rv, uv) if b > 0]
        if pairs:
            print(f"{test}: rucx{n}/UCX median of the per-repetition ratios {med(pairs):.2f}")
        rn = med(vals(f"rucx{n}_" + test, col, True))
        if un is not None and rn is not None:
            print(f"{test}: near runs only (hand-over < {near_ns:.0f} ns): UCX {un:.2f}, rucx{n} {rn:.2f}; ratio {rn / un:.2f}"
                  f" ({len(vals('ucx_' + test, col, True))} and {len(vals(f'rucx{n}_' + test, col, True))} runs)")
PY
