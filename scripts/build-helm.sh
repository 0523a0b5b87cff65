#!/usr/bin/env bash
# Builds the pinned helm (v4.2.3) from the published Go module helm.sh/helm/v4, through the
# wrapper module in scripts/helm/ (go.mod pins it, go.sum every checksum).
# Output: $ISTHMUS_CACHE/helm-v4.2.3/helm (scripts/cache.sh), used by tests/chart.rs
# (`helm lint`, `helm template`, `helm package`), scripts/chart.sh and the node of scripts/cluster.sh.
#
# Why v4.2.3: Gardener v1.149.3's gardenlet and gardener-operator render extension charts with
# the helm.sh/helm/v4 v4.2.3 library (pkg/chartrenderer; helm v4 since Gardener v1.143), so
# lint and template here see the chart as they do.
#
# Idempotent: does nothing when the binary exists and runs. The build time is printed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v4.2.3
out="$ISTHMUS_CACHE/helm-$version/helm"

if [[ -x "$out" ]] && "$out" version --short >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-helm: go is not installed" >&2; exit 1; }
grep -qE "^require helm.sh/helm/v4 $version$" "$root/scripts/helm/go.mod" ||
  { echo "build-helm: scripts/helm/go.mod does not pin helm.sh/helm/v4 $version" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
echo "build-helm: building helm $version"
start=$(date +%s)
cd "$root/scripts/helm"
# The variables helm's own Makefile sets for a release build. The default Kubernetes version of
# `helm template`/`lint` needs no flag in v4: helm derives it from its client-go module version
# (v0.36 -> v1.36) in the binary's build information.
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
  -ldflags "$ldflags" -o "$out.tmp" helm.sh/helm/v4/cmd/helm
mv "$out.tmp" "$out"
echo "build-helm: $("$out" version --short) built in $(($(date +%s) - start)) s -> $out"
