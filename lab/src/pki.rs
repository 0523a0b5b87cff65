//! The lab's TLS material: testkit's throwaway CA ([`isthmus_testkit::TestPki`]), written as
//! files where the lab's processes (etcd, kube-apiserver, the tunnel) read them, with the
//! lab's errors instead of testkit's panics.

use crate::error::{Error, Result};
use isthmus_testkit::TestPki;
use std::path::Path;

/// A new CA whose certificate is written as `ca.crt` into `dir`.
pub fn ca(dir: &Path) -> Result<TestPki> {
    let pki = TestPki::try_new()?;
    pki.try_write_ca(dir)
        .map_err(|e| Error::io(dir.join("ca.crt").display(), e))?;
    Ok(pki)
}

/// Writes `<stem>.crt` / `<stem>.key` into `dir` for `names` (DNS names or IP addresses; the
/// first is the common name), usable as server and client (as etcd peers use theirs).
pub fn leaf(pki: &TestPki, dir: &Path, stem: &str, names: &[&str]) -> Result<()> {
    pki.try_peer_cert(names)?
        .try_write(dir, stem)
        .map_err(|e| Error::io(dir.join(stem).display(), e))?;
    Ok(())
}
