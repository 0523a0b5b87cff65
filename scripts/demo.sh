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
#
# `--seeds real`: the same move between two real single-node Kubernetes seeds instead
# (scripts/cluster.sh: kubelet, containerd, etcd-druid, isthmus installed by its chart in each),
# linked at RTT 50 ms: the shoot's etcd as etcd-druid `Etcd`s (source in seed a, destination
# in seed b, each seed's isthmus controller driving its side), the shoot's kube-apiserver as a
# pod in each seed serving the lab's API load and watch through its name from outside, its
# admission webhook (failurePolicy Fail) called through each seed's tunnel server (seed b's
# the controller's temporary VPN) into the shoot, a writer straight to etcd. Prints each
# step's figures and checks 0 failed, 0 lost, 0 missed, 0 failed webhook calls
# (tests/seeds/shoot_move.rs, shoot_webhook.rs) and writes the lab's report and picture of it
# to target/demo/seeds-real/ (report.json, timeline.svg: each step's lane beside the lab's
# newest report in target/demo/); the seeds go down afterwards (`--keep`: they stay up).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
  echo "demo.sh: needs root (it creates network namespaces and veth pairs)" >&2
  exit 1
fi
if [[ "${1:-}" == "--seeds" ]]; then
  [[ "${2:-}" == real ]] || { echo "demo.sh: --seeds takes \`real\` (without it: the lab's seeds)" >&2; exit 2; }
  shift 2
  keep=
  for a in "$@"; do
    case "$a" in
      --keep) keep=1 ;;
      *) echo "demo.sh --seeds real: unknown argument $a (only --keep)" >&2; exit 2 ;;
    esac
  done
  scripts/install-deps.sh test
  # The image of this checkout: `up` builds one only when target/image has none.
  scripts/image.sh
  mkdir -p target/demo
  down() {
    scripts/cluster.sh --seed b down || true
    scripts/cluster.sh link down || true
    scripts/cluster.sh --seed a down || true
  }
  down # what an earlier run may have left up
  [[ -n "$keep" ]] || trap down EXIT
  scripts/cluster.sh --seed a up
  scripts/cluster.sh --seed b up
  scripts/cluster.sh link up --seeds a,b --rtt 50ms
  cargo test --test seeds shoot_api_across_running_seeds -- --ignored --nocapture \
    2>&1 | tee target/demo/seeds-real.log
  exit "${PIPESTATUS[0]}"
fi
scripts/install-deps.sh demo
cargo build --release -p isthmus -p isthmus-lab
bin="${CARGO_TARGET_DIR:-target}/release"
mkdir -p target/demo
exec "$bin/isthmus-lab" demo --controllers --isthmus "$bin/isthmus" \
  --report target/demo/report.json --picture target/demo/timeline.svg "$@"
