//! Errors of the tunnel library: what stopped it from starting (TLS files, configuration,
//! sockets) or a session from being set up.

use std::path::PathBuf;

/// Why the tunnel could not start or a session could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A TLS file could not be read or parsed.
    #[error("{}: {message}", path.display())]
    TlsFile {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        message: String,
    },
    /// rustls refused the configuration (e.g. key does not match certificate).
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// Building the client-certificate verifier failed (e.g. an empty CA file).
    #[error("client CA: {0}")]
    ClientCa(#[from] rustls::server::VerifierBuilderError),
    /// A socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The HTTP CONNECT proxy in front of a tunnel server refused us.
    #[error("HTTP CONNECT proxy answered {0:?}")]
    ProxyRefused(String),
    /// HTTP/2 failed on a session.
    #[error("HTTP/2: {0}")]
    Http2(#[from] h2::Error),
    /// The configuration file could not be read again (a reload).
    #[error(transparent)]
    Config(#[from] isthmus_config::LoadError),
    /// A server name is not a valid DNS name or IP address.
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
}

impl Error {
    /// An [`Error::Io`] with context.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
