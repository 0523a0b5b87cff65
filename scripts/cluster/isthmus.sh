# Sourced by scripts/cluster.sh: isthmus installed into the node as gardener-operator installs
# it on a seed: the chart's packaged archive (what the Extension's OCI reference points at),
# `helm install` with the values gardenlet injects (cluster/gardener-values.yaml) and the
# Extension's own (cluster/extension-values.yaml), after what every seed has (seed.yaml, the
# seed's CRDs).

HELM="$ISTHMUS_CACHE/helm-v4.2.3/helm"
RELEASE=isthmus
RELEASE_NS=isthmus-system

# The pinned helm against the node's kube-apiserver; its cache, config and registry state live
# in the state dir (`down` removes them).
helm_node() {
  node_exec env HELM_CACHE_HOME="$STATE/helm/cache" HELM_CONFIG_HOME="$STATE/helm/config" \
    HELM_DATA_HOME="$STATE/helm/data" "$HELM" --kubeconfig "$STATE/etc/admin.kubeconfig" "$@"
}

# The chart's archive, packaged now from charts/isthmus (lint included).
chart_archive() {
  "$root/scripts/chart.sh" package >&2
  ls "$root"/target/chart/isthmus-*.tgz | sort -V | tail -n 1
}

# What a seed has before any extension: its CRDs, gardenlet's PriorityClass, `garden`.
seed_prepare() {
  local f
  for f in "$ISTHMUS_CACHE"/upstream-crds/*.yaml; do
    kubectl_admin apply --server-side -f - <"$f" >/dev/null
  done
  kubectl_admin apply -f - <"$root/scripts/cluster/seed.yaml" >/dev/null
}

# isthmus_install [HELM-ARGS…]
isthmus_install() {
  local t0=$SECONDS
  "$root/scripts/build-helm.sh"
  [[ -f "$root/target/image/isthmus.oci.tar" ]] || "$root/scripts/image.sh"
  images_load "$root/target/image/isthmus.oci.tar"
  seed_prepare
  local chart t1
  chart="$(chart_archive)"
  t1=$SECONDS
  # The release namespace as gardenlet makes an extension's (gardener v1.149.3
  # pkg/gardenlet/controller/controllerinstallation/controllerinstallation/reconciler.go:
  # labelled with its registration's name, whose chart values select it by that label, and
  # gardener.cloud/role=extension).
  kubectl_admin get namespace "$RELEASE_NS" >/dev/null 2>&1 || kubectl_admin create namespace "$RELEASE_NS" >/dev/null
  kubectl_admin label namespace "$RELEASE_NS" --overwrite \
    "controllerregistration.core.gardener.cloud/name=$RELEASE" gardener.cloud/role=extension >/dev/null
  # This seed's facts in what gardenlet injects: its name and its node network.
  sed -e "s/seed-a/$SEED_NAME/g" -e "s#10\.200\.0\.0/24#$NODE_CIDR#g" \
    "$root/scripts/cluster/gardener-values.yaml" >"$STATE/gardener-values.yaml"
  helm_node install "$RELEASE" "$chart" --namespace "$RELEASE_NS" --create-namespace \
    -f "$STATE/gardener-values.yaml" -f "$root/scripts/cluster/extension-values.yaml" "$@" >/dev/null
  wait_for "the isthmus-proxy DaemonSet" 180 kubectl_admin -n "$RELEASE_NS" rollout status ds/isthmus-proxy --timeout=1s
  echo "cluster: isthmus installed in $((SECONDS - t0)) s (helm install of $(basename "$chart") -> DaemonSet Ready: $((SECONDS - t1)) s)"
}
