//! A seed's own kube-apiserver (the seed cluster's control plane, not the shoot's): the real
//! binary inside the seed's namespace on `<seed address>:7443`, stored in its own etcd v3.6
//! (`scripts/build-etcd.sh`; kube-apiserver 1.34's watches need etcd's progress requests),
//! RBAC, service-account tokens. The lab reaches it over the seed's veth; the seed's
//! `isthmus controller` reaches it from inside the seed.

use crate::api::kubeconfig::{kubeconfig_client, write_kubeconfig};
use crate::api::server::ApiServer;
use crate::error::{Error, Result};
use crate::pki;
use crate::seeds::Seed;
use isthmus_testkit::flags::{ApiServerAuth, ApiServerFlags, CLUSTER_ISSUER};
use isthmus_testkit::kube::service_account_token;
use kube::Client;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// The seed API's port on the seed's address (the shoot's kube-apiserver has 6443).
pub const PORT: u16 = 7443;
/// The seed store's etcd ports inside the seed (clear of every member and proxy port).
const STORE_CLIENT: u16 = 32379;
const STORE_PEER: u16 = 32380;

/// etcd v3.6 as `scripts/build-etcd.sh` leaves it, overridable with `ISTHMUS_ETCD`.
pub fn store_binary() -> PathBuf {
    std::env::var_os("ISTHMUS_ETCD")
        .map(PathBuf::from)
        .unwrap_or_else(isthmus_testkit::cache::etcd)
}

/// One seed's API server, its store and an admin client; processes stop on drop.
pub struct SeedApi {
    pub dir: PathBuf,
    pub server: Option<ApiServer>,
    store: Child,
    pub admin: Client,
    pub url: String,
    args: Vec<String>,
    bin: PathBuf,
}

impl std::fmt::Debug for SeedApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeedApi")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for SeedApi {
    fn drop(&mut self) {
        let _ = self.store.kill();
        let _ = self.store.wait();
    }
}

impl SeedApi {
    /// Starts the store and kube-apiserver in `seed` (files under `dir`) and waits until ready.
    pub async fn start(bin: &Path, seed: &Seed, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let ca = pki::ca(dir)?;
        let ip = seed.seed_ip.to_string();
        pki::leaf(&ca, dir, "serving", &[&ip, "kubernetes.default.svc"])?;
        let sa = rcgen::KeyPair::generate()?;
        write(&dir.join("sa.key"), &sa.serialize_pem())?;
        write(&dir.join("sa.pub"), &sa.public_key_pem())?;
        let token = crate::api::files::random_token();
        write(
            &dir.join("tokens.csv"),
            &format!("{token},isthmus-lab,isthmus-lab,system:masters\n"),
        )?;
        let store = start_store(seed, dir)?;
        let args = ApiServerFlags {
            etcd_servers: format!("http://127.0.0.1:{STORE_CLIENT}"),
            address: seed.seed_ip.into(),
            port: PORT,
            cert_dir: dir.join("certs"),
            serving: (dir.join("serving.crt"), dir.join("serving.key")),
            auth: ApiServerAuth::TokenFile(dir.join("tokens.csv")),
            issuer: CLUSTER_ISSUER.into(),
            service_account: (dir.join("sa.pub"), dir.join("sa.key")),
        }
        .args();
        let url = format!("https://{ip}:{PORT}");
        let admin_path = dir.join("admin.kubeconfig");
        write_kubeconfig(&admin_path, &url, &dir.join("ca.crt"), &token)?;
        let admin = kubeconfig_client(&admin_path).await?;
        let addr = SocketAddr::from((seed.seed_ip, PORT));
        let log = dir.join("kube-apiserver.log");
        let server = ApiServer::spawn(bin, seed, addr, &args, log, &admin).await?;
        Ok(Self {
            dir: dir.to_path_buf(),
            server: Some(server),
            store,
            admin,
            url,
            args,
            bin: bin.to_path_buf(),
        })
    }

    /// Stops kube-apiserver (SIGTERM, as kubelet stops a pod) and starts it again on the same
    /// store; returns once it is ready.
    pub async fn restart(&mut self, seed: &Seed) -> Result<String> {
        let how = match self.server.take() {
            Some(s) => s.stop().await?,
            None => "not running".into(),
        };
        let addr = SocketAddr::from((seed.seed_ip, PORT));
        let log = self.dir.join("kube-apiserver.log");
        let s = ApiServer::spawn(&self.bin, seed, addr, &self.args, log, &self.admin).await?;
        self.server = Some(s);
        Ok(how)
    }

    /// A kubeconfig (bearer token from a TokenRequest) for ServiceAccount `namespace/name`:
    /// what a pod of that ServiceAccount gets mounted.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> Result<PathBuf> {
        let token = service_account_token(&self.admin, namespace, name)
            .await
            .map_err(|e| Error::State(format!("TokenRequest for {namespace}/{name}: {e}")))?
            .ok_or_else(|| {
                Error::State(format!("TokenRequest for {namespace}/{name}: no token"))
            })?;
        let path = self.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
        write_kubeconfig(&path, &self.url, &self.dir.join("ca.crt"), &token)?;
        Ok(path)
    }
}

fn start_store(seed: &Seed, dir: &Path) -> Result<Child> {
    let bin = store_binary();
    let log_path = dir.join("store.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io(log_path.display(), e))?;
    let client = format!("http://127.0.0.1:{STORE_CLIENT}");
    let peer = format!("http://127.0.0.1:{STORE_PEER}");
    seed.command(&bin.display().to_string())
        .args(["--name", "store", "--data-dir"])
        .arg(dir.join("store.data"))
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("store={peer}")])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| Error::Command {
            command: format!("{} in {}", bin.display(), seed.label),
            detail: e.to_string(),
        })
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path.display(), e))
}
