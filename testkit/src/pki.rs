//! A throwaway certificate authority (rcgen) issuing server and client certificates, and
//! rustls configurations built from it.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A certificate and its private key, in DER and PEM.
#[derive(Debug)]
pub struct CertKey {
    /// Certificate chain, leaf first (just the leaf: the CA is in the trust store).
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key (PKCS#8).
    pub key: PrivateKeyDer<'static>,
    /// The certificate as PEM.
    pub cert_pem: String,
    /// The private key as PEM.
    pub key_pem: String,
}

impl CertKey {
    /// Writes `NAME.crt` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        self.try_write(dir, name).unwrap()
    }

    /// [`write`](Self::write) for callers that report errors instead of panicking (the lab).
    pub fn try_write(&self, dir: &Path, name: &str) -> std::io::Result<(PathBuf, PathBuf)> {
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, &self.cert_pem)?;
        std::fs::write(&k, &self.key_pem)?;
        Ok((c, k))
    }
}

/// A throw-away CA that issues server and client certificates.
#[derive(Debug)]
pub struct TestPki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Default for TestPki {
    fn default() -> Self {
        Self::new()
    }
}

impl TestPki {
    /// A new CA named "isthmus test CA".
    pub fn new() -> Self {
        Self::try_new().unwrap()
    }

    /// [`new`](Self::new) for callers that report errors instead of panicking (the lab).
    pub fn try_new() -> Result<Self, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name = dn("isthmus test CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Self { ca })
    }

    /// The CA certificate.
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.ca.der().clone()
    }

    /// The CA certificate as PEM.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// Writes the CA certificate as `ca.crt` into `dir`.
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        self.try_write_ca(dir).unwrap()
    }

    /// [`write_ca`](Self::write_ca) for callers that report errors instead of panicking.
    pub fn try_write_ca(&self, dir: &Path) -> std::io::Result<PathBuf> {
        let p = dir.join("ca.crt");
        std::fs::write(&p, self.ca_pem())?;
        Ok(p)
    }

    /// A trust store holding just this CA.
    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der()).unwrap();
        roots
    }

    /// A server certificate for DNS names and/or IP addresses (`"127.0.0.1"` becomes an IP SAN).
    pub fn server_cert(&self, names: &[&str]) -> CertKey {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params.distinguished_name = dn(names.first().map_or("server", String::as_str));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A certificate usable as server *and* client, as etcd peers use theirs (each member
    /// dials the others with the certificate it serves).
    pub fn peer_cert(&self, names: &[&str]) -> CertKey {
        self.try_peer_cert(names).unwrap()
    }

    /// [`peer_cert`](Self::peer_cert) for callers that report errors instead of panicking.
    pub fn try_peer_cert(&self, names: &[&str]) -> Result<CertKey, rcgen::Error> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names.clone())?;
        params.distinguished_name = dn(names.first().map_or("peer", String::as_str));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.try_issue(params)
    }

    /// A client certificate with common name `cn`.
    pub fn client_cert(&self, cn: &str) -> CertKey {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn(cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    /// A client certificate with common name `cn` and organization `group` (Kubernetes reads
    /// CN as the user name and O as a group: `system:masters` makes an admin). rcgen keeps one
    /// value per attribute type, hence one group.
    pub fn client_cert_in_group(&self, cn: &str, group: &str) -> CertKey {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn(cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, group);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> CertKey {
        self.try_issue(params).unwrap()
    }

    fn try_issue(&self, params: CertificateParams) -> Result<CertKey, rcgen::Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca)?;
        Ok(CertKey {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A rustls server config presenting `cert`; with `client_auth`, clients must present a
    /// certificate from this CA. ALPN: `alpn` (empty for none).
    pub fn server_config(
        &self,
        cert: &CertKey,
        client_auth: bool,
        alpn: &[&str],
    ) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if client_auth {
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(self.roots()),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(v)
        } else {
            builder.with_no_client_auth()
        };
        let mut c = builder
            .with_single_cert(cert.chain.clone(), cert.key.clone_key())
            .unwrap();
        c.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        Arc::new(c)
    }

    /// A rustls client config trusting this CA, presenting `client` if given.
    pub fn client_config(&self, client: Option<&CertKey>, alpn: &[&str]) -> Arc<ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(self.roots());
        let mut c = match client {
            Some(ck) => builder
                .with_client_auth_cert(ck.chain.clone(), ck.key.clone_key())
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        c.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        Arc::new(c)
    }
}

fn dn(cn: &str) -> DistinguishedName {
    let mut d = DistinguishedName::new();
    d.push(DnType::CommonName, cn);
    d
}
