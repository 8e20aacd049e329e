#!/usr/bin/env bash
# Unpacks UCX 1.13.1's source (Debian's `ucx` source package) into DIR, for UCX's own example
# programs (examples/uct_hello_world.c ...), which the tests build against Debian's headers:
#   capi/uct/tests/fetch-ucx-source.sh DIR     -> DIR/ucx-1.13.1/
# The orig tarball comes from UCX_SOURCE_TARBALL when that names a file, else from Debian's
# mirror with `apt-get source --download-only` under a private apt configuration (the system's
# apt setup is not touched; no root needed).
set -euo pipefail
dir=${1:?usage: fetch-ucx-source.sh DIR}
version=1.13.1
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -f "$dir/ucx-$version/examples/uct_hello_world.c" ]; then
    exit 0
fi
tarball=${UCX_SOURCE_TARBALL:-}
if [ -z "$tarball" ] || [ ! -f "$tarball" ]; then
    apt_dir="$dir/apt"
    mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    # A deb-src entry on the mirror the system's own sources name.
    sed -n 's/^Types: deb$/Types: deb-src/; /^Types:/,/^$/p' /etc/apt/sources.list.d/debian.sources |
        awk 'NF==0{exit} 1' > "$apt_dir/parts/src.sources"
    opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$apt_dir/parts"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o Debug::NoLocking=1)
    apt-get "${opts[@]}" update -qq
    (cd "$apt_dir" && apt-get "${opts[@]}" source --download-only "ucx=$version-1" >/dev/null)
    tarball="$apt_dir/ucx_$version.orig.tar.xz"
fi
tar -C "$dir" -xf "$tarball"
test -f "$dir/ucx-$version/examples/uct_hello_world.c"
echo "UCX $version source in $dir/ucx-$version"
