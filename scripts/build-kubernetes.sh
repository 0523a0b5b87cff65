#!/usr/bin/env bash
# Builds the pinned Kubernetes commands (v1.34.4) from the published Go module k8s.io/kubernetes,
# all six in one `go build`, through the wrapper module in scripts/kubernetes/ (go.mod pins it and
# points the staging modules at their published v0.34.4 versions; go.sum pins every checksum):
# kube-apiserver (testkit's KubeApiServer, the lab, the node), and kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy and kubectl (the node of scripts/cluster.sh).
# Output: $ISTHMUS_CACHE/kubernetes-v1.34.4/<command> (scripts/cache.sh).
#
# Idempotent: does nothing when every binary exists and runs. Otherwise one build: about 5.5 min
# on 2 cores with a warm Go build cache, ~20 min cold; the timing is printed at the end. Needs Go
# (>= 1.24) and the Go module proxy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v1.34.4
major=1
minor=34
commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
dir="$ISTHMUS_CACHE/kubernetes-$version"

ok=1
for c in "${commands[@]}"; do
  [[ -x "$dir/$c" ]] || { ok=0; break; }
done
if ((ok)) && "$dir/kube-apiserver" --version >/dev/null 2>&1 && "$dir/kubectl" version --client >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-kubernetes: go is not installed" >&2; exit 1; }
mkdir -p "$dir"

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

echo "build-kubernetes: building ${commands[*]} $version (takes a while on a small machine)"
start=$(date +%s)
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cd "$root/scripts/kubernetes"
# -mod=readonly: go.mod/go.sum are the pin; a build never edits them. -buildvcs=false: the
# wrapper module lives inside the isthmus checkout, whose VCS state is not Kubernetes'.
# CGO_ENABLED=0: static binaries, as Kubernetes releases them.
pkgs=()
for c in "${commands[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
  -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
# One rename per binary: a test running the old kube-apiserver keeps its inode.
for c in "${commands[@]}"; do mv "$tmp/$c" "$dir/$c"; done
echo "build-kubernetes: $("$dir/kube-apiserver" --version) (${commands[*]}) built in $(($(date +%s) - start)) s -> $dir"
