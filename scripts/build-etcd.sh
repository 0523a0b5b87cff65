#!/usr/bin/env bash
# Builds the pinned etcd (v3.6.16) that testkit's KubeApiServer stores its data in, from the
# published Go module go.etcd.io/etcd/server/v3, through the wrapper module in scripts/etcd/.
# Output: $ISTHMUS_CACHE/etcd-v3.6.16/etcd (scripts/cache.sh).
#
# Why not Debian's etcd 3.4.23: kube-apiserver v1.34 finds no RequestWatchProgress support in it
# and then refuses every streaming-list watch (`sendInitialEvents=true`, the WatchList feature,
# on by default in 1.34 and used by client-go informers) with "a watch stream was requested by
# the client but the required storage feature RequestWatchProgress is disabled". Seeds run
# etcd 3.5/3.6; so does the test world.
#
# Idempotent: does nothing when the binary exists and runs. A build takes a few minutes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v3.6.16
out="$ISTHMUS_CACHE/etcd-$version/etcd"

if [[ -x "$out" ]] && "$out" --version >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-etcd: go is not installed" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
echo "build-etcd: building etcd $version"
start=$(date +%s)
cd "$root/scripts/etcd"
GO111MODULE=on GOFLAGS= go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" \
  -o "$out.tmp" go.etcd.io/etcd/server/v3
mv "$out.tmp" "$out"
echo "build-etcd: $("$out" --version | head -1) built in $(($(date +%s) - start)) s -> $out"
