//! TLS for `https://` endpoints: rustls (ring provider) on the watcher's own `TcpStream`, so
//! `stop()` still ends a blocked read by shutting the socket underneath.
//!
//! Server certificates are checked against the CA bundle of [`TlsConfig::ca_file`], or, without
//! one, the system's bundle (the first of the usual files that exists: Debian/Ubuntu,
//! Fedora/RHEL, Alpine/macOS layouts). A client certificate ([`TlsConfig::cert_file`] and
//! [`TlsConfig::key_file`]) is sent when the server asks, as etcd does with
//! `--client-cert-auth` (Kubernetes' etcd always does).

use crate::Error;
use crate::http::Endpoint;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Files for TLS: a CA bundle to verify the server, and optionally a client certificate and key
/// (PEM).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// CA certificates (PEM) the server's certificate must chain to; `None`: the system's.
    pub ca_file: Option<PathBuf>,
    /// The client certificate chain (PEM), for servers that require one.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1); `None`: in
    /// `cert_file`, after the certificate.
    pub key_file: Option<PathBuf>,
}

impl TlsConfig {
    /// TLS verified against the CA bundle in `ca_file`.
    pub fn with_ca(ca_file: impl Into<PathBuf>) -> TlsConfig {
        TlsConfig {
            ca_file: Some(ca_file.into()),
            ..TlsConfig::default()
        }
    }

    /// Adds a client certificate and its key (mutual TLS).
    pub fn client_cert(mut self, cert_file: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(cert_file.into());
        self.key_file = Some(key.into());
        self
    }

    /// Reads the files and builds rustls' configuration; a missing or unreadable file, or one
    /// without what it should hold, is an [`Error::Config`] naming it.
    pub(crate) fn load(&self) -> Result<Arc<rustls::ClientConfig>, Error> {
        let mut roots = rustls::RootCertStore::empty();
        let ca_file = match &self.ca_file {
            Some(file) => file.clone(),
            None => system_bundle()?,
        };
        let cas = certificates(&ca_file, "CA bundle")?;
        let (added, _) = roots.add_parsable_certificates(cas);
        if added == 0 {
            return Err(Error::Config(format!(
                "CA bundle {}: no usable CA certificate in it",
                ca_file.display()
            )));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let config = match (&self.cert_file, &self.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), key) => {
                let chain = certificates(cert, "client certificate")?;
                let key = key.as_ref().unwrap_or(cert);
                let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    Error::Config(format!("client key {}: {}", key.display(), pem_error(&e)))
                })?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    Error::Config(format!(
                        "client certificate {} and key {} do not go together: {e}",
                        cert.display(),
                        key.display()
                    ))
                })?
            }
            (None, Some(_)) => {
                return Err(Error::Config(
                    "a client key without a client certificate (cert_file, --cert)".into(),
                ));
            }
        };
        Ok(Arc::new(config))
    }
}

fn certificates(file: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bad = |why: String| Error::Config(format!("{what} {}: {why}", file.display()));
    std::fs::metadata(file).map_err(|e| bad(e.to_string()))?;
    let certs = CertificateDer::pem_file_iter(file)
        .map_err(|e| bad(pem_error(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(pem_error(&e)))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok(certs)
}

fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind".into(),
        other => format!("not valid PEM ({other:?})"),
    }
}

/// The system's CA bundle: the first of the usual places that exists.
fn system_bundle() -> Result<PathBuf, Error> {
    const PLACES: [&str; 4] = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
        "/etc/ssl/ca-bundle.pem",
    ];
    PLACES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::Config(format!(
                "https without a CA file, and no system CA bundle (looked in {}): give one \
                 (TlsConfig::ca_file, --cacert)",
                PLACES.join(", ")
            ))
        })
}

/// A client session for `host` (a name, or an IP address the certificate must list).
pub(crate) fn connect(
    config: &Arc<rustls::ClientConfig>,
    host: &str,
) -> Result<rustls::ClientConnection, Error> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|_| Error::Config(format!("{host:?} is not a valid TLS server name")))?;
    rustls::ClientConnection::new(config.clone(), name)
        .map_err(|e| Error::Config(format!("TLS: {e}")))
}

/// An I/O error from a connection: a TLS failure becomes [`Error::Tls`] saying what to check;
/// anything else stays [`Error::Io`].
pub(crate) fn explain(e: io::Error, endpoint: &Endpoint) -> Error {
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return Error::Io {
            endpoint: endpoint.url.clone(),
            source: e,
        };
    };
    use rustls::{AlertDescription as A, CertificateError as C, Error as T};
    let why = match tls {
        T::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => format!(
            "the server's certificate is not signed by a trusted CA ({tls}); check the CA \
             bundle (TlsConfig::ca_file, --cacert)"
        ),
        T::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => format!(
            "the server's certificate does not name {:?} ({tls})",
            endpoint.host
        ),
        T::InvalidCertificate(_) => format!("the server's certificate is refused: {tls}"),
        T::AlertReceived(
            A::CertificateRequired | A::BadCertificate | A::HandshakeFailure | A::UnknownCA,
        ) => format!(
            "the server refused the TLS handshake ({tls}): it wants a client certificate it \
             trusts (TlsConfig::cert_file/key_file, --cert/--key)"
        ),
        T::InvalidMessage(_) | T::InappropriateMessage { .. } => {
            format!("no TLS answer ({tls}): is {} really https?", endpoint.url)
        }
        other => format!("TLS failed: {other}"),
    };
    Error::Tls {
        endpoint: endpoint.url.clone(),
        reason: why,
    }
}
