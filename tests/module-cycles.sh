#!/usr/bin/env bash
# Runs the module-cycle check (tests/tests/module_cycles.rs) alone: every crate's module cycles,
# each with the edges inside it, against the known debts it lists.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test -p rucx-tests --test module_cycles -- --nocapture "$@"
