#!/usr/bin/env bash
# The same MPI ping-pong and streaming-bandwidth program (pingpong.c) over Debian's UCX 1.13 and
# over rucx's libucp.so.0, under Open MPI (pml ucx) and MPICH (ch4:ucx): runs alternate between
# the two libraries (the order flips every repeat), both ranks are pinned to their own core by the
# launcher, and the table shows medians and the ratio rucx/UCX. A benchmark, not a test.
#
#   bash capi/bench/mpi-vs-ucx.sh LIBDIR [REPEATS]     # LIBDIR: rucx's libucp.so.0 and friends
#
# Environment: UCX_LIBDIR (the UCX to compare with, e.g. UCX 1.22's lib/ from the libucx-cu12
# wheel, bench/fetch-ucx122.sh; default: the system's, Debian's UCX 1.13),
# TLS (default shm,self; e.g. TLS=tcp for UCX_TLS=tcp with UCX_NET_DEVICES=lo),
# LAT_ITERS (default 100000), BW_ITERS (default 20: 20 windows of 64 x 1 MiB, 160 of 64 x 64 KiB).
# Goals: 8 B latency <= 0.9x UCX's, 64 KiB and 1 MiB bandwidth >= 1.1x.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 LIBDIR [REPEATS]" >&2
  exit 2
fi
libdir=$(realpath "$1")
repeats=${2:-5}
tls=${TLS:-shm,self}
lat_iters=${LAT_ITERS:-100000}
bw_iters=${BW_ITERS:-20}
[ -e "$libdir/libucp.so.0" ] || { echo "$libdir has no libucp.so.0" >&2; exit 2; }
rucx_ucp=$(realpath "$libdir/libucp.so.0")
ucx_libdir=${UCX_LIBDIR:-}
if [ -n "$ucx_libdir" ]; then
  ucx_libdir=$(realpath "$ucx_libdir")
  [ -e "$ucx_libdir/libucp.so.0" ] || { echo "$ucx_libdir has no libucp.so.0" >&2; exit 2; }
  ucx_ucp=$(realpath "$ucx_libdir/libucp.so.0")
else
  ucx_ucp=$(realpath "$(ldconfig -p | awk '$1 == "libucp.so.0" && !found { print $NF; found = 1 }')")
fi
[ "$rucx_ucp" != "$ucx_ucp" ] || { echo "$libdir/libucp.so.0 is the system's UCX" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-mpi-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
for mpi in openmpi mpich; do
  "mpicc.$mpi" -O2 -Wall -Wextra -Werror -o "$work/pingpong.$mpi" "$here/pingpong.c"
done

env_for() { # LIB: the environment of a run on LIB (ucx|rucx)
  local -a e=("UCX_TLS=$tls")
  [ "$tls" != tcp ] || e+=(UCX_NET_DEVICES=lo)
  if [ "$1" = rucx ]; then
    e+=("LD_LIBRARY_PATH=$libdir")
  elif [ -n "$ucx_libdir" ]; then
    e+=("LD_LIBRARY_PATH=$ucx_libdir")
  fi
  printf '%s\n' "${e[@]}"
}

# run MPI LIB REP: one run; appends "MPI LIB METRIC VALUE" lines to $work/results.
run() {
  local mpi=$1 lib=$2 rep=$3 out=$work/$1-$2-$3.out want e
  local -a env cmd
  mapfile -t env < <(env_for "$lib")
  if [ "$mpi" = openmpi ]; then
    cmd=(mpirun.openmpi --allow-run-as-root -np 2 --bind-to core --map-by core
         --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
    for e in "${env[@]}"; do cmd+=(-x "$e"); done
  else
    cmd=(env "${env[@]}" mpirun.mpich -np 2 -bind-to core)
  fi
  if ! timeout -k 10 600 "${cmd[@]}" "$work/pingpong.$mpi" "$lat_iters" "$bw_iters" >"$out" 2>&1; then
    echo "run $mpi $lib #$rep failed:" >&2
    tail -n 20 "$out" >&2
    exit 1
  fi
  want=$ucx_ucp
  [ "$lib" = ucx ] || want=$rucx_ucp
  local got
  got=$(awk '$3 == "libucp" { print $4; exit }' "$out")
  [ "$(realpath "$got")" = "$want" ] || { echo "run $mpi $lib loaded $got, not $want" >&2; exit 1; }
  awk -v p="$mpi $lib" '$1 == "lat" { print p, "lat" $2, $3 } $1 == "bw" { print p, "bw" $2, $3 }' \
    "$out" >>"$work/results"
  printf '  %-7s %-4s #%d: %s\n' "$mpi" "$lib" "$rep" "$(grep -E '^(lat|bw)' "$out" | tr '\n' ' ')"
}

echo "UCX_TLS=$tls, $repeats repeats; ucx: $ucx_ucp; rucx: $rucx_ucp"
: >"$work/results"
for ((rep = 1; rep <= repeats; rep++)); do
  for mpi in openmpi mpich; do
    if ((rep % 2)); then order=(ucx rucx); else order=(rucx ucx); fi
    for lib in "${order[@]}"; do run "$mpi" "$lib" "$rep"; done
  done
done

median() { # MPI LIB METRIC
  awk -v k="$1 $2 $3" '$1 " " $2 " " $3 == k { print $4 }' "$work/results" | sort -g \
    | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo
printf '%-8s %-22s %12s %12s %8s  %s\n' MPI metric UCX rucx rucx/UCX goal
for mpi in openmpi mpich; do
  for metric in lat8 bw65536 bw1048576; do
    u=$(median "$mpi" ucx "$metric")
    r=$(median "$mpi" rucx "$metric")
    case $metric in
      lat8) label="8 B latency (us)"; goal="<= 0.90" ;;
      bw65536) label="64 KiB bandwidth (MB/s)"; goal=">= 1.10" ;;
      bw1048576) label="1 MiB bandwidth (MB/s)"; goal=">= 1.10" ;;
    esac
    awk -v m="$mpi" -v l="$label" -v u="$u" -v r="$r" -v g="$goal" 'BEGIN {
      ratio = r / u
      met = (substr(g, 1, 2) == "<=") ? ratio <= substr(g, 4) + 0 : ratio >= substr(g, 4) + 0
      printf "%-8s %-22s %12.3f %12.3f %8.3f  %s %s\n", m, l, u, r, ratio, g, met ? "met" : "NOT met"
    }'
  done
done
