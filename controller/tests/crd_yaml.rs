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
