use std::net::SocketAddr;
use std::path::PathBuf;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem;

/// Why the metrics server could not be set up. None of them carries a bearer token.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--tls-min-version` is not one the server supports.
    #[error(
        "unsupported TLS minimum version {0:?}: VersionTLS12 or VersionTLS13 (empty means VersionTLS13)"
    )]
    TlsMinVersion(String),
    /// A PEM file of the certificate directory could not be read or parsed.
    #[error("reading {}: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: pem::Error,
    },
    /// `tls.crt` holds no certificate.
    #[error("{}: no certificate in it", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// `tls.crt` and `tls.key` do not make a usable certificate (unsupported key, or a key
    /// that is not the certificate's).
    #[error("{} and {}: {source}", cert.display(), key.display())]
    Certificate {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
    /// The self-signed certificate could not be made (a name that is neither a DNS name nor
    /// an IP address, for example).
    #[error("making a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    /// The TLS configuration was refused by rustls.
    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
    /// The listening socket could not be bound.
    #[error("binding the metrics server to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}
