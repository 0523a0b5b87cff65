#!/usr/bin/env bash
# Builds the pinned helm (v3.20.2) from the published Go module helm.sh/helm/v3, through the
# wrapper module in scripts/helm/ (go.mod pins it, go.sum every checksum).
# Output: $ISTHMUS_CACHE/helm-v3.20.2/helm (scripts/cache.sh), used by tests/chart.rs
# (`helm lint`, `helm template`, `helm package`), scripts/chart.sh and the node of scripts/cluster.sh.
#
# Why v3: Gardener v1.139.0's gardenlet and gardener-operator render extension charts with the
# helm.sh/helm/v3 v3.20.1 library; v3.20.2 is its patch release (v3.20.1 itself is not served
# by the Go module proxy here).
#
# Idempotent: does nothing when the binary exists and runs. The build time is printed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v3.20.2
out="$ISTHMUS_CACHE/helm-$version/helm"

if [[ -x "$out" ]] && "$out" version --short >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-helm: go is not installed" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
echo "build-helm: building helm $version"
start=$(date +%s)
cd "$root/scripts/helm"
# The variables helm's own Makefile sets: its version, and the Kubernetes version of its
# client-go (v0.35) as the default of `helm template`/`lint` (else v1.20, which the chart's
# kubeVersion refuses).
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=35"
done
GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
  -ldflags "$ldflags" -o "$out.tmp" helm.sh/helm/v3/cmd/helm
mv "$out.tmp" "$out"
echo "build-helm: $("$out" version --short) built in $(($(date +%s) - start)) s -> $out"
