#!/usr/bin/env bash
# mpi4py's own test suite (test/runtests.py of mpi4py 3.1.4, the version Debian's
# python3-mpi4py is built from; spawn and dynproc excluded) under Open MPI's pml ucx, 2 ranks,
# over shared memory (UCX_TLS=shm,self) and over tcp (UCX_TLS=tcp on lo), on the given UCX.
#
#   bash capi/tests/mpi/mpi4py-suite.sh LIBDIR [SUITES]   # rucx (capi/build.sh LIBDIR)
#   bash capi/tests/mpi/mpi4py-suite.sh system [SUITES]   # Debian's UCX: prints the counts
#
# SUITES is where capi/tests/mpi/fetch-suites.sh put the sources (default target/suites; fetched
# there if missing). Each rank must load the expected libucp.so.0 (mpi4py_suite.py notes it
# after MPI_Init), and each rank's "Ran N tests" / "OK (skipped=S)" must equal the line for
# that transport in mpi4py-expected.txt, measured on Debian's UCX (rucx must give the same
# result). A watchdog stops a run after TIMEOUT s (default 900). Runs with /usr/bin/python3,
# the interpreter that has python3-mpi4py.
# The last line is "N passed, M failed"; the exit status is non-zero if a case failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 LIBDIR|system [SUITES]" >&2
  exit 2
fi
source "$here/lib.sh"
mpi_setup "$1"
need_tools mpirun.openmpi timeout
suites=${2:-$root/target/suites}
# Absolute: the suites run from inside their own folders.
mkdir -p "$suites" && suites=$(cd "$suites" && pwd)
[ -f "$suites/mpi4py-3.1.4/test/runtests.py" ] || bash "$here/fetch-suites.sh" "$suites"
testdir=$suites/mpi4py-3.1.4/test
python=/usr/bin/python3
TIMEOUT=${TIMEOUT:-900}

work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-mpi4py.XXXXXX")
trap '[ "$keep_work" = 1 ] || rm -rf "$work"' EXIT

for tls in shm tcp; do
  name="mpi4py test suite openmpi np=2 $tls"
  out=$work/$tls
  mkdir -p "$out"
  # The suite starts from its own folder (some tests open files beside them).
  (cd "$testdir" && launch openmpi 2 "$tls" "$TIMEOUT" "$out/log" -- \
    "$python" "$here/mpi4py_suite.py" "$out" "$testdir" --no-builddir -e spawn -e dynproc
   echo "$status $elapsed" >"$out/status")
  read -r status elapsed <"$out/status"
  # The ranks' reports, one after the other, under the job's output (a failure shows its end).
  for f in "$out"/rank-*.out; do [ ! -f "$f" ] || { echo "== $f"; cat "$f"; } >>"$out/log"; done
  # Each rank prints "Ran N tests in T s" and then "OK (skipped=S)" or "FAILED (...)" into
  # its own rank-R.out (mpi4py_suite.py).
  got=$(for f in "$out"/rank-*.out; do
          [ -f "$f" ] || continue
          awk '/^Ran [0-9]+ tests/ { ran = $2 }
               /^(OK|FAILED)/ { s = 0; if (match($0, /skipped=[0-9]+/)) s = substr($0, RSTART + 8, RLENGTH - 8)
                                printf "%s %s %s\n", ran, s, $1 }' "$f"
        done | sort -u | tr '\n' ';')
  want=$(awk -v t="$tls" '$1 == t { printf "%s %s %s;", $2, $3, $4 }' "$here/mpi4py-expected.txt")
  echo "$name: per rank (tests skipped result): ${got:-none}"
  if grep -q 'timeout: sending signal' "$out/log"; then
    fail "$name" "hung: killed by the watchdog after $TIMEOUT s" "$out/log"
  elif ! check_libucp "$out" 2; then
    fail "$name" "$why" "$out/log"
  elif [ "$status" != 0 ]; then
    fail "$name" "exit status $status; got ${got:-no result}" "$out/log"
  elif [ "$(cat "$out"/rank-*.out 2>/dev/null | awk '/^Ran [0-9]+ tests/' | wc -l)" != 2 ]; then
    fail "$name" "expected a result from each of the 2 ranks" "$out/log"
  elif [ "$got" != "$want" ]; then
    fail "$name" "got ${got:-no result}, Debian's UCX gives $want (mpi4py-expected.txt)" "$out/log"
  else
    pass "$name, ${got%;}" "$elapsed"
  fi
done

[ "$keep_work" = 0 ] || echo "logs kept in $work"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
