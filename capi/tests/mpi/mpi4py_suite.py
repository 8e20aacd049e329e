"""Runs mpi4py's own test suite (its test/runtests.py) in an MPI rank, after noting which
libucp.so.0 the rank loaded.

Usage (under mpirun): python3 mpi4py_suite.py FOLDER TESTDIR [runtests.py options...]
Writes "rank R libucp PATH" (one line per libucp file mapped, "NONE" if none) to
FOLDER/rank-R.txt once MPI is initialised (Open MPI loads pml ucx, and so libucp, in MPI_Init),
then runs TESTDIR/runtests.py with the options as if started directly, its output (stdout
and stderr) in FOLDER/rank-R.out: the ranks' reports do not interleave.
"""

import os
import runpy
import sys

folder, testdir = sys.argv[1], sys.argv[2]
from mpi4py import MPI  # noqa: E402  (initialises MPI)

rank = MPI.COMM_WORLD.Get_rank()
with open("/proc/self/maps") as maps:
    found = sorted(
        {
            line.split()[-1]
            for line in maps
            if line.rstrip().split()[-1].rsplit("/", 1)[-1].startswith("libucp.so")
        }
    )
with open(os.path.join(folder, "rank-%d.txt" % rank), "w") as out:
    for path in found or ["NONE"]:
        out.write("rank %d libucp %s\n" % (rank, path))

sys.stdout.flush()
sys.stderr.flush()
log = os.open(os.path.join(folder, "rank-%d.out" % rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
os.close(log)

sys.path.insert(0, testdir)
sys.argv = [os.path.join(testdir, "runtests.py")] + sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
