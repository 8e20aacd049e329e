# Sourced inside the VM by the scripts of tests/rdma-vm that start perftest/ucx_perftest
# servers with `-p 0` (the kernel picks the port).
#
# listen_port PID: the TCP port that process (or a child or grandchild of it: `timeout`, `env`
# and `taskset` wrap the servers, `strace` adds a level) listens on at 0.0.0.0, found from its
# socket inodes in /proc/PID/fd and /proc/net/tcp; waits up to 10 s for it. Fails (status 1)
# if it never appears.
listen_port() {
    local pid=$1 n p ino hex
    for n in $(seq 100); do
        local kids
        kids=$(cat /proc/$pid/task/*/children 2>/dev/null)
        for p in $pid $kids $(for k in $kids; do cat /proc/$k/task/*/children 2>/dev/null; done); do
            for ino in $(ls -l /proc/$p/fd 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p'); do
                hex=$(awk -v i=$ino '$10 == i && $4 == "0A" && $2 ~ /^00000000:/ { split($2, a, ":"); print a[2] }' /proc/net/tcp)
                [ -n "$hex" ] && { echo $((16#$hex)); return 0; }
            done
        done
        sleep 0.1
    done
    echo "listen_port: process $pid listens on no port" >&2
    return 1
}
