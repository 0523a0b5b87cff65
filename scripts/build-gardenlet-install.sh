#!/usr/bin/env bash
# Builds gardenlet-install, the harness that installs a seed extension's chart as gardenlet's
# ControllerInstallation reconciler does (Gardener v1.149.3's chart renderer and
# managedresources helpers; scripts/gardenlet-install/main.go says what it mirrors; go.mod pins
# Gardener, go.sum every checksum), into
# $ISTHMUS_CACHE/gardenlet-install-v1.149.3/gardenlet-install (scripts/cache.sh).
# testkit::gardenlet runs this script before it runs the binary.
#
# The harness' own source lives here, so the binary carries a hash of it (`gardenlet-install
# version` prints it): idempotent, it does nothing when the cached binary was built from this
# very source, and rebuilds after an edit. Needs Go (>= 1.26) and the Go module proxy; the
# build time is printed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
version=v1.149.3
src="$root/scripts/gardenlet-install"
dir="$ISTHMUS_CACHE/gardenlet-install-$version"
out="$dir/gardenlet-install"
hash="$(cd "$src" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)"

fresh() { [[ -x "$out" ]] && "$out" version 2>/dev/null | grep -q "\"source\": \"$hash\""; }
fresh && exit 0
command -v go >/dev/null || { echo "build-gardenlet-install: go is not installed" >&2; exit 1; }
grep -qE "^\s*github.com/gardener/gardener $version\b" "$src/go.mod" ||
  { echo "build-gardenlet-install: scripts/gardenlet-install/go.mod does not pin gardener $version" >&2; exit 1; }
mkdir -p "$dir"
# One build at a time (tests of several clones may ask at once); the loser finds it fresh.
exec 9>"$dir/.lock"
flock 9
fresh && exit 0
echo "build-gardenlet-install: building gardenlet-install (gardener $version, source $hash)"
start=$(date +%s)
cd "$src"
# -mod=readonly: go.mod/go.sum are the pin. CGO_ENABLED=0: a static binary.
GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
  -ldflags "-s -w -X main.source=$hash" -o "$out.tmp" .
mv "$out.tmp" "$out"
echo "build-gardenlet-install: built in $(($(date +%s) - start)) s -> $out"
