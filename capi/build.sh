#!/usr/bin/env bash
# Builds rucx's drop-in UCX libraries into one folder:
#   capi/build.sh OUT_DIR
# gives OUT_DIR/libucp.so.0, libucs.so.0, libucm.so.0, libuct.so.0 (with those SONAMEs) and
# lib*.so symlinks. Use them with LD_LIBRARY_PATH=OUT_DIR (see capi/README.md).
# CARGO_TARGET_DIR is honoured; PROFILE=dev builds the debug profile instead of release.
set -euo pipefail
out=${1:?usage: capi/build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
profile=${PROFILE:-release}
dir=$profile
[ "$profile" = dev ] && dir=debug
cargo build --manifest-path "$root/Cargo.toml" --profile "$profile" \
    -p rucx-capi -p rucx-capi-ucs -p rucx-capi-ucm -p rucx-capi-uct
target=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$out"
for pair in ucp:rucx_ucp ucs:rucx_ucs ucm:rucx_ucm uct:rucx_uct; do
    name=${pair%%:*}
    crate=${pair##*:}
    install -m 0755 "$target/$dir/lib$crate.so" "$out/lib$name.so.0"
    ln -sf "lib$name.so.0" "$out/lib$name.so"
done
echo "rucx UCX libraries in $out: $(cd "$out" && ls lib*.so.0 | tr '\n' ' ')"
