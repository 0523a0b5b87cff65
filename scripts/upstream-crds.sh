#!/usr/bin/env bash
# Fetches the pinned upstream CRDs the controller is tested against into $ISTHMUS_CACHE/upstream-crds/:
#   - etcd-druid's `Etcd` CRD (with its CEL rules) from the Go module github.com/gardener/etcd-druid/api,
#     and the module's two other CRDs (`EtcdCopyBackupsTask`, `EtcdOpsTask`): the real etcd-druid
#     of the node (scripts/cluster/druid.sh) watches all three
#   - Gardener's `DNSRecord` CRD from the Go module github.com/gardener/gardener
#   - from the same Gardener module, what the chart (charts/isthmus) is checked against: the
#     `Extension` CRD (operator.gardener.cloud, the chart's registration) and the seed CRDs
#     Gardener installs that the chart uses: `VerticalPodAutoscaler` (with InPlaceOrRecreate),
#     prometheus-operator's `PodMonitor` and `PrometheusRule`, fluent-operator's
#     `ClusterParser` and `ClusterFilter` (fluentbit.fluent.io/v1alpha2)
#   - and `ServiceMonitor`, which Gardener's etcd deploy writes too (scripts/gardener-harness/gardener-etcd/)
# `go mod download` verifies each module zip against the checksum database (sum.golang.org), so
# the files are exactly what the tags published. Idempotent: does nothing when every file exists
# and came from the pins below ($out/PINS holds the list they came from; other pins fetch anew).
#
# Pins: etcd-druid api v0.38.1 is the newest version of that module the Go proxy serves (v0.39+
# are refused); it has additionalAdvertisePeerURLs, memberNamePrefix and
# bootstrapWithExistingCluster with their CEL rules. Gardener v1.149.3 (what the resource
# manager and gardenlet's install path are built from).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
out="$ISTHMUS_CACHE/upstream-crds"

# module@version  file-in-module  name-in-target
crds=(
  "github.com/gardener/etcd-druid/api@v0.38.1 core/v1alpha1/crds/druid.gardener.cloud_etcds.yaml druid.gardener.cloud_etcds.yaml"
  "github.com/gardener/etcd-druid/api@v0.38.1 core/v1alpha1/crds/druid.gardener.cloud_etcdcopybackupstasks.yaml druid.gardener.cloud_etcdcopybackupstasks.yaml"
  "github.com/gardener/etcd-druid/api@v0.38.1 core/v1alpha1/crds/druid.gardener.cloud_etcdopstasks.yaml druid.gardener.cloud_etcdopstasks.yaml"
  "github.com/gardener/gardener@v1.149.3 example/seed-crds/10-crd-extensions.gardener.cloud_dnsrecords.yaml extensions.gardener.cloud_dnsrecords.yaml"
  "github.com/gardener/gardener@v1.149.3 example/operator/10-crd-operator.gardener.cloud_extensions.yaml operator.gardener.cloud_extensions.yaml"
  "github.com/gardener/gardener@v1.149.3 example/seed-crds/10-crd-autoscaling.k8s.io_verticalpodautoscalers.yaml autoscaling.k8s.io_verticalpodautoscalers.yaml"
  "github.com/gardener/gardener@v1.149.3 example/seed-crds/10-crd-monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_podmonitors.yaml"
  "github.com/gardener/gardener@v1.149.3 example/seed-crds/10-crd-monitoring.coreos.com_prometheusrules.yaml monitoring.coreos.com_prometheusrules.yaml"
  "github.com/gardener/gardener@v1.149.3 example/seed-crds/10-crd-monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_servicemonitors.yaml"
  "github.com/gardener/gardener@v1.149.3 example/seed-crds/10-crd-fluentbit.fluent.io_clusterparsers.yaml fluentbit.fluent.io_clusterparsers.yaml"
  "github.com/gardener/gardener@v1.149.3 example/seed-crds/10-crd-fluentbit.fluent.io_clusterfilters.yaml fluentbit.fluent.io_clusterfilters.yaml"
)
pins="$(printf '%s\n' "${crds[@]}")"

have_all=1
for c in "${crds[@]}"; do
  read -r _ _ name <<<"$c"
  [[ -s "$out/$name" ]] || have_all=0
done
[[ "$(cat "$out/PINS" 2>/dev/null)" == "$pins" ]] || have_all=0
((have_all)) && exit 0

command -v go >/dev/null || { echo "upstream-crds: go is not installed" >&2; exit 1; }
mkdir -p "$out"
# Outside any module (a temp dir), module mode on, no inherited -mod flags.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for c in "${crds[@]}"; do
  read -r mod file name <<<"$c"
  dir="$(cd "$work" && GO111MODULE=on GOFLAGS= go mod download -json "$mod" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$dir" && -f "$dir/$file" ]] || { echo "upstream-crds: $file not found in $mod (dir: '$dir')" >&2; exit 1; }
  # The module cache is read-only; copy, then make the copy writable.
  cp "$dir/$file" "$out/$name.tmp"
  chmod u+w "$out/$name.tmp"
  mv "$out/$name.tmp" "$out/$name"
  echo "upstream-crds: $mod $file -> $out/$name"
done
printf '%s\n' "$pins" >"$out/PINS.tmp"
mv "$out/PINS.tmp" "$out/PINS"
