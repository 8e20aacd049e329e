#!/usr/bin/env bash
# ucx_perftest on rucx against UCX itself, as users compare them:
#   capi/bench/perftest-vs-ucx.sh DIR [REPEATS]     (DIR from capi/build.sh; REPEATS 5)
# Three ways to run each row, alternating in a rotating order every repeat, server pinned to
# core 0 and client to core 1 (taskset):
#   rucx    Debian's /usr/bin/ucx_perftest (UCX 1.13) on rucx's libraries (LD_LIBRARY_PATH=DIR)
#   ucx113  the same binary on Debian's UCX 1.13
#   ucx122  UCX 1.22's ucx_perftest on UCX 1.22's own lib/ (the libucx-cu12 wheel from PyPI,
#           fetched into target/ucx122 unless UCX122_DIR names an unpacked one)
#   rucx@122  UCX 1.22's ucx_perftest on rucx's libraries: the same binary as the ucx122 column
# Rows: ucp tag_lat at 8 B over shared memory (what MPI's latency rests on); ucp stream_bw, ucp_am_lat and ucp_am_bw at 8 B, 64 KiB and 1 MiB over shared memory
# (UCX_TLS=shm,self) and tcp (UCX_TLS=tcp on lo); uct am_lat, am_bw and put_bw over posix
# and tcp. Printed per row: the median of each (latency: 50th percentile in usec; bandwidth:
# overall MB/s) and three ratios (latency: rucx/UCX, goal <= 1.0; bandwidth: rucx/UCX, goal
# >= 1.0): "best", rucx (Debian's binary) against the best UCX column whichever binary it ran;
# "=113", the same binary (Debian's 1.13) on rucx against UCX 1.13; "=122", the same binary
# (UCX 1.22's) on rucx against UCX 1.22. The same-binary ratios compare the libraries alone:
# the two ucx_perftest builds differ in their own per-iteration cost (Debian's 1.13 spends
# about 50 more instructions per uct am_bw iteration in its own loop than 1.22's). A run that fails prints "-" (rucx's libucp may lack a
# call a row needs). ROWS=REGEX runs the rows whose label matches (e.g. ROWS='^uct'). Take
# timings on a quiet machine: the script says so when the load is high.
set -uo pipefail
lib=$(cd "${1:?usage: perftest-vs-ucx.sh DIR [REPEATS]}" && pwd)
repeats=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ucx122=${UCX122_DIR:-$root/target/ucx122/libucx}
if [ ! -x "$ucx122/bin/ucx_perftest" ]; then
    dl="$root/target/ucx122"
    mkdir -p "$dl"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dl" "libucx-cu12==1.22.0" &&
        python3 -c 'import sys, zipfile, glob; zipfile.ZipFile(glob.glob(sys.argv[1] + "/libucx_cu12-*.whl")[0]).extractall(sys.argv[1])' "$dl" &&
        chmod +x "$dl"/libucx/bin/* || echo "could not fetch UCX 1.22 (pip download libucx-cu12)"
    ucx122="$dl/libucx"
fi
[ -x /usr/bin/ucx_perftest ] || { echo "install ucx-utils (Debian's ucx_perftest)"; exit 1; }

load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" 'BEGIN{exit !(l > 0.5)}'; then
    echo "note: load average $load: numbers taken now are not trustworthy (take them on a quiet machine)"
fi

# Servers listen on port 0; program_pid and wildcard_port read the port they got.
# shellcheck source=../tests/ports.sh
. "$root/capi/tests/ports.sh"

# run IMPL KIND ENV ARGS...: one server/client pair; prints the value of KIND (lat: 50th
# percentile latency, usec; bw: overall bandwidth, MB/s) or "-".
run() {
    local impl=$1 kind=$2 envs=$3
    shift 3
    local bin=/usr/bin/ucx_perftest ldp=
    case $impl in
        rucx) ldp=$lib ;;
        ucx113) ldp= ;;
        ucx122) bin=$ucx122/bin/ucx_perftest ldp=$ucx122/lib ;;
        rucx122) bin=$ucx122/bin/ucx_perftest ldp=$lib ;;
    esac
    [ -x "$bin" ] || { echo -; return; }
    # The server gets the transport and device too (UCX 1.22's asks for them in uct tests).
    local sargs=() a prev=
    for a in "$@"; do
        case $prev in -x | -d) sargs+=("$prev" "$a") ;; esac
        prev=$a
    done
    local port srv
    env $envs LD_LIBRARY_PATH="$ldp" timeout 120 taskset -c 0 "$bin" -p 0 "${sargs[@]}" \
        >"$work/srv" 2>&1 &
    srv=$!
    if ! port=$(wildcard_port "$(program_pid "$srv" "$bin")"); then
        kill "$srv" 2>/dev/null
        echo -
        return
    fi
    env $envs LD_LIBRARY_PATH="$ldp" timeout 120 taskset -c 1 "$bin" 127.0.0.1 -p "$port" "$@" \
        >"$work/cli" 2>&1
    local rc=$?
    wait "$srv"
    local line
    line=$(grep '^Final:' "$work/cli")
    if [ "$rc" != 0 ] || [ -z "$line" ]; then
        echo -
    elif [ "$kind" = lat ]; then
        echo "$line" | awk '{print $3}'
    else
        echo "$line" | awk '{print $7}'
    fi
}

median() {
    tr ' ' '\n' | grep -v '^-\?$' | sort -g | awk '{v[NR]=$1} END {
        if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2 }'
}

# ratio_of RUCX UCX: RUCX / UCX to two decimals, "-" when either is missing.
ratio_of() {
    awk -v r="$1" -v u="$2" 'BEGIN { if (r == "-" || u == "-" || u == 0) print "-";
        else printf "%.2f", r / u }'
}

# Rows: label|kind|environment|perftest arguments
rows=()
for net in "shm|UCX_TLS=shm,self" "tcp|UCX_TLS=tcp UCX_NET_DEVICES=lo"; do
    name=${net%%|*}
    envs=${net#*|}
    for size in 8 65536 1048576; do
        n=20000
        [ "$size" = 65536 ] && n=5000
        [ "$size" = 1048576 ] && n=500
        rows+=("stream_bw $name ${size}B|bw|$envs|-t stream_bw -s $size -n $n")
        rows+=("ucp_am_lat $name ${size}B|lat|$envs|-t ucp_am_lat -s $size -n $n")
        rows+=("ucp_am_bw $name ${size}B|bw|$envs|-t ucp_am_bw -s $size -n $n")
    done
done
rows+=("tag_lat shm 8B|lat|UCX_TLS=shm,self|-t tag_lat -s 8 -n 100000")
rows+=("uct am_lat posix 8B|lat||-t am_lat -x posix -d memory -s 8 -n 100000")
rows+=("uct am_bw posix 8B|bw||-t am_bw -x posix -d memory -s 8 -n 100000")
rows+=("uct am_bw posix bcopy 4KiB|bw||-t am_bw -x posix -d memory -D bcopy -s 4096 -n 20000")
rows+=("uct put_bw posix bcopy 4KiB|bw||-t put_bw -x posix -d memory -D bcopy -s 4096 -n 20000")
rows+=("uct am_lat tcp 8B|lat||-t am_lat -x tcp -d lo -s 8 -n 20000")
rows+=("uct am_bw tcp bcopy 4KiB|bw||-t am_bw -x tcp -d lo -D bcopy -s 4096 -n 20000")
rows+=("uct put_bw tcp zcopy 64KiB|bw||-t put_bw -x tcp -d lo -D zcopy -s 65536 -n 2000")

impls=(rucx ucx113 ucx122 rucx122)
printf '%-30s %5s %10s %10s %10s %10s %6s %6s %6s\n' row unit rucx ucx113 ucx122 rucx@122 best =113 =122
for row in "${rows[@]}"; do
    IFS='|' read -r label kind envs args <<<"$row"
    if [ -n "${ROWS:-}" ] && ! [[ $label =~ $ROWS ]]; then
        continue
    fi
    declare -A vals=([rucx]="" [ucx113]="" [ucx122]="" [rucx122]="")
    for ((r = 0; r < repeats; r++)); do
        # Rotate who goes first each repeat.
        for ((k = 0; k < 4; k++)); do
            impl=${impls[$(((r + k) % 4))]}
            # shellcheck disable=SC2086
            vals[$impl]+="$(run "$impl" "$kind" "$envs" $args) "
        done
    done
    m_rucx=$(echo "${vals[rucx]}" | median)
    m_113=$(echo "${vals[ucx113]}" | median)
    m_122=$(echo "${vals[ucx122]}" | median)
    m_r122=$(echo "${vals[rucx122]}" | median)
    ratio=$(awk -v r="$m_rucx" -v a="$m_113" -v b="$m_122" -v kind="$kind" 'BEGIN {
        if (r == "-") { print "-"; exit }
        best = "";
        if (a != "-") best = a;
        if (b != "-" && (best == "" || (kind == "lat" ? b < best : b > best))) best = b;
        if (best == "" || best == 0) { print "-"; exit }
        printf "%.2f", r / best }')
    same113=$(ratio_of "$m_rucx" "$m_113")
    same122=$(ratio_of "$m_r122" "$m_122")
    unit=usec
    [ "$kind" = bw ] && unit=MB/s
    printf '%-30s %5s %10s %10s %10s %10s %6s %6s %6s\n' "$label" "$unit" "$m_rucx" "$m_113" \
        "$m_122" "$m_r122" "$ratio" "$same113" "$same122"
    unset vals
done
