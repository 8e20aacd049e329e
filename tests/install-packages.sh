#!/usr/bin/env bash
# Installs the Debian packages the tests use beyond a Rust toolchain (run as root):
# iproute2 and procps (network namespaces, process checks); Debian's MPI stacks built on UCX 1.13,
# NetPIPE and mpi4py (capi/tests/mpi); UCX 1.13's headers and tools (the C API's layout test is
# compiled against the headers; the benchmarks compare with the real UCX); ethtool, make, perl
# and python3-pip for issue 31's tests (offloads off on the hostile links of tests/netns,
# building and running MPICH's test suite, fetching mpi4py's); python3-pip also fetches UCX
# 1.22's wheel (io_demo, headers) for capi/tests/ucx-apps.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" != 0 ]; then
  echo "tests/install-packages.sh: run as root (apt-get install)" >&2
  exit 1
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends iproute2 procps openmpi-bin libopenmpi-dev mpich \
  libmpich-dev netpipe-openmpi python3-mpi4py python3-numpy libucx-dev ucx-utils \
  ethtool make perl python3-pip >/dev/null
