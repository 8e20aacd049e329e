#!/usr/bin/env bash
# Fetches the MPI test suites that capi/tests/mpi runs into DEST (default target/suites):
#   DEST/mpi4py-3.1.4/   mpi4py 3.1.4's source (the version of Debian's python3-mpi4py), from
#                        PyPI's sdist (`pip download --no-binary :all:`; Debian's mirror has no
#                        source for it);
#   DEST/mpich-4.0.2/    MPICH 4.0.2's source from Debian's `mpich` source package (apt-get
#                        source through a deb-src list of its own, made from the system's mirror;
#                        the system's apt configuration is not changed).
# Each is skipped if already there. MPI4PY_SDIST or MPICH_ORIG (paths of the tarballs, e.g. a
# local cache) are used instead of fetching when set.
#
#   bash capi/tests/mpi/fetch-suites.sh [DEST]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-$here/../../../target/suites}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
tmp=$(mktemp -d)
chmod 755 "$tmp" # apt-get source downloads as user _apt
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$dest/mpi4py-3.1.4/test/runtests.py" ]; then
  sdist=${MPI4PY_SDIST:-}
  if [ -z "$sdist" ]; then
    pip=(python3 -m pip)
    "${pip[@]}" --version >/dev/null 2>&1 || pip=(/usr/bin/python3 -m pip)
    "${pip[@]}" download -q --no-binary :all: --no-deps -d "$tmp" \
      mpi4py==3.1.4 || { echo "fetch-suites: pip download of mpi4py 3.1.4 failed" >&2; exit 1; }
    sdist=$tmp/mpi4py-3.1.4.tar.gz
  fi
  tar -xzf "$sdist" -C "$dest"
  echo "fetch-suites: mpi4py 3.1.4 in $dest/mpi4py-3.1.4"
fi

if [ ! -f "$dest/mpich-4.0.2/test/mpi/runtests.in" ]; then
  orig=${MPICH_ORIG:-}
  if [ -z "$orig" ]; then
    # A deb-src entry for the mirror the system's own sources name, in a private apt state.
    mkdir -p "$tmp/parts" "$tmp/lists/partial" "$tmp/cache"
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      sed -n 's/^Types: deb$/Types: deb-src/; /^Types:/,/^$/p' /etc/apt/sources.list.d/debian.sources |
        awk 'NF == 0 { exit } 1' >"$tmp/parts/src.sources"
    else
      grep -h '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' >"$tmp/parts/src.list"
    fi
    opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$tmp/parts"
          -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache")
    apt-get "${opts[@]}" update -qq >/dev/null
    (cd "$tmp" && apt-get "${opts[@]}" source --download-only -qq mpich=4.0.2-3 >/dev/null) ||
      { echo "fetch-suites: apt-get source mpich=4.0.2-3 failed" >&2; exit 1; }
    orig=$tmp/mpich_4.0.2.orig.tar.xz
  fi
  tar -xJf "$orig" -C "$dest" mpich-4.0.2/test/mpi
  echo "fetch-suites: MPICH 4.0.2's test/mpi in $dest/mpich-4.0.2/test/mpi"
fi
