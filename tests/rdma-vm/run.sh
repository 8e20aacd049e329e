#!/usr/bin/env bash
# Boots the Soft-RoCE test VM (tests/rdma-vm/build.sh makes it) and runs one command inside it,
# with rxe0 up on veth0 (10.83.0.1, RoCE v2, GID index 1). The command's output (stdout and
# stderr merged) is printed here and its exit code is ours.
#
# Usage: tests/rdma-vm/run.sh [-f FILE]... [-r DIR]... [-t SECONDS] [-m MEM] [--] CMD [ARGS...]
#   -f FILE     copy FILE (and the libraries ldd names for it) into /opt/rdmavm/bin in the VM,
#               which is first in PATH; repeatable
#   -r DIR      copy the tree DIR as it is into the VM's root (DIR/usr/bin/x becomes /usr/bin/x,
#               symbolic links kept); repeatable
#   -t SECONDS  wall-clock limit for the whole VM run (default 300); on expiry exit code 124
#   -m MEM      guest memory (default 2G)
# Exit codes: the command's; 124 timeout; 125 the VM or its setup failed.
# Environment: RDMA_VM_SMP (default 2) guest CPUs; RDMA_VM_VERBOSE=1 shows the kernel log;
# RDMA_VM_ACCEL=tcg|kvm (default tcg, qemu's emulator, which needs nothing of the host; kvm
# only when asked: on the nested-virtualisation host of 2026-12-05 /dev/kvm exists but the
# guest stalls at boot under it).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="$HERE/cache"
FILES=()
TREES=()
TIMEOUT=300
MEM=2G
while (($#)); do
    case "$1" in
        -f) FILES+=("$2"); shift 2 ;;
        -r) TREES+=("$2"); shift 2 ;;
        -t) TIMEOUT="$2"; shift 2 ;;
        -m) MEM="$2"; shift 2 ;;
        --) shift; break ;;
        -*) echo "run.sh: unknown option $1" >&2; exit 125 ;;
        *) break ;;
    esac
done
(($#)) || { echo "usage: run.sh [-f FILE]... [-t SECONDS] [--] CMD [ARGS...]" >&2; exit 125; }

[[ -f "$CACHE/vmlinux" && -f "$CACHE/base.cpio.gz" ]] || "$HERE/build.sh" >&2

WORK="$(mktemp -d /tmp/rdma-vm-run.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
X="$WORK/extra"
mkdir -p "$X/rdmavm" "$X/opt/rdmavm/bin"
for f in "${FILES[@]}"; do
    cp -L "$f" "$X/opt/rdmavm/bin/"
    while read -r lib; do
        [[ -z "$lib" ]] && continue
        mkdir -p "$X$(dirname "$lib")"
        cp -L "$lib" "$X$lib"
    done < <(ldd "$f" 2>/dev/null | awk '/=> \//{print $3}')
done
for t in ${TREES[@]+"${TREES[@]}"}; do
    cp -a "$t/." "$X/"
done
{
    echo '#!/bin/bash'
    printf '%q ' "$@"
    echo
} >"$X/rdmavm/cmd"
chmod +x "$X/rdmavm/cmd"
# Linux unpacks concatenated cpio archives in order: the cached base, then this run's files.
(cd "$X" && find . -print0 | cpio --null -o -H newc --quiet) >"$WORK/extra.cpio"
# An uncompressed archive must start 4-byte aligned; the kernel skips zero padding between them.
base_size=$(stat -c %s "$CACHE/base.cpio.gz")
{
    cat "$CACHE/base.cpio.gz"
    head -c $(((4 - base_size % 4) % 4)) /dev/zero
    cat "$WORK/extra.cpio"
} >"$WORK/initrd"

LOGLEVEL=1
[[ "${RDMA_VM_VERBOSE:-0}" == 1 ]] && LOGLEVEL=7

# Pins vCPU i's thread to host core i (when the host has that many cores; RDMA_VM_PIN=0
# leaves them to the scheduler): the benchmarks pin their two processes to vCPUs 0 and 1, and
# with floating vCPU threads the host may run both on one core for a while, which made single
# runs of either program take twice as long as the next.
pin_vcpus() {
    local smp=$1 marker=$2 pid="" i t name
    for _ in $(seq 1 200); do
        pid=$(pgrep -f -n -- "$marker" || true)
        [[ -n "$pid" ]] && [[ $(grep -l "^CPU [0-9]*/\(TCG\|KVM\)$" /proc/"$pid"/task/*/comm 2>/dev/null | wc -l) -ge $smp ]] && break
        sleep 0.05
    done
    [[ -n "$pid" ]] || return 0
    for t in /proc/"$pid"/task/*; do
        name=$(cat "$t/comm" 2>/dev/null) || continue
        if [[ "$name" =~ ^CPU\ ([0-9]+)/(TCG|KVM)$ ]]; then
            i=${BASH_REMATCH[1]}
            taskset -p -c "$i" "${t##*/}" >/dev/null 2>&1 || true
        fi
    done
}
SMP=${RDMA_VM_SMP:-2}
ACCEL=${RDMA_VM_ACCEL:-tcg}
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -name rdmavm,debug-threads=on -accel "$ACCEL" -machine q35 -cpu max -smp "$SMP" -m "$MEM" \
    -kernel "$CACHE/vmlinux" -initrd "$WORK/initrd" \
    -append "console=ttyS0 rdinit=/init loglevel=$LOGLEVEL panic=-1 mitigations=off nokaslr" \
    -nic none -display none -serial stdio -monitor none -no-reboot </dev/null 2>"$WORK/qemu.err" |
    tr -d '\r' | awk -v verbose="${RDMA_VM_VERBOSE:-0}" -v rcfile="$WORK/rc" '
        /^@@RDMAVM-EXIT [0-9]+@@$/ { rc = $2; sub(/@@$/, "", rc); print rc > rcfile; inside = 0; next }
        /^@@RDMAVM-BEGIN@@$/ { inside = 1; next }
        /^@@RDMAVM-SETUP-FAILED/ { print > "/dev/stderr"; next }
        inside || verbose == 1 { print; fflush() }'
qrc=${PIPESTATUS[0]}
set -e
if [[ -f "$WORK/rc" ]]; then
    exit "$(cat "$WORK/rc")"
fi
if [[ $qrc == 124 || $qrc == 137 ]]; then
    echo "run.sh: the VM did not finish within ${TIMEOUT}s" >&2
    exit 124
fi
echo "run.sh: the VM stopped without reporting an exit code (qemu exit $qrc)" >&2
cat "$WORK/qemu.err" >&2
exit 125
