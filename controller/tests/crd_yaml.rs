//! The committed CRD manifest is what the Rust types generate.

use isthmus_controller::crd::crd_yaml;
use std::path::PathBuf;

#[test]
fn committed_crd_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/isthmus/files/crd-etcdmigration.yaml");
    let generated = crd_yaml().unwrap();
    if std::env::var_os("ISTHMUS_UPDATE_CRD").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale; regenerate with:\n  ISTHMUS_UPDATE_CRD=1 cargo test -p isthmus-controller --test crd_yaml",
        path.display()
    );
}

#[test]
fn crd_names_and_scope() {
    let y = crd_yaml().unwrap();
    for needle in [
        "name: etcdmigrations.isthmus.dev",
        "scope: Namespaced",
        "kind: EtcdMigration",
        "subresources:",
    ] {
        assert!(y.contains(needle), "missing {needle:?}");
    }
}

/// Issue 47 point 8: the template's images are applied as given (the source `Etcd` is on the
/// other seed), so the CRD says where `kubectl explain` shows it that writing an
/// `EtcdMigration` is writing an `Etcd`.
#[test]
fn the_template_says_an_etcdmigration_is_an_etcd() {
    let y = crd_yaml().unwrap();
    let at = y.find("etcdTemplate:").unwrap();
    let field = &y[at..at + 2000.min(y.len() - at)];
    for needle in [
        "Writing an",
        "EtcdMigration is writing an Etcd",
        "spec.etcd.image",
        "spec.backup.image",
        "only whoever may create that `Etcd` (gardenlet)",
    ] {
        let flat = field.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(needle),
            "etcdTemplate lacks {needle:?}:\n{field}"
        );
    }
}
