//! One etcd CA for Gardener's secrets manager and the test's etcd: the shoot's `ca-etcd`, as a
//! live migration carries it from the source seed to the destination (Gardener keeps it in
//! the ShootState). Gardener's secrets manager takes a CA's data over from a Secret labelled
//! `secrets-manager-use-data-for-name: <config>` when it first generates that config (gardener
//! v1.149.3 `pkg/utils/secrets/manager/generate.go`, `keepExistingSecretsIfNeeded`), so
//! `Deploy`'s `etcd-client-<hash>` and `ca-etcd-bundle-<hash>` are issued by this CA, and the
//! controller reaches the test's etcd with exactly the Secrets the `Etcd` names: the members'
//! certificates are this CA's too, and it is all they trust (the seed world's
//! `Loopback::cluster_of_ca`). Gardener reads only PKCS#1 RSA keys (`pkg/utils/encoding.go`,
//! `DecodePrivateKey`), which rcgen does not make: `openssl` does.

use isthmus_seed_world::etcd::MemberCa;
use isthmus_testkit::Scratch;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// The CA, PEM: certificate and PKCS#1 key, and the directory `openssl` issues in.
pub struct EtcdCa {
    pub cert: String,
    pub key: String,
    dir: Scratch,
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

impl EtcdCa {
    /// A new `ca-etcd`.
    pub fn new() -> Self {
        let dir = Scratch::new("ca-etcd");
        let d = dir.path();
        openssl(d, &["genrsa", "-traditional", "-out", "ca.key", "2048"]);
        openssl(
            d,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "ca.key",
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
                "ca.crt",
            ],
        );
        let cert = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
        let key = std::fs::read_to_string(dir.join("ca.key")).unwrap();
        EtcdCa { cert, key, dir }
    }

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

impl MemberCa for EtcdCa {
    fn ca_pem(&self) -> String {
        self.cert.clone()
    }

    /// An etcd member's certificate for `names` (server and client, as etcd peers use theirs).
    fn peer_pem(&self, names: &[&str]) -> (String, String) {
        let d = self.dir.path();
        openssl(d, &["genrsa", "-out", "member.key", "2048"]);
        openssl(
            d,
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
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(_) => format!("IP:{n}"),
                Err(_) => format!("DNS:{n}"),
            })
            .collect();
        let ext = format!(
            "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=CA:FALSE\n",
            sans.join(",")
        );
        std::fs::write(d.join("member.ext"), ext).unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "member.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
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
        let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
        (read("member.crt"), read("member.key"))
    }
}
