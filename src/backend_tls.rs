//! TLS to the backend (issue 23): `?ssl-mode=` and `?ssl-ca=` in the `--backend` URL, with the
//! modes and meanings of MySQL's own clients (`--ssl-mode`):
//!
//! - `DISABLED` (the default): plain TCP.
//! - `PREFERRED`: TLS when the server offers it, without checking its certificate; plain otherwise.
//!   The message engine's and the binlog watcher's connections stay plain in this mode (their
//!   driver cannot fall back).
//! - `REQUIRED`: TLS or no connection; the certificate is not checked (unless `ssl-ca` is given,
//!   which makes it `VERIFY_CA`, as for MySQL's clients).
//! - `VERIFY_CA`: TLS with a certificate signed by the `ssl-ca` file's authorities, any name.
//! - `VERIFY_IDENTITY`: `VERIFY_CA`, and the certificate names the URL's host.
//!
//! The client sessions' connections, the engine's pool and the binlog watcher all follow it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme,
};

/// How the proxy uses TLS to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disabled,
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl SslMode {
    /// The mode a URL names, in any case (`verify_identity`, `VERIFY-IDENTITY` too).
    pub fn parse(text: &str) -> Option<SslMode> {
        Some(match text.to_ascii_uppercase().replace('-', "_").as_str() {
            "DISABLED" => SslMode::Disabled,
            "PREFERRED" => SslMode::Preferred,
            "REQUIRED" => SslMode::Required,
            "VERIFY_CA" => SslMode::VerifyCa,
            "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyCa => "VERIFY_CA",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }

    /// Whether a server without TLS is refused.
    pub fn required(self) -> bool {
        !matches!(self, SslMode::Disabled | SslMode::Preferred)
    }
}

/// The backend's TLS settings, with the client configuration made from them once.
#[derive(Clone)]
pub struct BackendTls {
    pub mode: SslMode,
    /// PEM file of the authorities the server's certificate must be signed by.
    pub ca: Option<PathBuf>,
    config: Option<Arc<ClientConfig>>,
}

impl PartialEq for BackendTls {
    fn eq(&self, other: &Self) -> bool {
        self.mode == other.mode && self.ca == other.ca
    }
}

impl Eq for BackendTls {}

impl std::fmt::Debug for BackendTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ssl-mode={}", self.mode.name())?;
        if let Some(ca) = &self.ca {
            write!(f, " ssl-ca={}", ca.display())?;
        }
        Ok(())
    }
}

impl Default for BackendTls {
    fn default() -> Self {
        BackendTls {
            mode: SslMode::Disabled,
            ca: None,
            config: None,
        }
    }
}

impl BackendTls {
    /// Settings for `mode` and `ca`; the CA file is read now, so a wrong path fails at start.
    /// `REQUIRED` with a CA file is `VERIFY_CA`, as for MySQL's clients.
    pub fn new(mode: SslMode, ca: Option<PathBuf>) -> Result<BackendTls, String> {
        let mode = match (mode, &ca) {
            (SslMode::Required, Some(_)) => SslMode::VerifyCa,
            (SslMode::VerifyCa | SslMode::VerifyIdentity, None) => {
                return Err(format!(
                    "ssl-mode={} needs ssl-ca=/path/to/ca.pem (the authorities that signed the server's certificate)",
                    mode.name()
                ))
            }
            _ => mode,
        };
        let provider = Arc::new(crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (mode, &ca) {
            (SslMode::Disabled, _) => {
                return Ok(BackendTls {
                    mode,
                    ca,
                    config: None,
                })
            }
            (SslMode::VerifyCa | SslMode::VerifyIdentity, Some(path)) => {
                let roots = Arc::new(read_roots(path)?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| format!("ssl-ca={}: {e}", path.display()))?;
                if mode == SslMode::VerifyCa {
                    Arc::new(AnyName(webpki))
                } else {
                    webpki
                }
            }
            _ => Arc::new(AnyCertificate(provider.clone())),
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS to the backend: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(BackendTls {
            mode,
            ca,
            config: Some(Arc::new(config)),
        })
    }

    /// The client configuration, `None` when TLS is off.
    pub fn config(&self) -> Option<Arc<ClientConfig>> {
        self.config.clone()
    }

    /// The same settings for mysql_async (the engine's pool, the binlog watcher); `None` for
    /// plain connections (`PREFERRED` too: that driver cannot fall back to plain).
    pub fn mysql_async_opts(&self) -> Option<mysql_async::SslOpts> {
        let opts = mysql_async::SslOpts::default();
        match self.mode {
            SslMode::Disabled | SslMode::Preferred => None,
            SslMode::Required => Some(opts.with_danger_accept_invalid_certs(true)),
            SslMode::VerifyCa | SslMode::VerifyIdentity => Some(
                opts.with_root_certs(self.ca.iter().map(|p| p.clone().into()).collect::<Vec<_>>())
                    .with_disable_built_in_roots(true)
                    .with_danger_skip_domain_validation(self.mode == SslMode::VerifyCa),
            ),
        }
    }
}

/// The authorities of a PEM file.
fn read_roots(path: &Path) -> Result<RootCertStore, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("ssl-ca={}: {e}", path.display()))?;
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut std::io::BufReader::new(file)) {
        let cert = cert.map_err(|e| format!("ssl-ca={}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("ssl-ca={}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "ssl-ca={}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(roots)
}

/// `VERIFY_CA`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `PREFERRED` and `REQUIRED`: any certificate (the connection is encrypted, the server not
/// authenticated), its signatures still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_as_mysql_clients_spell_them() {
        for (text, mode) in [
            ("disabled", SslMode::Disabled),
            ("PREFERRED", SslMode::Preferred),
            ("Required", SslMode::Required),
            ("verify_ca", SslMode::VerifyCa),
            ("VERIFY-IDENTITY", SslMode::VerifyIdentity),
        ] {
            assert_eq!(SslMode::parse(text), Some(mode), "{text}");
        }
        assert_eq!(SslMode::parse("on"), None);
    }

    #[test]
    fn verifying_needs_a_ca_file_that_exists() {
        assert!(BackendTls::new(SslMode::VerifyIdentity, None).is_err());
        assert!(BackendTls::new(SslMode::VerifyCa, Some("/nonexistent/ca.pem".into())).is_err());
        let required = BackendTls::new(SslMode::Required, None).expect("required");
        assert!(required.config().is_some());
        assert!(BackendTls::new(SslMode::Disabled, None)
            .expect("disabled")
            .config()
            .is_none());
    }
}
