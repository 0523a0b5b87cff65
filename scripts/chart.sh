#!/usr/bin/env bash
# The chart's build steps, with the pinned helm (scripts/build-helm.sh):
#   scripts/chart.sh package          helm package + the chart as an OCI artifact (an OCI image
#                                     layout, what `helm push` would upload) under target/chart/
#   scripts/chart.sh render [DIR]     renders charts/isthmus with examples/plain-values.yaml
#                                     (a cluster without Gardener, the form of deploy/) into DIR
#                                     (default target/chart/rendered), one file per object
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
"$root/scripts/build-helm.sh"
helm="${ISTHMUS_HELM:-$ISTHMUS_CACHE/helm-v3.20.2/helm}"
chart="$root/charts/isthmus"
out="$root/target/chart"

blob() { # file -> its sha256 digest, copied into the layout's blobs
  local d
  d="$(sha256sum "$1" | cut -d' ' -f1)"
  cp "$1" "$out/oci/blobs/sha256/$d"
  echo "$d"
}

case "${1:-}" in
package)
  mkdir -p "$out"
  "$helm" lint --strict "$chart" >/dev/null
  tgz="$("$helm" package "$chart" -d "$out" | sed -n 's/^Successfully packaged chart and saved it to: //p')"
  name="$(basename "$tgz" .tgz)"
  version="${name##*-}"
  # The layout helm's registry client pushes: a config blob with Chart.yaml as JSON, the
  # chart archive as the one layer, an OCI image manifest, tagged with the chart version.
  rm -rf "$out/oci" && mkdir -p "$out/oci/blobs/sha256"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$out/oci/oci-layout"
  "$helm" show chart "$tgz" | python3 -c 'import json,sys,yaml; print(json.dumps(yaml.safe_load(sys.stdin), separators=(",",":")), end="")' >"$out/config.json"
  config="$(blob "$out/config.json")"
  layer="$(blob "$tgz")"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.cncf.helm.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.cncf.helm.chart.content.v1.tar+gzip","digest":"sha256:%s","size":%d}],"annotations":{"org.opencontainers.image.title":"isthmus","org.opencontainers.image.version":"%s"}}' \
    "$config" "$(stat -c %s "$out/config.json")" "$layer" "$(stat -c %s "$tgz")" "$version" >"$out/manifest.json"
  manifest="$(blob "$out/manifest.json")"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$(stat -c %s "$out/manifest.json")" "$version" >"$out/oci/index.json"
  rm -f "$out/config.json" "$out/manifest.json"
  echo "chart: $tgz; OCI layout $out/oci (tag $version, manifest sha256:$manifest)"
  ;;
render)
  dir="${2:-$out/rendered}"
  rm -rf "$dir" && mkdir -p "$dir"
  "$helm" template isthmus "$chart" --namespace isthmus-system --kube-version v1.34.4 \
    -f "$chart/examples/plain-values.yaml" --output-dir "$dir/tmp" >/dev/null
  # One file per object, named <kind>-<namespace>-<name>.yaml.
  python3 - "$dir" <<'PY'
import os, sys, yaml
out = sys.argv[1]
for base, _, files in os.walk(os.path.join(out, "tmp")):
    for f in files:
        for doc in yaml.safe_load_all(open(os.path.join(base, f))):
            if not doc:
                continue
            m = doc["metadata"]
            name = "-".join(x for x in (doc["kind"].lower(), m.get("namespace"), m["name"]) if x)
            with open(os.path.join(out, name + ".yaml"), "w") as fh:
                yaml.safe_dump(doc, fh, sort_keys=False)
PY
  rm -rf "$dir/tmp"
  echo "chart: $(ls "$dir" | wc -l) objects in $dir"
  ;;
*)
  echo "usage: scripts/chart.sh package | render [DIR]" >&2
  exit 2
  ;;
esac
