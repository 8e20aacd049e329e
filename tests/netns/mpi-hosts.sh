#!/usr/bin/env bash
# MPI jobs across hosts made of network namespaces (issue 31): Debian's Open MPI (pml ucx) and
# MPICH (ch4:ucx) across two and three hosts, UCX_TLS=tcp,shm,self on the hosts' veth0 (tcp
# between hosts, shared memory between ranks of one host), then with hostile links.
#
#   tests/netns/mpi-hosts.sh LIBDIR          # rucx (capi/build.sh LIBDIR): pass/fail, for CI
#   tests/netns/mpi-hosts.sh system          # the same on Debian's UCX
#   tests/netns/mpi-hosts.sh --table LIBDIR  # both, and the table of what each condition gave
#
# The hosts: namespaces host-a, host-b, host-c (10.232.0.1-3, each with its own host name in a
# UTS namespace and an /etc/netns hosts file naming all three), each joined by a veth link to a
# switch namespace where hostile_switch.c forwards the frames (this kernel has no sch_netem;
# the switch applies the same impairments in user space). Jobs start on host-a; the launchers
# reach the other hosts through an rsh agent that enters their namespace (Open MPI's
# plm_rsh_agent, hydra's -launcher-exec), as ssh would.
#
# Cases (each a line "PASS name (time)" or "FAIL name: why"):
#   p2p.c (capi/tests/mpi) on 2 hosts (2 ranks each) and on 3 hosts (2+1+1 ranks);
#   mpi_traffic.c for TRAFFIC_S s (default 15) on 3 hosts, with the links
#     clean; delay (2 ms +- 1 ms on every frame); loss (1 %); reorder (25 % of the frames sent
#     at once ahead of frames held 2 ms); duplicate (1 %); outage (host-b's link down for 5 s,
#     3 s into the traffic, then up); cut (host-b's link down for good, 3 s into the traffic).
#   Every case but the cut must finish with every message checked; the cut must end the job
#   with a non-zero status within CUT_LIMIT s (default 120), with an error line that names the
#   peer (host-b or 10.232.0.2). Nothing may hang (watchdogs) or pass wrong data.
# Environment: MPIS (default "openmpi mpich"), PARALLEL=1 (the MPIs at once, not with --table),
# P2P_HOSTS (default "a:2,b:2 a:2,b:1,c:1"), CONDITIONS (default all seven), TRAFFIC_S, CUT_LIMIT.
# Needs root, iproute2, ethtool, util-linux (unshare), a C compiler and the MPI stacks. Where
# namespaces cannot be made, it says so loudly and exits 0 (like run.sh beside it).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
table=0
if [ "${1:-}" = --table ]; then table=1; shift; fi
if [ $# -ne 1 ] || { [ "$table" = 1 ] && [ "$1" = system ]; }; then
  echo "usage: $0 [--table] LIBDIR | $0 system" >&2
  exit 2
fi
# PARALLEL=1: one instance per MPI at once, each with hosts of its own (the same addresses in
# other namespaces do not meet); their outputs follow one another, and the status is theirs.
if [ "${PARALLEL:-0}" = 1 ] && [ "$table" = 0 ] && [ "$(echo ${MPIS:-openmpi mpich} | wc -w)" -gt 1 ]; then
  out=$(mktemp -d)
  pids=()
  for m in ${MPIS:-openmpi mpich}; do
    MPIS=$m PARALLEL=0 bash "$0" "$@" >"$out/$m" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for m in ${MPIS:-openmpi mpich}; do cat "$out/$m"; done
  rm -rf "$out"
  exit $rc
fi
source "$root/capi/tests/mpi/lib.sh"
need_tools mpicc.openmpi mpicc.mpich mpirun.openmpi mpirun.mpich timeout ip ethtool unshare cc
TRAFFIC_S=${TRAFFIC_S:-15}
CUT_LIMIT=${CUT_LIMIT:-120}
MPIS=${MPIS:-openmpi mpich}
P2P_HOSTS=${P2P_HOSTS-a:2,b:2 a:2,b:1,c:1}
CONDITIONS=${CONDITIONS-clean delay loss reorder duplicate outage cut}

skip() {
  echo "########################################################################" >&2
  echo "## mpi-hosts: SKIPPED: $1" >&2
  echo "## (network namespaces need root; the rest of CI goes on)" >&2
  echo "########################################################################" >&2
  exit 0
}

ID=$$
SW=rxsw-$ID
HOSTS=(a b c)
ns_of() { echo "rxh-$ID-$1"; }
addr_of() { case $1 in a) echo 10.232.0.1 ;; b) echo 10.232.0.2 ;; c) echo 10.232.0.3 ;; esac; }
work=$(mktemp -d "${TMPDIR:-/tmp}/rucx-mpi-hosts.XXXXXX")
switch_pid=

cleanup() {
  set +e
  [ -z "$switch_pid" ] || kill "$switch_pid" 2>/dev/null
  for h in "${HOSTS[@]}" sw; do
    local ns=$SW
    [ "$h" = sw ] || ns=$(ns_of "$h")
    # Processes left in a namespace (a launcher daemon of a failed job) are this script's own.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
    [ "$h" = sw ] || rm -rf "/etc/netns/$ns"
  done
  [ "$keep_work" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT INT TERM

ip netns add "$SW" 2>/dev/null || skip "cannot create network namespaces here"
ip -n "$SW" link set lo up
ip netns exec "$SW" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ports=()
for h in "${HOSTS[@]}"; do
  ns=$(ns_of "$h")
  ip netns add "$ns"
  # IPv4 only: no link-local IPv6 addresses for the launchers to try while they are tentative.
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip link add "rx$ID$h" type veth peer name "rxs$ID$h"
  ip link set "rx$ID$h" netns "$ns"
  ip -n "$ns" link set "rx$ID$h" name veth0
  ip link set "rxs$ID$h" netns "$SW"
  ip -n "$SW" link set "rxs$ID$h" name "port-$h"
  ip -n "$ns" addr add "$(addr_of "$h")/24" dev veth0
  # Frames must reach the switch whole and with their checksums computed (it copies bytes).
  for dev in "$ns veth0" "$SW port-$h"; do
    read -r n d <<<"$dev"
    ip netns exec "$n" ethtool -K "$d" tx off tso off gso off gro off >/dev/null 2>&1 || true
    ip -n "$n" link set "$d" up
  done
  ip -n "$ns" link set lo up
  ports+=("port-$h")
  mkdir -p "/etc/netns/$ns"
  { echo "127.0.0.1 localhost"
    for o in "${HOSTS[@]}"; do echo "$(addr_of "$o") host-$o"; done; } >"/etc/netns/$ns/hosts"
done
echo "hosts: host-a host-b host-c (10.232.0.1-3) on a switch in namespace $SW"

# A host is a network namespace plus, for each process started there, namespaces of its own for
# the host name, SysV/POSIX IPC and process ids (with its /proc): MPI libraries must not find the
# ranks of another host reachable over shared memory or cross-memory attach, as they would on one
# kernel otherwise (Debian's UCX did, under MPICH), and every byte between hosts crosses the links.
# --kill-child: a launcher that kills the agent it started (the pid it holds is unshare's, as
# `ip netns exec` execs) kills the host's processes with it, even behind a cut link.
UNSHARE=(unshare --uts --ipc --pid --fork --mount-proc --kill-child)

# on H CMD...: runs CMD on host H.
on() {
  local h=$1
  shift
  ip netns exec "$(ns_of "$h")" "${UNSHARE[@]}" sh -c 'hostname "$0"; exec "$@"' "host-$h" "$@"
}

# The rsh agent: "agent [-options] HOST COMMAND..." runs COMMAND (one shell line, as ssh does)
# on HOST. Its session crosses no link (it enters the host's namespaces), so it stands in for
# ssh's own liveness check: as ssh with ServerAliveInterval=10 and ServerAliveCountMax=3 ends a
# session whose host stopped answering, the agent ends (status 255, the command killed) once
# HOST's link has been down for 30 s. A launcher waiting for its remote daemons (MPICH's hydra
# after a rank aborted) then learns the host is gone, as it would over ssh, instead of waiting
# for ever behind a cut link; a 5 s outage does not end it.
cat >"$work/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1
shift
case \$host in
  host-a|host-b|host-c) ns=rxh-$ID-\${host#host-} ;;
  *) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
ip netns exec "\$ns" ${UNSHARE[*]} sh -c "hostname \$host; \$*" <&0 &
child=\$!
down=0
while kill -0 "\$child" 2>/dev/null; do
  if ip -n "\$ns" -o link show veth0 2>/dev/null | grep -q '[<,]UP[,>]'; then
    down=0
  else
    down=\$((down + 1))
    if [ "\$down" -ge 30 ]; then
      echo "agent: connection to \$host timed out (its link is down); session closed" >&2
      kill -9 "\$child" 2>/dev/null
      exit 255
    fi
  fi
  sleep 1
done
wait "\$child"
EOF
chmod +x "$work/agent"

cc -O2 -Wall -Wextra -Werror -o "$work/hostile_switch" "$here/hostile_switch.c"
for mpi in openmpi mpich; do
  "mpicc.$mpi" -O2 -Wall -Wextra -Werror -o "$work/p2p.$mpi" "$root/capi/tests/mpi/p2p.c"
  "mpicc.$mpi" -O2 -Wall -Wextra -Werror -o "$work/traffic.$mpi" "$here/mpi_traffic.c"
done

# start_switch ARGS...: (re)starts the switch with these impairments.
start_switch() {
  stop_switch
  # A high CPU weight: the ranks spin while they wait, and a switch that waits for a time slice
  # among them would be a slow link. (Not a real-time class: a real-time process spinning
  # elsewhere on the machine would then starve it, or it the machine.)
  ip netns exec "$SW" nice -n -10 "$work/hostile_switch" "$@" "${ports[@]}" 2>>"$work/switch.log" &
  switch_pid=$!
  sleep 0.2
  kill -0 "$switch_pid" || { cat "$work/switch.log"; echo "the switch did not start" >&2; exit 1; }
}
stop_switch() {
  if [ -n "$switch_pid" ]; then
    kill "$switch_pid" 2>/dev/null || true
    wait "$switch_pid" 2>/dev/null || true
    switch_pid=
  fi
}
# Frames the switch forwarded in its last run (its counters line).
switched() { tail -1 "$work/switch.log" | awk '$2 == "frames" { print $5; exit }'; }
MIN_FRAMES=1000 # a job whose ranks talk across hosts moves far more than this
link() { ip -n "$(ns_of "$1")" link set veth0 "$2"; }
# Processes left on the hosts once a job has ended (ranks and daemons of a job that was killed or
# cut off) belong to that job: they go before the next one starts.
reap() {
  local h p
  for h in "${HOSTS[@]}"; do
    for p in $(ip netns pids "$(ns_of "$h")"); do kill -9 "$p" 2>/dev/null || true; done
  done
}

# job MPI HOSTSPEC NP LIMIT LOG PROGRAM ARGS...: runs an MPI job started on host-a with the
# libraries of the current mode; sets `status` and `elapsed` and writes them to STATUS beside
# LOG (for a job run in the background). HOSTSPEC is like "a:2,b:1,c:1".
job() {
  local mpi=$1 spec=$2 np=$3 limit=$4 log=$5 hosts
  shift 5
  hosts=$(echo "$spec" | sed 's/\([abc]\):/host-\1:/g')
  local -a env=(UCX_TLS=tcp,shm,self UCX_NET_DEVICES=veth0)
  [ -z "$libpath" ] || env+=("LD_LIBRARY_PATH=$libpath")
  local -a cmd
  if [ "$mpi" = openmpi ]; then
    cmd=(mpirun.openmpi --allow-run-as-root --host "$hosts" -np "$np"
         --mca plm_rsh_agent "$work/agent" --mca oob_tcp_if_include veth0
         --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2
         --mca oob_tcp_keepalive_probes 3
         --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
    for e in "${env[@]}"; do cmd+=(-x "$e"); done
  else
    cmd=(env "${env[@]}" MPIR_CVAR_NOLOCAL=1 mpirun.mpich -launcher ssh
         -launcher-exec "$work/agent" -iface veth0 -hosts "$hosts" -np "$np")
  fi
  local t0=$EPOCHREALTIME
  status=0
  on a timeout --verbose -k 10 "$limit" "${cmd[@]}" "$@" >"$log" 2>&1 || status=$?
  elapsed=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  echo "$status $elapsed" >"$(dirname "$log")/status"
}

# wrong_data DIR: a rank of the job in DIR got a message with wrong bytes or length.
wrong_data() { grep -q ' FAIL .*wrong\| FAIL .*bad byte\| FAIL .*bytes from' "$1"/rank-*.txt 2>/dev/null; }

# The result of one case, as a table cell and a verdict: sets `cell` and returns 1 on failure
# (with `why`).
judge() { # KIND(ok|cut) DIR NP
  local kind=$1 dir=$2 np=$3 named
  why=
  if grep -q 'timeout: sending signal' "$dir/log"; then
    cell="HANG (watchdog)"; why="hung: killed by the watchdog"; return 1
  fi
  if [ "$kind" = ok ]; then
    if [ "$status" = 0 ] && check_ranks "$dir" "$np"; then
      local it
      it=$(awk '$3 == "iterations" { print $4; exit }' "$dir/rank-0.txt")
      cell="ok ${elapsed}s${it:+ ($it it.)}"
      return 0
    fi
    check_ranks "$dir" "$np" || true
    if wrong_data "$dir"; then
      cell="WRONG DATA"
    else
      cell="error ${elapsed}s"
    fi
    why="exit status $status after $elapsed s; ${why:-}"
    return 1
  fi
  named=$(grep -v '^timeout:' "$dir/log" | grep -m1 -E 'host-b|10\.232\.0\.2' | cut -c1-110 || true)
  if wrong_data "$dir"; then
    cell="WRONG DATA"; why="a rank received wrong data before the cut ended the job"; return 1
  elif [ "$status" = 0 ]; then
    cell="exit 0 (!)"; why="the job reported success with host-b cut off"; return 1
  elif [ -z "$named" ]; then
    cell="error ${elapsed}s, peer unnamed"; why="exit status $status, but no line names host-b"
    return 1
  fi
  cell="error ${elapsed}s"
  why=$named
}

declare -A cells
run_cases() { # MODE-LABEL
  local label=$1 mpi cond dir np args sw_pid
  for mpi in $MPIS; do
    for spec in $P2P_HOSTS; do
      local nh
      nh=$(echo "$spec" | tr ',' '\n' | wc -l)
      dir=$work/$label-$mpi-p2p-$nh
      mkdir -p "$dir"
      start_switch
      job "$mpi" "$spec" 4 300 "$dir/log" "$work/p2p.$mpi" "$dir"
      reap
      stop_switch
      if ! judge ok "$dir" 4; then
        fail "$label $mpi p2p.c on $nh hosts" "$why" "$dir/log"
      elif [ "$(switched)" -lt "$MIN_FRAMES" ]; then
        cell="ok, but $(switched) frames crossed"
        fail "$label $mpi p2p.c on $nh hosts" "only $(switched) frames crossed the links" "$dir/log"
      else
        pass "$label $mpi p2p.c on $nh hosts, $checks checks, $(switched) frames" "$elapsed"
      fi
      cells["p2p.c $nh hosts,$label $mpi"]=$cell
    done
    for cond in $CONDITIONS; do
      case $cond in
        clean | outage | cut) args=() ;;
        delay) args=(-d 2000 -j 1000) ;;
        loss) args=(-l 1) ;;
        reorder) args=(-d 2000 -r 25) ;;
        duplicate) args=(-u 1) ;;
      esac
      dir=$work/$label-$mpi-$cond
      mkdir -p "$dir"
      start_switch ${args[@]+"${args[@]}"} -s $((RANDOM + 1))
      local limit=$((TRAFFIC_S + 120))
      [ "$cond" != cut ] || limit=$((CUT_LIMIT + 30))
      job "$mpi" "a:2,b:1,c:1" 4 "$limit" "$dir/log" "$work/traffic.$mpi" "$dir" "$TRAFFIC_S" &
      local jpid=$!
      if [ "$cond" = outage ] || [ "$cond" = cut ]; then
        # 3 s into the traffic: the ranks have written their host lines once MPI_Init is done.
        for _ in $(seq 600); do
          [ "$(cat "$dir"/rank-*.txt 2>/dev/null | grep -c ' host ')" = 4 ] && break
          sleep 0.1
        done
        sleep 3
        link b down
        if [ "$cond" = outage ]; then sleep 5; link b up; fi
      fi
      wait "$jpid" || true
      read -r status elapsed <"$dir/status" # `job` ran in a subshell
      reap
      [ "$cond" != cut ] || link b up
      stop_switch
      local kind=ok
      [ "$cond" != cut ] || kind=cut
      if judge "$kind" "$dir" 4; then
        if [ "$kind" = cut ] && awk -v e="$elapsed" -v l="$CUT_LIMIT" 'BEGIN { exit !(e > l) }'; then
          fail "$label $mpi $cond" "the job ended after $elapsed s (bound $CUT_LIMIT s)" "$dir/log"
        elif [ "$kind" = ok ] && [ "$(switched)" -lt "$MIN_FRAMES" ]; then
          cell="ok, but $(switched) frames crossed"
          fail "$label $mpi $cond" "only $(switched) frames crossed the links" "$dir/log"
        else
          pass "$label $mpi $cond: $cell${why:+: $why}" "$elapsed"
        fi
      else
        fail "$label $mpi $cond" "$why" "$dir/log"
      fi
      cells["$cond,$label $mpi"]=$cell
      tail -1 "$work/switch.log" | sed 's/^/    switch: /'
    done
  done
}

labels=()
if [ "$table" = 1 ]; then
  mpi_setup system
  labels+=("ucx-1.13")
  run_cases "ucx-1.13"
fi
mpi_setup "$1"
[ "$mode" = rucx ] && label=rucx || label=ucx-1.13
labels=("$label" ${labels[@]+"${labels[@]}"})
run_cases "$label"

if [ "$table" = 1 ]; then
  echo
  printf '| %-14s |' condition
  for l in "${labels[@]}"; do for mpi in openmpi mpich; do printf ' %-22s |' "$l $mpi"; done; done
  echo
  printf '|%s|' "----------------"
  for l in "${labels[@]}"; do for mpi in openmpi mpich; do printf '%s|' "------------------------"; done; done
  echo
  for cond in "p2p.c 2 hosts" "p2p.c 3 hosts" clean delay loss reorder duplicate outage cut; do
    printf '| %-14s |' "$cond"
    for l in "${labels[@]}"; do
      for mpi in openmpi mpich; do printf ' %-22s |' "${cells["$cond,$l $mpi"]:-}"; done
    done
    echo
  done
fi
[ "$keep_work" = 0 ] || echo "logs kept in $work"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
