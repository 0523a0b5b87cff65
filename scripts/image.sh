#!/usr/bin/env bash
# Builds the production image without a daemon or a registry: the `isthmus` binary only, static
# (glibc with crt-static: the musl target's std cannot be fetched offline; the Dockerfile uses
# musl), stripped of debug info, on the files of deploy/rootfs/ (passwd/group with the nonroot
# user 65532, nsswitch.conf), user 65532:65532, entrypoint /isthmus, no shell. deploy/Dockerfile
# builds the same layout from the same deploy/rootfs/.
#
# Output: target/image/isthmus.oci.tar (and target/image/isthmus.cdx.json, the binary's
# software bill of materials, scripts/sbom.sh), an OCI image archive (image layout in a tar) holding one
# image named docker.io/library/isthmus:<tag> (default `latest`, what deploy/ runs), importable
# with `ctr -n k8s.io images import` (scripts/cluster.sh load) or `skopeo copy oci-archive:…`.
# Usage: scripts/image.sh [TAG]   (ISTHMUS_IMAGE_VERSION sets an `org.opencontainers.image.version`
# label; ISTHMUS_IMAGE_NO_BUILD=1 packs the last build without running cargo: the e2e upgrade
# test makes a second tag of the same binary that way.)
# Needs umoci (Debian; scripts/install-deps.sh) and a C toolchain with glibc's static libs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tag="${1:-latest}"
name="docker.io/library/isthmus:$tag"
triple="$(rustc -vV | sed -n 's/^host: //p')"
out="target/image"
command -v umoci >/dev/null || { echo "image.sh: umoci is not installed (scripts/install-deps.sh)" >&2; exit 1; }

# --target: build scripts and proc macros stay dynamic; only the binary is static.
# Its own target directory, in the machine's cache (scripts/cache.sh): the ordinary release
# build's artefacts stay untouched, and a fresh clone rebuilds only the workspace's crates
# (a cold release build of the dependencies takes 10-30 min on 2 cores).
. "$root/scripts/cache.sh"
target_dir="${ISTHMUS_IMAGE_TARGET_DIR:-$ISTHMUS_CACHE/image-build}"
bin="$target_dir/$triple/release/isthmus"
# ISTHMUS_IMAGE_NO_BUILD=1 packs the binary built last (another tag of the same build).
if [[ -z "${ISTHMUS_IMAGE_NO_BUILD:-}" || ! -x "$bin" ]]; then
  RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    cargo build --release --locked -p isthmus --target "$triple" --target-dir "$target_dir"
fi
if readelf -l -W "$bin" | grep -q INTERP; then
  echo "image.sh: $bin is not static (it asks for a program interpreter)" >&2
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/isthmus-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
layout="$work/oci"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci unpack --image "$layout:$tag" "$work/bundle" >/dev/null
rootfs="$work/bundle/rootfs"
# The layer records the root directory too: 0755, or user 65532 cannot reach /isthmus.
chmod 0755 "$rootfs"
cp -a deploy/rootfs/. "$rootfs/"
install -m 0755 -o 0 -g 0 "$bin" "$rootfs/isthmus"
install -d -m 1777 "$rootfs/tmp"
install -d -m 0700 -o 65532 -g 65532 "$rootfs/home/nonroot"
chown -R 0:0 "$rootfs/etc"
# No shell, no libraries: nothing in the image may be executable but /isthmus.
if [[ "$(find "$rootfs" -type f -perm /111 | sed "s#^$rootfs##")" != "/isthmus" ]]; then
  echo "image.sh: executables besides /isthmus in the image" >&2
  exit 1
fi
umoci repack --image "$layout:$tag" "$work/bundle" >/dev/null
version="${ISTHMUS_IMAGE_VERSION:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"
umoci config --image "$layout:$tag" \
  --config.user 65532:65532 \
  --config.entrypoint /isthmus \
  --config.workingdir / \
  --clear config.cmd \
  --config.label "org.opencontainers.image.title=isthmus" \
  --config.label "org.opencontainers.image.version=$version" \
  --architecture amd64 --os linux \
  --author isthmus
# umoci names the tag only; containerd wants the full name in the index annotation.
umoci tag --image "$layout:$tag" "$name"
umoci rm --image "$layout:$tag"
umoci gc --layout "$layout"
mkdir -p "$out"
tar -C "$layout" --sort=name --owner=0 --group=0 --numeric-owner -cf "$out/isthmus.oci.tar.tmp" .
mv "$out/isthmus.oci.tar.tmp" "$out/isthmus-$tag.oci.tar"
[[ "$tag" == latest ]] && ln -sf "isthmus-$tag.oci.tar" "$out/isthmus.oci.tar"
# The bill of materials of the binary, offline (scripts/sbom.sh: CycloneDX from cargo tree).
"$root/scripts/sbom.sh" "$out/isthmus.cdx.json"
echo "image.sh: $name ($(du -k "$out/isthmus-$tag.oci.tar" | cut -f1) KiB archive, binary $(du -k "$bin" | cut -f1) KiB) -> $out/isthmus-$tag.oci.tar"
