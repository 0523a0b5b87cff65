#!/usr/bin/env bash
# Builds what the node's real etcd-druid runs (scripts/cluster/druid.sh) into $ISTHMUS_CACHE,
# each through its pinned wrapper module in scripts/<name>/ (scripts/build-go-tool.sh):
#   etcd-druid v0.38.1, etcd-backup-restore v0.43.0, the stand-in for etcd-wrapper (etcd
#   v3.5.27 embedded) and local-path-provisioner v0.0.30 (the node's default StorageClass).
# Idempotent: each is a no-op once built. Sourced (by scripts/cluster/druid.sh), it only sets
# the versions. The -X flags stamp the versions the commands print.
DRUID_VERSION=v0.38.1
BACKUP_RESTORE_VERSION=v0.43.0
WRAPPER_ETCD_VERSION=v3.5.27
# The stand-in's own revision (r2: etcd-wrapper#92's skip-client-san-verification bridge).
WRAPPER_STANDIN_REVISION=r2
LOCAL_PATH_VERSION=v0.0.30
[[ "${BASH_SOURCE[0]}" != "$0" ]] && return 0

set -euo pipefail
b="$(dirname "${BASH_SOURCE[0]}")/build-go-tool.sh"
GO_TOOL_LDFLAGS="-X github.com/gardener/etcd-druid/internal/version.gitVersion=$DRUID_VERSION" \
  "$b" etcd-druid "$DRUID_VERSION" github.com/gardener/etcd-druid/cmd --version
GO_TOOL_LDFLAGS="-X github.com/gardener/etcd-backup-restore/pkg/version.Version=$BACKUP_RESTORE_VERSION" \
  "$b" etcd-backup-restore "$BACKUP_RESTORE_VERSION" github.com/gardener/etcd-backup-restore --version
GO_TOOL_REVISION=$WRAPPER_STANDIN_REVISION \
  "$b" etcd-wrapper-standin "$WRAPPER_ETCD_VERSION" isthmus.invalid/etcd-wrapper-standin --version
GO_TOOL_LDFLAGS="-X main.VERSION=$LOCAL_PATH_VERSION" \
  "$b" local-path-provisioner "$LOCAL_PATH_VERSION" github.com/rancher/local-path-provisioner --version
