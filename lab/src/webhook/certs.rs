//! The tunnel's TLS material, from one throwaway CA: files for the tunnel processes, rustls
//! configurations for the parties that run in the lab process (the callers and the webhook).

use super::{VPN_NAME, WEBHOOK_NAME, WEBHOOK_SERVICE_NAME};
use crate::error::{Error, Result};
use crate::pki;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the PEM files are.
#[derive(Debug, Clone)]
pub(super) struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// `seed_ips`: where the seeds' kube-apiservers reach their tunnel server's CONNECT
    /// endpoint (kube-apiserver's egress selector checks the URL's host, an address).
    pub(super) fn new(dir: &Path, seed_ips: &[Ipv4Addr]) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let ca = pki::ca(dir)?;
        let ips: Vec<String> = seed_ips.iter().map(|ip| ip.to_string()).collect();
        let mut server: Vec<&str> = vec![VPN_NAME];
        server.extend(ips.iter().map(String::as_str));
        pki::leaf(&ca, dir, "tunnel-server", &server)?;
        pki::leaf(&ca, dir, "tunnel-agent", &["vpn-shoot"])?;
        pki::leaf(&ca, dir, "kube-apiserver", &["kube-apiserver"])?;
        // kube-apiserver checks a service-referenced webhook against `<service>.<namespace>.svc`.
        pki::leaf(&ca, dir, "webhook", &[WEBHOOK_NAME, WEBHOOK_SERVICE_NAME])?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    pub(super) fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// `(certificate, key)` of `stem`.
    pub(super) fn pair(&self, stem: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{stem}.crt")),
            self.dir.join(format!("{stem}.key")),
        )
    }
}

/// TLS of the parties in the lab process.
#[derive(Debug, Clone)]
pub(super) struct LabTls {
    /// kube-apiserver to a tunnel server's CONNECT endpoint (mTLS).
    pub(super) connect: Arc<rustls::ClientConfig>,
    /// kube-apiserver to the webhook, through the tunnel.
    pub(super) to_webhook: Arc<rustls::ClientConfig>,
    /// The webhook's server side.
    pub(super) webhook: Arc<rustls::ServerConfig>,
}

impl LabTls {
    pub(super) fn new(certs: &Certs) -> Result<Self> {
        let client = |alpn: &[&[u8]]| -> Result<Arc<rustls::ClientConfig>> {
            // The tunnel's client builder (TLS 1.3, client certificate) with the caller's ALPN.
            let (crt, key) = certs.pair("kube-apiserver");
            let base = isthmus_tunnel::tls::agent_config(&certs.ca(), &crt, &key)?;
            let mut c = (*base).clone();
            c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
            Ok(Arc::new(c))
        };
        let (crt, key) = certs.pair("webhook");
        Ok(Self {
            connect: client(&[])?,
            to_webhook: client(&[b"http/1.1"])?,
            // kube-apiserver presents its client certificate to webhooks that ask for one.
            webhook: isthmus_tunnel::tls::server_config(&crt, &key, &certs.ca(), &[b"http/1.1"])?,
        })
    }
}
