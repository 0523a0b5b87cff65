#!/usr/bin/env bash
# The test command of the README: installs what the tests need, runs every test of the
# workspace (real etcd, real TLS, network namespaces: run as root), then a short fuzz run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The production image (tests/image.rs checks it; tests/cluster.rs runs it in a real node).
scripts/image.sh
# Benchmarks are built (clippy --all-targets) but run only by `cargo bench`.
cargo test --workspace --lib --bins --tests --examples
cargo test --workspace --doc
scripts/fuzz-smoke.sh
