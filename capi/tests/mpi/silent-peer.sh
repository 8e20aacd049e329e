#!/usr/bin/env bash
# A busy peer is not a dead one (issue 31): silent_peer.c under Open MPI (pml ucx) and MPICH
# (ch4:ucx, MPIR_CVAR_NOLOCAL=1 so that ranks of one host also talk through UCX), over shared
# memory (UCX_TLS=shm,self) and tcp (UCX_TLS=tcp over lo), with rank 1 out of MPI for 0, 10, 45
# and 120 s while rank 0 waits in MPI_Recv.
#
#   bash capi/tests/mpi/silent-peer.sh LIBDIR   # rucx's libraries (capi/build.sh LIBDIR)
#   bash capi/tests/mpi/silent-peer.sh system   # Debian's UCX, for comparison
#
# The silent rank sleeps: to the other rank a sleeping process and a computing one look the
# same (neither calls MPI, so no progress runs in its application thread), and sleeping ranks
# cost no CPU, so all cases run at once and the stage takes about the longest silence. Two cases
# compute instead (COMPUTE_CASES), to show the result does not depend on that.
# A case passes when the job exits 0, every rank loaded the expected libucp.so.0 and passed its
# checks (the data of every message), rank 1 was silent at least as long as asked, rank 0 waited
# at most the silence + WAIT_SLACK s (default 15) and the job took at most the silence +
# JOB_SLACK s (default 60; start-up of all jobs at once on 2 cores is most of it). These bounds
# only detect hangs (on rucx the job hung once the silence passed its 30 s keepalive timeout);
# they are not timings. A watchdog kills a job at the silence + 120 s.
# Environment: SILENCES (default "0 10 45 120"), MPIS (default "openmpi mpich"), TLS_SETS
# (default "shm tcp"), COMPUTE_CASES (MPI:TLS:SECONDS..., default
# "openmpi:shm:45 mpich:tcp:45"; empty for none).
# The last line is "N passed, M failed"; the exit status is non-zero if a case failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ]; then
  echo "usage: $0 LIBDIR|system" >&2
  exit 2
fi
source "$here/lib.sh"
mpi_setup "$1"
need_tools mpicc.openmpi mpicc.mpich mpirun.openmpi mpirun.mpich timeout

SILENCES=${SILENCES:-0 10 45 120}
MPIS=${MPIS:-openmpi mpich}
TLS_SETS=${TLS_SETS:-shm tcp}
COMPUTE_CASES=${COMPUTE_CASES-openmpi:shm:45 mpich:tcp:45}
WAIT_SLACK=${WAIT_SLACK:-15}
JOB_SLACK=${JOB_SLACK:-60}

work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-silent.XXXXXX")
trap '[ "$keep_work" = 1 ] || rm -rf "$work"' EXIT
for mpi in openmpi mpich; do
  "mpicc.$mpi" -O2 -Wall -Wextra -Werror -o "$work/silent_peer.$mpi" "$here/silent_peer.c"
done

# one_case MPI TLS SECONDS HOW: runs one job and writes its PASS/FAIL line (with the log's tail
# on failure) to stdout.
one_case() {
  local mpi=$1 tls=$2 secs=$3 how=$4 out waited silent
  local name="silent peer $mpi $tls ${secs} s $how"
  out=$work/$mpi-$tls-$secs-$how
  mkdir -p "$out"
  extra_env=()
  [ "$mpi" != mpich ] || extra_env=(MPIR_CVAR_NOLOCAL=1)
  launch "$mpi" 2 "$tls" $((secs + 120)) "$out/log" -- "$work/silent_peer.$mpi" "$out" "$secs" "$how"
  waited=$(awk '$3 == "time" && $4 == "waited" { print $5 }' "$out/rank-0.txt" 2>/dev/null || true)
  silent=$(awk '$3 == "time" && $4 == "silent" { print $5 }' "$out/rank-1.txt" 2>/dev/null || true)
  if grep -q 'timeout: sending signal' "$out/log"; then
    fail "$name" "hung: killed by the watchdog after $((secs + 120)) s" "$out/log"
  elif [ "$status" != 0 ]; then
    check_ranks "$out" 2 || true
    fail "$name" "exit status $status after $elapsed s; ${why:-}" "$out/log"
  elif ! check_ranks "$out" 2; then
    fail "$name" "$why" "$out/log"
  elif [ -z "$waited" ] || [ -z "$silent" ]; then
    fail "$name" "no time lines in the rank files" "$out/log"
  elif awk -v s="$silent" -v n="$secs" 'BEGIN { exit !(s < n) }'; then
    fail "$name" "rank 1 was silent only $silent s" "$out/log"
  elif awk -v w="$waited" -v n="$secs" -v k="$WAIT_SLACK" 'BEGIN { exit !(w > n + k) }'; then
    fail "$name" "rank 0 waited $waited s for a $secs s silence (bound: +$WAIT_SLACK s)" "$out/log"
  elif awk -v e="$elapsed" -v n="$secs" -v k="$JOB_SLACK" 'BEGIN { exit !(e > n + k) }'; then
    fail "$name" "the job took $elapsed s for a $secs s silence (bound: +$JOB_SLACK s)" "$out/log"
  else
    pass "$name, $checks checks, rank 0 waited $waited s" "$elapsed"
  fi
}

cases=()
for secs in $SILENCES; do
  for mpi in $MPIS; do
    for tls in $TLS_SETS; do cases+=("$mpi $tls $secs sleep"); done
  done
done
for c in $COMPUTE_CASES; do
  IFS=: read -r mpi tls secs <<<"$c"
  cases+=("$mpi $tls $secs compute")
done

echo "running ${#cases[@]} jobs at once (silences: $SILENCES s)"
pids=()
for i in "${!cases[@]}"; do
  # shellcheck disable=SC2086 # the case is four words
  one_case ${cases[$i]} >"$work/result.$i" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
for i in "${!cases[@]}"; do
  cat "$work/result.$i"
  if grep -q '^PASS ' "$work/result.$i"; then passed=$((passed + 1)); else failed=$((failed + 1)); keep_work=1; fi
done
[ "$keep_work" = 0 ] || echo "logs kept in $work"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
