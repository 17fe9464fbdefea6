//! Turning a client away at connect with an error it shows as it is: too many clients (1040),
//! or the backend out of reach (1429).
//!
//! The error comes as the server sends an ordinary user's 1040: after a greeting, in reply to the
//! client's login, with its SQLSTATE. Sent in place of the greeting it carried no SQLSTATE, and
//! libmariadb clients that want TLS (the `mariadb` client by default) showed it wrapped in
//! "Received error packet before completion of TLS handshake". The greeting is the proxy's own
//! (no backend is asked), and it offers TLS when the proxy has a certificate, so that a client
//! that insists on TLS also gets the error rather than "server does not support TLS".

use std::time::Duration;

use mysql_common::constants::{CapabilityFlags, StatusFlags};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

use super::login::VERSION_SUFFIX;
use crate::protocol::auth::new_nonce;
use crate::protocol::handshake::{ssl_request_capabilities, Greeting, NATIVE_PASSWORD};
use crate::protocol::packet::{write_packet, PacketReader};
use crate::protocol::wire::ErrorPacket;

/// How long a refused client has, from its greeting, to log in (TLS upgrade included) before
/// its connection is simply closed: a flood of refused clients holds nothing for long.
const REFUSAL_WAIT: Duration = Duration::from_secs(3);

/// Largest login a refused client may send (a real one is a few hundred bytes).
const MAX_LOGIN: usize = 1 << 16;

/// Greets the client, takes its login (over TLS if it asks and `tls` is there), and answers it
/// with `err`. Whatever goes wrong with the client meanwhile just ends the connection.
pub async fn refuse<S>(client: S, tls: Option<TlsAcceptor>, err: ErrorPacket)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _ = tokio::time::timeout(REFUSAL_WAIT, greet_then_refuse(client, tls, &err)).await;
}

async fn greet_then_refuse<S>(
    client: S,
    tls: Option<TlsAcceptor>,
    err: &ErrorPacket,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut client = PacketReader::new(client);
    write_packet(client.get_mut(), 0, &greeting(tls.is_some())).await?;
    let first = client.next_logical_packet(MAX_LOGIN).await?;
    let reply_seq = first.seq.wrapping_add(1);
    match (ssl_request_capabilities(&first.payload), tls) {
        (Some(_), Some(acceptor)) => {
            let (stream, read_past_request) = client.into_parts();
            let stream = super::tls::Rewound::new(read_past_request, stream);
            let mut client = PacketReader::new(acceptor.accept(stream).await?);
            let login = client.next_logical_packet(MAX_LOGIN).await?;
            write_packet(
                client.get_mut(),
                login.seq.wrapping_add(1),
                &err.encode(true),
            )
            .await?;
            // close_notify, so the client reads the error rather than a truncated TLS stream.
            client.get_mut().shutdown().await
        }
        // A TLS request the greeting did not invite (no certificate): the client cannot read
        // anything but TLS from here on, so the connection just ends, as the server ends it.
        (Some(_), None) => Ok(()),
        (None, _) => write_packet(client.get_mut(), reply_seq, &err.encode(true))
            .await
            .map(drop),
    }
}

/// The refusal's greeting: the proxy's version marker on a MariaDB-style version (no backend
/// was asked for its own), native passwords, TLS only when it can be given.
fn greeting(offer_tls: bool) -> Vec<u8> {
    let mut version = b"5.5.5".to_vec();
    version.extend_from_slice(VERSION_SUFFIX);
    let mut capabilities = CapabilityFlags::CLIENT_LONG_PASSWORD
        | CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH;
    capabilities.set(CapabilityFlags::CLIENT_SSL, offer_tls);
    Greeting {
        server_version: &version,
        connection_id: 0,
        nonce: &new_nonce(),
        capabilities,
        collation: 45, // utf8mb4_general_ci
        status: StatusFlags::SERVER_STATUS_AUTOCOMMIT.bits(),
        auth_plugin: NATIVE_PASSWORD,
        mariadb_capabilities: 0,
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::handshake::BackendGreeting;

    #[test]
    fn the_greeting_offers_tls_only_when_it_can_be_given() {
        for offer in [false, true] {
            let parsed = BackendGreeting::parse(&greeting(offer)).expect("a greeting");
            assert_eq!(
                parsed.capabilities.contains(CapabilityFlags::CLIENT_SSL),
                offer
            );
            assert!(parsed
                .capabilities
                .contains(CapabilityFlags::CLIENT_PROTOCOL_41));
            assert!(parsed.server_version.ends_with(VERSION_SUFFIX));
        }
    }
}
