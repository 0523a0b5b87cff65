#!/usr/bin/env bash
# Installs the Debian packages the tests, the demo and the benchmarks use. Idempotent: does
# nothing (not even `apt-get update`) when everything is already there. Needs root.
set -euo pipefail
packages=(
  etcd-server etcd-client      # real etcd 3.4 for the proxy and lab tests
  protobuf-compiler libprotobuf-dev   # protoc and its well-known .proto files (descriptor.proto), for the etcd-client crate's build
  iproute2 curl openssl        # network namespaces, admin scraping, certificates
  nftables                     # the lab's pod addresses (DNAT inside a seed) when the controllers drive it
  openvpn                      # OpenVPN through the http_connect listener
  python3-yaml                 # scripts/chart.sh (the chart's OCI config blob, one file per rendered object)
  nginx-light libnginx-mod-stream haproxy sniproxy   # benchmark peers
  strace                       # the peers bench's syscalls scenario (calls per connection)
  containerd runc containernetworking-plugins   # the real node of scripts/cluster.sh
  iptables ipset socat umoci gcc libc6-dev      # kube-proxy/kube-router rules, the API door, images
  make                         # jemalloc's build (tikv-jemalloc-sys, the isthmus binary's allocator)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts these as services on install; the benchmarks start their own instances.
for s in nginx haproxy sniproxy openvpn; do
  (command -v systemctl >/dev/null && systemctl stop "$s" 2>/dev/null) || service "$s" stop >/dev/null 2>&1 || true
done
# Debian starts containerd as a service on install where it can; the node runs its own.
(command -v systemctl >/dev/null && systemctl disable --now containerd 2>/dev/null) || true
# The pinned upstream CRDs, etcd and the Kubernetes commands (kube-apiserver for the tests'
# API servers, all six for the node), CoreDNS and kube-router (Go modules; cached in
# $ISTHMUS_CACHE, ~/.cache/isthmus by default (scripts/cache.sh), built once per machine,
# reused by every clone). (konnectivity, the tunnel bench's peer, is built by
# `cargo bench --bench tunnels` on first use.)
d="$(dirname "${BASH_SOURCE[0]}")"
"$d/upstream-crds.sh"
"$d/build-etcd.sh"
"$d/build-kubernetes.sh"
"$d/build-go-tool.sh" kube-router v2.1.0 github.com/cloudnativelabs/kube-router/v2/cmd/kube-router --version
"$d/build-go-tool.sh" coredns v1.12.1 github.com/coredns/coredns -version
# Gardener's own etcd deploy, secrets manager and health checks (the gardener-etcd harness of
# the Gardener-contract tests, testkit::gardener).
"$d/build-gardener-etcd.sh"
# gardener-resource-manager and the gardenlet-install harness (Gardener v1.149.3): the chart
# installed the way gardenlet installs an Extension (tests/gardenlet_install.rs), and the
# node's NetworkPolicies the Gardener way.
"$d/build-go-tool.sh" gardener-resource-manager v1.149.3 github.com/gardener/gardener/cmd/gardener-resource-manager --version
"$d/build-gardenlet-install.sh"
# helm and prometheus/promtool: the chart and monitoring tests.
"$d/build-helm.sh"
"$d/build-prometheus.sh"
