#!/usr/bin/env bash
# Offline validation of every manifest in deploy/ (called by .ci/run):
#  1. yamllint over all YAML here;
#  2. kubernetes-validate --strict against the Kubernetes JSON schemas bundled in the PyPI
#     package (no network at validation time) for every built-in kind, CRD and the example
#     access grants (Role, RoleBinding) included;
#  3. custom resources (our EtcdMigration examples) against the openAPIV3Schema of the
#     committed CRD, strictly (unknown fields rejected, as kubectl's strict field validation
#     would). Gardener's DNSRecord and etcd-druid's Etcd are never written as manifests here
#     (the controller builds them), so no schema for them is needed.
# The tools are installed once into a virtualenv (PyPI); set ISTHMUS_VALIDATE_VENV to reuse one.
set -euo pipefail
cd "$(dirname "$0")"

K8S_VERSION="${K8S_VERSION:-1.33.0}"
VENV="${ISTHMUS_VALIDATE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/isthmus-validate-venv}"
if ! "$VENV/bin/python" -c 'import kubernetes_validate, yamllint' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet 'kubernetes-validate==1.37.0' 'yamllint==1.38.0'
fi

echo "== yamllint"
"$VENV/bin/yamllint" --strict -c .yamllint.yaml .

echo "== kubernetes-validate (Kubernetes $K8S_VERSION, strict)"
builtin=(namespace.yaml proxy.yaml controller.yaml tunnel.yaml crd-etcdmigration.yaml examples/access-*.yaml)
"$VENV/bin/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "${builtin[@]}"

echo "== custom resources against crd-etcdmigration.yaml"
"$VENV/bin/python" - examples/etcdmigration-*.yaml <<'PY'
import sys, yaml, jsonschema

crd = yaml.safe_load(open("crd-etcdmigration.yaml"))
kind = crd["spec"]["names"]["kind"]
group = crd["spec"]["group"]
versions = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}

def strict(s):
    """OpenAPI v3 (Kubernetes flavour) -> JSON Schema that rejects unknown fields."""
    if not isinstance(s, dict):
        return s
    s = dict(s)
    if s.pop("nullable", False) and "type" in s:
        s["type"] = [s["type"], "null"]
    for k in ("properties",):
        if k in s:
            s[k] = {n: strict(v) for n, v in s[k].items()}
    if "items" in s:
        s["items"] = strict(s["items"])
    for k in ("oneOf", "anyOf", "allOf"):
        if k in s:
            s[k] = [strict(v) for v in s[k]]
    if s.get("type") in ("object", ["object", "null"]) and "properties" in s \
            and "additionalProperties" not in s:
        s["additionalProperties"] = False
    s.pop("format", None)  # uint8/uint16 are Kubernetes-only formats
    return s

failed = 0
checked = 0
for path in sys.argv[1:]:
    for doc in yaml.safe_load_all(open(path)):
        if not doc:
            continue
        api, _, version = doc.get("apiVersion", "").partition("/")
        if doc.get("kind") != kind or api != group or version not in versions:
            print(f"{path}: no schema for {doc.get('apiVersion')} {doc.get('kind')}")
            failed += 1
            continue
        schema = strict(versions[version])
        schema["properties"].update({"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                     "metadata": {"type": "object"}})
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
        for e in errors:
            print(f"{path}: {'.'.join(map(str, e.absolute_path))}: {e.message}")
        failed += bool(errors)
        checked += 1
if checked == 0:
    print("no custom resources checked: examples/ is empty?")
    failed += 1
print(f"{checked} custom resource(s) checked")
sys.exit(1 if failed else 0)
PY
echo "deploy/: all manifests valid"
