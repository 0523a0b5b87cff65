# Sourced by scripts/cluster.sh: the real etcd-druid v0.38.1 on the node, deployed as gardenlet
# deploys it (scripts/cluster/etcd-druid.yaml says how and where it differs), with what it needs
# to make real etcd pods: the images of its image vector built here (etcd v3.5.27 behind the
# stand-in for etcd-wrapper, etcd-backup-restore v0.43.0; scripts/cluster/images.sh) and a
# default StorageClass that gives every new Etcd's members their volumes on demand (rancher's
# local-path-provisioner, scripts/cluster/local-path.yaml; volumes in $STATE/volumes).
# The Go parts are built once per machine into $ISTHMUS_CACHE by scripts/build-druid.sh (run by
# scripts/install-deps.sh), each through its pinned wrapper module in scripts/<name>/.

. "$root/scripts/build-druid.sh"
BUSYBOX_VERSION=1.35.0
DRUID_IMAGES=(
  "$IMAGES/etcd-druid-$DRUID_VERSION.oci.tar"
  "$IMAGES/etcd-wrapper-standin-$WRAPPER_ETCD_VERSION-$WRAPPER_STANDIN_REVISION.oci.tar"
  "$IMAGES/etcdbrctl-$BACKUP_RESTORE_VERSION.oci.tar"
  "$IMAGES/local-path-provisioner-$LOCAL_PATH_VERSION.oci.tar"
  "$IMAGES/busybox-$BUSYBOX_VERSION.oci.tar"
)

druid_images_build() {
  "$root/scripts/build-druid.sh"
  local c="$ISTHMUS_CACHE"
  IMAGE_NONROOT=1 image_build "${DRUID_IMAGES[0]}" "isthmus.local/etcd-druid:$DRUID_VERSION" \
    /etcd-druid "$c/etcd-druid-$DRUID_VERSION/etcd-druid=/etcd-druid"
  IMAGE_NONROOT=1 image_build "${DRUID_IMAGES[1]}" "isthmus.local/etcd-wrapper-standin:$WRAPPER_ETCD_VERSION" \
    /etcd-wrapper-standin "$c/etcd-wrapper-standin-$WRAPPER_ETCD_VERSION-$WRAPPER_STANDIN_REVISION/etcd-wrapper-standin=/etcd-wrapper-standin"
  IMAGE_NONROOT=1 image_build "${DRUID_IMAGES[2]}" "isthmus.local/etcdbrctl:$BACKUP_RESTORE_VERSION" \
    /etcdbrctl "$c/etcd-backup-restore-$BACKUP_RESTORE_VERSION/etcd-backup-restore=/etcdbrctl"
  image_build "${DRUID_IMAGES[3]}" "isthmus.local/local-path-provisioner:$LOCAL_PATH_VERSION" \
    /usr/bin/local-path-provisioner \
    "$c/local-path-provisioner-$LOCAL_PATH_VERSION/local-path-provisioner=/usr/bin/local-path-provisioner"
  # Debian's busybox-static (scripts/install-deps.sh): the applets the helper pods' scripts and
  # druid's chown init container call.
  [[ "$(dpkg-query -W -f='${Version}' busybox-static)" == *":$BUSYBOX_VERSION-"* ]] ||
    { echo "cluster: busybox-static is not $BUSYBOX_VERSION" >&2; return 1; }
  IMAGE_LINKS="/bin/sh=busybox /bin/mkdir=busybox /bin/rm=busybox /bin/chown=busybox" \
    image_build "${DRUID_IMAGES[4]}" "isthmus.local/busybox:$BUSYBOX_VERSION" /bin/sh \
    /bin/busybox=/bin/busybox
}

# The default StorageClass; waits for the provisioner.
storage_install() {
  mkdir -p "$STATE/volumes"
  sed "s#__VOLUMES__#$STATE/volumes#" "$root/scripts/cluster/local-path.yaml" |
    kubectl_admin apply -f - >/dev/null
  wait_for "local-path-provisioner" 120 kubectl_admin -n local-path-storage rollout status \
    deploy/local-path-provisioner --timeout=1s
}

# etcd-druid in `garden`: its CRDs (from its api module), the webhook's serving certificate
# (signed by the node's CA, which is the webhook's caBundle), the objects of etcd-druid.yaml.
druid_install() {
  local t0=$SECONDS crd
  for crd in etcds etcdcopybackupstasks etcdopstasks; do
    kubectl_admin apply --server-side -f - \
      <"$ISTHMUS_CACHE/upstream-crds/druid.gardener.cloud_$crd.yaml" >/dev/null
  done
  kubectl_admin apply -f - <"$root/scripts/cluster/seed.yaml" >/dev/null
  druid_webhook_cert
  kubectl_admin -n garden create secret tls etcd-druid-webhook --cert "$PKI/druid-webhook.crt" \
    --key "$PKI/druid-webhook.key" --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
  sed "s#__CA_BUNDLE__#$(base64 -w0 "$PKI/ca.crt")#" "$root/scripts/cluster/etcd-druid.yaml" |
    kubectl_admin apply -f - >/dev/null
  wait_for "etcd-druid" 120 kubectl_admin -n garden rollout status deploy/etcd-druid --timeout=1s
  echo "cluster: etcd-druid $DRUID_VERSION runs in garden, local-path the default StorageClass ($((SECONDS - t0)) s)"
}

druid_webhook_cert() {
  [[ -s "$PKI/druid-webhook.crt" ]] && return 0
  (
    cd "$PKI"
    umask 077
    printf 'subjectAltName=DNS:etcd-druid,DNS:etcd-druid.garden,DNS:etcd-druid.garden.svc,DNS:etcd-druid.garden.svc.cluster.local\nextendedKeyUsage=serverAuth\n' >druid-webhook.ext
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=etcd-druid.garden.svc" \
      -keyout druid-webhook.key -out druid-webhook.csr 2>/dev/null
    openssl x509 -req -in druid-webhook.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile druid-webhook.ext -out druid-webhook.crt 2>/dev/null
    rm -f druid-webhook.csr druid-webhook.ext ca.srl
  )
}
