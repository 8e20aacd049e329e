#!/usr/bin/env bash
# rc_verbs for real: builds (or reuses) the Soft-RoCE VM, builds the test binaries, and runs inside
# one VM boot:
#   - the uct rc_verbs tests, including the conformance suite with its tag-offload tests and
#     rc_verbs' own (rendezvous READ into a multi-piece receive, either peer dying),
#   - the uct ud_verbs tests with the conformance suite: pairing, a full-window stream, 1300
#     messages with 5% of datagrams dropped on purpose (once, in order), a silent peer and an
#     unreachable interface failing the endpoint after bounded retries,
#   - the allocation-counting test of the rc_verbs data path (`rc_verbs_no_alloc`),
#   - dead-peer detection with the default timeout and retry count (about 8 s),
#   - `rucx-info -d` listing rxe0:1 with its details,
#   - the RoCE v2 GID auto-selection and RUCX_IB_GID_INDEX override (uct_hello_world -h),
#   - the uct_hello_world pair `-d rxe0:1 -t rc_verbs` with -i, -b and -z,
#   - the ucp tag tests over rc_verbs (tests/tests/ucp_rc_verbs.rs; wire-up over tcp, then AM
#     and RMA lanes on rc_verbs): two workers in one process (also switching while the
#     receiver does not progress; connected through a ucp listener), and two processes with eager
#     small/large + rendezvous, 400 messages in order through wildcard receives, order across
#     the lane switch, and a killed peer failing the endpoint,
#   - ucp over ud_verbs (tests/tests/ucp_ud_verbs.rs): alone, every protocol size in order;
#     as rc_verbs' wire-up with RUCX_TLS=rc_verbs,ud_verbs and no tcp socket in the process,
#     a rendezvous by rc_verbs tag offload; two processes echoing 300 messages in order while
#     both drop 3% of their datagrams; a killed peer failing the endpoint,
#   - perftest tag_lat 8 B and ucp_put_bw 64 KiB between two processes over rc_verbs (short
#     runs: it must work and its protocol table must show rc_verbs as the AM lane), tag_lat
#     over ud_verbs alone, and tag_bw 1 MiB over rc_verbs with its tag offload (the table must
#     show the offloaded rendezvous),
#   - cma under Yama (this kernel has it; the host's may not): ptrace_scope 1 and 2 with two
#     processes without CAP_SYS_PTRACE exchanging rendezvous messages over posix,cma
#     (tests/tests/cma_yama.rs: cma towards the peer that made us its ptracer, else a fallback
#     logged once; the data intact and no failed request either way),
# then, in a second boot, Debian's Open MPI and MPICH on rucx's libucp.so.0 over UCX_TLS=rc,ud
# (tests/rdma-vm/mpi.sh), and prints one PASS/FAIL line per check and a summary. Exits non-zero if anything failed.
# Every step has a timeout; every server listens on a port the kernel picks (-p 0). The whole
# run stays well under 10 minutes on 2 cores (245 s with the binaries built, under load).
#
# Usage: tests/rdma-vm/ci.sh            (from anywhere; needs root for apt-get on first use)
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
started=$(date +%s)
say() { echo "rdma-vm ci [$(($(date +%s) - started))s]: $*"; }
die() {
    say "FAIL: $*"
    echo "0 passed, 1 failed"
    exit 1
}

say "building the VM image (cached in tests/rdma-vm/cache)"
timeout 900 "$HERE/build.sh" || die "build.sh failed"

say "building test binaries"
cd "$ROOT"
# Gives the test executable of `cargo test -p uct <selector> --no-run` for target $1.
test_exe() {
    local target=$1
    shift
    timeout 1200 cargo test -p uct "$@" --no-run --message-format=json 2>/dev/null |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])
' "$target" | tail -1
}
UCT_TESTS="$(test_exe uct --lib)"
UCP_RC="$(timeout 1200 cargo test -p rucx-tests --test ucp_rc_verbs --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "ucp_rc_verbs":
        print(m["executable"])
' | tail -1)"
[[ -x "$UCP_RC" ]] || die "could not build the ucp_rc_verbs test"
UCP_UD="$(timeout 1200 cargo test -p rucx-tests --test ucp_ud_verbs --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "ucp_ud_verbs":
        print(m["executable"])
' | tail -1)"
[[ -x "$UCP_UD" ]] || die "could not build the ucp_ud_verbs test"
CMA_YAMA="$(timeout 1200 cargo test -p rucx-tests --test cma_yama --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cma_yama":
        print(m["executable"])
' | tail -1)"
[[ -x "$CMA_YAMA" ]] || die "could not build the cma_yama test"
[[ -x "$UCT_TESTS" ]] || die "could not build the uct test binary"
NO_ALLOC="$(test_exe rc_verbs_no_alloc --test rc_verbs_no_alloc)"
[[ -x "$NO_ALLOC" ]] || die "could not build the rc_verbs_no_alloc test"
timeout 1200 cargo build -q -p rucx-examples --bin uct_hello_world || die "could not build uct_hello_world"
# Cargo's own target directory (CARGO_TARGET_DIR when set, as in a worktree with its own).
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
HELLO="$TARGET_DIR/debug/uct_hello_world"
timeout 1200 cargo build -q -p perftest --bin rucx-info --bin perftest || die "could not build rucx-info and perftest"
INFO="$TARGET_DIR/debug/rucx-info"
PERFTEST="$TARGET_DIR/debug/perftest"

WORK="$(mktemp -d /tmp/rdma-vm-ci.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
# The script that runs inside the VM: one marker line per check.
cat >"$WORK/vm-checks.sh" <<EOF
#!/bin/bash
check() {
    local name=\$1; shift
    echo "--- \$name: \$*"
    "\$@"
    local rc=\$?
    if [ \$rc = 0 ]; then echo "@@CHECK \$name PASS"; else echo "@@CHECK \$name FAIL (exit \$rc)"; fi
}
# port_in FILE: the port a perftest or uct_hello_world server started with -p 0 (the kernel
# picks) names in its output, waiting up to 10 s for the line.
port_in() {
    local n p
    for n in \$(seq 100); do
        p=\$(sed -n -e 's/^Listening on port \([0-9][0-9]*\).*/\1/p' \
            -e 's/^Waiting for connection on port \([0-9][0-9]*\).*/\1/p' \$1 | head -1)
        [ -n "\$p" ] && { echo \$p; return 0; }
        sleep 0.1
    done
    echo "no port in \$1:" >&2
    cat \$1 >&2
    return 1
}
hello() {
    local mode=\$1
    timeout 60 uct_hello_world -d rxe0:1 -t rc_verbs -p 0 >/tmp/server.hello 2>&1 &
    local server=\$! port
    port=\$(port_in /tmp/server.hello) || return 1
    timeout 60 uct_hello_world -d rxe0:1 -t rc_verbs -n 10.83.0.1 -p \$port \$mode -s 100
    local c=\$?
    wait \$server
    local s=\$?
    cat /tmp/server.hello
    echo "client exit \$c, server exit \$s"
    [ \$c = 0 ] && [ \$s = 0 ] && grep -q "received 100 bytes" /tmp/server.hello
}
ibv_devinfo -d rxe0 | grep -E "state|active_mtu|link_layer"
# uct_lib TRANSPORT: the uct library tests of that transport, conformance suite included.
# Capability skips of the suite are expected (ud_verbs has no RMA or tags); a missing device
# is not.
uct_lib() {
    timeout 300 $(basename "$UCT_TESTS") \$1 --test-threads=2 --nocapture 2>&1 | tee /tmp/uct_lib.out |
        grep -E "^test |dropped on purpose|test result"
    local rc=\${PIPESTATUS[0]}
    ! grep -q "not available here\|no \$1 device here" /tmp/uct_lib.out && [ \$rc = 0 ]
}
check uct_rc_verbs_tests uct_lib rc_verbs
check uct_ud_verbs_tests uct_lib ud_verbs
check rc_verbs_no_alloc timeout 120 $(basename "$NO_ALLOC")
check dead_peer_default_timeouts timeout 120 $(basename "$UCT_TESTS") dead_peer_with_default_timeouts --ignored
gid_override() {
    RUCX_IB_GID_INDEX=0 uct_hello_world -h | grep "rc_verbs" | tee /dev/stderr | grep -q "GID index 0 (fe80:" &&
        uct_hello_world -h | grep -q "GID index 1 (::ffff:10.83.0.1)" &&
        RUCX_IB_GID_INDEX=5000 uct_hello_world -h | grep "rc_verbs" | tee /dev/stderr | grep -q "RUCX_IB_GID_INDEX=5000 is outside"
}
check gid_index_auto_and_override gid_override
rucx_info() {
    rucx-info -d | tee /tmp/info.out | grep -B2 -A22 "Transport: *\(rc\|ud\)_verbs" | head -60
    grep -q "rxe0:1" /tmp/info.out && grep -q "GID index 1" /tmp/info.out &&
        grep -A25 "Transport: *rc_verbs" /tmp/info.out | grep -q "tag offload" &&
        grep -q "Transport: *ud_verbs" /tmp/info.out
}
check rucx_info_lists_rxe rucx_info
check hello_world_am_short hello -i
check hello_world_am_bcopy hello -b
check hello_world_am_zcopy hello -z
ucp_rc() {
    timeout 150 $(basename "$UCP_RC") --exact \$1 --nocapture --test-threads=1 2>&1 | grep -v "^child: *\(running .*\)\?\$" | tee /tmp/ucp_rc.out
    local rc=\${PIPESTATUS[0]}
    # The test skips (and passes) without rc_verbs: here it must have really run.
    ! grep -q "skipped" /tmp/ucp_rc.out && grep -q "1 passed" /tmp/ucp_rc.out && [ \$rc = 0 ]
}
check ucp_rc_two_workers ucp_rc tag_over_rc_verbs_two_workers
check ucp_rc_switch_receiver_idle ucp_rc switch_while_the_receiver_is_idle
check ucp_rc_listener ucp_rc listener_connection_then_rc_verbs_lanes
check ucp_rc_mp_eager_and_rndv ucp_rc mp_eager_small_and_large_and_rndv
check ucp_rc_mp_many_in_order_wildcard ucp_rc mp_many_messages_in_order_wildcard
check ucp_rc_mp_order_across_lane_switch ucp_rc mp_order_across_the_lane_switch
check ucp_rc_mp_killed_peer ucp_rc mp_killed_peer_fails_the_endpoint
ucp_ud() {
    timeout 200 $(basename "$UCP_UD") --exact \$1 --nocapture --test-threads=1 2>&1 | grep -v "^child: *\(running .*\)\?\$" | tee /tmp/ucp_ud.out | tail -25
    local rc=\${PIPESTATUS[0]}
    ! grep -q "skipped" /tmp/ucp_ud.out && grep -q "1 passed" /tmp/ucp_ud.out && [ \$rc = 0 ]
}
check ucp_ud_alone ucp_ud tag_over_ud_verbs_alone
check ucp_rc_wired_by_ud_no_tcp ucp_ud rc_verbs_wired_up_by_ud_verbs_without_tcp
check ucp_ud_mp_lossy_in_order ucp_ud mp_lossy_ud_echo_in_order
check ucp_ud_mp_killed_peer ucp_ud mp_killed_peer_fails_the_ud_endpoint
# perftest over rc_verbs, configured as UCX is (RUCX_TLS=rc_verbs: tcp joins by itself as the
# wire-up transport), server and client processes.
perf_rc() {
    RUCX_TLS=rc_verbs RUCX_NET_DEVICES=rxe0:1 timeout 90 perftest -p 0 >/tmp/perf_server.out 2>&1 &
    local server=\$! port
    port=\$(port_in /tmp/perf_server.out) || return 1
    RUCX_TLS=rc_verbs RUCX_NET_DEVICES=rxe0:1 RUCX_PROTO_INFO=y timeout 90 perftest 10.83.0.1 -p \$port "\$@" >/tmp/perf.out 2>&1
    local c=\$?
    wait \$server
    local s=\$?
    grep -A8 "AM and RMA lanes moved" /tmp/perf.out | head -8
    grep "Final:" /tmp/perf.out || tail -5 /tmp/perf.out
    echo "client exit \$c, server exit \$s"
    [ \$c = 0 ] && [ \$s = 0 ] && grep -q "Final:" /tmp/perf.out &&
        grep -q "AM and RMA lanes moved to rc_verbs" /tmp/perf.out &&
        grep -A3 "AM and RMA lanes moved" /tmp/perf.out | grep "eager short" | grep -q "rc_verbs/rxe0:1"
}
check perftest_tag_lat_rc_verbs perf_rc -t tag_lat -s 8 -n 300 -w 30
check perftest_ucp_put_bw_rc_verbs perf_rc -t ucp_put_bw -s 65536 -n 50 -w 5
# perf_tls TLS WANT ARGS...: perftest with RUCX_TLS=TLS, server and client processes; the
# client's protocol table must contain WANT.
perf_tls() {
    local tls=\$1 want=\$2; shift 2
    RUCX_TLS=\$tls RUCX_NET_DEVICES=rxe0:1 timeout 90 perftest -p 0 >/tmp/perf_server.out 2>&1 &
    local server=\$! port
    port=\$(port_in /tmp/perf_server.out) || return 1
    RUCX_TLS=\$tls RUCX_NET_DEVICES=rxe0:1 RUCX_PROTO_INFO=y timeout 90 perftest 10.83.0.1 -p \$port "\$@" >/tmp/perf.out 2>&1
    local c=\$?
    wait \$server
    local s=\$?
    grep -B2 -A10 "protocol" /tmp/perf.out | head -30
    grep "Final:" /tmp/perf.out || tail -5 /tmp/perf.out
    echo "client exit \$c, server exit \$s"
    [ \$c = 0 ] && [ \$s = 0 ] && grep -q "Final:" /tmp/perf.out && grep -q "\$want" /tmp/perf.out
}
check perftest_tag_lat_ud_verbs perf_tls ud_verbs "ud_verbs/rxe0:1" -t tag_lat -s 8 -n 300 -w 30
check perftest_tag_bw_rc_offload perf_tls rc_verbs,ud_verbs "tag offload" -t tag_bw -s 1048576 -n 20 -w 2
# cma under Yama: the test sets ptrace_scope itself (and restores it); --ignored runs it here.
yama() {
    [ -f /proc/sys/kernel/yama/ptrace_scope ] || { echo "no Yama in this kernel"; return 1; }
    timeout 150 $(basename "$CMA_YAMA") --exact \$1 --ignored --nocapture --test-threads=1 >/tmp/yama.out 2>&1
    local rc=\$?
    tail -40 /tmp/yama.out
    grep -q "1 passed" /tmp/yama.out && [ \$rc = 0 ]
}
check cma_yama_scope_1 yama yama_scope_1_cma_towards_the_verified_peer
check cma_yama_scope_2 yama yama_scope_2_falls_back_without_cma
EOF
chmod +x "$WORK/vm-checks.sh"

say "booting the VM and running the checks"
"$HERE/run.sh" -t 720 -f "$UCT_TESTS" -f "$NO_ALLOC" -f "$HELLO" -f "$INFO" -f "$UCP_RC" -f "$UCP_UD" -f "$CMA_YAMA" -f "$PERFTEST" -f "$WORK/vm-checks.sh" -- vm-checks.sh 2>&1 | tee "$WORK/out"
vm_rc=${PIPESTATUS[0]}

# MPI over RDMA, in a boot of its own (the MPI runtimes make a larger image): the libraries the
# MPI stage of .ci/run built, else those of an earlier run, else mpi.sh builds them.
say "MPI over RDMA (tests/rdma-vm/mpi.sh)"
MPI_LIB=""
for d in "$ROOT/target/rucx-ucx" "$ROOT/target/rucx-ucx-vm"; do
    [[ -e "$d/libucp.so.0" ]] && { MPI_LIB=$d; break; }
done
if timeout 1800 "$HERE/mpi.sh" $MPI_LIB 2>&1 | tee "$WORK/mpi.out" | grep -E "^(PASS|FAIL|  )|passed"; then
    echo "@@CHECK mpi_p2p_openmpi_mpich_over_rc_ud PASS" >>"$WORK/out"
else
    echo "@@CHECK mpi_p2p_openmpi_mpich_over_rc_ud FAIL" >>"$WORK/out"
fi

echo
echo "=== rc_verbs inside the Soft-RoCE VM: summary"
pass=$(grep -c '^@@CHECK .* PASS$' "$WORK/out")
fail=$(grep -c '^@@CHECK .* FAIL' "$WORK/out")
grep '^@@CHECK ' "$WORK/out" | sed 's/^@@CHECK /  /'
expected=27
if ((pass + fail < expected)); then
    say "only $((pass + fail)) of $expected checks reported (VM exit $vm_rc)"
    fail=$((fail + expected - pass - fail))
fi
say "total time $(($(date +%s) - started))s"
echo "$pass passed, $fail failed"
((fail == 0))
