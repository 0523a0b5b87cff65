#!/usr/bin/env bash
# Builds one command of the Gardener harness module scripts/gardener-harness/ (go.mod pins
# Gardener v1.149.3, go.sum every checksum) into $ISTHMUS_CACHE/gardener-harness-v1.149.3/NAME
# (scripts/cache.sh), through scripts/build-go-tool.sh. Usage: build-gardener-harness.sh NAME,
# NAME one of
#   gardener-etcd      a shoot's etcd-main deployed with Gardener's own code (testkit::gardener)
#   gardenlet-install  gardenlet's ControllerInstallation install path (testkit::gardenlet)
# Each command's main.go says what it mirrors; testkit runs this script before it runs one.
#
# Unlike the other Go parts, the harness' own source lives here, so the binary carries a hash
# of it (`NAME version --source HASH` fails for another): idempotent, it does nothing when the
# cached binary was built from this very source (go.mod, go.sum, the shared harness/ and
# NAME/), and rebuilds after an edit. Cold: 39 min for gardener-etcd on 2 cores shared with
# the Kubernetes build (load average 20-30); about 2 min after an edit with a warm Go build
# cache. Needs Go (>= 1.26) and the Go module proxy.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
name="${1:-}"
version=v1.149.3
src="$root/scripts/gardener-harness"
[[ -n "$name" && "$name" != harness && -f "$src/$name/main.go" ]] ||
  { echo "usage: build-gardener-harness.sh gardener-etcd|gardenlet-install" >&2; exit 2; }
grep -qE "^\s*github.com/gardener/gardener $version\b" "$src/go.mod" ||
  { echo "build-gardener-harness: scripts/gardener-harness/go.mod does not pin gardener $version" >&2; exit 1; }
hash="$(cd "$src" && cat go.mod go.sum harness/*.go "$name"/*.go | sha256sum | cut -c1-16)"
dir="$ISTHMUS_CACHE/gardener-harness-$version"
mkdir -p "$dir"
# One build at a time (tests of several clones may ask at once); the loser finds it fresh.
exec 9>"$dir/.lock"
flock 9
GO_TOOL_MODULE=gardener-harness GO_TOOL_LDFLAGS="-X isthmus.invalid/gardener-harness/harness.Source=$hash" \
  "$root/scripts/build-go-tool.sh" "$name" "$version" "./$name" version --source "$hash"
