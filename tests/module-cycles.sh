#!/usr/bin/env bash
# Runs the module-cycle check (tests/tests/module_cycles.rs), the whole-tree test included even
# while it is #[ignore]d: every crate's module cycles, each with the edges inside it.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test -p rucx-tests --test module_cycles -- --include-ignored "$@"
