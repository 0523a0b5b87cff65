#!/usr/bin/env bash
# A real single-node Kubernetes (v1.34.4) for isthmus, in a network namespace of its own: a
# seed. `--seed NAME` (first argument; a single letter a–j, default a) picks which of up to ten
# seeds on one machine a command is for; each has its own namespaces, cgroup, addresses, state
# directory and host port (see "Seeds" below), so several can run side by side.
#
#   scripts/cluster.sh up        build what is missing, start the node, load the isthmus image,
#                                install the chart as gardener-operator would (helm install of
#                                its archive with a seed's injected values), wait for the proxy
#                                DaemonSet; prints the `export KUBECONFIG=…` line for a shell
#                                (`up --no-isthmus`: the node only)
#   scripts/cluster.sh down      stop everything and leave the host as it was
#   scripts/cluster.sh status    what runs and what is Ready
#   scripts/cluster.sh kubectl … the cluster's own kubectl (inside the node's namespace)
#   scripts/cluster.sh helm …    the pinned helm against the node (release `isthmus` in
#                                isthmus-system: `helm upgrade isthmus … --reuse-values --set …`)
#   scripts/cluster.sh install [HELM-ARGS…]  install the chart as `up` does, with extra helm
#                                arguments (after `up --no-isthmus`; e.g. --set networkPolicy.explicit=false)
#   scripts/cluster.sh chart     the chart's archive, packaged now (the path of the .tgz)
#   scripts/cluster.sh grm       start the seed's gardener-resource-manager (the real one, its
#                                NetworkPolicy controller) on the node
#   scripts/cluster.sh seed-policies NS…  gardenlet's policies of a seed namespace (deny-all,
#                                allow-to-dns, …; a stand-in: gardenlet cannot run here)
#   scripts/cluster.sh load FILE import an OCI image archive into the node's containerd
#   scripts/cluster.sh node CMD… run a command in the node's network and mount namespace
#   scripts/cluster.sh link up --seeds a,b[,…] [--rtt 50ms]  join the seeds' outsides through
#                                the lab's link emulator (`isthmus-lab link`) at that RTT, as
#                                in the demo: every TCP connection between seeds crosses it
#   scripts/cluster.sh link down|cut|restore|status  remove it (the last seed's `down` does
#                                too), cut it (connections reset), restore it, show it
#
# What runs: etcd v3.6 (the tests' build), kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kube-proxy (one pinned build of k8s.io/kubernetes), containerd +
# runc + CNI plugins (Debian), kube-router (NetworkPolicy enforcement and LoadBalancer addresses)
# as node processes; CoreDNS, the default StorageClass's provisioner (local-path) and the real
# etcd-druid v0.38.1 (in `garden`, as gardenlet deploys it: any `Etcd` becomes real etcd pods
# with etcd-backup-restore) as pods. Images (pause, CoreDNS, a test etcd, druid's, isthmus) are
# built locally into OCI archives and imported: there is no registry and nothing is pulled.
#
# Isolation: the node is the network namespace `isthmus-node` (10.200.0.2) joined by a veth to
# `isthmus-node-ext` (10.200.0.1), which plays "the outside" (clients of the LoadBalancer range
# 10.200.1.0/24); no route leaves the two. Every node process runs in one private mount
# namespace (tmpfs over /run, /var/lib and /var/log; state under target/cluster/), in the cgroup
# /isthmus-node, whose every process `down` kills by PID before removing the cgroups, the
# namespaces and the state; the few global sysctls kubelet sets are saved by `up` and restored.
# Needs root. Environment: ISTHMUS_CLUSTER_DIR (the seed's state; default target/cluster),
# ISTHMUS_CLUSTER_PORT (the host's 127.0.0.1 port forwarded to kube-apiserver; default 16443).
#
# Seeds: seed a is the node above. Another seed is the same with i = its letter's number
# (b = 1, …, j = 9): namespaces `isthmus-<seed>` and `isthmus-<seed>-ext`, cgroup /isthmus-<seed>, node
# 10.(200+i).0.2, outside 10.(200+i).0.1, LoadBalancer range 10.(200+i).1.0/24, state
# target/cluster-<seed>, host port 16443+i, seed name `seed-<seed>` in the values gardenlet
# injects. Pod and Service ranges are the same in every seed: they never leave its namespace.
# The kernel settings kubelet changes are saved by the first seed up and restored by the last
# one down (target/cluster-host/).
#
# The link: without it no route joins two seeds. `link up` adds the namespace `isthmus-link`
# with a veth to each named seed's outside (10.(200+i).2.1, link side .2.2); each outside
# routes the other seeds' 10.(200+j).0.0/16 (node, LoadBalancer range) into it, where every TCP
# connection is redirected to `isthmus-lab link` (ISTHMUS_LAB_BIN, else target/release or
# target/debug, else built) and relayed with half the RTT added each way; nothing else crosses
# (no forwarding there: no ping, no UDP). Details in scripts/cluster/link.sh.
set -euo pipefail
# A caller's `flock LOCK scripts/cluster.sh up` hands the lock down as an open descriptor; the
# node's daemons would inherit it and hold the lock long after the caller is gone (a later
# `flock LOCK scripts/cluster.sh down` then waits forever). Nothing above 2 is ours yet; 255 is
# bash reading this script.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] && [ "$fd" -lt 255 ]; then eval "exec $fd>&-"; fi
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"

SEED=a
if [[ "${1:-}" == "--seed" ]]; then
  SEED="${2:-}"
  shift 2 || true
fi
case "$SEED" in
  [a-j]) ;;
  *) echo "cluster: --seed takes one letter a-j (got '${SEED}')" >&2; exit 2 ;;
esac
SEED_INDEX=$(($(printf '%d' "'$SEED") - 97))
if [[ "$SEED" == a ]]; then
  NODE_NAME=isthmus-node
  EXT_NS=isthmus-node-ext
  DEFAULT_STATE="$root/target/cluster"
else
  NODE_NAME="isthmus-$SEED"
  EXT_NS="isthmus-$SEED-ext"
  DEFAULT_STATE="$root/target/cluster-$SEED"
fi
NODE_NS="$NODE_NAME"
CGROUP="$NODE_NAME"
NET_PREFIX="10.$((200 + SEED_INDEX))"
NODE_IP="$NET_PREFIX.0.2"
EXT_IP="$NET_PREFIX.0.1"
NODE_CIDR="$NET_PREFIX.0.0/24"
LB_RANGE="$NET_PREFIX.1.0/24"
SEED_NAME="seed-$SEED"
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
K8S_VERSION=v1.34.4
K8S="$ISTHMUS_CACHE/kubernetes-$K8S_VERSION"
ETCD_BIN="$ISTHMUS_CACHE/etcd-v3.6.16/etcd"
COREDNS_VERSION=v1.12.1
KUBE_ROUTER_VERSION=v2.1.0
PAUSE_IMAGE=isthmus.local/pause:3.10.1
STATE="${ISTHMUS_CLUSTER_DIR:-$DEFAULT_STATE}"
# What the seeds of this machine share: the saved kernel settings and who is up.
HOST_STATE="$root/target/cluster-host"
RUN="$STATE/run"
PKI="$STATE/pki"
API_PORT="${ISTHMUS_CLUSTER_PORT:-$((16443 + SEED_INDEX))}"
KUBECONFIG_HOST="$STATE/kubeconfig"

. "$root/scripts/cluster/pki.sh"
. "$root/scripts/cluster/config.sh"
. "$root/scripts/cluster/node.sh"
. "$root/scripts/cluster/images.sh"
. "$root/scripts/cluster/druid.sh"
. "$root/scripts/cluster/isthmus.sh"
. "$root/scripts/cluster/grm.sh"
. "$root/scripts/cluster/link.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }

cmd="${1:-}"
shift || true
case "$cmd" in
  up) cluster_up "$@" ;;
  down) cluster_down; link_down_if_last ;;
  status) cluster_status ;;
  kubectl) node_exec "$K8S/kubectl" --kubeconfig "$STATE/etc/admin.kubeconfig" "$@" ;;
  helm) helm_node "$@" ;;
  load) images_load "$@" ;;
  chart) chart_archive ;;
  install) isthmus_install "$@" ;;
  grm) grm_start ;;
  seed-policies) for ns in "$@"; do grm_seed_policies "$ns"; done ;;
  node) node_exec "$@" ;;
  link) link_cmd "$@" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
