//! What the shoot's kube-apiservers read at start: their serving certificate (valid for the
//! shoot API's DNS name and both seeds' addresses), the service-account key pair, a token file
//! for the lab's clients, each seed's `EgressSelectorConfiguration` and the admission
//! configuration that gives kube-apiserver its client certificate for the webhook.

use crate::error::{Error, Result};
use crate::pki;
use crate::webhook::Egress;
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The files, under `dir`.
#[derive(Debug, Clone)]
pub struct Files {
    pub dir: PathBuf,
    /// Serving certificate and key.
    pub serving: (PathBuf, PathBuf),
    /// The token the lab's clients present (`system:masters`).
    pub token: String,
    pub tokens: PathBuf,
    /// Service-account signing key and public key.
    pub sa: (PathBuf, PathBuf),
    pub admission: PathBuf,
    /// The audit policy: one `Metadata` event per request of the load and the watch.
    pub audit_policy: PathBuf,
}

impl Files {
    /// Writes everything but the egress files (those need the tunnel, [`Files::write_egress`]).
    pub fn new(dir: &Path, seed_ips: &[Ipv4Addr], webhook: &Egress) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
        let ca = pki::ca(dir)?;
        let mut names: Vec<String> = vec![super::API_NAME.into(), "kubernetes.default.svc".into()];
        names.extend(seed_ips.iter().map(|ip| ip.to_string()));
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        pki::leaf(&ca, dir, "kube-apiserver-serving", &refs)?;
        let sa = rcgen::KeyPair::generate()?;
        let sa_paths = (dir.join("sa.key"), dir.join("sa.pub"));
        write(&sa_paths.0, &sa.serialize_pem())?;
        write(&sa_paths.1, &sa.public_key_pem())?;
        let token = random_token();
        let tokens = dir.join("tokens.csv");
        write(
            &tokens,
            &format!("{token},isthmus-lab,isthmus-lab,system:masters\n"),
        )?;
        let kubeconfig = dir.join("webhook.kubeconfig");
        write(
            &kubeconfig,
            &webhook_kubeconfig(&webhook.cert, &webhook.key),
        )?;
        let admission = dir.join("admission.yaml");
        write(&admission, &admission_config(&kubeconfig))?;
        let audit_policy = dir.join("audit-policy.yaml");
        write(&audit_policy, AUDIT_POLICY)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            serving: (
                dir.join("kube-apiserver-serving.crt"),
                dir.join("kube-apiserver-serving.key"),
            ),
            token,
            tokens,
            sa: sa_paths,
            admission,
            audit_policy,
        })
    }

    /// Seed `label`'s audit log (see [`AUDIT_POLICY`]).
    pub fn audit_log(&self, label: &str) -> PathBuf {
        self.dir.join(format!("audit-{label}.log"))
    }

    /// The egress file of seed `label`.
    pub fn egress(&self, label: &str) -> PathBuf {
        self.dir.join(format!("egress-{label}.yaml"))
    }

    /// Writes seed `label`'s egress: the `cluster` network (service-referenced webhooks, logs,
    /// exec) over HTTPConnect with mTLS to the seed's tunnel server.
    pub fn write_egress(&self, label: &str, e: &Egress) -> Result<()> {
        let url = format!("https://{}", e.connect);
        write(
            &self.egress(label),
            &egress_config(&url, &e.ca, &e.cert, &e.key),
        )
    }
}

/// kube-apiserver's `EgressSelectorConfiguration`: the `cluster` network (service-referenced
/// webhooks, logs, exec) over HTTPConnect to `url` (`https://host:port`, a tunnel server's
/// CONNECT front), trusting `ca`, with the client certificate `cert`/`key`. Also the shoot's
/// kube-apiserver pods' (tests/seeds/shoot_webhook.rs), with the paths they mount.
pub fn egress_config(url: &str, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\n\
         egressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    \
         transport:\n      tcp:\n        url: {url}\n        tlsConfig:\n          \
         caBundle: {}\n          clientCert: {}\n          clientKey: {}\n",
        ca.display(),
        cert.display(),
        key.display()
    )
}

/// kube-apiserver's client certificate towards webhooks: a kubeconfig whose user `*` matches
/// every webhook (WebhookAdmissionConfiguration).
pub fn webhook_kubeconfig(cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    \
         client-certificate: {}\n    client-key: {}\n",
        cert.display(),
        key.display()
    )
}

/// The `AdmissionConfiguration` that gives the validating webhooks' plugin `kubeconfig`
/// ([`webhook_kubeconfig`]).
pub fn admission_config(kubeconfig: &Path) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n\
         - name: ValidatingAdmissionWebhook\n  configuration:\n    \
         apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    \
         kubeConfigFile: {}\n",
        kubeconfig.display()
    )
}

/// What kube-apiserver audits: the load's and the watch's requests (ConfigMaps in the load's
/// namespace) at `Metadata`, nothing else. Each event carries the server's own view of the
/// request (received, answered, code), which the report sets beside what the client measured
/// (`api::audit`).
pub const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
rules:\n- level: Metadata\n  namespaces: [lab-load]\n  resources: [{group: \"\", resources: [configmaps]}]\n\
- level: None\n";

/// An unguessable token without a random-number crate: std's `RandomState` keys SipHash from
/// the OS's random source (128 bits, once per thread, stepped per instance), so its outputs
/// cannot be predicted without that key.
pub fn random_token() -> String {
    let word = || {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    format!("{:016x}{:016x}", word(), word())
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path.display(), e))
}
