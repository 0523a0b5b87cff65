#!/usr/bin/env bash
# Builds konnectivity's proxy-server and proxy-agent (apiserver-network-proxy v0.34.0) from the
# published Go module, through the wrapper module in scripts/konnectivity/ (go.mod pins the
# version, go.sum every checksum). Output: $ISTHMUS_CACHE/konnectivity-v0.34.0/{proxy-server,proxy-agent},
# used by `cargo bench --bench tunnels` as the konnectivity peer.
#
# Idempotent: does nothing when both binaries exist and run. Otherwise one build; the timing is
# printed at the end. Needs Go (>= 1.24) and the Go module proxy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v0.34.0
dir="$ISTHMUS_CACHE/konnectivity-$version"
server="$dir/proxy-server"
agent="$dir/proxy-agent"

if [[ -x "$server" && -x "$agent" ]] && "$server" --help >/dev/null 2>&1 && "$agent" --help >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-konnectivity: go is not installed" >&2; exit 1; }
mkdir -p "$dir"
echo "build-konnectivity: building proxy-server and proxy-agent $version"
start=$(date +%s)
cd "$root/scripts/konnectivity"
# -mod=readonly: go.mod/go.sum are the pin; a build never edits them.
GO111MODULE=on GOFLAGS= go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" \
  -o "$server.tmp" sigs.k8s.io/apiserver-network-proxy/cmd/server
GO111MODULE=on GOFLAGS= go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" \
  -o "$agent.tmp" sigs.k8s.io/apiserver-network-proxy/cmd/agent
mv "$server.tmp" "$server"
mv "$agent.tmp" "$agent"
echo "build-konnectivity: built in $(($(date +%s) - start)) s -> $dir"
