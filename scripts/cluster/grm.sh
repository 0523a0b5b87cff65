# Sourced by scripts/cluster.sh: the seed's gardener-resource-manager, the real one (Gardener
# v1.149.3, built from its Go module by scripts/build-go-tool.sh through the wrapper module
# scripts/gardener-resource-manager/), as a node process with only what a seed's instance
# does for NetworkPolicies: its NetworkPolicy controller, watching the namespaces a seed's
# instance watches (gardener.cloud/role shoot, extension, istio-*, garden). It cannot run
# without its ManagedResource CRD (the managedresource and health controllers always start),
# which comes from the same module. It authenticates with a token of system:masters: a
# seed's resource manager is bound to a ClusterRole nearly as wide.
#
# And gardenlet's part of a seed's policies, which cannot run here (gardenlet needs a
# garden): grm_seed_policies NAMESPACE writes what gardenlet's NetworkPolicy controller
# (pkg/controller/networkpolicy, v1.149.3) keeps in every seed namespace it handles:
# deny-all, allow-to-dns, allow-to-runtime-apiserver, allow-to-private-networks and
# allow-to-public-networks, computed from this node's networks as that controller computes
# them from the seed's (scripts/cluster/seed-policies.yaml).

GRM_VERSION=v1.149.3
GRM="$ISTHMUS_CACHE/gardener-resource-manager-$GRM_VERSION/gardener-resource-manager"

grm_build() {
  "$root/scripts/build-go-tool.sh" gardener-resource-manager "$GRM_VERSION" \
    github.com/gardener/gardener/cmd/gardener-resource-manager --version
}

# The Gardener module's directory in the Go module cache (downloaded by the build).
grm_module_dir() {
  (cd "$root/scripts/gardener-resource-manager" && GOFLAGS= go list -mod=readonly -m -f '{{.Dir}}' github.com/gardener/gardener)
}

grm_config() {
  mkdir -p "$STATE/grm/tls"
  # The webhook server starts whether or not a webhook is on; it needs a serving certificate.
  if [[ ! -s "$STATE/grm/tls/tls.crt" ]]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=gardener-resource-manager" -addext "subjectAltName=IP:127.0.0.1" \
      -keyout "$STATE/grm/tls/tls.key" -out "$STATE/grm/tls/tls.crt" 2>/dev/null
  fi
  cat > "$STATE/grm/config.yaml" <<EOF2
apiVersion: resourcemanager.config.gardener.cloud/v1alpha1
kind: ResourceManagerConfiguration
sourceClientConnection:
  kubeconfig: $STATE/etc/gardener-resource-manager.kubeconfig
  qps: 100
  burst: 130
# In a seed the target is the same cluster, reached through the in-cluster configuration of
# the resource manager's pod; a node process names it.
targetClientConnection:
  kubeconfig: $STATE/etc/gardener-resource-manager.kubeconfig
  qps: 100
  burst: 130
leaderElection:
  leaderElect: false
  resourceLock: leases
  resourceName: gardener-resource-manager
  resourceNamespace: kube-system
server:
  webhooks:
    bindAddress: 127.0.0.1
    port: 19443
    tls:
      serverCertDir: $STATE/grm/tls
  healthProbes:
    bindAddress: 127.0.0.1
    port: 18081
  metrics:
    bindAddress: 127.0.0.1
    port: 18080
logLevel: info
logFormat: json
controllers:
  clusterID: $SEED_NAME
  resourceClass: seed
  networkPolicy:
    enabled: true
    namespaceSelectors:
      - matchLabels: {gardener.cloud/role: shoot}
      - matchLabels: {gardener.cloud/role: extension}
      - matchLabels: {gardener.cloud/role: istio-system}
      - matchLabels: {gardener.cloud/role: istio-ingress}
      - matchExpressions: [{key: handler.exposureclass.gardener.cloud/name, operator: Exists}]
      - matchLabels: {kubernetes.io/metadata.name: garden}
EOF2
}

grm_start() {
  node_running || { echo "cluster: the node is not up (scripts/cluster.sh up)" >&2; return 1; }
  if [[ -s "$STATE/pids/gardener-resource-manager" ]] && kill -0 "$(cat "$STATE/pids/gardener-resource-manager")" 2>/dev/null; then
    echo "cluster: gardener-resource-manager already runs"
    return 0
  fi
  grm_build
  kubectl_admin apply --server-side -f - \
    <"$(grm_module_dir)/example/seed-crds/10-crd-resources.gardener.cloud_managedresources.yaml" >/dev/null
  kubeconfig_make "$STATE/etc/gardener-resource-manager.kubeconfig" "$PKI/token-gardener-resource-manager" "https://127.0.0.1:6443"
  grm_config
  start gardener-resource-manager "$GRM" --config "$STATE/grm/config.yaml"
  wait_for "gardener-resource-manager healthy" 120 node_exec curl -fsS http://127.0.0.1:18081/readyz
  echo "cluster: gardener-resource-manager $GRM_VERSION runs (NetworkPolicy controller)"
}

# grm_seed_policies NAMESPACE: gardenlet's policies of a seed namespace (stand-in, above).
grm_seed_policies() {
  local ns="$1"
  sed -e "s/__NAMESPACE__/$ns/g" -e "s/__NODE_IP__/$NODE_IP/g" -e "s#10\.200\.0\.0/24#$NODE_CIDR#g" \
    "$root/scripts/cluster/seed-policies.yaml" | kubectl_admin apply -f - >/dev/null
}
