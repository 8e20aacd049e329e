#!/usr/bin/env bash
# One-sided communication over Debian's UCX 1.13 and over rucx's libucp.so.0: MPI_Put latency and
# bandwidth through an RMA window (put.c) under Open MPI (osc ucx) and MPICH (ch4:ucx), and the
# OpenSHMEM fetch-add rate (shmem_amo.c, spml/atomic/sshmem ucx) on a static and a heap counter.
# Runs alternate between the two libraries (the order flips every repeat), both processes are
# pinned to their own core by the launcher (--bind-to core), and the table shows medians and the
# ratio rucx/UCX. A benchmark, not a test.
#
#   bash capi/bench/onesided-vs-ucx.sh LIBDIR [REPEATS] # REPEATS: 9; LIBDIR: rucx's libucp.so.0 etc.
#
# Environment: TLS (default shm,self; TLS=tcp for UCX_TLS=tcp with UCX_NET_DEVICES=lo),
# LAT_ITERS (default 200000 puts), BW_ITERS (default 100 windows of 64 x 1 MiB, 800 of 64 x 64 KiB),
# AMO_ITERS (default 100000 fetch-adds per counter).
# Debian's Open MPI 4.1 leaves a memory hook of its common ucx library registered after
# shmem_finalize unloads it, so OpenSHMEM jobs on Debian's UCX end with SIGSEGV after printing
# their results; those results are used and the crashes counted. Goal: speedup >= 1.0 over
# shared memory (for times, latency and CPU time per operation, the speedup is UCX/rucx). The CPU
# time of the measuring thread is shown under each latency and rate (for a bandwidth, the bytes
# over that CPU time), and under each bandwidth also its median over the windows of 64 puts: on a
# machine whose cores are shared with other work, wall times include waiting for a core and vary
# widely (a window that waited is an outlier for the median, while it lowers the whole-run rate).
# Over shared memory both libraries make an MPI_Put of 64 KiB or 1 MiB as one glibc memmove into
# the target's segment mapped in the initiator (UCX: uct_sm_ep_put_short; rucx: its direct path),
# so those rows differ by the libraries' per-put overhead only (a few percent of the copy at
# 64 KiB; count it with callgrind on rank 0), which is inside the run-to-run spread of wall times
# on a loaded machine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 LIBDIR [REPEATS]" >&2
  exit 2
fi
libdir=$(realpath "$1")
repeats=${2:-9}
tls=${TLS:-shm,self}
lat_iters=${LAT_ITERS:-200000}
bw_iters=${BW_ITERS:-100}
amo_iters=${AMO_ITERS:-100000}
[ -e "$libdir/libucp.so.0" ] || { echo "$libdir has no libucp.so.0" >&2; exit 2; }
rucx_ucp=$(realpath "$libdir/libucp.so.0")
ucx_ucp=$(realpath "$(ldconfig -p | awk '$1 == "libucp.so.0" && !found { print $NF; found = 1 }')")
[ "$rucx_ucp" != "$ucx_ucp" ] || { echo "$libdir/libucp.so.0 is the system's UCX" >&2; exit 2; }
unset RUCX_TLS RUCX_NET_DEVICES

work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-onesided-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
for mpi in openmpi mpich; do
  "mpicc.$mpi" -O2 -Wall -Wextra -Werror -o "$work/put.$mpi" "$here/put.c"
done
oshcc -O2 -Wall -Wextra -Werror -o "$work/shmem_amo" "$here/shmem_amo.c"

env_for() { # LIB: the environment of a run on LIB (ucx|rucx)
  local -a e=("UCX_TLS=$tls")
  [ "$tls" != tcp ] || e+=(UCX_NET_DEVICES=lo)
  [ "$1" = ucx ] || e+=("LD_LIBRARY_PATH=$libdir")
  printf '%s\n' "${e[@]}"
}

crashes=0
# run KIND LIB REP: one run (KIND: openmpi|mpich|shmem); appends "KIND LIB METRIC VALUE" lines to
# $work/results.
run() {
  local kind=$1 lib=$2 rep=$3 out=$work/$1-$2-$3.out want e status=0
  local -a env cmd
  mapfile -t env < <(env_for "$lib")
  case $kind in
    openmpi | shmem)
      local launcher=mpirun.openmpi
      [ "$kind" = openmpi ] || launcher=oshrun
      cmd=("$launcher" --allow-run-as-root -np 2 --bind-to core --map-by core
           --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
      if [ "$kind" = openmpi ]; then
        cmd+=(--mca osc ucx "$work/put.openmpi" "$lat_iters" "$bw_iters")
      else
        cmd+=(--mca spml ucx --mca atomic ucx --mca sshmem ucx "$work/shmem_amo" "$amo_iters")
      fi
      for e in "${env[@]}"; do cmd=("${cmd[0]}" -x "$e" "${cmd[@]:1}"); done
      ;;
    mpich) cmd=(env "${env[@]}" mpirun.mpich -np 2 -bind-to core "$work/put.mpich" "$lat_iters" "$bw_iters") ;;
  esac
  timeout -k 10 600 "${cmd[@]}" >"$out" 2>&1 || status=$?
  if [ "$status" != 0 ]; then
    if [ "$kind" = shmem ] && [ "$lib" = ucx ] && grep -q '^amo heap' "$out"; then
      crashes=$((crashes + 1))
    else
      echo "run $kind $lib #$rep failed (status $status):" >&2
      tail -n 20 "$out" >&2
      exit 1
    fi
  fi
  want=$ucx_ucp
  [ "$lib" = ucx ] || want=$rucx_ucp
  local got
  got=$(awk '$3 == "libucp" { print $4; exit }' "$out")
  [ "$(realpath "$got")" = "$want" ] || { echo "run $kind $lib loaded $got, not $want" >&2; exit 1; }
  awk -v p="$kind $lib" '$1 == "lat" { print p, "lat" $2, $3 } $1 == "bw" { print p, "bw" $2, $3 }
    $1 == "amo" { print p, "amo_" $2, $3 } $1 == "cpu" { print p, "cpu_" $2, $3 }
    $1 == "cpubw" { print p, "cpubw" $2, $3 } $1 == "bwmed" { print p, "bwmed" $2, $3 }' "$out" >>"$work/results"
  printf '  %-7s %-4s #%d: %s\n' "$kind" "$lib" "$rep" "$(grep -E '^(lat|cpu|bw|amo)' "$out" | tr '\n' ' ')"
}

echo "UCX_TLS=$tls, $repeats repeats; ucx: $ucx_ucp; rucx: $rucx_ucp"
: >"$work/results"
for ((rep = 1; rep <= repeats; rep++)); do
  for kind in openmpi mpich shmem; do
    if ((rep % 2)); then order=(ucx rucx); else order=(rucx ucx); fi
    for lib in "${order[@]}"; do run "$kind" "$lib" "$rep"; done
  done
done

median() { # KIND LIB METRIC
  awk -v k="$1 $2 $3" '$1 " " $2 " " $3 == k { print $4 }' "$work/results" | sort -g \
    | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo
printf '%-8s %-30s %12s %12s %9s\n' job metric UCX rucx speedup
for kind in openmpi mpich shmem; do
  if [ "$kind" = shmem ]; then
    metrics=(amo_static cpu_static amo_heap cpu_heap)
  else
    metrics=(lat8 cpu_8 bw65536 cpubw65536 bwmed65536 bw1048576 cpubw1048576 bwmed1048576)
  fi
  for metric in "${metrics[@]}"; do
    u=$(median "$kind" ucx "$metric")
    r=$(median "$kind" rucx "$metric")
    case $metric in
      lat8) label="MPI_Put 8 B + flush (us)" ;;
      cpu_8) label="  its CPU time (us)" ;;
      cpu_static | cpu_heap) label="  its CPU time (us)" ;;
      bw65536) label="MPI_Put 64 KiB (MB/s)" ;;
      bw1048576) label="MPI_Put 1 MiB (MB/s)" ;;
      cpubw65536 | cpubw1048576) label="  per CPU second (MB/s)" ;;
      bwmed65536 | bwmed1048576) label="  median window (MB/s)" ;;
      amo_static) label="fetch-add, static (Mops/s)" ;;
      amo_heap) label="fetch-add, heap (Mops/s)" ;;
    esac
    awk -v m="$kind" -v l="$label" -v u="$u" -v r="$r" -v kind="${metric%%[0-9_]*}" 'BEGIN {
      speedup = (kind == "lat" || kind == "cpu") ? u / r : r / u
      printf "%-8s %-30s %12.4f %12.4f %8.3fx %s\n", m, l, u, r, speedup, (speedup >= 1 ? "" : "(below 1.0x)")
    }'
  done
done
[ "$crashes" = 0 ] || echo "(OpenSHMEM on Debian's UCX ended with a crash in $crashes of $repeats runs, after its results)"
