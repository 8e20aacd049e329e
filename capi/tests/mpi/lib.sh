# shellcheck shell=bash
# Shared by the scripts of capi/tests/mpi (sourced, not run): which libucp.so.0 the ranks must
# load, launching a case under Open MPI or MPICH with a watchdog, and checking the rank files
# that the test programs write (p2p.c's format).
#
#   source capi/tests/mpi/lib.sh
#   mpi_setup LIBDIR|system   # sets mode (rucx|system), want_ucp, libpath; exits 2 on bad input
#
# Each script keeps `passed`, `failed` and `keep_work` (pass and fail update them) and a work
# folder of its own.

# mpi_setup LIBDIR|system: LIBDIR holds rucx's libucp.so.0, libucs.so.0, libucm.so.0; `system`
# is Debian's UCX. Sets `mode`, `want_ucp` (the real path every rank must map) and `libpath`
# (the LD_LIBRARY_PATH the ranks get; empty for the system's UCX without one).
mpi_setup() {
  local lib
  system_ucp=$(ldconfig -p | awk '$1 == "libucp.so.0" && !found { print $NF; found = 1 }')
  if [ "$1" = system ]; then
    mode=system
    [ -n "$system_ucp" ] || { echo "no system libucp.so.0 (install libucx0)" >&2; exit 2; }
    want_ucp=$(realpath "$system_ucp")
    libpath=${LD_LIBRARY_PATH:-}
  else
    mode=rucx
    libdir=$(realpath "$1")
    for lib in libucp.so.0 libucs.so.0 libucm.so.0; do
      [ -e "$libdir/$lib" ] || { echo "$libdir has no $lib" >&2; exit 2; }
    done
    want_ucp=$(realpath "$libdir/libucp.so.0")
    if [ -n "$system_ucp" ] && [ "$want_ucp" = "$(realpath "$system_ucp")" ]; then
      echo "$libdir/libucp.so.0 is the system's UCX; use 'system' for that" >&2
      exit 2
    fi
    libpath=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  echo "libucp.so.0 expected in every rank: $want_ucp ($mode)"
  # The cases choose the transports with UCX_TLS, as MPI users do; rucx's own names would win.
  unset RUCX_TLS RUCX_NET_DEVICES
}

# need_tools TOOL...: exits 2 naming the first one missing.
need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 2; }
  done
}

passed=0
failed=0
keep_work=0
pass() { passed=$((passed + 1)); echo "PASS $1 ($2 s)"; }
fail() {
  failed=$((failed + 1))
  keep_work=1
  echo "FAIL $1: $2"
  if [ -n "${3:-}" ] && [ -f "$3" ]; then sed 's/^/    | /' "$3" | tail -n 15; fi
}

# launch MPI NP TLS TIMEOUT LOG -- PROGRAM ARGS...: runs PROGRAM under MPI (openmpi|oshmem|mpich)
# with NP ranks, UCX_TLS chosen by TLS (shm|tcp), the library path of this mode, and a watchdog
# of TIMEOUT seconds; stdout and stderr go to LOG. `extra_env` (VAR=VALUE...) and `extra_mca`
# (Open MPI options) are added when set. Sets `status` and `elapsed`.
launch() {
  local mpi=$1 np=$2 tls=$3 limit=$4 log=$5
  shift 6
  local -a env=()
  case $tls in
    shm) env=(UCX_TLS=shm,self) ;;
    tcp) env=(UCX_TLS=tcp UCX_NET_DEVICES=lo) ;;
    *) echo "unknown transport set $tls" >&2; exit 2 ;;
  esac
  [ -z "$libpath" ] || env+=("LD_LIBRARY_PATH=$libpath")
  local -a cmd
  if [ "$mpi" = openmpi ] || [ "$mpi" = oshmem ]; then
    local run=mpirun.openmpi
    [ "$mpi" = openmpi ] || run=oshrun
    cmd=("$run" --allow-run-as-root --oversubscribe -np "$np"
         --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
         ${extra_mca[@]+"${extra_mca[@]}"})
    for e in "${env[@]}" ${extra_env[@]+"${extra_env[@]}"}; do cmd+=(-x "$e"); done
  else
    cmd=(env "${env[@]}" ${extra_env[@]+"${extra_env[@]}"} mpirun.mpich -np "$np")
  fi
  local t0=$EPOCHREALTIME
  status=0
  # --verbose makes the watchdog say when it fires: Open MPI's own status for a rank killed by a
  # signal (137) is the same as timeout's when it has to use SIGKILL.
  timeout --verbose -k 10 "$limit" "${cmd[@]}" "$@" >"$log" 2>&1 || status=$?
  elapsed=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
}
extra_env=()
extra_mca=()

# check_libucp DIR NP: each rank file in DIR names exactly one libucp, the expected one;
# otherwise sets `why` and returns 1.
check_libucp() {
  local dir=$1 np=$2 r f path
  why=
  for ((r = 0; r < np; r++)); do
    f=$dir/rank-$r.txt
    [ -f "$f" ] || { why="rank $r wrote no results"; return 1; }
    mapfile -t paths < <(awk -v r="$r" '$1 == "rank" && $2 == r && $3 == "libucp" { print $4 }' "$f")
    [ "${#paths[@]}" = 1 ] || { why="rank $r mapped ${#paths[@]} libucp files: ${paths[*]}"; return 1; }
    path=${paths[0]}
    [ "$path" != NONE ] && [ "$(realpath "$path")" = "$want_ucp" ] \
      || { why="rank $r loaded libucp from $path, not $want_ucp"; return 1; }
  done
}

# check_ranks DIR NP: every rank file in DIR names the expected libucp and ends with
# "done C 0" and no FAIL line; sets `checks` to the number of checks. Otherwise sets `why` and
# returns 1.
check_ranks() {
  local dir=$1 np=$2 r f c bad total=0
  check_libucp "$dir" "$np" || return 1
  for ((r = 0; r < np; r++)); do
    f=$dir/rank-$r.txt
    if grep -q ' FAIL ' "$f"; then why="rank $r: $(grep -m3 ' FAIL ' "$f" | tr '\n' ';')"; return 1; fi
    read -r c bad < <(awk '$3 == "done" { print $4, $5 }' "$f") || true
    [ -n "${c:-}" ] && [ "${bad:-}" = 0 ] && [ "$c" -gt 0 ] \
      || { why="rank $r did not finish its checks"; return 1; }
    total=$((total + c))
  done
  checks=$total
}
