#!/usr/bin/env bash
# Builds the pinned kube-apiserver (Kubernetes v1.34.4) from the published Go module
# k8s.io/kubernetes, through the wrapper module in scripts/kube-apiserver/ (go.mod pins it and
# points the staging modules at their published v0.34.4 versions; go.sum pins every checksum).
# Output: $ISTHMUS_CACHE/kubernetes-v1.34.4/kube-apiserver (scripts/cache.sh), used by testkit's
# KubeApiServer and the lab.
#
# Idempotent: does nothing when the binary exists and runs. Otherwise one build: measured 18 min
# wall-clock on the 2-core CI machine (modules already downloaded, cargo builds running beside
# it); the timing is printed at the end. Needs Go (>= 1.24) and the Go module proxy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v1.34.4
major=1
minor=34
out="$ISTHMUS_CACHE/kubernetes-$version/kube-apiserver"

if [[ -x "$out" ]] && "$out" --version >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-kube-apiserver: go is not installed" >&2; exit 1; }
mkdir -p "$(dirname "$out")"

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

echo "build-kube-apiserver: building kube-apiserver $version (takes a while on a small machine)"
start=$(date +%s)
cd "$root/scripts/kube-apiserver"
# -mod=readonly: go.mod/go.sum are the pin; a build never edits them. -buildvcs=false: the
# wrapper module lives inside the isthmus checkout, whose VCS state is not kube-apiserver's.
GO111MODULE=on GOFLAGS= go build -mod=readonly -buildvcs=false -trimpath -ldflags "$ldflags" \
  -o "$out.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$out.tmp" "$out"
echo "build-kube-apiserver: $("$out" --version) built in $(($(date +%s) - start)) s -> $out"
