//! The server's TLS: a certificate from a directory (re-read when it changes) or
//! self-signed, and the minimum protocol version.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

use crate::Error;

/// The certificate file of a certificate directory (PEM, leaf first).
pub const CERT_FILE: &str = "tls.crt";
/// The key file of a certificate directory (PEM: PKCS#8, PKCS#1 or SEC1).
pub const KEY_FILE: &str = "tls.key";

/// The lowest TLS version accepted (MetalLB's `--tls-min-version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMinVersion {
    /// `VersionTLS12`: TLS 1.2 and 1.3.
    Tls12,
    /// `VersionTLS13` (and the flag's default, empty): TLS 1.3 only.
    #[default]
    Tls13,
}

impl FromStr for TlsMinVersion {
    type Err = Error;

    /// The values of MetalLB's flag: `VersionTLS12`, `VersionTLS13`, or empty for the
    /// default (TLS 1.3). `VersionTLS10`/`VersionTLS11` are refused (rustls has neither).
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "" | "VersionTLS13" => Ok(TlsMinVersion::Tls13),
            "VersionTLS12" => Ok(TlsMinVersion::Tls12),
            _ => Err(Error::TlsMinVersion(s.to_string())),
        }
    }
}

/// Where the certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// [`CERT_FILE`] and [`KEY_FILE`] in this directory (MetalLB's `--metrics-cert-dir`).
    Dir(PathBuf),
    /// A certificate made at start and signed by its own key, for these subject alternative
    /// names (each an IP address or a DNS name; none means `localhost`).
    SelfSigned {
        /// The subject alternative names.
        names: Vec<String>,
    },
}

/// The TLS settings of the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// The certificate.
    pub cert: CertSource,
    /// The lowest protocol version.
    pub min_version: TlsMinVersion,
}

/// A ready TLS configuration and the certificate it serves.
///
/// Cheap to clone (shared). With [`CertSource::Dir`], [`ServerTls::reload`] re-reads the
/// files when they changed (the server calls it every few seconds).
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    resolver: Arc<Resolver>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("dir", &self.resolver.dir.as_ref().map(|d| &d.path))
            .finish_non_exhaustive()
    }
}

/// When the files of a directory last changed, as far as metadata tells.
type Stamp = [Option<(SystemTime, u64)>; 2];

struct CertDir {
    path: PathBuf,
    stamp: Mutex<Stamp>,
}

/// Hands out the current certificate; swapped on reload.
struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
    dir: Option<CertDir>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

fn stamp(dir: &Path) -> Stamp {
    [CERT_FILE, KEY_FILE].map(|f| {
        std::fs::metadata(dir.join(f))
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    })
}

/// Reads `tls.crt` and `tls.key` of `dir` into a certificate.
fn load_dir(dir: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, Error> {
    let cert_path = dir.join(CERT_FILE);
    let key_path = dir.join(KEY_FILE);
    let chain = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| Error::Pem {
            path: cert_path.clone(),
            source,
        })?;
    if chain.is_empty() {
        return Err(Error::NoCertificate { path: cert_path });
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|source| Error::Pem {
        path: key_path.clone(),
        source,
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|source| Error::Certificate {
        cert: cert_path,
        key: key_path,
        source,
    })
}

/// A self-signed certificate for `names`, valid from an hour ago for a year.
fn self_signed(names: &[String], provider: &CryptoProvider) -> Result<CertifiedKey, Error> {
    let names = if names.is_empty() {
        vec!["localhost".to_string()]
    } else {
        names.to_vec()
    };
    let mut params = rcgen::CertificateParams::new(names.clone())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, names[0].clone());
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - Duration::from_secs(3600);
    params.not_after = now + Duration::from_secs(365 * 24 * 3600);
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    CertifiedKey::from_der(vec![cert.der().clone()], key_der, provider).map_err(Error::Tls)
}

impl ServerTls {
    /// Loads or makes the certificate and builds the server configuration (HTTP/1.1 by
    /// ALPN, no client certificates).
    pub fn new(opts: &TlsOptions) -> Result<ServerTls, Error> {
        let provider = provider();
        let (key, dir) = match &opts.cert {
            CertSource::Dir(path) => {
                let before = stamp(path);
                let key = load_dir(path, &provider)?;
                let dir = CertDir {
                    path: path.clone(),
                    stamp: Mutex::new(before),
                };
                tracing::info!(dir = %path.display(), "TLS certificate loaded");
                (key, Some(dir))
            }
            CertSource::SelfSigned { names } => {
                let key = self_signed(names, &provider)?;
                tracing::info!(names = ?names, "TLS certificate is self-signed");
                (key, None)
            }
        };
        let resolver = Arc::new(Resolver {
            current: RwLock::new(Arc::new(key)),
            dir,
        });
        let versions: &[&'static rustls::SupportedProtocolVersion] = match opts.min_version {
            TlsMinVersion::Tls13 => &[&rustls::version::TLS13],
            TlsMinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        };
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .map_err(Error::Tls)?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            config: Arc::new(config),
            resolver,
        })
    }

    /// The configuration to accept connections with.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// The leaf certificate served now (to trust a self-signed one, or to log its
    /// fingerprint).
    pub fn certificate(&self) -> CertificateDer<'static> {
        let current = self
            .resolver
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        current.cert[0].clone()
    }

    /// Serves this certificate (PEM chain, leaf first) and key (PEM) from now on, for a
    /// caller that manages the certificate itself (the controller's webhook, whose
    /// certificate it rotates in a Secret). The previous one is kept on error.
    pub fn replace_pem(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), Error> {
        let source = || PathBuf::from("(in memory)");
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Pem {
                path: source(),
                source: e,
            })?;
        if chain.is_empty() {
            return Err(Error::NoCertificate { path: source() });
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| Error::Pem {
            path: source(),
            source: e,
        })?;
        let key =
            CertifiedKey::from_der(chain, key, &provider()).map_err(|e| Error::Certificate {
                cert: source(),
                key: source(),
                source: e,
            })?;
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }

    /// Whether the certificate comes from a directory (and so may be reloaded).
    pub fn reloads(&self) -> bool {
        self.resolver.dir.is_some()
    }

    /// Re-reads the directory's files if their modification time or size changed since
    /// they were last read: `Ok(true)` when a new certificate is served from now on,
    /// `Ok(false)` when nothing changed (or the certificate is self-signed), an error (and
    /// the previous certificate kept) when the new files do not make a certificate; they
    /// are tried again at the next change.
    pub fn reload(&self) -> Result<bool, Error> {
        let Some(dir) = &self.resolver.dir else {
            return Ok(false);
        };
        let now = stamp(&dir.path);
        {
            let mut last = dir.stamp.lock().unwrap_or_else(|e| e.into_inner());
            if *last == now {
                return Ok(false);
            }
            *last = now;
        }
        let key = load_dir(&dir.path, &provider())?;
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        tracing::info!(dir = %dir.path.display(), "metrics TLS certificate reloaded");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_version_flag_values() {
        assert_eq!("".parse::<TlsMinVersion>().unwrap(), TlsMinVersion::Tls13);
        assert_eq!(
            "VersionTLS13".parse::<TlsMinVersion>().unwrap(),
            TlsMinVersion::Tls13
        );
        assert_eq!(
            "VersionTLS12".parse::<TlsMinVersion>().unwrap(),
            TlsMinVersion::Tls12
        );
        for bad in ["VersionTLS11", "VersionTLS10", "tls12", "1.2"] {
            let err = bad.parse::<TlsMinVersion>().unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn replace_pem_swaps_the_served_certificate_and_keeps_it_on_error() {
        let tls = ServerTls::new(&TlsOptions {
            cert: CertSource::SelfSigned { names: vec![] },
            min_version: TlsMinVersion::Tls13,
        })
        .expect("self-signed");
        let before = tls.certificate();
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["webhook.example".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        tls.replace_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
            .expect("replaced");
        assert_eq!(tls.certificate(), *cert.der());
        assert_ne!(tls.certificate(), before);
        // A key that is not the certificate's, and no certificate: refused, kept.
        let other = rcgen::KeyPair::generate().expect("key");
        assert!(
            tls.replace_pem(cert.pem().as_bytes(), other.serialize_pem().as_bytes())
                .is_err()
        );
        assert!(
            tls.replace_pem(b"", key.serialize_pem().as_bytes())
                .is_err()
        );
        assert_eq!(tls.certificate(), *cert.der());
    }

    #[test]
    fn self_signed_names_and_errors() {
        let tls = ServerTls::new(&TlsOptions {
            cert: CertSource::SelfSigned {
                names: vec!["localhost".into(), "192.0.2.7".into()],
            },
            min_version: TlsMinVersion::Tls13,
        })
        .unwrap();
        assert!(!tls.reloads());
        assert!(!tls.reload().unwrap());
        // The DER holds the DNS name and the 4 bytes of the IP address.
        let der = tls.certificate();
        let der = der.as_ref();
        assert!(der.windows(9).any(|w| w == b"localhost"));
        assert!(der.windows(4).any(|w| w == [192, 0, 2, 7]));

        let err = ServerTls::new(&TlsOptions {
            cert: CertSource::SelfSigned {
                names: vec!["bücher.example".into()],
            },
            min_version: TlsMinVersion::Tls13,
        })
        .unwrap_err();
        assert!(matches!(err, Error::SelfSigned(_)), "{err:?}");
    }

    #[test]
    fn missing_or_bad_dir_is_an_error() {
        let dir = std::env::temp_dir().join(format!("kube-metrics-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let opts = TlsOptions {
            cert: CertSource::Dir(dir.clone()),
            min_version: TlsMinVersion::Tls13,
        };
        let err = ServerTls::new(&opts).unwrap_err();
        assert!(
            matches!(&err, Error::Pem { path, .. } if path.ends_with(CERT_FILE)),
            "{err:?}"
        );
        // A certificate with the key of another one.
        let a = rcgen::generate_simple_self_signed(vec!["a".to_string()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".to_string()]).unwrap();
        std::fs::write(dir.join(CERT_FILE), a.cert.pem()).unwrap();
        std::fs::write(dir.join(KEY_FILE), b.signing_key.serialize_pem()).unwrap();
        let err = ServerTls::new(&opts).unwrap_err();
        assert!(matches!(err, Error::Certificate { .. }), "{err:?}");
        // An empty certificate file.
        std::fs::write(dir.join(CERT_FILE), "").unwrap();
        let err = ServerTls::new(&opts).unwrap_err();
        assert!(matches!(err, Error::NoCertificate { .. }), "{err:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
