//! The flags every kube-apiserver of the project starts with: testkit's own ([`crate::kube`]),
//! and the lab's seed and shoot API servers, which add their own on top (egress, admission,
//! feature gates). One list, so that a flag learnt the hard way reaches every one of them.

use std::net::IpAddr;
use std::path::PathBuf;

/// How callers authenticate to the API server (besides ServiceAccount tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiServerAuth {
    /// `--client-ca-file`: client certificates of this CA (testkit's admin).
    ClientCa(PathBuf),
    /// `--token-auth-file`: the static bearer tokens of this CSV file (the lab's clients).
    TokenFile(PathBuf),
}

/// What differs between the project's kube-apiservers; everything else is fixed in
/// [`ApiServerFlags::args`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServerFlags {
    /// `--etcd-servers`: client URLs, comma-separated.
    pub etcd_servers: String,
    /// `--bind-address` and `--advertise-address`.
    pub address: IpAddr,
    /// `--secure-port`.
    pub port: u16,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    /// `--tls-cert-file` and `--tls-private-key-file`.
    pub serving: (PathBuf, PathBuf),
    pub auth: ApiServerAuth,
    /// `--service-account-issuer`.
    pub issuer: String,
    /// `--service-account-key-file` (public) and `--service-account-signing-key-file`.
    pub service_account: (PathBuf, PathBuf),
}

/// The issuer of testkit's and the seeds' API servers (the shoot's names its own).
pub const CLUSTER_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

impl ApiServerFlags {
    /// The command line: these values, RBAC, a service range of `10.0.0.0/24`, no endpoint
    /// reconciler, no profiling, `--v=1`.
    pub fn args(&self) -> Vec<String> {
        let d = |p: &PathBuf| p.display().to_string();
        let auth = match &self.auth {
            ApiServerAuth::ClientCa(p) => format!("--client-ca-file={}", d(p)),
            ApiServerAuth::TokenFile(p) => format!("--token-auth-file={}", d(p)),
        };
        vec![
            format!("--etcd-servers={}", self.etcd_servers),
            format!("--bind-address={}", self.address),
            format!("--advertise-address={}", self.address),
            format!("--secure-port={}", self.port),
            format!("--cert-dir={}", d(&self.cert_dir)),
            format!("--tls-cert-file={}", d(&self.serving.0)),
            format!("--tls-private-key-file={}", d(&self.serving.1)),
            auth,
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer={}", self.issuer),
            format!("--service-account-key-file={}", d(&self.service_account.0)),
            format!(
                "--service-account-signing-key-file={}",
                d(&self.service_account.1)
            ),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            // The default reconciler writes the `kubernetes` Endpoints, which reject a loopback
            // address; nothing here reads them (and two kube-apiservers of one shoot sharing an
            // etcd during the handover would fight over them).
            "--endpoint-reconciler-type=none".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_of_every_kube_apiserver_and_what_differs() {
        let flags = ApiServerFlags {
            etcd_servers: "http://127.0.0.1:2379".into(),
            address: IpAddr::from([127, 0, 0, 1]),
            port: 6443,
            cert_dir: "/d/certs".into(),
            serving: ("/d/apiserver.crt".into(), "/d/apiserver.key".into()),
            auth: ApiServerAuth::ClientCa("/d/ca.crt".into()),
            issuer: CLUSTER_ISSUER.into(),
            service_account: ("/d/sa.pub".into(), "/d/sa.key".into()),
        };
        assert_eq!(
            flags.args(),
            [
                "--etcd-servers=http://127.0.0.1:2379",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--secure-port=6443",
                "--cert-dir=/d/certs",
                "--tls-cert-file=/d/apiserver.crt",
                "--tls-private-key-file=/d/apiserver.key",
                "--client-ca-file=/d/ca.crt",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file=/d/sa.pub",
                "--service-account-signing-key-file=/d/sa.key",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
            ]
        );
        let tokens = ApiServerFlags {
            auth: ApiServerAuth::TokenFile("/d/tokens.csv".into()),
            ..flags
        };
        assert!(tokens
            .args()
            .contains(&"--token-auth-file=/d/tokens.csv".to_string()));
        assert!(!tokens.args().iter().any(|a| a.starts_with("--client-ca")));
    }
}
