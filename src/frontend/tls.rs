//! TLS for client connections (rustls), built once from the configured PEM files.

use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsSettings;

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot read TLS file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("no certificate found in {0}")]
    NoCertificate(String),
    #[error("no private key found in {0}")]
    NoKey(String),
    #[error("invalid TLS certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

pub fn acceptor(settings: &TlsSettings) -> Result<TlsAcceptor, TlsSetupError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|source| TlsSetupError::Read {
            path: p.display().to_string(),
            source,
        })
    };
    let cert_pem = read(&settings.cert)?;
    let key_pem = read(&settings.key)?;
    let certs = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsSetupError::Read {
            path: settings.cert.display().to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate(
            settings.cert.display().to_string(),
        ));
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|source| TlsSetupError::Read {
            path: settings.key.display().to_string(),
            source,
        })?
        .ok_or_else(|| TlsSetupError::NoKey(settings.key.display().to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
