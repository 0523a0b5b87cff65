//! rustls configurations from PEM files: TLS 1.3 only, mutual authentication everywhere.

use crate::Error;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
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
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots(client_ca)?), provider())
            .build()?;
    let mut c = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(cert)?, key(key_path)?)?;
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Ok(Arc::new(c))
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
