#!/usr/bin/env bash
# Installs what a command needs, and nothing it does not use. Idempotent: does nothing (not even
# `apt-get update`) when everything is already there. Needs root for the Debian packages.
#   scripts/install-deps.sh fast   the build and the fast test tier (`scripts/test.sh --fast`)
#   scripts/install-deps.sh demo   that, and what `scripts/demo.sh` runs
#   scripts/install-deps.sh [test] everything: the full test tier, the node, the benchmarks
set -euo pipefail
set_name="${1:-test}"
case "$set_name" in
  fast | demo | test) ;;
  *) echo "usage: $0 [fast|demo|test]" >&2; exit 2 ;;
esac

fast=(
  protobuf-compiler libprotobuf-dev   # protoc and its well-known .proto files (descriptor.proto), for the etcd-client crate's build
  make gcc libc6-dev           # jemalloc's build (tikv-jemalloc-sys, the isthmus binary's allocator), the linker
  curl                         # tunnel/tests/connect.rs's second CONNECT client
)
demo=(
  etcd-server                  # the shoot's real etcd 3.4, what the lab migrates
  iproute2                     # the seeds' network namespaces and veth pairs
  nftables                     # the lab's pod addresses (DNAT inside a seed) when the controllers drive it
)
test=(
  etcd-client openssl          # etcdctl for the proxy and controller tests, certificates
  openvpn                      # OpenVPN through the http_connect listener
  python3-yaml                 # scripts/chart.sh (the chart's OCI config blob, one file per rendered object)
  nginx-light libnginx-mod-stream haproxy sniproxy   # benchmark peers
  strace                       # the peers bench's syscalls scenario (calls per connection)
  containerd runc containernetworking-plugins   # the real node of scripts/cluster.sh
  iptables ipset socat umoci   # kube-proxy/kube-router rules, the API door, images
  busybox-static               # the node's helper image (local-path-provisioner's helper pods)
)
packages=("${fast[@]}")
[[ "$set_name" == fast ]] || packages+=("${demo[@]}")
[[ "$set_name" == test ]] && packages+=("${test[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps.sh: missing Debian packages: ${missing[*]}; run as root: sudo $0 $set_name" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[[ "$set_name" == fast ]] && exit 0

d="$(dirname "${BASH_SOURCE[0]}")"
# Cached in $ISTHMUS_CACHE, ~/.cache/isthmus by default (scripts/cache.sh), built once per
# machine, reused by every clone. The demo: the pinned upstream CRDs (the seeds' API servers),
# etcd v3.6 (their storage) and kube-apiserver (the shoot's and the seeds'; the one `go build`
# of k8s.io/kubernetes makes all six commands the node needs too).
"$d/upstream-crds.sh"
"$d/build-etcd.sh"
"$d/build-kubernetes.sh"
[[ "$set_name" == demo ]] && exit 0

# Debian starts these as services on install; the benchmarks start their own instances.
for s in nginx haproxy sniproxy openvpn; do
  (command -v systemctl >/dev/null && systemctl stop "$s" 2>/dev/null) || service "$s" stop >/dev/null 2>&1 || true
done
# Debian starts containerd as a service on install where it can; the node runs its own.
(command -v systemctl >/dev/null && systemctl disable --now containerd 2>/dev/null) || true
# The node's CoreDNS and kube-router (Go modules), and helm and prometheus/promtool: the chart
# and monitoring tests. (konnectivity, the tunnel bench's peer, is built by
# `cargo bench --bench tunnels` on first use.)
"$d/build-go-tool.sh" kube-router v2.1.0 github.com/cloudnativelabs/kube-router/v2/cmd/kube-router --version
"$d/build-go-tool.sh" coredns v1.12.1 github.com/coredns/coredns -version
# What the node's etcd-druid runs: druid, backup-restore, the etcd-wrapper stand-in, local-path.
"$d/build-druid.sh"
"$d/build-helm.sh"
"$d/build-prometheus.sh"
# Gardener's own etcd deploy, secrets manager and health checks (the gardener-etcd harness of
# the Gardener-contract tests, testkit::gardener).
"$d/build-gardener-harness.sh" gardener-etcd
# gardener-resource-manager and the gardenlet-install harness (Gardener v1.149.3): the chart
# installed the way gardenlet installs an Extension (tests/gardenlet_install.rs), and the
# node's NetworkPolicies the Gardener way.
"$d/build-go-tool.sh" gardener-resource-manager v1.149.3 github.com/gardener/gardener/cmd/gardener-resource-manager --version
"$d/build-gardener-harness.sh" gardenlet-install
