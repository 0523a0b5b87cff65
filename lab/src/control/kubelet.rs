//! The kubelet stand-in's one job here: deliver the route ConfigMap the controller writes to
//! the seed's proxy the way kubelet delivers a ConfigMap volume (its "atomic writer"): each
//! version in a fresh `..<n>` directory, `..data` switched to it by renaming a symlink, and
//! `proxy.yaml` a symlink to `..data/proxy.yaml`. The proxy watches the path and reloads when
//! the swap shows a new file; the controller then reads the proxy's `/config` hash.
//! The real kubelet doing the same into a real proxy pod is tested by `tests/cluster.rs`
//! (the node of `scripts/cluster.sh`).

use crate::error::{Error, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One mounted ConfigMap volume.
#[derive(Debug)]
pub struct Volume {
    pub dir: PathBuf,
    /// `resourceVersion` last delivered.
    delivered: Option<String>,
    versions: u32,
}

impl Volume {
    /// An empty volume under `dir`.
    pub fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            delivered: None,
            versions: 0,
        })
    }

    /// The path a container reads `key` at.
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// Writes `data` as a new version and swaps `..data` to it.
    pub fn write(&mut self, data: &BTreeMap<String, String>) -> Result<()> {
        self.versions += 1;
        let name = format!("..v{}", self.versions);
        let version = self.dir.join(&name);
        std::fs::create_dir_all(&version).map_err(|e| Error::io(version.display(), e))?;
        for (k, v) in data {
            let p = version.join(k);
            std::fs::write(&p, v).map_err(|e| Error::io(p.display(), e))?;
        }
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).map_err(|e| Error::io(tmp.display(), e))?;
        let data_link = self.dir.join("..data");
        let old = std::fs::read_link(&data_link).ok();
        std::fs::rename(&tmp, &data_link).map_err(|e| Error::io(data_link.display(), e))?;
        for k in data.keys() {
            let link = self.dir.join(k);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(k), &link)
                    .map_err(|e| Error::io(link.display(), e))?;
            }
        }
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(self.dir.join(old));
        }
        Ok(())
    }

    /// Delivers the ConfigMap `name` if it changed since the last delivery; returns its new
    /// `resourceVersion` when it did.
    pub async fn sync(&mut self, api: &Api<ConfigMap>, name: &str) -> Result<Option<String>> {
        let Some(cm) = api
            .get_opt(name)
            .await
            .map_err(|e| Error::State(format!("ConfigMap {name}: {e}")))?
        else {
            return Ok(None);
        };
        let rv = cm.metadata.resource_version.clone();
        if rv.is_some() && rv == self.delivered {
            return Ok(None);
        }
        self.write(&cm.data.unwrap_or_default())?;
        self.delivered = rv.clone();
        Ok(rv)
    }
}

#[cfg(test)]
mod tests {
    use super::Volume;

    #[test]
    fn each_version_is_swapped_in_whole_and_the_old_one_goes() {
        let dir = std::env::temp_dir().join(format!("isthmus-volume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut v = Volume::new(&dir).unwrap();
        let path = v.path("proxy.yaml");
        v.write(&[("proxy.yaml".to_string(), "one".to_string())].into())
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one");
        // The path a container reads stays a symlink into `..data`; the swap changes the target.
        let first = std::fs::read_link(dir.join("..data")).unwrap();
        v.write(&[("proxy.yaml".to_string(), "two".to_string())].into())
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(
            std::fs::read_link(&path).unwrap(),
            std::path::Path::new("..data/proxy.yaml")
        );
        assert_ne!(std::fs::read_link(dir.join("..data")).unwrap(), first);
        assert!(!dir.join(first).exists(), "the old version is removed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
