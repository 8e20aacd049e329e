#!/usr/bin/env bash
# Fetches what the UCX application tests build and run, into CACHE (kept between runs):
#   CACHE/ucx-src   Debian's ucx 1.13.1 source (examples/ucp_hello_world.c, ucp_client_server.c),
#                   fetched with apt-get source --download-only through a private deb-src list
#                   (the system's apt configuration is not touched)
#   CACHE/ucx122    UCX 1.22's wheel (libucx-cu12 1.22.0 from PyPI), unzipped: libucx/include,
#                   libucx/bin/io_demo
#   capi/tests/ucx-apps/fetch.sh CACHE
# UCX_SRC_DIR / UCX122_DIR, when set to folders holding the same, are linked instead.
set -euo pipefail
cache=${1:?usage: fetch.sh CACHE}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

if [ ! -f "$cache/ucx-src/examples/ucp_hello_world.c" ]; then
    if [ -n "${UCX_SRC_DIR:-}" ] && [ -f "$UCX_SRC_DIR/examples/ucp_hello_world.c" ]; then
        ln -sfn "$UCX_SRC_DIR" "$cache/ucx-src"
    else
        d=$cache/apt
        mkdir -p "$d/parts" "$d/lists/partial" "$d/cache/archives/partial"
        # The deb-src entry reuses the mirror the system's own apt sources name.
        sed -n 's/^Types: deb$/Types: deb-src/; /^Types:/,/^$/p' \
            /etc/apt/sources.list.d/debian.sources | awk 'NF==0{exit} 1' > "$d/parts/src.sources"
        o=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$d/parts"
           -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache")
        apt-get "${o[@]}" update -qq
        (cd "$d" && apt-get "${o[@]}" source --download-only ucx=1.13.1-1 >/dev/null)
        mkdir -p "$cache/ucx-src"
        tar -xJf "$d"/ucx_1.13.1.orig.tar.xz -C "$cache/ucx-src" --strip-components=1
    fi
fi

if [ ! -x "$cache/ucx122/libucx/bin/io_demo" ]; then
    if [ -n "${UCX122_DIR:-}" ] && [ -x "$UCX122_DIR/libucx/bin/io_demo" ]; then
        ln -sfn "$UCX122_DIR" "$cache/ucx122"
    else
        mkdir -p "$cache/wheel"
        python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$cache/wheel" \
            "libucx-cu12==1.22.0"
        mkdir -p "$cache/ucx122"
        python3 -m zipfile -e "$cache"/wheel/libucx_cu12-1.22.0-*.whl "$cache/ucx122"
        chmod +x "$cache/ucx122/libucx/bin/"*
    fi
fi
echo "UCX sources in $cache/ucx-src, UCX 1.22 in $cache/ucx122"
