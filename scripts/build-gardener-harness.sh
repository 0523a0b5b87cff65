#!/usr/bin/env bash
# Builds one command of the Gardener harness module scripts/gardener-harness/ (go.mod pins
# Gardener v1.149.3, go.sum every checksum) into $ISTHMUS_CACHE/gardener-harness-v1.149.3/NAME
# (scripts/cache.sh). Usage: build-gardener-harness.sh NAME, NAME one of
#   gardener-etcd      a shoot's etcd-main deployed with Gardener's own code (testkit::gardener)
#   gardenlet-install  gardenlet's ControllerInstallation install path (testkit::gardenlet)
# Each command's main.go says what it mirrors; testkit runs this script before it runs one.
#
# Unlike the other Go parts (scripts/build-go-tool.sh), the harness' own source lives here, so
# the binary carries a hash of it (`NAME version` prints it): idempotent, it does nothing when
# the cached binary was built from this very source (go.mod, go.sum, the shared harness/ and
# NAME/), and rebuilds after an edit. Cold: 39 min for gardener-etcd on 2 cores shared with the
# Kubernetes build (load average 20-30); 16 s after an edit with a warm Go build cache. Needs
# Go (>= 1.26) and the Go module proxy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
name="${1:-}"
version=v1.149.3
src="$root/scripts/gardener-harness"
[[ -n "$name" && "$name" != harness && -f "$src/$name/main.go" ]] ||
  { echo "usage: build-gardener-harness.sh gardener-etcd|gardenlet-install" >&2; exit 2; }
dir="$ISTHMUS_CACHE/gardener-harness-$version"
out="$dir/$name"
hash="$(cd "$src" && cat go.mod go.sum harness/*.go "$name"/*.go | sha256sum | cut -c1-16)"

fresh() { [[ -x "$out" ]] && "$out" version 2>/dev/null | grep -q "\"source\": \"$hash\""; }
fresh && exit 0
command -v go >/dev/null || { echo "build-gardener-harness: go is not installed" >&2; exit 1; }
grep -qE "^\s*github.com/gardener/gardener $version\b" "$src/go.mod" ||
  { echo "build-gardener-harness: scripts/gardener-harness/go.mod does not pin gardener $version" >&2; exit 1; }
mkdir -p "$dir"
# One build at a time (tests of several clones may ask at once); the loser finds it fresh.
exec 9>"$dir/.lock"
flock 9
fresh && exit 0
echo "build-gardener-harness: building $name (gardener $version, source $hash)"
start=$(date +%s)
cd "$src"
# -mod=readonly: go.mod/go.sum are the pin. CGO_ENABLED=0: a static binary.
GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
  -ldflags "-s -w -X isthmus.invalid/gardener-harness/harness.Source=$hash" -o "$out.tmp" "./$name"
mv "$out.tmp" "$out"
echo "build-gardener-harness: $name built in $(($(date +%s) - start)) s -> $out"
