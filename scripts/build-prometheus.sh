#!/usr/bin/env bash
# Builds the pinned prometheus and promtool (Prometheus v3.10.0 = Go module
# github.com/prometheus/prometheus v0.310.0, what Gardener v1.139.0 runs in its seeds) through
# the wrapper module in scripts/prometheus/ (go.mod pins it, go.sum every checksum).
# Output: $ISTHMUS_CACHE/prometheus-v3.10.0/{prometheus,promtool} (scripts/cache.sh), used by
# tests/monitoring.rs (`promtool check rules`, `promtool test rules`, a real Prometheus
# scraping a running isthmus).
#
# Build tags: Prometheus' own `remove_all_sd` + `enable_kubernetes_sd` leave out the cloud
# service discoveries (AWS, Azure, GCE, ...): the tests scrape static targets, and Kubernetes
# SD stays so that `promtool check config` accepts the chart's scrape configuration. No web UI
# assets (the `builtinassets` tag): the tests use the HTTP API only.
#
# Idempotent: does nothing when both binaries exist and run. The build time is printed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v3.10.0
module_version=v0.310.0
dir="$ISTHMUS_CACHE/prometheus-$version"

if [[ -x "$dir/prometheus" && -x "$dir/promtool" ]] && "$dir/promtool" --version >/dev/null 2>&1 &&
  "$dir/prometheus" --version >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-prometheus: go is not installed" >&2; exit 1; }
mkdir -p "$dir"
echo "build-prometheus: building prometheus and promtool $version ($module_version)"
start=$(date +%s)
cd "$root/scripts/prometheus"
pkg=github.com/prometheus/common/version
ldflags="-s -w -X $pkg.Version=${version#v} -X $pkg.Revision=$module_version -X $pkg.Branch=release -X $pkg.BuildUser=isthmus -X $pkg.BuildDate=19700101-00:00:00"
for cmd in prometheus promtool; do
  GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
    -tags remove_all_sd,enable_kubernetes_sd -ldflags "$ldflags" \
    -o "$dir/$cmd.tmp" "github.com/prometheus/prometheus/cmd/$cmd"
  mv "$dir/$cmd.tmp" "$dir/$cmd"
done
echo "build-prometheus: $("$dir/prometheus" --version | head -1) built in $(($(date +%s) - start)) s -> $dir"
