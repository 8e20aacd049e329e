#!/usr/bin/env bash
# Runs unmodified Debian MPI stacks on a given libucp.so.0 and checks the results.
#
#   bash capi/tests/mpi/run.sh LIBDIR   # LIBDIR holds libucp.so.0, libucs.so.0, libucm.so.0
#   bash capi/tests/mpi/run.sh system   # the same tests on Debian's UCX, to validate the tests
#
# Cases (each one a line "PASS name (time)" or "FAIL name: why"):
#   p2p.c under Open MPI (pml ucx) and MPICH (ch4:ucx), 2 and 4 ranks, over shared memory
#     (UCX_TLS=shm,self) and tcp (UCX_TLS=tcp, UCX_NET_DEVICES=lo); every rank must report the
#     expected libucp.so.0 in its /proc/self/maps, pass every check and exit 0;
#   threads.c (MPI_THREAD_MULTIPLE, 4 threads per rank) under both MPIs and both transports;
#   peer_death.c under both MPIs and both transports: rank 1 SIGKILLs itself while rank 0 waits in
#     MPI_Recv with MPI_Irecvs outstanding; the job must end with a non-zero status before the
#     watchdog fires;
#   NetPIPE (NPopenmpi) over its whole size range (default upper bound), timing mode and integrity
#     mode, with the loaded libucp proved by the dynamic linker's own log (LD_DEBUG=files);
#   mpi4py_check.py under Open MPI with numpy arrays and Python objects;
#   osc.c (MPI RMA windows: put/get, accumulate, fetch-and-op, compare-and-swap, fences, locks,
#     flushes) under Open MPI with osc ucx forced (`--mca osc ucx`: window creation fails if the
#     component cannot run; its selection is also checked in the osc framework's verbose log)
#     and under MPICH, 2 and 4 ranks, over shared memory and tcp;
#   shmem.c under oshrun (spml, atomic and sshmem ucx forced, selections checked in their
#     verbose logs), 2 and 4 PEs, over shared memory and tcp: every PE must finish its checks
#     after shmem_finalize and exit 0.
# The last line is "N passed, M failed"; the exit status is non-zero if a case failed.
# Needs: openmpi-bin libopenmpi-dev mpich libmpich-dev netpipe-openmpi python3-mpi4py python3-numpy
# (oshcc and oshrun come with libopenmpi-dev and openmpi-bin).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ]; then
  echo "usage: $0 LIBDIR|system" >&2
  exit 2
fi

source "$here/lib.sh"
mpi_setup "$1"
need_tools mpicc.openmpi mpicc.mpich mpirun.openmpi mpirun.mpich oshcc oshrun NPopenmpi timeout
python=/usr/bin/python3 # the Debian interpreter that has python3-mpi4py

work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-mpi.XXXXXX")
trap '[ "$keep_work" = 1 ] || rm -rf "$work"' EXIT

echo "building the test programs in $work"
for mpi in openmpi mpich; do
  for prog in p2p threads peer_death; do
    "mpicc.$mpi" -O2 -Wall -Wextra -Werror -pthread -o "$work/$prog.$mpi" "$here/$prog.c"
  done
done
for mpi in openmpi mpich; do
  "mpicc.$mpi" -O2 -Wall -Wextra -Werror -o "$work/osc.$mpi" "$here/osc.c"
done
oshcc -O2 -Wall -Wextra -Werror -o "$work/shmem" "$here/shmem.c"

# checked NAME MPI NP TLS TIMEOUT PROGRAM ARGS...: runs a program that writes rank files (p2p.c's
# format) into a fresh folder given as its last argument, and checks them. Sets `last_out` to
# that folder and `last_ok` to 1 if the case passed.
checked() {
  local name=$1 mpi=$2 np=$3 tls=$4 limit=$5 out
  shift 5
  out=$work/$(echo "$name" | tr ' =' '--')
  last_out=$out
  last_ok=0
  mkdir -p "$out"
  launch "$mpi" "$np" "$tls" "$limit" "$out/log" -- "$@" "$out"
  if grep -q '^timeout: sending signal' "$out/log"; then
    fail "$name" "hung: killed by the watchdog after $limit s" "$out/log"
  elif [ "$status" != 0 ]; then
    check_ranks "$out" "$np" || true
    fail "$name" "exit status $status; ${why:-}" "$out/log"
  elif ! check_ranks "$out" "$np"; then
    fail "$name" "$why" "$out/log"
  else
    pass "$name, $checks checks" "$elapsed"
    last_ok=1
  fi
}

for mpi in openmpi mpich; do
  for tls in shm tcp; do
    for np in 2 4; do
      checked "p2p $mpi np=$np $tls" "$mpi" "$np" "$tls" 300 "$work/p2p.$mpi"
    done
    checked "thread-multiple $mpi np=2 $tls" "$mpi" 2 "$tls" 120 "$work/threads.$mpi"
  done
done

for mpi in openmpi mpich; do
  for tls in shm tcp; do
    name="peer death $mpi $tls"
    out=$work/peer-death-$mpi-$tls
    mkdir -p "$out"
    launch "$mpi" 2 "$tls" 60 "$out/log" -- "$work/peer_death.$mpi" "$out"
    if grep -q '^timeout: sending signal' "$out/log"; then
      fail "$name" "the job hung after rank 1 died (watchdog fired at 60 s)" "$out/log"
    elif [ "$status" = 0 ]; then
      fail "$name" "the job reported success although rank 1 was killed" "$out/log"
    elif ! check_libucp "$out" 2; then
      fail "$name" "$why" "$out/log"
    elif ! grep -qx 'rank 0 waiting' "$out/rank-0.txt" || ! grep -qx 'rank 1 dying' "$out/rank-1.txt"; then
      fail "$name" "did not reach the point where rank 1 dies (status $status)" "$out/log"
    elif grep -qx 'rank 0 recv returned 0' "$out/rank-0.txt"; then
      fail "$name" "rank 0's MPI_Recv succeeded with no sender" "$out/log"
    else
      pass "$name, exit status $status" "$elapsed"
    fi
  done
done

# check_lddebug DIR: the dynamic linker's logs in DIR show exactly 2 processes initialising a
# libucp.so.0, both the expected one.
check_lddebug() {
  local dir=$1 f p n=0
  for f in "$dir"/ld.*; do
    [ -e "$f" ] || continue
    p=$(sed -n '/calling init: .*libucp\.so/{s/.*calling init: //;p;q}' "$f")
    [ -n "$p" ] || continue
    [ "$(realpath "$p")" = "$want_ucp" ] || { why="a rank initialised $p, not $want_ucp"; return 1; }
    n=$((n + 1))
  done
  [ "$n" = 2 ] || { why="$n processes initialised a libucp, expected 2"; return 1; }
}

for np_mode in timing integrity; do
  name="NetPIPE $np_mode openmpi shm"
  dir=$work/netpipe-$np_mode
  mkdir -p "$dir/ld"
  if [ "$np_mode" = timing ]; then
    # Every size of the default range (1 B to 8 MiB + 3); a fixed repeat count instead of
    # NetPIPE's own calibration, which spends ~0.75 s on each of the 124 sizes.
    args=(-n 10 -o "$dir/np.out")
  else
    args=(-i -n 5 -o "$dir/np.out")
  fi
  extra_env=("LD_DEBUG=files" "LD_DEBUG_OUTPUT=$dir/ld/ld")
  launch openmpi 2 shm 300 "$dir/log" -- NPopenmpi "${args[@]}"
  extra_env=()
  last=$(awk 'END { print $1 }' "$dir/np.out" 2>/dev/null || true)
  if grep -q '^timeout: sending signal' "$dir/log"; then
    fail "$name" "hung: killed by the watchdog after 300 s" "$dir/log"
  elif [ "$status" != 0 ]; then
    fail "$name" "exit status $status" "$dir/log"
  elif [ -z "$last" ] || [ "$last" -lt 8388608 ]; then
    fail "$name" "stopped at ${last:-no} bytes, before the default upper bound (8 MiB)" "$dir/log"
  elif [ "$np_mode" = integrity ] && ! grep -q 'Integrity check passed' "$dir/log"; then
    fail "$name" "no 'Integrity check passed'" "$dir/log"
  elif [ "$np_mode" = integrity ] && grep -qi 'integrity check failed' "$dir/log"; then
    fail "$name" "an integrity check failed" "$dir/log"
  elif ! check_lddebug "$dir/ld"; then
    fail "$name" "$why" "$dir/log"
  else
    pass "$name, $(wc -l <"$dir/np.out") sizes up to $last B" "$elapsed"
  fi
done

checked "mpi4py openmpi np=2 shm" openmpi 2 shm 120 "$python" "$here/mpi4py_check.py"
checked "mpi4py openmpi np=3 tcp" openmpi 3 tcp 120 "$python" "$here/mpi4py_check.py"

# check_selected LOG NP FRAMEWORK: Open MPI's verbose log shows every one of the NP processes
# selecting component ucx of FRAMEWORK (osc: "osc: ucx selected" is not printed by 4.1, so the
# forced `--mca osc ucx` plus its "component ucx open function successful" line is the proof);
# otherwise sets `why` and returns 1.
check_selected() {
  local log=$1 np=$2 fw=$3 n
  case $fw in
    spml) n=$(grep -c 'mca_spml_base_select() select: component ucx selected' "$log" || true) ;;
    sshmem) n=$(grep -c 'sshmem: base: runtime_query: (shmem) Selected component \[ucx\]' "$log" || true) ;;
    osc) n=$(grep -c 'mca: base: components_open: component ucx open function successful' "$log" || true) ;;
  esac
  [ "${n:-0}" -ge "$np" ] || { why="$fw ucx selected by ${n:-0} of $np processes"; return 1; }
}

# One-sided: MPI RMA windows (osc.c) and OpenSHMEM (shmem.c).
for tls in shm tcp; do
  for np in 2 4; do
    extra_mca=(--mca osc ucx --mca osc_base_verbose 10)
    checked "osc openmpi np=$np $tls" openmpi "$np" "$tls" 120 "$work/osc.openmpi"
    if [ "$last_ok" = 1 ] && ! check_selected "$last_out/log" "$np" osc; then
      fail "osc openmpi np=$np $tls: osc ucx" "$why" "$last_out/log"
    fi
    extra_mca=()
    checked "osc mpich np=$np $tls" mpich "$np" "$tls" 120 "$work/osc.mpich"
    extra_mca=(--mca spml ucx --mca atomic ucx --mca sshmem ucx
               --mca spml_base_verbose 10 --mca sshmem_base_verbose 10)
    checked "shmem oshrun np=$np $tls" oshmem "$np" "$tls" 120 "$work/shmem"
    for fw in spml sshmem; do
      if [ "$last_ok" = 1 ] && ! check_selected "$last_out/log" "$np" "$fw"; then
        fail "shmem oshrun np=$np $tls: $fw ucx" "$why" "$last_out/log"
      fi
    done
    extra_mca=()
  done
done

[ "$keep_work" = 0 ] || echo "logs kept in $work"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
