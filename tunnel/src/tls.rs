//! rustls configurations from PEM files: TLS 1.3 only, mutual authentication everywhere.

use crate::Error;
use prometheus_client::metrics::counter::Counter;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore,
    ServerConfig, SignatureScheme,
};
use std::path::Path;
use std::sync::Arc;

/// ALPN of agent sessions.
pub const ALPN_H2: &[u8] = b"h2";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::TlsFile {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in file"));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(path, e))
}

fn roots(path: &Path) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for c in certs(path)? {
        roots.add(c).map_err(|e| file_error(path, e))?;
    }
    Ok(roots)
}

/// A TLS 1.3 server config that requires client certificates chaining to `client_ca`.
pub fn server_config(
    cert: &Path,
    key_path: &Path,
    client_ca: &Path,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>, Error> {
    server_config_for_names(cert, key_path, client_ca, alpn, &[], Counter::default())
}

/// Like [`server_config`], and when `names` is not empty the client certificate must also
/// carry one of those DNS names, exactly, as a subject alternative name: a certificate of the
/// right CA for another name, or for a wildcard that would cover it (`*.shoot--a.example` for
/// `agent.shoot--a.example`), fails the handshake and counts in `refused`.
pub fn server_config_for_names(
    cert: &Path,
    key_path: &Path,
    client_ca: &Path,
    alpn: &[&[u8]],
    names: &[String],
    refused: Counter,
) -> Result<Arc<ServerConfig>, Error> {
    let webpki =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots(client_ca)?), provider())
            .build()?;
    let verifier: Arc<dyn ClientCertVerifier> = if names.is_empty() {
        webpki
    } else {
        let names = names
            .iter()
            .map(|n| match ServerName::try_from(n.as_str()) {
                Ok(ServerName::DnsName(_)) if !n.contains('*') => Ok(n.to_ascii_lowercase()),
                _ => Err(Error::TlsFile {
                    path: client_ca.to_owned(),
                    message: format!("allowed client name {n:?}: not an exact DNS name"),
                }),
            })
            .collect::<Result<_, _>>()?;
        Arc::new(NameCheck {
            inner: webpki,
            names,
            refused,
        })
    };
    let mut c = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(cert)?, key(key_path)?)?;
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Ok(Arc::new(c))
}

/// The CA's verdict, then the name: one of the certificate's DNS names must equal one of
/// `names` (ASCII case aside). Not the check a TLS client makes of a server's name, which
/// lets a wildcard certificate stand for every name under it: a client name identifies one
/// agent (or one kube-apiserver), and a certificate issued for a whole domain is not it.
#[derive(Debug)]
struct NameCheck {
    inner: Arc<dyn ClientCertVerifier>,
    /// Lower case.
    names: Vec<String>,
    refused: Counter,
}

impl NameCheck {
    fn allows(&self, end_entity: &CertificateDer<'_>) -> bool {
        // The chain is already verified; this only reads the names it was issued for.
        let Ok(cert) = webpki::EndEntityCert::try_from(end_entity) else {
            return false;
        };
        cert.valid_dns_names()
            .any(|san| self.names.iter().any(|n| n.eq_ignore_ascii_case(san)))
    }
}

impl ClientCertVerifier for NameCheck {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.allows(end_entity) {
            return Ok(verified);
        }
        self.refused.inc();
        Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The agent's TLS 1.3 client config: trusts `ca`, presents `cert`/`key`, offers ALPN `h2`.
pub fn agent_config(ca: &Path, cert: &Path, key_path: &Path) -> Result<Arc<ClientConfig>, Error> {
    let mut c = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(ca)?)
        .with_client_auth_cert(certs(cert)?, key(key_path)?)?;
    c.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(Arc::new(c))
}
