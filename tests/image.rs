//! The production image as `scripts/image.sh` leaves it (`target/image/isthmus.oci.tar`, built
//! by `scripts/test.sh` before the tests): an OCI archive whose image runs `/isthmus` as 65532,
//! holds no shell and no other executable, and whose binary is static and runs with nothing
//! else around it. Prints the sizes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::Scratch;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn archive() -> PathBuf {
    isthmus_testkit::tier::full_only("the image (scripts/image.sh, a static release build)");
    let a = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/image/isthmus.oci.tar");
    assert!(
        a.exists(),
        "{} is missing: run scripts/image.sh (scripts/test.sh does)",
        a.display()
    );
    a
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The archive unpacked into a scratch directory (an OCI image layout).
fn unpack() -> (Scratch, PathBuf) {
    let dir = Scratch::new("image");
    let layout = dir.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive())
        .arg("-C")
        .arg(&layout));
    (dir, layout)
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let (alg, hex) = digest.split_once(':').unwrap();
    layout.join("blobs").join(alg).join(hex)
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn the_image_runs_isthmus_as_nonroot_without_a_shell() {
    let (dir, layout) = unpack();
    let index = json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "{index}");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"],
        "docker.io/library/isthmus:latest",
        "the name deploy/ runs (isthmus:latest) must be in the index"
    );
    let manifest = json(&blob(&layout, manifests[0]["digest"].as_str().unwrap()));
    let config = json(&blob(
        &layout,
        manifest["config"]["digest"].as_str().unwrap(),
    ));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["config"]["User"], "65532:65532", "{config}");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/isthmus"])
    );
    assert!(config["config"]["Cmd"].is_null(), "{config}");

    // Every file of every layer: nothing executable but /isthmus, no shell, the nonroot user.
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let mut layer_bytes = 0;
    for layer in manifest["layers"].as_array().unwrap() {
        layer_bytes += layer["size"].as_u64().unwrap();
        let path = blob(&layout, layer["digest"].as_str().unwrap());
        // The root directory's own entry: user 65532 must be able to enter `/` (a 0700 root
        // made every container fail with "stat /isthmus: permission denied").
        let list = String::from_utf8(run(Command::new("tar").arg("-tvzf").arg(&path))).unwrap();
        for entry in list
            .lines()
            .filter(|l| l.ends_with(" ./") || l.ends_with(" ."))
        {
            assert!(
                entry.starts_with("drwxr-xr-x"),
                "root directory entry: {entry}"
            );
        }
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&path)
            .arg("-C")
            .arg(&rootfs));
    }
    let listing = String::from_utf8(run(Command::new("find")
        .arg(".")
        .args(["-type", "f", "-perm", "/111"])
        .current_dir(&rootfs)))
    .unwrap();
    assert_eq!(listing.trim(), "./isthmus", "executables in the image");
    for shell in ["bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"] {
        assert!(!rootfs.join(shell).exists(), "{shell} in the image");
    }
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");

    // Static: no program interpreter, and it runs with an empty environment and no libraries.
    let elf = String::from_utf8(run(Command::new("readelf")
        .args(["-l", "-W"])
        .arg(rootfs.join("isthmus"))))
    .unwrap();
    assert!(
        !elf.contains("INTERP"),
        "/isthmus asks for a dynamic loader:\n{elf}"
    );
    let help = run(Command::new(rootfs.join("isthmus"))
        .arg("--help")
        .env_clear());
    assert!(String::from_utf8_lossy(&help).contains("proxy"));

    let archive_bytes = std::fs::metadata(archive()).unwrap().len();
    let binary_bytes = std::fs::metadata(rootfs.join("isthmus")).unwrap().len();
    println!(
        "image: archive {:.1} MiB, compressed layers {:.1} MiB, /isthmus {:.1} MiB",
        archive_bytes as f64 / 1048576.0,
        layer_bytes as f64 / 1048576.0,
        binary_bytes as f64 / 1048576.0
    );
}

/// deploy/Dockerfile must produce the same layout: its final stage copies deploy/rootfs/ and
/// the binary to /isthmus, as 65532, with the same entrypoint.
#[test]
fn the_dockerfile_builds_the_same_layout() {
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/Dockerfile")).unwrap();
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    for line in [
        "scratch",
        "COPY deploy/rootfs/ /",
        "COPY --from=build /isthmus /isthmus",
        "USER 65532:65532",
        "ENTRYPOINT [\"/isthmus\"]",
    ] {
        assert!(
            last_stage.contains(line),
            "deploy/Dockerfile's last stage lacks {line:?}:\n{last_stage}"
        );
    }
}

/// Issue 47 point 9: the builder image, which produces the shipped binary, is pinned by its
/// digest, not by a tag that can move.
#[test]
fn the_dockerfile_pins_its_builder_by_digest() {
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/Dockerfile")).unwrap();
    let froms: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    for from in froms {
        let image = from.split_whitespace().next().unwrap();
        if image == "scratch" {
            continue;
        }
        let digest = image
            .split_once("@sha256:")
            .map(|(_, d)| d)
            .unwrap_or_else(|| panic!("{image}: not pinned by digest"));
        assert!(
            digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{image}"
        );
    }
}

/// Issue 47 point 9: a bill of materials of what the binary links, made offline by
/// scripts/sbom.sh (scripts/image.sh writes it next to the image): CycloneDX 1.5, every
/// registry crate with its Cargo.lock checksum, the workspace's crates marked, none of the
/// lab's, and the same bytes twice.
#[test]
fn the_sbom_lists_what_the_binary_links() {
    let dir = Scratch::new("sbom");
    let sbom = |name: &str| {
        let out = dir.join(name);
        run(Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/sbom.sh")).arg(&out));
        std::fs::read_to_string(out).unwrap()
    };
    let text = sbom("a.cdx.json");
    assert_eq!(text, sbom("b.cdx.json"), "not reproducible");
    let bom: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["specVersion"], "1.5");
    assert_eq!(bom["metadata"]["component"]["name"], "isthmus");
    let components = bom["components"].as_array().unwrap();
    let named = |n: &str| components.iter().find(|c| c["name"] == n);
    for linked in [
        "isthmus-proxy",
        "isthmus-tunnel",
        "rustls",
        "tokio",
        "kube-client",
    ] {
        assert!(named(linked).is_some(), "{linked} missing");
    }
    for not_linked in ["isthmus-lab", "etcd-client", "tonic", "prost", "criterion"] {
        assert!(
            named(not_linked).is_none(),
            "{not_linked} is not in the binary"
        );
    }
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
    let mut hashed = 0;
    for c in components {
        let purl = c["purl"].as_str().unwrap();
        assert_eq!(
            purl,
            format!(
                "pkg:cargo/{}@{}",
                c["name"].as_str().unwrap(),
                c["version"].as_str().unwrap()
            )
        );
        if c["properties"][0]["value"] == "workspace" {
            assert!(c["name"].as_str().unwrap().starts_with("isthmus-"), "{c}");
            continue;
        }
        let sum = c["hashes"][0]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("{c}"));
        assert!(lock.contains(&format!("checksum = \"{sum}\"")), "{c}");
        assert!(c["licenses"][0]["expression"].is_string(), "{c}");
        hashed += 1;
    }
    println!(
        "figure: SBOM of the isthmus binary: {} crates, {hashed} with their Cargo.lock SHA-256",
        components.len()
    );
    assert!(hashed > 100, "{hashed}");
}
