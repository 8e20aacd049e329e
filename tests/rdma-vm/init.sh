#!/bin/bash
# /init of the Soft-RoCE test VM (run by the kernel from the initramfs, as bash: busybox's shell
# and its built-in ip cannot make veth pairs). Sets up rxe0 on a veth pair, runs /rdmavm/cmd,
# prints its exit code on a marker line and powers the VM off.
export PATH=/opt/rdmavm/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
[[ -e /dev/fd ]] || ln -s /proc/self/fd /dev/fd
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
ulimit -l unlimited

die() {
    echo "@@RDMAVM-SETUP-FAILED: $*@@"
    echo "@@RDMAVM-EXIT 125@@"
    reboot -f
}

while read -r mod; do
    insmod "/lib/modules/$mod" || die "insmod $mod"
done </lib/modules/load-order

ip link set lo up
ip link add veth0 type veth peer name veth1 || die "veth pair"
ip addr add 10.83.0.1/24 dev veth0
ip addr add 10.83.0.2/24 dev veth1
ip link set veth0 up && ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || die "rdma link add rxe0"
# Wait (bounded) for the port to become active and the IPv4 GID to appear.
for _ in $(seq 1 100); do
    if [[ "$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)" == *ACTIVE* ]] &&
        [[ "$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)" == 0000:0000:0000:0000:0000:ffff:* ]]; then
        break
    fi
    sleep 0.05
done

cd /root
if [[ -x /rdmavm/cmd ]]; then
    echo "@@RDMAVM-BEGIN@@"
    /rdmavm/cmd </dev/null 2>&1
    rc=$?
    echo "@@RDMAVM-EXIT $rc@@"
else
    echo "@@RDMAVM-SETUP-FAILED: no /rdmavm/cmd@@"
    echo "@@RDMAVM-EXIT 125@@"
fi
sync
reboot -f
