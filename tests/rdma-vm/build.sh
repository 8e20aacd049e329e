#!/usr/bin/env bash
# Builds (or reuses) the Soft-RoCE test VM image under tests/rdma-vm/cache/:
#   cache/vmlinux        uncompressed Debian 6.1 kernel (booted through its PVH entry point)
#   cache/base.cpio.gz   busybox + bash + rdma_rxe/veth modules + libibverbs/rxe provider +
#                        ibverbs-utils + iproute2 (ip, rdma) + UCX 1.13 ucx_perftest (when present)
#   cache/stamp          what the cache was built from (script hash + kernel package)
#
# Usage: tests/rdma-vm/build.sh [--force]
# Needs root for apt-get (installs what is missing). Idempotent and quick when the cache is valid.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="$HERE/cache"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1
mkdir -p "$CACHE"

log() { echo "rdma-vm build: $*" >&2; }

PKGS=(qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils iproute2 kmod cpio xz-utils)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# The kernel: the newest Debian linux-image-6.1.*-amd64 (plain flavour), unless the cache has one.
SCRIPT_HASH="$( (cat "$HERE/build.sh" "$HERE/init.sh") | sha256sum | cut -c1-16)"
if [[ -f "$CACHE/stamp" && -f "$CACHE/vmlinux" && -f "$CACHE/base.cpio.gz" && $FORCE == 0 ]]; then
    if grep -q "^script=$SCRIPT_HASH\$" "$CACHE/stamp"; then
        log "cache is valid ($(grep '^kernel=' "$CACHE/stamp"))"
        exit 0
    fi
fi

KPKG="$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)"
if [[ -z "$KPKG" ]]; then
    apt-get update -q >&2
    KPKG="$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)"
fi
[[ -n "$KPKG" ]] || { log "no linux-image-6.1.*-amd64 package found"; exit 1; }
KVER="${KPKG#linux-image-}"

WORK="$(mktemp -d /tmp/rdma-vm-build.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
log "fetching $KPKG"
(cd "$WORK" && apt-get download -q "$KPKG" 2>&1 | grep -v unsandboxed >&2 || true)
ls "$WORK"/linux-image-*.deb >/dev/null
dpkg -x "$WORK"/linux-image-*.deb "$WORK/kernel"

# vmlinux out of the bzImage: find the xz stream and decompress it.
BZ="$WORK/kernel/boot/vmlinuz-$KVER"
OFF="$(python3 - "$BZ" <<'EOF'
import sys
d = open(sys.argv[1], 'rb').read()
for magic in (b'\xfd7zXZ\x00', b'\x28\xb5\x2f\xfd', b'\x1f\x8b\x08\x00'):
    i = d.find(magic)
    if i >= 0:
        print(i, {b'\xfd7zXZ\x00': 'xz', b'\x28\xb5\x2f\xfd': 'zstd', b'\x1f\x8b\x08\x00': 'gz'}[magic])
        break
EOF
)"
read -r OFFSET KIND <<<"$OFF"
case "$KIND" in
    xz) (tail -c +"$((OFFSET + 1))" "$BZ" || true) | xz -dc --single-stream >"$WORK/vmlinux" ;;
    gz) (tail -c +"$((OFFSET + 1))" "$BZ" || true) | (gzip -dc 2>/dev/null || true) >"$WORK/vmlinux" ;;
    zstd) (tail -c +"$((OFFSET + 1))" "$BZ" || true) | zstd -dc >"$WORK/vmlinux" ;;
    *) log "cannot find the compressed kernel in $BZ"; exit 1 ;;
esac
head -c 4 "$WORK/vmlinux" | grep -q ELF || { log "extracted vmlinux is not an ELF file"; exit 1; }

# The initramfs tree.
R="$WORK/root"
mkdir -p "$R"/{bin,sbin,etc,proc,sys,dev,tmp,run,lib64,opt/rdmavm/bin,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu}

# Copies a file and every library ldd names for it, at the same paths.
add_file() {
    local f="$1"
    [[ -e "$f" ]] || { log "missing $f"; return 1; }
    mkdir -p "$R$(dirname "$f")"
    cp -L "$f" "$R$f"
}
add_elf() {
    local f="$1" lib
    add_file "$f"
    while read -r lib; do
        [[ -n "$lib" && ! -e "$R$lib" ]] && add_file "$lib"
    done < <(ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\//{print $1}')
    return 0
}

cp /bin/busybox "$R/bin/busybox"
for app in $("$R/bin/busybox" --list); do
    [[ -e "$R/bin/$app" ]] || ln -s busybox "$R/bin/$app"
done
add_elf /bin/bash
rm -f "$R/bin/sh" && ln -s bash "$R/bin/sh"
# iproute2's ip (busybox's cannot make veth pairs) and rdma; ibverbs-utils.
for b in /sbin/ip /usr/bin/rdma /usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong \
    /usr/bin/ibv_ud_pingpong /usr/bin/timeout /usr/bin/env /usr/bin/ldd; do
    [[ -e "$b" ]] && add_elf "$b"
done
rm -f "$R/bin/ip" && ln -s /sbin/ip "$R/bin/ip"
add_elf "$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1)"
cp -P /usr/lib/x86_64-linux-gnu/libibverbs.so.1 "$R/usr/lib/x86_64-linux-gnu/"
add_elf /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
mkdir -p "$R/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
# Rust test binaries need libgcc_s for unwinding.
for l in /lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libm.so.6 /lib/x86_64-linux-gnu/libdl.so.2 \
    /lib/x86_64-linux-gnu/librt.so.1 /lib/x86_64-linux-gnu/libpthread.so.0; do
    [[ -e "$l" ]] && add_file "$l"
done

# UCX 1.13 for comparisons (ucx-utils), with its dlopen'ed transport modules.
if [[ -x /usr/bin/ucx_perftest ]]; then
    add_elf /usr/bin/ucx_perftest
    [[ -x /usr/bin/ucx_info ]] && add_elf /usr/bin/ucx_info
    for m in /usr/lib/x86_64-linux-gnu/ucx/*.so.0; do add_elf "$m"; done
    cp -P /usr/lib/x86_64-linux-gnu/ucx/* "$R/usr/lib/x86_64-linux-gnu/ucx/" 2>/dev/null || true
    for l in /usr/lib/x86_64-linux-gnu/libuc[mpst]*.so*; do cp -P "$l" "$R/usr/lib/x86_64-linux-gnu/"; done
    for l in /usr/lib/x86_64-linux-gnu/librdmacm.so.1; do [[ -e "$l" ]] && add_elf "$(readlink -f "$l")" && cp -P "$l" "$R/usr/lib/x86_64-linux-gnu/"; done
fi

# Kernel modules, in dependency order (crc32_generic before rdma_rxe, or `rdma link add` fails
# with ENOENT).
KMOD="$WORK/kernel/lib/modules/$KVER"
depmod -b "$WORK/kernel" "$KVER"
mkdir -p "$R/lib/modules"
: >"$R/lib/modules/load-order"
for m in crc32_generic rdma_rxe veth; do
    while read -r _ path _; do
        rel="${path#"$KMOD"/}"
        if ! grep -qx "$rel" "$R/lib/modules/load-order"; then
            mkdir -p "$R/lib/modules/$(dirname "$rel")"
            cp "$path" "$R/lib/modules/$rel"
            echo "$rel" >>"$R/lib/modules/load-order"
        fi
    done < <(modprobe -d "$WORK/kernel" -S "$KVER" --show-depends "$m" | grep '^insmod ')
done

cp "$HERE/init.sh" "$R/init"
chmod +x "$R/init"
echo "root:x:0:0:root:/root:/bin/bash" >"$R/etc/passwd"
echo "root:x:0:" >"$R/etc/group"
printf '127.0.0.1 localhost\n10.83.0.1 rdmavm\n' >"$R/etc/hosts"
mkdir -p "$R/root"

(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$WORK/base.cpio.gz"
mv "$WORK/vmlinux" "$CACHE/vmlinux"
mv "$WORK/base.cpio.gz" "$CACHE/base.cpio.gz"
printf 'script=%s\nkernel=%s\n' "$SCRIPT_HASH" "$KPKG" >"$CACHE/stamp"
log "built $KPKG: vmlinux $(du -h "$CACHE/vmlinux" | cut -f1), initramfs $(du -h "$CACHE/base.cpio.gz" | cut -f1)"
