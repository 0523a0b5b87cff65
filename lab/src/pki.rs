//! The demo's TLS material, generated at run time: one CA and a peer certificate per etcd member.

use crate::error::{Error, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::Path;

/// A throwaway CA.
pub struct Pki {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pki")
    }
}

impl Pki {
    /// A new CA; writes `ca.crt` into `dir`.
    pub fn new(dir: &Path) -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "isthmus lab CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        write(&dir.join("ca.crt"), &issuer.pem())?;
        Ok(Self { issuer })
    }

    /// The CA certificate (DER), for clients that take roots as bytes.
    pub fn ca_der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// Writes `<stem>.crt` / `<stem>.key` for a member's DNS names (exposed and in-cluster),
    /// usable as peer server and client.
    pub fn member(&self, dir: &Path, stem: &str, dns_names: &[&str]) -> Result<()> {
        self.leaf(dir, stem, dns_names)
    }

    /// Writes `<stem>.crt` / `<stem>.key` for `names` (DNS names or IP addresses; the first is
    /// the common name), usable as server and client.
    pub fn leaf(&self, dir: &Path, stem: &str, names: &[&str]) -> Result<()> {
        let sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(sans)?;
        if let Some(cn) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *cn);
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        write(&dir.join(format!("{stem}.crt")), &cert.pem())?;
        write(&dir.join(format!("{stem}.key")), &key.serialize_pem())
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path.display(), e))
}
