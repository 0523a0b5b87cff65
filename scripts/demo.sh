#!/usr/bin/env bash
# Runs the live-migration lab once: installs what it needs (etcd 3.4, protoc, iproute2), then
# `isthmus demo`, which moves a real 3-member etcd between two seeds (network namespaces) through
# isthmus proxies while a client writes and reads. Needs root (network namespaces).
# Extra arguments go to `isthmus demo` (e.g. `--rtt 150ms`, `--scenario link-cut`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "demo.sh: needs root (it creates network namespaces and veth pairs)" >&2
  exit 1
fi
scripts/install-deps.sh
mkdir -p target/demo
exec cargo run --release -- demo --report target/demo/report.json --picture target/demo/timeline.svg "$@"
