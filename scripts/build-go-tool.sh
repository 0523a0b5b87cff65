#!/usr/bin/env bash
# Builds one pinned Go command through its wrapper module in scripts/<name>/ (go.mod pins the
# version, go.sum every checksum) into $ISTHMUS_CACHE/<name>-<version>/<name> (scripts/cache.sh).
# Usage: build-go-tool.sh NAME VERSION PACKAGE [VERSION-CHECK-ARGS...]
# The node of scripts/cluster.sh uses it for CoreDNS and kube-router:
#   build-go-tool.sh coredns v1.12.1 github.com/coredns/coredns -version           (~6 min cold)
#   build-go-tool.sh kube-router v2.1.0 github.com/cloudnativelabs/kube-router/v2/cmd/kube-router --version  (~2 min cold)
#   build-go-tool.sh etcd-druid v0.38.1 github.com/gardener/etcd-druid/cmd --version             (~? min cold)
#   build-go-tool.sh etcd-backup-restore v0.43.0 github.com/gardener/etcd-backup-restore --version (~? min cold)
# GO_TOOL_LDFLAGS adds linker flags (a command's -X version stamp). GO_TOOL_MODULE names the
# wrapper module when it holds several commands of its own (scripts/build-gardener-harness.sh):
# the module is scripts/<module>/, PACKAGE its folder ./NAME, the binary
# $ISTHMUS_CACHE/<module>-<version>/NAME.
# GO_TOOL_REVISION (r2, …) names a changed build of a stand-in of ours at the same pinned
# version: $ISTHMUS_CACHE/<module>-<version>-<revision>/, so the earlier build stays for
# whoever still uses it.
# Idempotent: does nothing when the binary exists and answers the version check.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
name="$1" version="$2" pkg="$3"
shift 3
module="${GO_TOOL_MODULE:-$name}"
out="$ISTHMUS_CACHE/$module-$version${GO_TOOL_REVISION:+-$GO_TOOL_REVISION}/$name"

if [[ -x "$out" ]] && "$out" "$@" >/dev/null 2>&1; then
  exit 0
fi
command -v go >/dev/null || { echo "build-go-tool: go is not installed" >&2; exit 1; }
# The module: the package path up to its /cmd/… (or a trailing /cmd). A command of the
# wrapper module itself (isthmus.invalid/NAME, a stand-in, or ./NAME) is pinned by what it
# requires.
mod="${pkg%%/cmd/*}"
mod="${mod%/cmd}"
[[ "$pkg" == "isthmus.invalid/$name" || "$pkg" == "./$name" ]] && mod='\S+'
grep -qE "^(require )?\s*$mod $version\b" "$root/scripts/$module/go.mod" ||
  { echo "build-go-tool: scripts/$module/go.mod does not pin $mod $version" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
echo "build-go-tool: building $name $version"
start=$(date +%s)
cd "$root/scripts/$module"
# -mod=readonly: go.mod/go.sum are the pin. CGO_ENABLED=0: a static binary, runnable in an
# image without libraries.
GO111MODULE=on GOFLAGS= CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath \
  -ldflags "-s -w ${GO_TOOL_LDFLAGS:-}" -o "$out.tmp" "$pkg"
mv "$out.tmp" "$out"
echo "build-go-tool: $name $version built in $(($(date +%s) - start)) s -> $out"
