#!/usr/bin/env bash
# Where both vCPUs spend a tag_bw run over rc_verbs in steady state, UCX 1.13 beside rucx (tag
# offload off, and on with ON=1): inside the Soft-RoCE VM each configuration runs tag_bw SIZE
# bytes x N (server = receiver on vCPU 0, client = sender on vCPU 1); WAIT seconds after the
# client starts (set-up over: registration, page population, wire-up), the per-CPU jiffies of
# /proc/stat, rxe0's sent packets and a `perf record -a` (cpu-clock, call graphs, both vCPUs:
# with offload on the sender's vCPU copies the half it RDMA-WRITEs) cover a window of WIN
# seconds. Prints, per run: the result, the MiB moved in the window (packets / 1030: 1 MiB is
# 1024 READ responses at rxe's 1024-byte MTU plus a few messages), each vCPU's jiffies by kind,
# its perf samples by process and context (softirq: the stack holds handle_softirqs; syscall: a
# system call without a softirq in it; pagefault; idle; user: the rest, a spinning perftest
# among them), and its kernel samples by leaf function and the two frames above it (the copies
# `memcpy_erms<rxe_mr_copy<...`, the ICRC `crc32_body<...`, the zeroing of every new packet
# buffer `memset_erms<__kmem_cache_alloc_node<...`: Debian's kernel zeroes allocations,
# init_on_alloc). The host's perf (same 6.1 major version as the guest's kernel) goes in
# with -f. Under TCG the guest's `sleep WIN` lasts longer than WIN seconds of the client's own
# clock (164 MiB moved in a "5 s" window of a 12.5 MB/s run), so compare the window's counts
# between the runs of one boot, as shares. It reports; it asserts nothing.
#
# Usage: tests/rdma-vm/perf-tag-bw.sh [REPS]     (default 2)
# Environment: RUCX_PERFTEST=path to a built perftest (default: cargo build --release -p perftest)
#              SIZE (default 1048576), N (default 200), WAIT (default 6), WIN (default 5),
#              ON=1 adds rucx with tag offload on
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REPS=${1:-2}
PERF="$(command -v perf || true)"
[[ -n "$PERF" ]] || { echo "perf is needed on the host (apt-get install linux-perf)" >&2; exit 1; }
"$HERE/build.sh"
if [[ -z "${RUCX_PERFTEST:-}" ]]; then
    (cd "$ROOT" && timeout 3600 cargo build -q --release -p perftest) ||
        { echo "no perftest package to build; set RUCX_PERFTEST" >&2; exit 1; }
    RUCX_PERFTEST="${CARGO_TARGET_DIR:-$ROOT/target}/release/perftest"
fi
WORK="$(mktemp -d /tmp/rdma-vm-perf.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/perf-bw.sh" <<EOF
#!/bin/bash
SIZE=${SIZE:-1048576}
N=${N:-200}
WAIT=${WAIT:-6}
WIN=${WIN:-5}
source listen-port.sh
UCX_ENV="UCX_TLS=rc_verbs,ud_verbs UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=rxe0:1"
RUCX_ENV="RUCX_TLS=rc_verbs,ud_verbs RUCX_NET_DEVICES=rxe0:1"
PKTS=/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts
for rep in \$(seq 1 $REPS); do
    for t in ucx rucx_off ${ON:+rucx_on}; do
        case \$t in
            ucx) envs=\$UCX_ENV; prog=ucx_perftest ;;
            rucx_off) envs="\$RUCX_ENV RUCX_TM_ENABLE=n"; prog=perftest ;;
            rucx_on) envs="\$RUCX_ENV RUCX_TM_ENABLE=y"; prog=perftest ;;
        esac
        env \$envs timeout 600 taskset -c 0 \$prog -p 0 >/tmp/server.out 2>&1 &
        s=\$!
        port=\$(listen_port \$s) || { tail -3 /tmp/server.out; kill \$s; wait \$s; continue; }
        env \$envs timeout 600 taskset -c 1 \$prog 10.83.0.1 -p \$port -t tag_bw -s \$SIZE -n \$N -w 5 >/tmp/client.out 2>&1 &
        c=\$!
        sleep \$WAIT
        p0=\$(cat \$PKTS); grep '^cpu[01] ' /proc/stat >/tmp/c0
        perf record -q -a -g -e cpu-clock -F 250 -o /tmp/perf.data -- sleep \$WIN 2>/dev/null
        p1=\$(cat \$PKTS); grep '^cpu[01] ' /proc/stat >/tmp/c1
        wait \$c || echo "\$t: client failed: \$(tail -2 /tmp/client.out)"
        wait \$s || echo "\$t: server failed: \$(tail -2 /tmp/server.out)"
        echo "== \$t \$(grep 'Final:' /tmp/client.out | tail -1)"
        echo "   window (guest sleep \${WIN}s): ~\$(( (p1 - p0) / 1030 )) MiB (rxe0 sent_pkts \$((p1 - p0)))"
        paste /tmp/c0 /tmp/c1 | awk '{ printf "   %s jiffies: user %d sys %d idle %d softirq %d\n", \$1, \$13-\$2, \$15-\$4, \$16-\$5, \$19-\$8 }'
        perf script -i /tmp/perf.data -F cpu,comm,ip,sym 2>/dev/null | awk '
            function out() {
                k = "user/kernel thread"
                if (stack ~ / handle_softirqs/) k = "softirq"
                else if (stack ~ / (native_safe_halt|default_idle)/) k = "idle"
                else if (stack ~ / exc_page_fault/) k = "pagefault"
                else if (stack ~ / do_syscall_64/) k = "syscall"
                ctx[cpu "|" comm " " k]++
                if (k == "softirq" || k == "syscall") leaf[cpu "|" f[1] "<" f[2] "<" f[3]]++
                n = 0
            }
            /^[^ \t]/ { if (n) out(); comm = \$1; cpu = \$2; gsub(/[^0-9]/, "", cpu); cpu += 0; n = 1
                         stack = ""; d = 0; delete f; next }
            { stack = stack " " \$2; if (d < 3) f[++d] = \$2 }
            END {
                if (n) out()
                for (x in ctx) { split(x, a, "|"); printf "c%s %7d  %s\n", a[1], ctx[x], a[2] }
                for (x in leaf) { split(x, a, "|"); printf "l%s %7d  %s\n", a[1], leaf[x], a[2] }
            }' | sort -k1,1 -k2,2nr >/tmp/perf.txt
        for cpu in 0 1; do
            echo "   vCPU \$cpu perf samples (250 Hz) by process and context:"
            grep "^c\$cpu " /tmp/perf.txt | head -6 | cut -d' ' -f2-
            echo "   vCPU \$cpu kernel samples by leaf function < caller < caller:"
            grep "^l\$cpu " /tmp/perf.txt | head -8 | cut -d' ' -f2-
        done
    done
done
EOF
chmod +x "$WORK/perf-bw.sh"
cp "$RUCX_PERFTEST" "$WORK/perftest"
echo "host load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$HERE/run.sh" -t 2400 -f "$WORK/perftest" -f "$PERF" -f "$HERE/listen-port.sh" -f "$WORK/perf-bw.sh" -- perf-bw.sh
echo "host load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
