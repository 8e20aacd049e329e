#!/usr/bin/env bash
# Traffic both ways at once over shared memory, rucx against UCX 1.22 (PyPI's libucx-cu12
# wheel, bench/fetch-ucx122.sh) and Debian's UCX 1.13: medians of REPS runs, the programs
# alternating (the order turns every repeat), each process pinned to its own core; prints the
# medians and the ratios rucx/UCX. A benchmark: it asserts nothing.
#
#   1. tag_bibw at 64 KiB, 1 MiB and 16 MiB (both sides stream, 16 in flight each way): rucx's
#      perftest (from mapped memory as ucx_perftest sends, and from heap vectors), and
#      bench/ucp_both_ways.c, one C program over libucp, on UCX 1.22, UCX 1.13 and rucx's
#      libucp.so.0 (ucx_perftest has no such test). MB/s per direction (10^6 B/s).
#   2. MPI_Sendrecv pairs (bench/sendrecv.c) under Debian's Open MPI (pml ucx) on the three
#      libraries (LD_LIBRARY_PATH), same sizes. MB/s per direction.
#   3. HPCC (Debian's hpcc, 2 ranks, N=1600) on the three libraries: ring bandwidth (GB/s,
#      naturally ordered), MPIRandomAccess (GUP/s), ring latency (µs, naturally ordered) and
#      the run's wall time (s, from the launch to HPCC's last line).
#
# Usage: bench/both-ways-vs-ucx.sh [-r REPS] [-R] [-q] [PART...]
#   -r REPS   repeats per program and row (default 5)
#   -R        run the measured processes under SCHED_FIFO (chrt -f 10; root): on a machine other
#             jobs keep busy they then take their cores whole (mpirun itself stays ordinary)
#   -q        quick: a tenth of the iterations
#   PART      bibw, sendrecv, hpcc (default: all three)
# Environment: RUCX_PERFTEST (a release perftest; default: cargo build --release),
#   RUCX_LIBDIR (capi/build.sh output; default: built into a temporary folder),
#   UCX122 (a folder with UCX 1.22's bin/ and lib/; default: bench/fetch-ucx122.sh),
#   CORE0, CORE1 (0, 1).
set -euo pipefail

REPS=5
SCALE=1
RT=()
while getopts "r:Rqh" opt; do
    case "$opt" in
        r) REPS=$OPTARG ;;
        R) RT=(chrt -f 10) ;;
        q) SCALE=10 ;;
        h) sed -n '2,27p' "$0"; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=(bibw sendrecv hpcc)
root=$(cd "$(dirname "$0")/.." && pwd)
CORE0=${CORE0:-0}
CORE1=${CORE1:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-both-ways.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- the three libraries and the programs ------------------------------------------------------
if [ -z "${RUCX_PERFTEST:-}" ]; then
    echo "# building rucx's perftest (release)" >&2
    (cd "$root" && cargo build --release -q -p perftest)
    RUCX_PERFTEST=${CARGO_TARGET_DIR:-$root/target}/release/perftest
fi
if [ -z "${RUCX_LIBDIR:-}" ]; then
    echo "# building rucx's libucp.so.0 (release)" >&2
    RUCX_LIBDIR=$work/rucx-lib
    bash "$root/capi/build.sh" "$RUCX_LIBDIR" >&2
fi
UCX122=${UCX122:-$("$root/bench/fetch-ucx122.sh")}
[ -e "$UCX122/lib/libucp.so.0" ] || { echo "no UCX 1.22 in $UCX122" >&2; exit 1; }
ucx113_lib=$(dirname "$(ldconfig -p | awk '$1 == "libucp.so.0" && !f { print $NF; f = 1 }')")
[ -e "$ucx113_lib/libucp.so.0" ] || { echo "Debian's UCX is not installed (libucx0)" >&2; exit 1; }
# lib NAME: the LD_LIBRARY_PATH of a library (empty: the system's UCX 1.13).
lib() {
    case "$1" in
        rucx) echo "$RUCX_LIBDIR" ;;
        ucx122) echo "$UCX122/lib" ;;
        ucx113) echo "" ;;
    esac
}
LIBS=(ucx122 ucx113 rucx)
cc -O2 -Wall -Wextra -Werror -o "$work/both" "$root/bench/ucp_both_ways.c" -lucp -lucs
mpicc.openmpi -O2 -Wall -Wextra -Werror -o "$work/sendrecv" "$root/bench/sendrecv.c"

median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
# vals KEY: the values recorded under KEY.
vals() { awk -v k="$1" '$1 == k { print $2 }' "$work/results"; }
record() { echo "$1 $2" >>"$work/results"; }
: >"$work/results"

# Runs "$@" and prints its output; a failure ends the script with the output.
checked() {
    local out
    if ! out=$(timeout -k 5 600 "$@" 2>&1); then
        echo "failed: $*" >&2
        echo "$out" | tail -20 >&2
        exit 1
    fi
    echo "$out"
}

sizes=(65536 1048576 16777216)
names=(64KiB 1MiB 16MiB)
bibw_iters=(50000 5000 300)
sr_iters=(20000 2000 150)

# --- 1. tag_bibw --------------------------------------------------------------------------------
part_bibw() {
    local i s n r who order out v
    for i in "${!sizes[@]}"; do
        s=${sizes[$i]}
        n=$((bibw_iters[i] / SCALE))
        for r in $(seq 1 "$REPS"); do
            order=(perftest-map perftest-heap c-ucx122 c-ucx113 c-rucx)
            if ((r % 2 == 0)); then order=(c-rucx c-ucx113 c-ucx122 perftest-heap perftest-map); fi
            for who in "${order[@]}"; do
                case "$who" in
                    perftest-*)
                        out=$(checked env RUCX_TLS=posix,cma,self "${RT[@]}" "$RUCX_PERFTEST" --local \
                            -c "$CORE0,$CORE1" -t tag_bibw -s "$s" -n "$n" -w $((n / 10)) \
                            --mem "${who#perftest-}" -v)
                        # CSV column 6: overall MB/s (2^20 B/s) -> 10^6 B/s
                        v=$(echo "$out" | grep -E '^ *[0-9]+,' | tail -1 | cut -d, -f6 |
                            awk '{ printf "%.1f", $1 * 1.048576 }')
                        ;;
                    c-*)
                        out=$(checked env UCX_TLS=posix,cma,self LD_LIBRARY_PATH="$(lib "${who#c-}")" \
                            "${RT[@]}" "$work/both" bibw "$s" "$n" 16 "$CORE0" "$CORE1")
                        v=$(echo "$out" | awk '$1 == "bibw" { print $3 }')
                        ;;
                esac
                record "bibw-$s-$who" "$v"
            done
        done
    done
}

# --- 2. MPI_Sendrecv ----------------------------------------------------------------------------
# descendants PID: the process ids below PID, deepest first.
descendants() {
    local c
    for c in $(ps -o pid= --ppid "$1"); do
        descendants "$c"
        echo "$c"
    done
}

# ompi LIB MARKER_FILE MARKER ARGS...: an Open MPI job of 2 ranks on LIB over shared memory, in
# its own process group; it ends when the job does, or (the ranks under SCHED_FIFO can stall
# in MPI_Finalize while the launcher waits for a core) 5 s after MARKER appears in MARKER_FILE.
# Prints the seconds until the marker (or the end); the job's output goes to $work/job.out.
ompi() {
    local l=$1 file=$2 marker=$3
    shift 3
    local -a cmd=(mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --bind-to core
        --map-by core --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
        -x UCX_TLS=shm,self -x RUCX_TLS=shm,self)
    [ -z "$(lib "$l")" ] || cmd+=(-x LD_LIBRARY_PATH="$(lib "$l")")
    local t0 t1="" pid i
    t0=$(date +%s.%N)
    setsid "${cmd[@]}" "${RT[@]}" "$@" >"$work/job.out" 2>&1 &
    pid=$!
    # Watched by pid from here on (no "Killed" notice from the shell when it is ended).
    disown "$pid"
    for ((i = 0; i < 30000; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            [ -n "$t1" ] || t1=$(date +%s.%N)
            break
        fi
        if [ -z "$t1" ] && grep -q "$marker" "$file" 2>/dev/null; then
            t1=$(date +%s.%N)
        fi
        if [ -n "$t1" ] && awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a > 5) }'; then
            break
        fi
        sleep 0.02
    done
    if kill -0 "$pid" 2>/dev/null; then
        # The ranks may have left the launcher's session: end them by process id.
        local kids
        kids=$(descendants "$pid")
        kill -TERM "$pid" 2>/dev/null
        sleep 1
        # shellcheck disable=SC2086
        kill -KILL $kids "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            # shellcheck disable=SC2086
            kill -0 $kids 2>/dev/null || break
            sleep 0.05
        done
    fi
    if ! grep -q "$marker" "$file" 2>/dev/null; then
        echo "MPI job on $l failed: $*" >&2
        tail -20 "$work/job.out" >&2
        exit 1
    fi
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

part_sendrecv() {
    local i s n r l order out v want
    for i in "${!sizes[@]}"; do
        s=${sizes[$i]}
        n=$((sr_iters[i] / SCALE))
        [ "$n" -ge 10 ] || n=10
        for r in $(seq 1 "$REPS"); do
            order=("${LIBS[@]}")
            if ((r % 2 == 0)); then order=(rucx ucx113 ucx122); fi
            for l in "${order[@]}"; do
                ompi "$l" "$work/job.out" "^sendrecv " "$work/sendrecv" "$s" "$n" >/dev/null
                out=$(cat "$work/job.out")
                want=$(lib "$l")
                [ -n "$want" ] || want=$ucx113_lib
                echo "$out" | grep -q "libucp $(realpath "$want")/libucp.so" ||
                    echo "$out" | grep -q "libucp $want/libucp.so" ||
                    { echo "sendrecv on $l did not load $want/libucp.so.0: $(echo "$out" | grep libucp)" >&2; exit 1; }
                v=$(echo "$out" | awk '$1 == "sendrecv" { print $3 }')
                record "sendrecv-$s-$l" "$v"
            done
        done
    done
}

# --- 3. HPCC -------------------------------------------------------------------------------------
hpcc_input() {
    cat >"$1/hpccinf.txt" <<'EOF'
HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
1600         Ns
1            # of NBs
80           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
1            Ps
2            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
EOF
}

part_hpcc() {
    command -v hpcc >/dev/null || { echo "hpcc not found (apt-get install hpcc)" >&2; exit 1; }
    local r l order dir f key wall
    for r in $(seq 1 "$REPS"); do
        order=("${LIBS[@]}")
        if ((r % 2 == 0)); then order=(rucx ucx113 ucx122); fi
        for l in "${order[@]}"; do
            dir=$work/hpcc-$l-$r
            mkdir -p "$dir"
            hpcc_input "$dir"
            f=$dir/hpccoutf.txt
            wall=$(cd "$dir" && ompi "$l" "$f" "End of HPC Challenge tests" hpcc) || exit 1
            for key in NaturallyOrderedRingBandwidth_GBytes MPIRandomAccess_GUPs \
                NaturallyOrderedRingLatency_usec; do
                record "hpcc-$key-$l" "$(sed -n "s/^$key=//p" "$f" | head -1)"
            done
            record "hpcc-wall-$l" "$wall"
        done
    done
}

for p in "${PARTS[@]}"; do
    case "$p" in
        bibw) part_bibw ;;
        sendrecv) part_sendrecv ;;
        hpcc) part_hpcc ;;
        *) echo "unknown part $p (bibw, sendrecv, hpcc)" >&2; exit 2 ;;
    esac
done

# --- report ---------------------------------------------------------------------------------------
m() { vals "$1" | grep . | median; }
printf "# both ways at once over shared memory; median of %s runs each, alternating; cores %s,%s%s\n" \
    "$REPS" "$CORE0" "$CORE1" "$([ ${#RT[@]} -gt 0 ] && echo '; SCHED_FIFO')"
printf "# UCX 1.22: %s; UCX 1.13: %s; rucx: %s\n" "$UCX122/lib" "$ucx113_lib" "$RUCX_LIBDIR"
for p in "${PARTS[@]}"; do
    case "$p" in
        bibw)
            printf "\n# tag_bibw, MB/s per direction (higher is better)\n"
            printf "%-8s %10s %10s %12s %12s %10s %9s %9s %9s %9s\n" size "UCX 1.22" "UCX 1.13" \
                "rucx pt map" "rucx pt heap" "rucx C" "map/1.22" "heap/1.22" "C/1.22" "C/1.13"
            for i in "${!sizes[@]}"; do
                s=${sizes[$i]}
                u2=$(m "bibw-$s-c-ucx122"); u1=$(m "bibw-$s-c-ucx113"); pm=$(m "bibw-$s-perftest-map")
                ph=$(m "bibw-$s-perftest-heap"); rc=$(m "bibw-$s-c-rucx")
                printf "%-8s %10s %10s %12s %12s %10s %9s %9s %9s %9s\n" "${names[$i]}" "$u2" "$u1" "$pm" \
                    "$ph" "$rc" "$(ratio "$pm" "$u2")" "$(ratio "$ph" "$u2")" "$(ratio "$rc" "$u2")" \
                    "$(ratio "$rc" "$u1")"
            done
            ;;
        sendrecv)
            printf "\n# MPI_Sendrecv under Open MPI, MB/s per direction (higher is better)\n"
            printf "%-8s %10s %10s %10s %9s %9s\n" size "UCX 1.22" "UCX 1.13" rucx "rucx/1.22" "rucx/1.13"
            for i in "${!sizes[@]}"; do
                s=${sizes[$i]}
                u2=$(m "sendrecv-$s-ucx122"); u1=$(m "sendrecv-$s-ucx113"); rc=$(m "sendrecv-$s-rucx")
                printf "%-8s %10s %10s %10s %9s %9s\n" "${names[$i]}" "$u2" "$u1" "$rc" \
                    "$(ratio "$rc" "$u2")" "$(ratio "$rc" "$u1")"
            done
            ;;
        hpcc)
            printf "\n# HPCC, 2 ranks, N=1600, under Open MPI\n"
            printf "%-34s %10s %10s %10s %9s %9s\n" metric "UCX 1.22" "UCX 1.13" rucx "rucx/1.22" "rucx/1.13"
            for key in NaturallyOrderedRingBandwidth_GBytes MPIRandomAccess_GUPs \
                NaturallyOrderedRingLatency_usec wall; do
                u2=$(m "hpcc-$key-ucx122"); u1=$(m "hpcc-$key-ucx113"); rc=$(m "hpcc-$key-rucx")
                printf "%-34s %10s %10s %10s %9s %9s\n" "$key" "$u2" "$u1" "$rc" \
                    "$(ratio "$rc" "$u2")" "$(ratio "$rc" "$u1")"
            done
            printf "# ring bandwidth and RandomAccess: higher is better; latency and wall time (s): lower\n"
            ;;
    esac
done
