#!/usr/bin/env bash
# Scale benchmark: one hub worker with an endpoint to each of N peer workers, one 8-byte tagged
# message each way, run by the same C program (scale.c) over Debian's UCX 1.13 and over rucx's
# drop-in libucp.so.0, over shared memory and over tcp on loopback. Prints a table of medians
# with the ratio rucx/UCX per row.
#   capi/bench/scale.sh [LIBDIR]
# LIBDIR holds rucx's libraries; without it they are built (release) into target/capi-lib.
# Environment: NS="100 1000" (peer workers), PROCS="0 4" (0: peers in the hub's process;
# P: P peer processes), REPEATS=3, TLS_LIST="shm tcp", KEEP=dir (keep the raw RESULT lines),
# FDCHECK=1 (also try 1,000 endpoints under `ulimit -n 1024`, peers in 10 processes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lib=${1:-}
if [ -z "$lib" ]; then
    lib=${CARGO_TARGET_DIR:-$root/target}/capi-lib
    "$root/capi/build.sh" "$lib" >&2
fi
lib=$(cd "$lib" && pwd)
[ -f "$lib/libucp.so.0" ] || { echo "no libucp.so.0 in $lib" >&2; exit 1; }
[ -f /usr/include/ucp/api/ucp.h ] || { echo "install libucx-dev (UCX 1.13 headers)" >&2; exit 1; }

NS=${NS:-"100 1000"}
PROCS=${PROCS:-"0 4"}
REPEATS=${REPEATS:-3}
TLS_LIST=${TLS_LIST:-"shm tcp"}
out=${KEEP:-$(mktemp -d)}
mkdir -p "$out"
bin=$out/scale
${CC:-cc} -O2 -Wall -Wextra -Werror -o "$bin" "$here/scale.c" -lucp -lucs

# tcp in one process needs a few descriptors per endpoint on each side: raise the soft limit.
soft=$(ulimit -Sn)
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true
echo "fd limit: soft $soft raised to $(ulimit -Sn) (hard $(ulimit -Hn))" >&2

raw=$out/results.txt
: >"$raw"
for n in $NS; do
    for p in $PROCS; do
        for tls in $TLS_LIST; do
            case $tls in
            shm) tlsvar="shm,self" ;;
            tcp) tlsvar="tcp" ;;
            *) tlsvar=$tls ;;
            esac
            for r in $(seq "$REPEATS"); do
                for which in ucx rucx; do
                    if [ "$which" = rucx ]; then ld=$lib; else ld=; fi
                    line=$(env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$ld" \
                        UCX_TLS="$tlsvar" UCX_NET_DEVICES=lo \
                        timeout 600 "$bin" -n "$n" -p "$p" -t 300 | grep '^RESULT' || true)
                    if [ -z "$line" ]; then
                        echo "FAILED: $which tls=$tls n=$n procs=$p repeat=$r" >&2
                        line="RESULT failed=1"
                    fi
                    echo "which=$which tls=$tls n=$n procs=$p run=$r ${line#RESULT }" >>"$raw"
                    echo "$which tls=$tls n=$n procs=$p run $r: ${line#RESULT }" >&2
                done
            done
        done
    done
done

# The common 1,024-descriptor limit: a hub with 1,000 endpoints to peer workers in 10 processes.
fdcheck=$out/fdcheck.txt
: >"$fdcheck"
if [ "${FDCHECK:-1}" = 1 ]; then
    for tls in $TLS_LIST; do
        case $tls in shm) tlsvar="shm,self" ;; *) tlsvar=$tls ;; esac
        for which in ucx rucx; do
            if [ "$which" = rucx ]; then ld=$lib; else ld=; fi
            err=$out/fdcheck-$which-$tls.err
            if (ulimit -n 1024 && env -u RUCX_TLS -u RUCX_NET_DEVICES LD_LIBRARY_PATH="$ld" \
                UCX_TLS="$tlsvar" UCX_NET_DEVICES=lo timeout 600 "$bin" -n 1000 -p 10 -t 300 \
                >/dev/null 2>"$err"); then
                verdict=ok
            else
                verdict="FAILS: $(grep -m1 -v '^scale\[[0-9]*\]: read from socketpair' "$err" |
                    sed 's/\x1b\[[0-9;]*m//g' | cut -c1-150)"
            fi
            echo "ulimit -n 1024, N=1000 in 10 processes, $tls, $which: $verdict" >>"$fdcheck"
        done
    done
fi

python3 - "$raw" <<'EOF'
import shlex, statistics, sys
rows = []
for line in open(sys.argv[1]):
    d = dict(kv.split("=", 1) for kv in shlex.split(line))
    rows.append(d)

def metrics(d):
    """Per-endpoint figures of one run (None when the run failed)."""
    if d.get("failed"):
        return None
    f = {k: float(v) for k, v in d.items() if k not in ("which", "tls", "lib", "run")}
    n, p = f["n"], f["procs"]
    m = {}
    if p == 0:
        m["KB/pair, total (peer worker + both endpoints)"] = (f["rss_eps_kb"] - f["rss_base_kb"]) / n
        m["KB/pair, peer worker only"] = (f["rss_workers_kb"] - f["rss_base_kb"]) / n
        m["KB/pair, endpoints + exchange"] = (f["rss_eps_kb"] - f["rss_workers_kb"]) / n
        if "shm_eps_kb" in f:
            m["KB/pair, endpoints, private (RssAnon)"] = (f["anon_eps_kb"] - f["anon_workers_kb"]) / n
            m["KB/pair, endpoints, shared pages (RssShmem)"] = (f["shm_eps_kb"] - f["shm_workers_kb"]) / n
        m["fds/pair, total"] = (f["fd_eps"] - f["fd_base"]) / n
        m["fds/pair, endpoints"] = (f["fd_eps"] - f["fd_workers"]) / n
    else:
        m["hub KB/endpoint"] = (f["rss_eps_kb"] - f["rss_workers_kb"]) / n
        if "shm_eps_kb" in f:
            m["hub KB/endpoint, private (RssAnon)"] = (f["anon_eps_kb"] - f["anon_workers_kb"]) / n
            m["hub KB/endpoint, shared pages (RssShmem)"] = (f["shm_eps_kb"] - f["shm_workers_kb"]) / n
        m["hub fds/endpoint"] = (f["fd_eps"] - f["fd_workers"]) / n
        m["peers KB/worker (worker + endpoint)"] = f["peer_rss_kb"] / n
        m["peers fds/worker (worker + endpoint)"] = f["peer_fd"] / n
    m["shm mappings in hub process (count)"] = f["map_eps"] - f["map_base"]
    m["SysV segments (ipcs -m delta)"] = f["ipcs_eps"] - f["ipcs_base"]
    m["fds left after closing endpoints (hub)"] = f["fd_end"] - f["fd_base"]
    if p == 0:
        m["peer worker creation, ms total"] = f["t_workers_ms"]
    m["ucp_ep_create calls, ms total"] = f["t_create_ms"]
    m["first exchange (incl. wireup), ms"] = f["t_exchange_ms"]
    m["close all endpoints, ms"] = f["t_close_ms"]
    return m

groups = {}
for d in rows:
    key = (d["tls"], int(d["n"]), int(d["procs"]))
    groups.setdefault(key, {}).setdefault(d["which"], []).append(metrics(d))

def med(runs, k):
    vals = [r[k] for r in runs if r is not None]
    return statistics.median(vals) if vals else None

def fmt(v):
    if v is None:
        return "fail"
    return f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}"

print(f"{'tls':4} {'N':>5} {'procs':>5}  {'metric':45} {'UCX 1.13':>10} {'rucx':>10} {'rucx/UCX':>9}")
for key in sorted(groups):
    tls, n, p = key
    g = groups[key]
    ucx, rucx = g.get("ucx", []), g.get("rucx", [])
    names = next((list(r) for r in ucx + rucx if r is not None), [])
    for k in names:
        a, b = med(ucx, k), med(rucx, k)
        ratio = "-" if a is None or b is None or a == 0 else f"{b / a:.2f}"
        print(f"{tls:4} {n:>5} {p:>5}  {k:45} {fmt(a):>10} {fmt(b):>10} {ratio:>9}")
    nfail = sum(r is None for r in ucx + rucx)
    if nfail:
        print(f"{tls:4} {n:>5} {p:>5}  ({nfail} failed runs)")
EOF
cat "$fdcheck"
echo "(medians of $REPEATS runs; raw RESULT lines in $raw)"
