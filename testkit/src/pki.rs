//! A throwaway certificate authority (rcgen) issuing server and client certificates.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::{Path, PathBuf};

/// A CA that signs leaf certificates for tests.
pub struct TestPki {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestPki")
    }
}

/// A certificate with its key, in the forms rustls and files want.
#[derive(Debug, Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: CertificateDer<'static>,
    pub key_der: Vec<u8>,
}

impl Identity {
    /// The key in the type rustls configs take.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// Writes `<stem>.crt` and `<stem>.key` into `dir` and returns their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }
}

impl Default for TestPki {
    fn default() -> Self {
        Self::new()
    }
}

impl TestPki {
    /// A new CA with a fresh key.
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "isthmus test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    /// The CA certificate (DER).
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes `ca.crt` into `dir` and returns its path.
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.crt");
        std::fs::write(&path, self.ca_pem()).unwrap();
        path
    }

    /// A certificate for these DNS names / IP addresses, usable as server and client.
    pub fn server_cert(&self, names: &[&str]) -> Identity {
        self.issue(names, names.first().copied().unwrap_or("server"))
    }

    /// A client certificate with this common name.
    pub fn client_cert(&self, cn: &str) -> Identity {
        self.issue(&[cn], cn)
    }

    fn issue(&self, names: &[&str], cn: &str) -> Identity {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }
}
