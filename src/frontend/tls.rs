//! TLS for client connections (rustls), built once from the configured PEM files.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsSettings;
use crate::protocol::packet::PacketReader;

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

/// The client's connection after its SSL request packet, upgraded to TLS: the handshake runs on
/// the bytes the packet reader took past that packet, then on the connection.
pub async fn upgrade<S: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &TlsAcceptor,
    client: PacketReader<S>,
) -> io::Result<PacketReader<tokio_rustls::server::TlsStream<Rewound<S>>>> {
    let (stream, read_past_request) = client.into_parts();
    let tls = acceptor
        .accept(Rewound::new(read_past_request, stream))
        .await?;
    Ok(PacketReader::new(tls))
}

/// A connection with bytes already read from it put back in front: a client may send its TLS
/// ClientHello in the same segment as the SSL request packet (the protocol allows it, and
/// mysqlnd sometimes does), so bytes the packet reader took past that packet belong to the TLS
/// handshake.
pub struct Rewound<S> {
    read_first: BytesMut,
    inner: S,
}

impl<S> Rewound<S> {
    pub fn new(read_first: BytesMut, inner: S) -> Rewound<S> {
        Rewound { read_first, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.read_first.is_empty() {
            let n = self.read_first.len().min(buf.remaining());
            buf.put_slice(&self.read_first[..n]);
            self.read_first.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
