#!/usr/bin/env bash
# The image's software bill of materials, offline: CycloneDX 1.5 JSON of every crate the
# `isthmus` binary links (normal dependencies of `-p isthmus` for the image's target, with the
# features the build resolves), from `cargo tree` (cargo's own resolver, so exactly the
# build's graph; no build scripts' or tests' crates), and each registry crate's SHA-256 from
# Cargo.lock. scripts/image.sh writes it next to the image; scanners that read CycloneDX
# (osv-scanner, grype, trivy) take it where an advisory database is reachable (README.md,
# "Security").
# Why not cargo-cyclonedx: one more tool to install and pin on every machine (a crates.io
# build of minutes on 2 cores), and it describes the whole package (dev and build
# dependencies, all targets) unless configured; `cargo tree -e normal --target` is the graph
# the binary is built from, and cargo is already there.
# Usage: scripts/sbom.sh [OUT]   (default target/image/isthmus.cdx.json)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-target/image/isthmus.cdx.json}"
triple="${ISTHMUS_SBOM_TARGET:-$(rustc -vV | sed -n 's/^host: //p')}"
mkdir -p "$(dirname "$out")"
cargo tree --offline --locked -p isthmus -e normal --target "$triple" --prefix none \
  --format '{p}|{l}|{r}' >"$out.tree"
python3 - "$out.tree" Cargo.lock "$out" "$triple" <<'PY'
import json, re, sys, tomllib, uuid
tree_path, lock_path, out, triple = sys.argv[1:]
lock = tomllib.load(open(lock_path, "rb"))
sums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}
components, seen, root = [], set(), None
for line in open(tree_path):
    line = line.strip()
    if not line:
        continue
    spec, licence, repo = (line.split("|") + ["", ""])[:3]
    m = re.match(r"^(\S+) v(\S+)(?: \((.*?)\))?(?: \(\*\))?$", spec.strip())
    if not m:
        sys.exit(f"sbom.sh: cannot read cargo tree line {line!r}")
    name, version, where = m.groups()
    repo = repo.replace("(*)", "").strip()
    if root is None:
        root = (name, version)
        continue
    if (name, version) in seen:
        continue
    seen.add((name, version))
    purl = f"pkg:cargo/{name}@{version}"
    c = {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}
    if licence:
        c["licenses"] = [{"expression": licence}]
    checksum = sums.get((name, version))
    if checksum:
        c["hashes"] = [{"alg": "SHA-256", "content": checksum}]
    else:
        # The workspace's own crates: built from this repository, not downloaded.
        c["properties"] = [{"name": "isthmus:source", "value": "workspace"}]
    if repo.startswith("http"):
        c["externalReferences"] = [{"type": "vcs", "url": repo}]
    components.append(c)
components.sort(key=lambda c: (c["name"], c["version"]))
name, version = root
# Reproducible: the serial number follows the content, and there is no timestamp.
digest = json.dumps(components, sort_keys=True)
bom = {
    "bomFormat": "CycloneDX",
    "specVersion": "1.5",
    "serialNumber": "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"isthmus/{version}/{triple}/{digest}")),
    "version": 1,
    "metadata": {
        "tools": {"components": [{"type": "application", "name": "cargo tree (scripts/sbom.sh)"}]},
        "component": {"type": "container", "bom-ref": f"isthmus@{version}", "name": "isthmus",
                      "version": version,
                      "properties": [{"name": "isthmus:target", "value": triple}]},
    },
    "components": components,
}
json.dump(bom, open(out, "w"), indent=1, sort_keys=True)
open(out, "a").write("\n")
print(f"sbom.sh: {len(components)} crates -> {out}")
PY
rm -f "$out.tree"
