//! Turning a client away at connect with an error it shows as it is: too many clients (1040),
//! or the backend out of reach (1429).
//!
//! The error comes as the server sends an ordinary user's 1040: after a greeting, in reply to the
//! client's login, with its SQLSTATE. Sent in place of the greeting it carried no SQLSTATE, and
//! libmariadb clients that want TLS (the `mariadb` client by default) showed it wrapped in
//! "Received error packet before completion of TLS handshake". The greeting is the proxy's own
//! (no backend is asked), and it offers TLS when the proxy has a certificate, so that a client
//! that insists on TLS also gets the error rather than "server does not support TLS". At most
//! [`MAX_GREETING`] refusals greet at once; past that the error comes in place of the greeting.

use std::sync::Arc;
use std::time::Duration;

use mysql_common::constants::{CapabilityFlags, StatusFlags};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::greeting::proxy_version;
use crate::protocol::auth::new_nonce;
use crate::protocol::handshake::{ssl_request_capabilities, Greeting, NATIVE_PASSWORD};
use crate::protocol::packet::{write_packet, PacketReader};
use crate::protocol::wire::ErrorPacket;

/// Most refusals greeting their clients at once. A refusal is wanted when the proxy is already
/// overloaded, and clients retrying in a loop would have it spend its CPU on greetings and TLS
/// handshakes: past this many, a client gets the error in place of the greeting and the
/// connection closes at once, as the server does past its one extra connection for a SUPER user.
pub const MAX_GREETING: usize = 32;

/// Largest login a refused client may send (a real one is a few hundred bytes).
const MAX_LOGIN: usize = 1 << 16;

/// How the proxy turns clients away; cheap to clone, one per proxy.
#[derive(Clone)]
pub struct Refusals {
    tls: Option<TlsAcceptor>,
    /// How long a refused client has, from its greeting, to log in (TLS included): the
    /// `handshake_timeout` an admitted client has.
    wait: Duration,
    greeting: Arc<Semaphore>,
}

impl Refusals {
    pub fn new(tls: Option<TlsAcceptor>, wait: Duration, max_greeting: usize) -> Refusals {
        Refusals {
            tls,
            wait,
            greeting: Arc::new(Semaphore::new(max_greeting)),
        }
    }

    /// Greets the client, takes its login (over TLS if it asks and the proxy has a
    /// certificate), and answers it with `err`; past [`MAX_GREETING`] refusals at once, sends
    /// `err` in place of the greeting. Whatever goes wrong with the client just ends the
    /// connection.
    pub async fn refuse<S>(self, mut client: S, err: ErrorPacket)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let Ok(_greeting) = self.greeting.try_acquire_owned() else {
            // Before any greeting the protocol has no SQLSTATE to give.
            let _ = write_packet(&mut client, 0, &err.encode(false)).await;
            return;
        };
        let refusal = greet_then_refuse(client, self.tls, &err);
        let _ = tokio::time::timeout(self.wait, refusal).await;
    }
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
            let mut client = super::tls::upgrade(&acceptor, client).await?;
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
        // Anything else, a TLS request the greeting did not invite (no certificate) included,
        // is answered in plain text, as the server answers that one (with 1043).
        _ => write_packet(client.get_mut(), reply_seq, &err.encode(true))
            .await
            .map(drop),
    }
}

/// The refusal's greeting: the proxy's version marker on a MariaDB-style version (no backend
/// was asked for its own), native passwords, TLS only when it can be given.
fn greeting(offer_tls: bool) -> Vec<u8> {
    let version = proxy_version(b"5.5.5");
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
    use crate::frontend::greeting::VERSION_SUFFIX;
    use crate::protocol::handshake::BackendGreeting;
    use tokio::io::{duplex, AsyncReadExt, DuplexStream};

    fn err() -> ErrorPacket {
        ErrorPacket::new(1040, "08004", "Too many connections")
    }

    async fn read_packet(client: &mut DuplexStream) -> (u8, Vec<u8>) {
        let mut header = [0u8; 4];
        client.read_exact(&mut header).await.expect("a header");
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        let mut payload = vec![0u8; len];
        client.read_exact(&mut payload).await.expect("a payload");
        (header[3], payload)
    }

    async fn send_packet(client: &mut DuplexStream, seq: u8, payload: &[u8]) {
        write_packet(client, seq, payload).await.expect("send");
    }

    /// An SSL request: the 32 bytes a client sends before its TLS handshake.
    fn ssl_request() -> Vec<u8> {
        let caps = CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SSL
            | CapabilityFlags::CLIENT_SECURE_CONNECTION;
        let mut p = caps.bits().to_le_bytes().to_vec();
        p.extend_from_slice(&(16u32 << 20).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[0; 23]);
        p
    }

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

    #[tokio::test]
    async fn the_error_answers_the_login_with_its_sql_state() {
        let refusals = Refusals::new(None, Duration::from_secs(5), 4);
        for first in [vec![0x8d; 40], ssl_request()] {
            let (mut client, proxy) = duplex(1 << 16);
            let refusal = tokio::spawn(refusals.clone().refuse(proxy, err()));
            let (seq, greeting) = read_packet(&mut client).await;
            assert_eq!((seq, greeting[0]), (0, 10), "a protocol-10 greeting first");
            // A login, or a TLS request though TLS was not offered: either way the error comes
            // in plain text, after the packet, with its SQLSTATE.
            send_packet(&mut client, 1, &first).await;
            let (seq, reply) = read_packet(&mut client).await;
            assert_eq!(seq, 2);
            assert_eq!(reply, err().encode(true).to_vec());
            refusal.await.expect("the refusal ends");
        }
    }

    #[tokio::test]
    async fn past_the_limit_the_error_comes_in_place_of_the_greeting() {
        let refusals = Refusals::new(None, Duration::from_secs(30), 1);
        // The one greeting refusal waits for a login that does not come.
        let (mut silent, proxy) = duplex(1 << 16);
        let waiting = tokio::spawn(refusals.clone().refuse(proxy, err()));
        let (seq, _) = read_packet(&mut silent).await;
        assert_eq!(seq, 0);
        let (mut next, proxy) = duplex(1 << 16);
        refusals.clone().refuse(proxy, err()).await;
        let (seq, reply) = read_packet(&mut next).await;
        assert_eq!(seq, 0);
        assert_eq!(
            reply,
            err().encode(false).to_vec(),
            "no SQLSTATE before a greeting"
        );
        // Once the first is done, greetings come again.
        drop(silent);
        waiting
            .await
            .expect("the refusal ends when its client goes");
        let (mut later, proxy) = duplex(1 << 16);
        let refusal = tokio::spawn(refusals.clone().refuse(proxy, err()));
        let (seq, greeting) = read_packet(&mut later).await;
        assert_eq!((seq, greeting[0]), (0, 10));
        drop(later);
        refusal.await.expect("the refusal ends");
    }
}
