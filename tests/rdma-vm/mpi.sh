#!/usr/bin/env bash
# MPI over RDMA: Debian's unmodified Open MPI (pml ucx) and MPICH (ch4:ucx) on rucx's
# libucp.so.0 inside the Soft-RoCE VM, with UCX_TLS=rc,ud UCX_NET_DEVICES=rxe0:1 (rucx maps them
# to rc_verbs with ud_verbs carrying the wire-up: no tcp). Runs capi/tests/mpi/p2p.c (every size
# class from 0 B to 64 MiB, wildcards, probes, Ssend, cancel, truncation, collectives) with 2
# ranks under each MPI; every rank must map LIBDIR/libucp.so.0 (its /proc/self/maps, as
# capi/tests/mpi/run.sh checks it), pass every check and exit 0.
#
# Usage: tests/rdma-vm/mpi.sh [LIBDIR]
#   LIBDIR holds libucp.so.0, libucs.so.0, libucm.so.0 (capi/build.sh LIBDIR); without it the
#   debug profile is built into target/rucx-ucx-vm.
# The MPI runtimes go into the VM as an extra tree (-r of run.sh): every file of their Debian
# packages and the libraries those link. Prints "PASS"/"FAIL" lines and "N passed, M failed".
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
started=$(date +%s)
say() { echo "rdma-vm mpi: $*"; }

LIBDIR=${1:-}
if [[ -z "$LIBDIR" ]]; then
    LIBDIR=$ROOT/target/rucx-ucx-vm
    PROFILE=${PROFILE:-dev} bash "$ROOT/capi/build.sh" "$LIBDIR" >&2
fi
LIBDIR=$(realpath "$LIBDIR")
for lib in libucp.so.0 libucs.so.0 libucm.so.0; do
    [[ -e "$LIBDIR/$lib" ]] || { say "$LIBDIR has no $lib"; exit 2; }
done
for tool in mpicc.openmpi mpicc.mpich mpirun.openmpi mpirun.mpich; do
    command -v "$tool" >/dev/null || { say "missing $tool (tests/install-packages.sh installs it)"; exit 2; }
done

WORK=$(mktemp -d /tmp/rdma-vm-mpi.XXXXXX)
trap '[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"' EXIT
R=$WORK/root
mkdir -p "$R/opt/rucx/lib" "$R/opt/mpitest"
cp -P "$LIBDIR"/lib*.so* "$R/opt/rucx/lib/"
for mpi in openmpi mpich; do
    "mpicc.$mpi" -O2 -Wall -Wextra -Werror -o "$R/opt/mpitest/p2p.$mpi" "$ROOT/capi/tests/mpi/p2p.c"
done

# The MPI runtimes: the packages' files (links kept), then every library an ELF file among
# them links, resolved on this host.
copy_path() {
    local f=$1
    [[ -e "$R$f" || -L "$R$f" ]] && return 0
    [[ -d "$f" && ! -L "$f" ]] && return 0
    mkdir -p "$R$(dirname "$f")"
    cp -P "$f" "$R$f"
    if [[ -L "$f" ]]; then
        local t
        t=$(readlink -f "$f")
        [[ -f "$t" ]] && copy_path "$t"
    fi
    return 0
}
PKGS=(openmpi-bin libopenmpi3 openmpi-common libpmix2 mpich libmpich12 libhwloc15 libhwloc-plugins)
for pkg in "${PKGS[@]}"; do
    while read -r f; do
        [[ -f "$f" || -L "$f" ]] && ! [[ -d "$f" ]] && copy_path "$f"
    done < <(dpkg -L "$pkg" | grep -v -E '^/usr/share/(doc|man|lintian)/')
done
# The alternatives the MPI tools are reached through.
for f in /etc/alternatives/mpi* /etc/alternatives/libmpi*; do
    [[ -e "$f" || -L "$f" ]] && copy_path "$f"
done
# A library as ldd names it, with its contents (no link: /lib and /usr/lib are one folder on
# this host but two in the VM's image).
copy_lib() {
    [[ -e "$R$1" || -L "$R$1" ]] && return 0
    mkdir -p "$R$(dirname "$1")"
    cp -L "$1" "$R$1"
}
while read -r elf; do
    while read -r lib; do
        [[ -n "$lib" ]] && copy_lib "$lib"
    done < <(ldd "$elf" 2>/dev/null | awk '/=> \//{print $3}')
done < <(find "$R" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'head -c 4 "$1" | grep -q ELF && echo "$1"' _ {} \; | sed "s|^$R||")
say "MPI runtimes: $(du -sh "$R" | cut -f1) in the extra tree"

cat >"$R/opt/mpitest/run.sh" <<'EOF'
#!/bin/bash
# Inside the VM: p2p under each MPI over rc,ud on rxe0:1.
hostname rdmavm
export LD_LIBRARY_PATH=/opt/rucx/lib
want=$(realpath /opt/rucx/lib/libucp.so.0)
cd /opt/mpitest
pass=0
fail=0
for mpi in openmpi mpich; do
    out=/tmp/p2p-$mpi
    mkdir -p "$out"
    t0=$(date +%s)
    if [ $mpi = openmpi ]; then
        timeout -k 10 400 mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 \
            --mca plm_rsh_agent false --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl self \
            -x UCX_TLS=rc,ud -x UCX_NET_DEVICES=rxe0:1 -x LD_LIBRARY_PATH -x RUCX_PROTO_INFO=y \
            ./p2p.openmpi "$out" >"$out/log" 2>&1
    else
        UCX_TLS=rc,ud UCX_NET_DEVICES=rxe0:1 RUCX_PROTO_INFO=y timeout -k 10 400 mpirun.mpich -np 2 \
            ./p2p.mpich "$out" >"$out/log" 2>&1
    fi
    st=$?
    why=""
    [ $st = 0 ] || why="exit status $st"
    # rucx prints each endpoint's protocol table (RUCX_PROTO_INFO): the AM lane must have moved
    # to rc_verbs and no row may name tcp.
    moved=$(grep -c "AM and RMA lanes moved to rc_verbs" "$out/log")
    [ "$moved" -ge 1 ] || why="$why; no endpoint's lanes moved to rc_verbs"
    grep -q "tcp/" "$out/log" && why="$why; a protocol row names tcp"
    echo "  $moved endpoints moved their lanes to rc_verbs; rows: $(grep -o '[a-z_]*_verbs/rxe0:1' "$out/log" | sort | uniq -c | tr '\n' ' ')"
    for r in 0 1; do
        f=$out/rank-$r.txt
        [ -f "$f" ] || { why="$why; rank $r wrote nothing"; continue; }
        lib=$(awk -v r=$r '$1 == "rank" && $2 == r && $3 == "libucp" { print $4 }' "$f")
        [ "$(realpath "$lib" 2>/dev/null)" = "$want" ] || why="$why; rank $r mapped libucp '$lib', not $want"
        grep -q ' FAIL ' "$f" && why="$why; rank $r: $(grep -m2 ' FAIL ' "$f" | tr '\n' ';')"
        read -r c bad < <(awk '$3 == "done" { print $4, $5 }' "$f")
        [ -n "$c" ] && [ "$bad" = 0 ] && [ "$c" -gt 0 ] || why="$why; rank $r did not finish its checks"
        echo "  rank $r: libucp $lib, $(awk '$3 == "done" { print $4 " checks, " $5 " failed" }' "$f")"
    done
    if [ -z "$why" ]; then
        pass=$((pass + 1)); echo "PASS p2p $mpi np=2 rc,ud ($(( $(date +%s) - t0 )) s)"
    else
        fail=$((fail + 1)); echo "FAIL p2p $mpi np=2 rc,ud: $why"; tail -20 "$out/log" | sed 's/^/    | /'
    fi
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
EOF
chmod +x "$R/opt/mpitest/run.sh"

say "booting the VM"
set +e
"$HERE/run.sh" -t "${MPI_VM_TIMEOUT:-900}" -m 3G -r "$R" -- /opt/mpitest/run.sh 2>&1 | tee "$WORK/out"
rc=${PIPESTATUS[0]}
set -e
say "total time $(($(date +%s) - started))s"
grep -q "^2 passed, 0 failed" "$WORK/out" && [[ $rc == 0 ]]
