//! When to re-read files that may be replaced under a running process: each file's identity
//! (device, inode, size, modification time, following symlinks), compared on every poll.
//!
//! Polling rather than inotify: a Kubernetes ConfigMap or Secret volume is updated by swapping
//! a `..data` symlink two levels above the file, which an inotify watch on the file misses;
//! through the symlinks the swap shows as a new inode. A few `stat`s a second cost nothing.
//! The proxy's configuration watch (`proxy/src/server/reload.rs`) polls the same identity of
//! its one file; the tunnel server watches its file and the TLS files it names.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What tells one version of a file from the next.
type Identity = (u64, u64, u64, SystemTime);

/// The identity of the file at `path` now; `None` while it cannot be read.
fn identity(path: &Path) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
}

/// A set of files and the identities they had when last looked at.
#[derive(Debug, Default)]
pub struct Watched {
    files: Vec<(PathBuf, Option<Identity>)>,
}

impl Watched {
    /// Watches `paths` from their present identities on.
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let files = paths
            .into_iter()
            .map(|p| {
                let id = identity(&p);
                (p, id)
            })
            .collect();
        Self { files }
    }

    /// Whether any file changed (appeared, vanished, was rewritten or replaced) since the
    /// last call or since [`Watched::new`]; the new identities are remembered either way.
    pub fn changed(&mut self) -> bool {
        let mut changed = false;
        for (path, seen) in &mut self.files {
            let now = identity(path);
            if now != *seen {
                *seen = now;
                changed = true;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_a_replacement_and_a_removal_are_changes() {
        let dir = std::env::temp_dir().join(format!("isthmus-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, "one").unwrap();
        std::fs::write(&b, "x").unwrap();
        let mut w = Watched::new([a.clone(), b.clone()]);
        assert!(!w.changed());
        std::fs::write(&a, "three").unwrap();
        assert!(w.changed());
        assert!(!w.changed());
        // Replaced by a rename (a new inode), as a Secret volume's symlink swap shows.
        let tmp = dir.join("tmp");
        std::fs::write(&tmp, "x").unwrap();
        std::fs::rename(&tmp, &b).unwrap();
        assert!(w.changed());
        std::fs::remove_file(&b).unwrap();
        assert!(w.changed());
        assert!(!w.changed());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
