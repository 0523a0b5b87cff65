# Sourced by scripts/cluster.sh: the node's own images, built locally (umoci, no daemon, no
# registry) into OCI archives cached in $ISTHMUS_CACHE/node-images/, and imported into the
# node's containerd. Nothing is ever pulled.
#   isthmus.local/pause:3.10.1          pause.c from the pinned k8s.io/kubernetes module, static
#   isthmus.local/coredns:v1.12.1       the pinned CoreDNS build (static)
#   isthmus.local/test-etcd:v3.6.16     for the end-to-end tests: the tests' etcd, curl and pause,
#                                       each with exactly the libraries it links (ldd)
# and what etcd-druid runs (scripts/cluster/druid.sh), each a static Go build on the distroless
# layout its upstream image uses (deploy/rootfs: user nonroot 65532 with its home):
#   isthmus.local/etcd-druid:v0.38.1    etcd-druid itself
#   isthmus.local/etcd-wrapper-standin:v3.5.27  the etcd container: the stand-in for
#                                       etcd-wrapper (scripts/etcd-wrapper-standin/), etcd v3.5.27
#   isthmus.local/etcdbrctl:v0.43.0     etcd-backup-restore, the etcd pods' sidecar
#   isthmus.local/local-path-provisioner:v0.0.30  the node's default StorageClass (root, as upstream)
#   isthmus.local/busybox:1.35.0        Debian's static busybox: the provisioner's helper pods and
#                                       druid's `alpine` init container
#   isthmus.local/kube-apiserver:v1.34.4  the shoot's kube-apiserver as a pod (tests/seeds/
#                                       shoot_api.rs): the node's own static build, nonroot
#                                       as Gardener runs it
# The isthmus image itself comes from scripts/image.sh.

IMAGES="$ISTHMUS_CACHE/node-images"

# image_build ARCHIVE NAME ENTRYPOINT FILE...: a one-layer image of FILEs (each at its own path,
# plus the libraries a dynamic one needs), entrypoint ENTRYPOINT, written as an OCI archive.
# IMAGE_NONROOT=1: on deploy/rootfs (distroless's passwd, group, nsswitch.conf), user
# 65532:65532 with its home /home/nonroot and a /tmp. IMAGE_LINKS="LINK=TARGET …": symlinks.
image_build() {
  local archive="$1" name="$2" entry="$3"
  shift 3
  [[ -s "$archive" ]] && return 0
  local work
  work="$(mktemp -d)"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:img"
  umoci unpack --image "$work/oci:img" "$work/bundle" >/dev/null
  local f lib
  for f in "$@"; do
    local src="${f%%=*}" dst="${f#*=}"
    install -D -m 0755 "$src" "$work/bundle/rootfs$dst"
    # Dynamic executables bring exactly the libraries they link.
    for lib in $(ldd "$src" 2>/dev/null | grep -o '/[^ ]*' || true); do
      install -D -m 0755 "$lib" "$work/bundle/rootfs$lib"
    done
  done
  local link user=()
  for link in ${IMAGE_LINKS:-}; do
    ln -s "${link#*=}" "$work/bundle/rootfs${link%%=*}"
  done
  if [[ -n "${IMAGE_NONROOT:-}" ]]; then
    cp -a "$root/deploy/rootfs/." "$work/bundle/rootfs/"
    chown -R 0:0 "$work/bundle/rootfs/etc"
    install -d -m 1777 "$work/bundle/rootfs/tmp"
    install -d -m 0700 -o 65532 -g 65532 "$work/bundle/rootfs/home/nonroot"
    user=(--config.user 65532:65532)
  fi
  chmod 0755 "$work/bundle/rootfs"
  umoci repack --image "$work/oci:img" "$work/bundle" >/dev/null
  umoci config --image "$work/oci:img" --config.entrypoint "$entry" --clear config.cmd \
    "${user[@]}" --architecture amd64 --os linux
  umoci tag --image "$work/oci:img" "$name"
  umoci rm --image "$work/oci:img"
  umoci gc --layout "$work/oci"
  mkdir -p "$(dirname "$archive")"
  tar -C "$work/oci" -cf "$archive.tmp" . && mv "$archive.tmp" "$archive"
  rm -rf "$work"
}

images_build_all() {
  mkdir -p "$IMAGES"
  local pause_src
  pause_src="$(cd "$root/scripts/kubernetes" && GOFLAGS= go list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  if [[ ! -s "$IMAGES/pause.oci.tar" ]]; then
    # As build/pause/Makefile builds it: -Os -static, VERSION baked in.
    gcc -Os -Wall -Werror -static -DVERSION=v3.10.1-isthmus -o "$IMAGES/pause" "$pause_src"
    image_build "$IMAGES/pause.oci.tar" "$PAUSE_IMAGE" /pause "$IMAGES/pause=/pause"
  fi
  image_build "$IMAGES/coredns-$COREDNS_VERSION.oci.tar" "isthmus.local/coredns:$COREDNS_VERSION" \
    /coredns "$ISTHMUS_CACHE/coredns-$COREDNS_VERSION/coredns=/coredns"
  image_build "$IMAGES/test-etcd-v3.6.16.oci.tar" isthmus.local/test-etcd:v3.6.16 \
    /usr/local/bin/etcd "$ETCD_BIN=/usr/local/bin/etcd" /usr/bin/curl=/usr/bin/curl \
    "$IMAGES/pause=/pause"
  druid_images_build
  IMAGE_NONROOT=1 image_build "$IMAGES/kube-apiserver-$K8S_VERSION.oci.tar" \
    "isthmus.local/kube-apiserver:$K8S_VERSION" /usr/local/bin/kube-apiserver \
    "$K8S/kube-apiserver=/usr/local/bin/kube-apiserver"
}

# images_load ARCHIVE...: import OCI archives into the node's containerd (namespace k8s.io,
# where kubelet's images live), names taken from the archives.
images_load() {
  local a
  for a in "$@"; do
    a="$(realpath "$a")"
    node_exec ctr --address "$RUN/containerd.sock" -n k8s.io images import \
      --all-platforms "$a" >/dev/null
  done
}

images_import_all() {
  images_load "$IMAGES/pause.oci.tar" "$IMAGES/coredns-$COREDNS_VERSION.oci.tar" \
    "$IMAGES/test-etcd-v3.6.16.oci.tar" "${DRUID_IMAGES[@]}" \
    "$IMAGES/kube-apiserver-$K8S_VERSION.oci.tar"
}
