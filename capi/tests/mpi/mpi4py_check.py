"""mpi4py (Debian's python3-mpi4py, built on Open MPI) exchanging numpy arrays and Python
objects over pml ucx, every result checked.

Run by run.sh under mpirun with 2 or more ranks. Each rank prints "rank R libucp PATH" (the
libucp.so.0 mapped in the process), "rank R ok NAME" or "rank R FAIL NAME: WHY" per check, and
"rank R done CHECKS FAILED"; it exits 1 if a check failed. With a folder argument the lines go
to FOLDER/rank-R.txt instead of stdout (launchers merge the ranks' streams mid-line).
"""

import os
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
out = open(os.path.join(sys.argv[1], f"rank-{rank}.txt"), "w") if len(sys.argv) > 1 else sys.stdout
checks = 0
failures = 0


def say(line):
    out.write(f"rank {rank} {line}\n")
    out.flush()


def check(ok, name, why=""):
    global checks, failures
    checks += 1
    if ok:
        say(f"ok {name}")
    else:
        failures += 1
        say(f"FAIL {name}: {why}")


def libucp_path():
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").partition("/")[2]
            if path and os.path.basename(path).startswith("libucp.so"):
                path = "/" + path
                if path not in found:
                    found.append(path)
    return found


paths = libucp_path()
for p in paths or ["NONE"]:
    say(f"libucp {p}")
check(len(paths) == 1, "one libucp.so.0 is mapped", f"mapped: {paths}")

right = (rank + 1) % size
left = (rank - 1) % size

# Numpy arrays through the buffer interface (Send/Recv, Isend/Irecv), small and 8 MiB,
# several dtypes.
for dtype, n in [(np.int32, 7), (np.float64, 1 << 20), (np.uint8, (4 << 20) + 3), (np.complex128, 1000)]:
    name = f"Sendrecv numpy {np.dtype(dtype).name}[{n}]"
    send = (np.arange(n, dtype=np.int64) * (rank + 3)).astype(dtype)
    recv = np.zeros(n, dtype=dtype)
    reqs = [comm.Irecv(recv, source=left, tag=5), comm.Isend(send, dest=right, tag=5)]
    MPI.Request.Waitall(reqs)
    want = (np.arange(n, dtype=np.int64) * (left + 3)).astype(dtype)
    check(np.array_equal(recv, want), name, "received array differs")

if rank % 2 == 0 and rank + 1 < size:
    a = np.linspace(0.0, 1.0, 300001)
    comm.Send(a, dest=rank + 1, tag=6)
    st = MPI.Status()
    b = np.empty(300001)
    comm.Recv(b, source=rank + 1, tag=7, status=st)
    check(np.array_equal(b, a * 2) and st.Get_count(MPI.DOUBLE) == 300001, "Send/Recv numpy float64 2.4 MB", "differs")
elif rank % 2 == 1:
    st = MPI.Status()
    comm.Probe(source=rank - 1, tag=6, status=st)
    n = st.Get_count(MPI.DOUBLE)
    b = np.empty(n)
    comm.Recv(b, source=rank - 1, tag=6)
    comm.Send(b * 2, dest=rank - 1, tag=7)
    check(n == 300001 and np.array_equal(b, np.linspace(0.0, 1.0, 300001)), "Probe + Recv numpy float64 2.4 MB", f"count {n}")

# Python objects (pickled): send/recv, isend/irecv, bcast, allreduce, gather.
obj = {"rank": rank, "list": list(range(rank, rank + 10)), "text": "é" * rank, "nested": (rank, [b"x" * 100000])}
got = comm.sendrecv(obj, dest=right, source=left)
check(got["rank"] == left and got["list"] == list(range(left, left + 10)) and got["nested"][1][0] == b"x" * 100000,
      "sendrecv python object", repr(got)[:200])

if rank == 0:
    for dest in range(1, size):
        comm.send({"to": dest, "payload": np.full(1000, dest)}, dest=dest, tag=8)
else:
    msg = comm.recv(source=0, tag=8)
    check(msg["to"] == rank and np.all(msg["payload"] == rank), "send/recv python object with numpy inside", repr(msg)[:200])

req = comm.irecv(source=left, tag=9)
comm.isend(("hello", rank), dest=right, tag=9).wait()
check(req.wait() == ("hello", left), "isend/irecv python object")

for root in range(size):
    value = {"root": root, "data": list(range(1000))} if rank == root else None
    value = comm.bcast(value, root=root)
    check(value == {"root": root, "data": list(range(1000))}, f"bcast python object from root {root}", repr(value)[:200])

arr = np.arange(5000, dtype=np.float64) if rank == 0 else np.empty(5000)
comm.Bcast(arr, root=0)
check(np.array_equal(arr, np.arange(5000, dtype=np.float64)), "Bcast numpy")

total = comm.allreduce(rank + 1, op=MPI.SUM)
check(total == size * (size + 1) // 2, "allreduce python int", str(total))
biggest = comm.allreduce(f"r{rank:03d}", op=MPI.MAX)
check(biggest == f"r{size - 1:03d}", "allreduce python str max", biggest)

n = 1 << 18
x = np.arange(n, dtype=np.int64) * (rank + 1)
y = np.empty_like(x)
comm.Allreduce(x, y, op=MPI.SUM)
check(np.array_equal(y, np.arange(n, dtype=np.int64) * (size * (size + 1) // 2)), "Allreduce numpy int64 2 MiB")

gathered = comm.gather(rank * 11, root=0)
if rank == 0:
    check(gathered == [r * 11 for r in range(size)], "gather python int", str(gathered))

comm.Barrier()
say(f"done {checks} {failures}")
out.close()
sys.exit(1 if failures else 0)
