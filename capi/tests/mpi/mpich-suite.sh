#!/usr/bin/env bash
# MPICH's own test suite (test/mpi of Debian's `mpich` 4.0.2 source package): the pt2pt and coll
# programs written for at most 4 ranks, run by MPICH's `runtests -maxnp=4` under Debian's MPICH
# (ch4:ucx) on the given UCX. Tests MPICH itself marks as expected failures (xfail=) are left out.
#
#   bash capi/tests/mpi/mpich-suite.sh LIBDIR [SUITES]   # rucx (capi/build.sh LIBDIR)
#   bash capi/tests/mpi/mpich-suite.sh system [SUITES]   # Debian's UCX
#
# SUITES is where fetch-suites.sh put the sources (default target/suites; fetched if missing);
# the suite is configured and its pt2pt/coll programs built there once (mpicc.mpich).
# Passes when every test that failed is listed in mpich-expected-failures.txt (the failures of
# Debian's UCX, measured with `system`), and the dynamic linker's log shows every process that
# initialised a libucp initialising the expected one. A failure of MPICH's harness includes any
# output other than " No Errors" (a warning line counts).
# Environment: ONLY and EXCLUDE (grep -E patterns on the test lines "DIR: PROGRAM NP ARGS...",
# to run a subset: e.g. ONLY='^pt2pt: '), MPITEST_TIMEOUT (runtests' limit per test, seconds,
# default 180), UCX_TLS (default: all).
# Prints each failure, then "N passed, M failed"; the exit status is non-zero if a case failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 LIBDIR|system [SUITES]" >&2
  exit 2
fi
source "$here/lib.sh"
mpi_setup "$1"
need_tools mpicc.mpich mpirun.mpich perl make timeout
suites=${2:-$root/target/suites}
# Absolute: the suites run from inside their own folders.
mkdir -p "$suites" && suites=$(cd "$suites" && pwd)
[ -f "$suites/mpich-4.0.2/test/mpi/runtests.in" ] || bash "$here/fetch-suites.sh" "$suites"
src=$suites/mpich-4.0.2/test/mpi
dirs="pt2pt coll"

# The programs of a testlist line that runs on at most 4 ranks and is not an expected failure.
selected() { # DIR
  awk 'NF > 0 && $1 !~ /^#/ && $2 ~ /^[0-9]+$/ && $2 <= 4 && !/xfail=/' "$src/$1/testlist"
}

if [ ! -f "$src/.rucx-built" ]; then
  echo "configuring and building MPICH's test suite in $src (once)"
  (cd "$src" && ./configure -q CC=mpicc.mpich MPICC=mpicc.mpich MPIEXEC=mpirun.mpich \
     --enable-fortran=none --disable-cxx --disable-spawn --disable-romio --disable-ft-tests \
     --disable-perftest --disable-checkfaults --with-pm=hydra >"$src/rucx-configure.log" 2>&1) ||
    { tail -20 "$src/rucx-configure.log"; echo "configure failed" >&2; exit 1; }
  make -s -C "$src/dtpools" -j2 >/dev/null
  make -s -C "$src/util" -j2 >/dev/null
  for d in $dirs; do
    # shellcheck disable=SC2046 # one word per program
    make -s -C "$src/$d" -j2 $(selected "$d" | awk '{ print $1 }' | sort -u) >/dev/null
  done
  touch "$src/.rucx-built"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-mpich-suite.XXXXXX")
trap '[ "$keep_work" = 1 ] || rm -rf "$work"' EXIT
# One list per folder (testlist.rucx, read by runtests) and the same lines, prefixed with the
# folder, in run order: the k-th result of the TAP file is the k-th line of $work/tests.
: >"$work/tests"
for d in $dirs; do
  selected "$d" | sed "s|^|$d: |" | grep -E -- "${ONLY:-.}" |
    { if [ -n "${EXCLUDE:-}" ]; then grep -Ev -- "$EXCLUDE"; else cat; fi; } >>"$work/tests" || true
  sed -n "s|^$d: ||p" "$work/tests" >"$src/$d/testlist.rucx"
done
total=$(wc -l <"$work/tests")
echo "running $total tests of $dirs with runtests -maxnp=4"

mkdir -p "$work/ld"
# LD_DEBUG=files logs, per process, which libraries it initialised.
(cd "$src" && env ${libpath:+LD_LIBRARY_PATH=$libpath} MPITEST_TIMEOUT="${MPITEST_TIMEOUT:-180}" \
  LD_DEBUG=files LD_DEBUG_OUTPUT="$work/ld/ld" \
  timeout --verbose -k 10 $((total * 200 + 60)) \
  perl "$src/runtests" -srcdir="$src" -testdirs=pt2pt,coll -tests=testlist.rucx -maxnp=4 \
  -mpiexec=mpirun.mpich -tapfile="$work/results.tap" >"$work/log" 2>&1) || true

# Every process that initialised a libucp initialised the expected one.
inits=$(cat "$work"/ld/ld.* 2>/dev/null | sed -n 's/.*calling init: \(.*libucp\.so[^ ]*\).*/\1/p' |
  xargs -r -n1 realpath | sort | uniq -c)
n_init=$(echo "$inits" | awk '{ n += $1 } END { print n + 0 }')
if [ "$(echo "$inits" | awk 'NF { print $2 }' | sort -u)" != "$want_ucp" ]; then
  fail "libucp of the suite's processes" "initialised: $(echo "$inits" | tr '\n' ' ')"
else
  pass "libucp of the suite's processes: $n_init processes initialised $want_ucp" 0
fi

results=$(grep -E '^(not )?ok ' "$work/results.tap" || true)
if [ "$(echo "$results" | grep -c .)" != "$total" ]; then
  fail "MPICH test suite" "$(echo "$results" | grep -c .) results for $total tests" "$work/log"
fi
k=0
while IFS= read -r line; do
  k=$((k + 1))
  test_line=$(sed -n "${k}p" "$work/tests")
  if [[ $line == "not ok"* ]]; then
    if grep -qxF -- "$test_line" "$here/mpich-expected-failures.txt"; then
      echo "EXPECTED FAILURE (Debian's UCX fails it too) $test_line"
      passed=$((passed + 1))
    else
      fail "$test_line" "failed ($line)"
    fi
  else
    passed=$((passed + 1))
  fi
done <<<"$results"
if [ "$failed" != 0 ]; then
  # runtests' log has each failing program's output.
  grep -E 'Unexpected output|exited without No Errors|non-zero exit|TIMED OUT' "$work/log" |
    sort -u | head -n 60 | sed 's/^/    | /'
fi
echo "runtests: $(grep -E 'tests failed out of|All [0-9]+ tests passed' "$work/log" | tail -1)"
[ "$keep_work" = 0 ] || echo "logs kept in $work"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
