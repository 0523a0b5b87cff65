#!/usr/bin/env bash
# Runs the live-migration lab once: installs what it needs and nothing else (`install-deps.sh
# demo`: etcd 3.4, protoc, iproute2, nftables, etcd 3.6, kube-apiserver, the CRDs), builds
# `isthmus` (the binary under test: each seed's proxy and tunnel server) and `isthmus-lab`, then
# runs `isthmus-lab demo`, which moves a real 3-member etcd between two seeds (network namespaces)
# through isthmus proxies while the shoot's real kube-apiservers (~/.cache/isthmus/, built once by
# scripts/build-kubernetes.sh from install-deps.sh) serve API load from it and call a webhook
# through the isthmus tunnel. `--controllers`: each seed runs its own kube-apiserver and two
# `isthmus controller` replicas, which drive the migration (docs/lab.md). Needs root (network
# namespaces).
# Extra arguments go to `isthmus-lab demo` (e.g. `--rtt 150ms`, `--scenario link-cut`; `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "demo.sh: needs root (it creates network namespaces and veth pairs)" >&2
  exit 1
fi
scripts/install-deps.sh demo
cargo build --release -p isthmus -p isthmus-lab
bin="${CARGO_TARGET_DIR:-target}/release"
mkdir -p target/demo
exec "$bin/isthmus-lab" demo --controllers --isthmus "$bin/isthmus" \
  --report target/demo/report.json --picture target/demo/timeline.svg "$@"
