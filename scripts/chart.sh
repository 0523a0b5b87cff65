#!/usr/bin/env bash
# The chart's build steps, with the pinned helm (scripts/build-helm.sh):
#   scripts/chart.sh package          helm package + the chart as an OCI artifact (an OCI image
#                                     layout, what `helm push` would upload) under target/chart/
#   scripts/chart.sh render [DIR]     deploy/ (default; or DIR): the chart rendered for a cluster
#                                     without Gardener (examples/plain-values.yaml, release
#                                     `isthmus` in isthmus-system) as files `kubectl apply -f`
#                                     takes: 00-namespace.yaml, crd-etcdmigration.yaml,
#                                     controller.yaml, proxy.yaml, examples/tunnel.yaml
#                                     (tests/chart.rs fails when deploy/ is not this output)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/cache.sh"
"$root/scripts/build-helm.sh"
helm="${ISTHMUS_HELM:-$ISTHMUS_CACHE/helm-v4.2.3/helm}"
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
  dir="${2:-$root/deploy}"
  mkdir -p "$dir/examples"
  "$helm" template isthmus "$chart" --namespace isthmus-system --kube-version v1.34.4 \
    -f "$chart/examples/plain-values.yaml" >"$out.render.yaml"
  # Objects go to the file of their component (label app.kubernetes.io/name), in helm's install
  # order, each with its template's comments; helm's managed-by label is dropped (kubectl
  # applies these files). An object of no known component fails the render.
  python3 - "$out.render.yaml" "$dir" <<'PY'
import os, re, sys, yaml
text, out = open(sys.argv[1]).read(), sys.argv[2]
header = ("# Rendered from charts/isthmus with charts/isthmus/examples/plain-values.yaml by\n"
          "# `scripts/chart.sh render`; do not edit (tests/chart.rs fails when this is stale).\n")
files = {"00-namespace.yaml": [
    "# The namespace of the proxy and the controller (helm install --create-namespace).\n"
    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: isthmus-system\n"
    "  labels:\n    app.kubernetes.io/part-of: isthmus\n"]}
component = {"isthmus-proxy": "proxy.yaml", "isthmus-controller": "controller.yaml",
             "isthmus-tunnel-server": "examples/tunnel.yaml",
             "isthmus-tunnel-agent": "examples/tunnel.yaml"}
for doc in re.split(r"^---\n", text, flags=re.M):
    obj = yaml.safe_load(doc)
    if not obj:
        continue
    name = obj["metadata"].get("labels", {}).get("app.kubernetes.io/name")
    f = "crd-etcdmigration.yaml" if obj["kind"] == "CustomResourceDefinition" else component.get(name)
    if f is None:
        sys.exit(f"chart.sh render: {obj['kind']}/{obj['metadata']['name']} belongs to no file of deploy/")
    doc = re.sub(r"^ *app\.kubernetes\.io/managed-by: Helm\n", "", doc, flags=re.M)
    files.setdefault(f, []).append(doc.rstrip("\n") + "\n")
for f, docs in files.items():
    with open(os.path.join(out, f), "w") as fh:
        fh.write(header + "---\n".join(docs))
print(f"chart: {sum(len(d) for d in files.values())} objects in {len(files)} files under {out}")
PY
  rm -f "$out.render.yaml"
  ;;
*)
  echo "usage: scripts/chart.sh package | render [DIR]" >&2
  exit 2
  ;;
esac
