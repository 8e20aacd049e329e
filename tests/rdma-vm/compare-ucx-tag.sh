#!/usr/bin/env bash
# Tag matching over RDMA, rucx beside UCX 1.13, inside the Soft-RoCE VM on the same rxe device:
# server and client processes pinned to the VM's two vCPUs, every row alternating within each
# repetition, REPS repetitions; then each run's result, the medians and the ratios.
#
#   rows                       UCX 1.13 (ucx_perftest)         rucx (perftest)
#   rc tag_lat 8 B             UCX_TLS=rc_verbs,ud_verbs       RUCX_TLS=rc_verbs,ud_verbs,
#   rc tag_bw 64 KiB, 1 MiB                                    RUCX_TM_ENABLE=y (offload on)
#                                                              and =n (offload off)
#   ud tag_lat 8 B             UCX_TLS=ud_verbs                RUCX_TLS=ud_verbs
#
# UCX's rc_verbs has no tag offload (UCX offloads only on rc_mlx5/dc_mlx5 hardware), so UCX has
# one rc row; rucx's rc_verbs matches tags in the receiving transport (software offload; the
# rendezvous is read by the transport's RDMA READ), on or off. Both sides wire up over their
# ud_verbs (UCX_UD_ETH_DGID_CHECK=n lets UCX's ud accept rxe's loopback GIDs). It reports; it
# asserts nothing. Under TCG and on a loaded host single runs vary by several times: compare
# medians, and only from a quiet host (the load is printed before and after).
#
# Usage: tests/rdma-vm/compare-ucx-tag.sh [REPS]      (default 5)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              LAT_ITERS (default 2000), BW64_ITERS (default 300), BW1M_ITERS (default 40),
#              BW_WARMUP (default 20: tag_bw warm-up iterations; both perftests keep a window of
#              sends and receives in flight, rucx's with a buffer each (-O 16), so the warm-up
#              covers the window and the registration of every buffer is out of the measurement),
#              ROWS (default "rc_lat rc_bw64k rc_bw1m ud_lat") to run a subset, or add rc_bw32k
#              (tag_bw 32 KiB, BW32_ITERS default 600: at the tag-offload split threshold),
#              RUCX_VARIANTS="NAME=path ..." more perftest builds alternating with it in the same
#              boot (rows rucxNAME_tm_on / rucxNAME_tm_off, or rucxNAME on ud)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REPS=${1:-5}
LAT_ITERS=${LAT_ITERS:-2000}
BW32_ITERS=${BW32_ITERS:-600}
BW64_ITERS=${BW64_ITERS:-300}
BW1M_ITERS=${BW1M_ITERS:-40}
BW_WARMUP=${BW_WARMUP:-20}
ROWS=${ROWS:-rc_lat rc_bw64k rc_bw1m ud_lat}
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 3600 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
WORK="$(mktemp -d /tmp/rdma-vm-tag.XXXXXX)"
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
UCX_RC="UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
UCX_UD="UCX_TLS=ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
RUCX_ON="RUCX_TLS=rc_verbs,ud_verbs RUCX_NET_DEVICES=rxe0:1 RUCX_TM_ENABLE=y"
RUCX_OFF="RUCX_TLS=rc_verbs,ud_verbs RUCX_NET_DEVICES=rxe0:1 RUCX_TM_ENABLE=n"
RUCX_UD="RUCX_TLS=ud_verbs RUCX_NET_DEVICES=rxe0:1"
ncpu=\$(nproc)
pin() { if [ "\$ncpu" -ge 2 ]; then echo "taskset -c \$1"; fi; }
source listen-port.sh
# run LABEL ENV PROG ARGS...: one server/client pair; prints "@@R LABEL <Final line fields>".
run() {
    local label=\$1 envs=\$2 prog=\$3; shift 3
    env \$envs timeout 300 \$(pin 0) \$prog -p 0 >/tmp/server.out 2>&1 &
    local s=\$! port
    port=\$(listen_port \$s) || { echo "\$label: the server listens on no port:"; tail -3 /tmp/server.out; kill \$s; wait \$s; return; }
    local out
    out=\$(env \$envs timeout 300 \$(pin 1) \$prog 10.83.0.1 -p \$port "\$@" 2>&1)
    wait \$s || { echo "\$label: server failed:"; tail -3 /tmp/server.out; }
    local fin
    fin=\$(echo "\$out" | grep "Final:" | tail -1)
    if [ -n "\$fin" ]; then echo "@@R \$label \${fin#*Final:}"; else echo "\$label: no result:"; echo "\$out" | tail -5; fi
}
# The protocol tables rucx chose (client side), once per configuration.
table() {
    local envs=\$1; shift
    echo "--- rucx protocol table: \$envs \$*"
    env \$envs RUCX_PROTO_INFO=y timeout 60 \$(pin 0) perftest -p 0 >/dev/null 2>&1 &
    local port
    port=\$(listen_port \$!) || return
    env \$envs RUCX_PROTO_INFO=y timeout 60 \$(pin 1) perftest 10.83.0.1 -p \$port "\$@" 2>&1 |
        sed -n '/^\[rucx\] endpoint/,/^\$/p' | tail -12
    wait
}
table "\$RUCX_ON" -t tag_bw -s 1048576 -n 4
table "\$RUCX_OFF" -t tag_bw -s 1048576 -n 4
table "\$RUCX_UD" -t tag_lat -s 8 -n 10
for rep in \$(seq 1 $REPS); do
    for row in $ROWS; do
        case \$row in
            rc_lat) a=(-t tag_lat -s 8 -n $LAT_ITERS -w 100) ;;
            rc_bw32k) a=(-t tag_bw -s 32768 -n $BW32_ITERS -w $BW_WARMUP) ;;
            rc_bw64k) a=(-t tag_bw -s 65536 -n $BW64_ITERS -w $BW_WARMUP) ;;
            rc_bw1m) a=(-t tag_bw -s 1048576 -n $BW1M_ITERS -w $BW_WARMUP) ;;
            ud_lat) a=(-t tag_lat -s 8 -n $LAT_ITERS -w 100) ;;
        esac
        if [ \$row = ud_lat ]; then
            run "\$row/ucx" "\$UCX_UD" ucx_perftest "\${a[@]}"
            for v in "" $VARIANT_NAMES; do
                run "\$row/rucx\$v" "\$RUCX_UD" perftest\$v "\${a[@]}"
            done
        else
            run "\$row/ucx" "\$UCX_RC" ucx_perftest "\${a[@]}"
            for v in "" $VARIANT_NAMES; do
                run "\$row/rucx\${v}_tm_on" "\$RUCX_ON" perftest\$v "\${a[@]}"
                run "\$row/rucx\${v}_tm_off" "\$RUCX_OFF" perftest\$v "\${a[@]}"
            done
        fi
    done
done
EOF
chmod +x "$WORK/compare.sh"
cp "$RUCX_PERFTEST" "$WORK/perftest"
echo "host load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$HERE/run.sh" -t "${VM_TIMEOUT:-5400}" -f "$WORK/perftest" "${VARIANT_FILES[@]}" -f "$HERE/listen-port.sh" -f "$WORK/compare.sh" -- compare.sh | tee "$WORK/out"
echo "host load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "=== tag matching over RDMA in the Soft-RoCE VM, medians of $REPS runs"
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
# Final line columns: iterations, typical latency, avg latency, overall latency (us), avg MB/s,
# overall MB/s, avg msg/s, overall msg/s.
spec = {"rc_lat": (1, "us typical latency", "lower"), "ud_lat": (1, "us typical latency", "lower"),
        "rc_bw32k": (5, "MB/s overall", "higher"), "rc_bw64k": (5, "MB/s overall", "higher"), "rc_bw1m": (5, "MB/s overall", "higher")}
for row, (col, unit, better) in spec.items():
    systems = sorted(l.split("/")[1] for l in runs if l.startswith(row + "/"))
    if not systems:
        continue
    meds = {}
    for s in systems:
        v = [r[col] for r in runs[f"{row}/{s}"] if len(r) > col]
        meds[s] = statistics.median(v)
        print(f"{row} {s:12} runs {v} -> median {meds[s]:.2f} {unit}")
    base = meds.get("ucx")
    for s in systems:
        if s != "ucx" and base:
            print(f"{row}: ratio {s}/ucx {meds[s] / base:.2f} ({better} is better)")
    for s in systems:
        if s.endswith("_tm_on") and meds.get(s[:-2] + "off"):
            print(f"{row}: ratio {s[:-6]} offload on/off {meds[s] / meds[s[:-2] + 'off']:.2f}")
PY
