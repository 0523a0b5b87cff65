//! One etcd CA for Gardener's secrets manager and the test's etcd: the shoot's `ca-etcd`, as a
//! live migration carries it from the source seed to the destination (Gardener keeps it in
//! the ShootState). Gardener's secrets manager takes a CA's data over from a Secret labelled
//! `secrets-manager-use-data-for-name: <config>` when it first generates that config (gardener
//! v1.149.3 `pkg/utils/secrets/manager/generate.go`, `keepExistingSecretsIfNeeded`), so
//! `Deploy`'s `etcd-client-<hash>` and `ca-etcd-bundle-<hash>` are issued by this CA, and the
//! controller reaches the test's etcd with exactly the Secrets the `Etcd` names. Gardener
//! reads only PKCS#1 RSA keys (`pkg/utils/encoding.go`, `DecodePrivateKey`), which rcgen does
//! not make: `openssl` does.

use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// The CA, PEM: certificate and PKCS#1 key.
pub struct EtcdCa {
    pub cert: String,
    pub key: String,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes the CA in `dir` and, signed by it, the etcd members' certificate for `names` (server
/// and client, as etcd peers use theirs) over `member.crt`/`member.key`; appends the CA to
/// `ca.crt`, the bundle every member and `etcdctl` trust (the test's own CA stays in it).
/// Call before the first member starts (`common::etcd::TestEtcd` reads these files then).
pub fn issue_for_etcd(dir: &Path, names: &[String]) -> EtcdCa {
    openssl(
        dir,
        &["genrsa", "-traditional", "-out", "gardener-ca.key", "2048"],
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "gardener-ca.key",
            "-sha256",
            "-days",
            "2",
            "-subj",
            "/CN=ca-etcd",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-out",
            "gardener-ca.crt",
        ],
    );
    openssl(dir, &["genrsa", "-out", "member.key", "2048"]);
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "member.key",
            "-subj",
            "/CN=etcd-member",
            "-out",
            "member.csr",
        ],
    );
    let sans: Vec<String> = names
        .iter()
        .map(|n| format!("DNS:{n}"))
        .chain(["DNS:localhost".into(), "IP:127.0.0.1".into()])
        .collect();
    let ext = format!(
        "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=CA:FALSE\n",
        sans.join(",")
    );
    std::fs::write(dir.join("member.ext"), ext).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "member.csr",
            "-CA",
            "gardener-ca.crt",
            "-CAkey",
            "gardener-ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-sha256",
            "-extfile",
            "member.ext",
            "-out",
            "member.crt",
        ],
    );
    let cert = std::fs::read_to_string(dir.join("gardener-ca.crt")).unwrap();
    let key = std::fs::read_to_string(dir.join("gardener-ca.key")).unwrap();
    let mut bundle = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    bundle.push_str(&cert);
    std::fs::write(dir.join("ca.crt"), bundle).unwrap();
    EtcdCa { cert, key }
}

impl EtcdCa {
    /// The Secret the secrets manager takes `ca-etcd`'s data from.
    pub fn takeover_secret(&self, namespace: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "isthmus-test-ca-etcd", "namespace": namespace,
                         "labels": {"secrets-manager-use-data-for-name": "ca-etcd"}},
            "stringData": {"ca.crt": self.cert, "ca.key": self.key},
        })
    }
}
