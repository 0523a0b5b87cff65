#!/usr/bin/env bash
# Builds the pinned helm (v4.2.3) from the published Go module helm.sh/helm/v4, through the
# wrapper module in scripts/helm/ (go.mod pins it, go.sum every checksum).
# Output: $ISTHMUS_CACHE/helm-v4.2.3/helm (scripts/cache.sh), used by tests/chart.rs
# (`helm lint`, `helm template`, `helm package`), scripts/chart.sh and the node of scripts/cluster.sh.
#
# Why v4.2.3: Gardener v1.149.3's gardenlet and gardener-operator render extension charts with
# the helm.sh/helm/v4 v4.2.3 library (pkg/chartrenderer; helm v4 since Gardener v1.143), so
# lint and template here see the chart as they do.
#
# Built by scripts/build-go-tool.sh with the version stamps of helm's own Makefile. Idempotent:
# does nothing when the binary exists and runs. The build time is printed.
set -euo pipefail
version=v4.2.3
# The variables helm's own Makefile sets for a release build. The default Kubernetes version of
# `helm template`/`lint` needs no flag in v4: helm derives it from its client-go module version
# (v0.36 -> v1.36) in the binary's build information.
GO_TOOL_LDFLAGS="-X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
  exec "$(dirname "${BASH_SOURCE[0]}")/build-go-tool.sh" helm "$version" helm.sh/helm/v4/cmd/helm version --short
