# Port helpers for the scripts under capi/ that start a server and then its client (sourced).
# No port is picked and released for a server to reuse (another process may take it in
# between): a server that can listen on port 0 does, and its port is read from the kernel's
# socket table; one that cannot (UCX's hello_world examples refuse port 0) is started on a
# port the kernel just handed out, checked to be the one listening there, and started again
# on another port when it lost the race for that one.

# The pid of program $2 (a path or name) started as $1 or as a descendant of it (through
# wrappers such as env, timeout, stdbuf, taskset), once it has exec'd (waits up to 10 s).
program_pid() {
    local top=$1 comm name _ pids p
    name=$(basename "$2" | cut -c1-15)
    for _ in $(seq 100); do
        pids=$top
        while [ -n "$pids" ]; do
            for p in $pids; do
                comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
                [ "$comm" = "$name" ] && { echo "$p"; return 0; }
            done
            pids=$(for p in $pids; do pgrep -P "$p"; done)
        done
        kill -0 "$top" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# The TCP port process $1 listens on at a wildcard address (0.0.0.0, [::] or *), waiting up to
# 20 s for it: the out-of-band or listener socket of a server started with port 0 (rucx's
# transports listen on device addresses, not wildcards).
wildcard_port() {
    local pid=$1 port _
    for _ in $(seq 200); do
        port=$(ss -Hltnp 2>/dev/null | grep "pid=$pid," |
            awk '$4 ~ /^(0\.0\.0\.0|\[::\]|\*):[0-9]+$/ {sub(/.*:/, "", $4); print $4; exit}')
        [ -n "$port" ] && { echo "$port"; return 0; }
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# True when process $1 listens on TCP port $2 (waits up to 20 s while it runs).
listens_on() {
    local pid=$1 port=$2 _
    for _ in $(seq 200); do
        ss -Hltnp "sport = :$port" 2>/dev/null | grep -q "pid=$pid," && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# A port the kernel has just handed out (for servers that cannot take port 0: the caller
# checks with `listens_on` that its server got it, and starts it again if not).
kernel_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
