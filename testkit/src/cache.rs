//! Where the one-time builds live (`scripts/cache.sh` is the shell twin): outside any clone's
//! `target/`, so a fresh clone on the same machine reuses them. One folder per pinned thing,
//! `<cache>/<name>-<version>/`.

use std::path::{Path, PathBuf};

/// The pinned Kubernetes version of every Kubernetes binary the project builds.
pub const KUBE_VERSION: &str = "v1.34.4";
/// The pinned etcd the test API servers store their data in.
pub const ETCD_VERSION: &str = "v3.6.16";

/// `ISTHMUS_CACHE`, else `$XDG_CACHE_HOME/isthmus`, else `$HOME/.cache/isthmus`.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ISTHMUS_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Path::new(&d).join("isthmus");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/isthmus")
}

/// A one-time build's file: the path in the variable `env` when it is set, else `path`, which
/// must exist (panics naming `script`, the build that makes it).
pub fn built(env: Option<&str>, path: PathBuf, script: &str) -> PathBuf {
    if let Some(p) = env.and_then(std::env::var_os) {
        return PathBuf::from(p);
    }
    let or = env.map(|e| format!(" (or set {e})")).unwrap_or_default();
    assert!(
        path.is_file(),
        "{} is missing: run {script}{or}",
        path.display()
    );
    path
}

/// kube-apiserver as `scripts/build-kubernetes.sh` leaves it.
pub fn kube_apiserver() -> PathBuf {
    dir()
        .join(format!("kubernetes-{KUBE_VERSION}"))
        .join("kube-apiserver")
}

/// etcd v3.6 as `scripts/build-etcd.sh` leaves it.
pub fn etcd() -> PathBuf {
    dir().join(format!("etcd-{ETCD_VERSION}")).join("etcd")
}

/// The pinned upstream CRDs as `scripts/upstream-crds.sh` leaves them.
pub fn upstream_crds() -> PathBuf {
    dir().join("upstream-crds")
}

/// The given files of [`upstream_crds`]; panics naming the script when one is missing.
pub fn upstream_crd_paths(files: &[&str]) -> Vec<PathBuf> {
    let dir = upstream_crds();
    files
        .iter()
        .map(|f| {
            let p = dir.join(f);
            assert!(
                p.is_file(),
                "{} is missing: run scripts/upstream-crds.sh",
                p.display()
            );
            p
        })
        .collect()
}
