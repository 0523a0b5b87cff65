#!/usr/bin/env bash
# Builds gardener-etcd, the harness that deploys a shoot's etcd-main with Gardener v1.149.3's
# own code (scripts/gardener-etcd/main.go says what it mirrors; go.mod pins Gardener, go.sum
# every checksum), into $ISTHMUS_CACHE/gardener-etcd-v1.149.3/gardener-etcd (scripts/cache.sh).
# testkit::gardener runs this script before it runs the binary.
#
# Unlike the other Go parts, the harness' own source lives here, so the binary carries a hash
# of it (`gardener-etcd version` prints it): idempotent, it does nothing when the cached binary
# was built from this very source, and rebuilds (seconds with a warm Go build cache) after an
# edit. Cold: 39 min on 2 cores shared with the Kubernetes build (load average 20-30), 16 s
# after an edit of the harness. Needs Go (>= 1.26) and the Go module proxy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v1.149.3
src="$root/scripts/gardener-etcd"
dir="$ISTHMUS_CACHE/gardener-etcd-$version"
out="$dir/gardener-etcd"
hash="$(cd "$src" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)"

fresh() { [[ -x "$out" ]] && "$out" version 2>/dev/null | grep -q "\"source\": \"$hash\""; }
fresh && exit 0
command -v go >/dev/null || { echo "build-gardener-etcd: go is not installed" >&2; exit 1; }
grep -qE "^\s*github.com/gardener/gardener $version\b" "$src/go.mod" ||
  { echo "build-gardener-etcd: scripts/gardener-etcd/go.mod does not pin gardener $version" >&2; exit 1; }
mkdir -p "$dir"
# One build at a time (tests of several clones may ask at once); the loser finds it fresh.
exec 9>"$dir/.lock"
flock 9
fresh && exit 0
echo "build-gardener-etcd: building gardener-etcd (gardener $version, source $hash)"
start=$(date +%s)
cd "$src"
# -mod=readonly: go.mod/go.sum are the pin. CGO_ENABLED=0: a static binary.
GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
  -ldflags "-s -w -X main.source=$hash" -o "$out.tmp" .
mv "$out.tmp" "$out"
echo "build-gardener-etcd: built in $(($(date +%s) - start)) s -> $out"
