//! The connection phase of one client: greeting, optional TLS upgrade, the proxy's own password
//! check, then the login to the backend with the client's session settings.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use mysql_common::constants::CapabilityFlags;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use super::context::Context;
use super::greeting::proxy_version;
use super::peer::Peer;
use super::pool::{Checkout, PoolKey, Ticket, Warm};
use super::session::Session;
use super::spares::Fresh;
use crate::backend::{unsupported_capabilities, Backend, LoginReply};
use crate::config::Secret;
use crate::protocol::auth::{self, Plugin};
use crate::protocol::commands::*;
use crate::protocol::handshake::{self, Greeting, HandshakeResponse, NATIVE_PASSWORD};
use crate::protocol::packet::{write_packet, Packet, PacketReader};
use crate::protocol::wire::ErrorPacket;

/// Serves one client connection from accept to close.
pub async fn serve<S>(ctx: Arc<Context>, stream: S, peer: Peer)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The backend connection comes first so the client's connection id can be the backend's
    // thread id: CONNECTION_ID(), the process list and KILL then agree without translation. It
    // is one a client that did not log in left (`spares`) when there is one: a client that never
    // logs in costs the server nothing.
    let warm = ctx.pool.take_any().await;
    let fresh = match warm {
        Some(warm) => Ok(Greeter::Warm(Box::new(warm))),
        None => ctx
            .spares
            .take(ctx.config.backend_connect_timeout)
            .await
            .map(|fresh| Greeter::Fresh(Box::new(fresh))),
    };
    let fresh = match fresh {
        Ok(b) => b,
        Err(e) => {
            ctx.metrics
                .backend_error(crate::metrics::BackendErrorKind::Connect);
            tracing::warn!(%peer, "refusing client: {e}");
            let err = match e {
                crate::backend::BackendError::Refused(err) => with_connect_sql_state(err),
                // Never a client-range code such as CR_CONN_HOST_ERROR (2003): libmariadb
                // clients would show "malformed packet" instead of this message (commands.rs).
                other => ErrorPacket::new(
                    ER_CONNECT_TO_FOREIGN_DATA_SOURCE,
                    "08004",
                    format!("msgproxy cannot reach its backend MySQL server ({}): {other}; retry when it is back", ctx.backend_target().address()),
                ),
            };
            ctx.refusals.clone().refuse(stream, err).await;
            return;
        }
    };
    let handshake_timeout = ctx.config.handshake_timeout;
    // Taken from here only to log in; if the client never gets that far (closed, timed out,
    // refused) it is still here, untouched, for the next client.
    let mut unused = Some(fresh);
    let login = connection_phase(ctx.clone(), PacketReader::new(stream), &mut unused, peer);
    let outcome = tokio::time::timeout(handshake_timeout, login).await;
    match unused {
        Some(Greeter::Fresh(fresh)) => ctx.spares.give_back(*fresh),
        Some(Greeter::Warm(warm)) => ctx.pool.put_back(*warm),
        None => {}
    }
    match outcome {
        Ok(Ok(Some(session))) => session.run_boxed().await,
        Ok(Ok(None)) => {}
        Ok(Err(e)) => debug!(%peer, "handshake failed: {e}"),
        Err(_) => debug!(%peer, "handshake timed out"),
    }
}

/// The backend's own refusal at connect (sent in place of its greeting, so without a SQLSTATE),
/// with the SQLSTATE the server gives that error once the protocol has one to give.
fn with_connect_sql_state(mut err: ErrorPacket) -> ErrorPacket {
    if err.code == ER_CON_COUNT_ERROR {
        err.sql_state = *b"08004";
    }
    err
}

/// The backend connection a client is greeted with (its thread id is in the greeting).
pub enum Greeter {
    /// Connected, never logged in (`spares`).
    Fresh(Box<Fresh>),
    /// Logged in and reset (`pool`): it serves the client if the client's settings match.
    Warm(Box<Warm>),
}

impl Greeter {
    fn backend(&self) -> &Backend {
        match self {
            Greeter::Fresh(f) => &f.backend,
            Greeter::Warm(w) => &w.backend,
        }
    }
}

/// A session ready to run, whatever stream the client ended up on.
pub enum ReadySession<S> {
    Plain(Box<Session<S>>),
    Tls(Box<Session<tokio_rustls::server::TlsStream<super::tls::Rewound<S>>>>),
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> ReadySession<S> {
    async fn run_boxed(self) {
        match self {
            ReadySession::Plain(s) => s.run().await,
            ReadySession::Tls(s) => s.run().await,
        }
    }
}

/// The capabilities the proxy offers a client: the backend's, minus what the relay does not
/// support, plus TLS when configured.
fn offered_capabilities(ctx: &Context, backend: &Backend) -> CapabilityFlags {
    let mut caps = backend.greeting.capabilities - unsupported_capabilities();
    caps |= CapabilityFlags::CLIENT_PROTOCOL_41
        | CapabilityFlags::CLIENT_SECURE_CONNECTION
        | CapabilityFlags::CLIENT_PLUGIN_AUTH;
    caps.set(CapabilityFlags::CLIENT_SSL, ctx.tls.is_some());
    caps
}

/// The connection phase with `backend`, which stays in its slot until the client has passed the
/// proxy's checks and the backend login begins.
async fn connection_phase<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: Arc<Context>,
    mut client: PacketReader<S>,
    backend: &mut Option<Greeter>,
    peer: Peer,
) -> std::io::Result<Option<ReadySession<S>>> {
    let Some(greeted) = backend.as_ref().map(Greeter::backend) else {
        return Ok(None);
    };
    let nonce = auth::new_nonce();
    let offered = offered_capabilities(&ctx, greeted);
    let version = proxy_version(&greeted.greeting.server_version);
    let greeting = Greeting {
        server_version: &version,
        connection_id: greeted.greeting.connection_id,
        nonce: &nonce,
        capabilities: offered,
        collation: greeted.greeting.collation,
        status: greeted.greeting.status,
        auth_plugin: NATIVE_PASSWORD,
        mariadb_capabilities: greeted.greeting.mariadb_capabilities
            & crate::backend::SUPPORTED_MARIADB_CAPABILITIES,
    };
    write_packet(client.get_mut(), 0, &greeting.encode()).await?;
    let first = client.next_logical_packet(1 << 20).await?;
    if let Some(_caps) = handshake::ssl_request_capabilities(&first.payload) {
        let Some(acceptor) = ctx.tls.clone() else {
            let err = ErrorPacket::new(
                ER_HANDSHAKE_ERROR,
                "08S01",
                "TLS was requested but msgproxy has no TLS certificate configured",
            );
            write_packet(
                client.get_mut(),
                first.seq.wrapping_add(1),
                &err.encode(true),
            )
            .await?;
            return Ok(None);
        };
        let mut client = super::tls::upgrade(&acceptor, client).await?;
        let response = client.next_logical_packet(1 << 20).await?;
        let session =
            authenticate(ctx, client, response, backend, nonce, offered, peer, true).await?;
        return Ok(session.map(|s| ReadySession::Tls(Box::new(s))));
    }
    let session = authenticate(ctx, client, first, backend, nonce, offered, peer, false).await?;
    Ok(session.map(|s| ReadySession::Plain(Box::new(s))))
}

#[allow(clippy::too_many_arguments)]
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    ctx: Arc<Context>,
    mut client: PacketReader<S>,
    response_packet: Packet,
    backend: &mut Option<Greeter>,
    nonce: [u8; 20],
    offered: CapabilityFlags,
    peer: Peer,
    secure: bool,
) -> std::io::Result<Option<Session<S>>> {
    let mut seq = response_packet.seq.wrapping_add(1);
    let response = match HandshakeResponse::parse(&response_packet.payload) {
        Ok(r) => r,
        Err(e) => {
            let err = ErrorPacket::new(ER_HANDSHAKE_ERROR, "08S01", format!("Bad handshake: {e}"));
            write_packet(client.get_mut(), seq, &err.encode(true)).await?;
            return Ok(None);
        }
    };
    // mysqlnd (PHP's MYSQLI_CLIENT_COMPRESS, PDO::MYSQL_ATTR_COMPRESS) asks for compression
    // though the greeting does not offer it, and then compresses every packet, which the
    // proxy cannot read: the client saw "Unknown command", then "MySQL server has gone away".
    // Refused here, before the client starts compressing, with what to do.
    if response.capabilities.intersects(
        CapabilityFlags::CLIENT_COMPRESS | CapabilityFlags::CLIENT_ZSTD_COMPRESSION_ALGORITHM,
    ) {
        let err = ErrorPacket::new(
            ER_HANDSHAKE_ERROR,
            "08S01",
            "msgproxy does not support the compressed protocol; connect without compression",
        );
        write_packet(client.get_mut(), seq, &err.encode(true)).await?;
        return Ok(None);
    }
    // A Unix socket is secure transport, as for the server's `require_secure_transport`: it
    // never leaves the host.
    if ctx.config.require_tls && !secure && !matches!(peer, Peer::Socket) {
        let err = ErrorPacket::new(
            ER_SECURE_TRANSPORT_REQUIRED,
            "HY000",
            "Connections using insecure transport are prohibited: msgproxy requires TLS; connect with TLS (e.g. --ssl)",
        );
        write_packet(client.get_mut(), seq, &err.encode(true)).await?;
        return Ok(None);
    }
    let user = String::from_utf8_lossy(response.user).into_owned();
    let plugin_auth = response
        .capabilities
        .contains(CapabilityFlags::CLIENT_PLUGIN_AUTH);
    let checkable = checkable_plugin(
        &ctx,
        &user,
        plugin_auth,
        response.auth_plugin,
        response.auth_response,
    );
    let (plugin, auth_response): (Plugin, Vec<u8>) = match checkable {
        Some(p) => (p, response.auth_response.to_vec()),
        None => {
            write_packet(client.get_mut(), seq, &auth_switch_request(&nonce)).await?;
            let reply = client.next_logical_packet(1 << 16).await?;
            seq = reply.seq.wrapping_add(1);
            (Plugin::Native, reply.payload.to_vec())
        }
    };
    if !check_password(&ctx, &user, plugin, &nonce, &auth_response) {
        ctx.metrics.login_failed();
        let err = access_denied(&user, peer, !auth_response.is_empty());
        write_packet(client.get_mut(), seq, &err.encode(true)).await?;
        return Ok(None);
    }
    if plugin == Plugin::CachingSha2 && !auth_response.is_empty() {
        // caching_sha2_password "fast auth succeeded"; the OK follows.
        seq = write_packet(client.get_mut(), seq, &[0x01, 0x03]).await?;
    }
    let session_caps = response.capabilities & offered;
    // From here the greeting's backend connection is this client's (or, if it is a warm one of
    // other settings, back in the pool), whatever happens.
    let Some(greeter) = backend.take() else {
        return Ok(None);
    };
    let served = match backend_for(&ctx, greeter, &response).await {
        Ok(r) => r,
        Err(e) => {
            ctx.metrics
                .backend_error(crate::metrics::BackendErrorKind::Connect);
            tracing::warn!(%peer, "backend login failed: {e}");
            let err = match e {
                // A new connection the server refused in place of its greeting (too many
                // connections, host blocked): its own error, as at the greeting (with the pool on,
                // a client whose settings no warm connection has gets its connection here).
                crate::backend::BackendError::Refused(err) => with_connect_sql_state(err),
                e => ErrorPacket::new(
                    ER_CONNECT_TO_FOREIGN_DATA_SOURCE,
                    "08004",
                    format!("msgproxy could not log in to its backend: {e}; fix the backend or msgproxy's --backend, then reconnect"),
                ),
            };
            write_packet(client.get_mut(), seq, &err.encode(true)).await?;
            return Ok(None);
        }
    };
    match served {
        Served::Ready(backend, ok, ticket) => {
            write_packet(client.get_mut(), seq, &ok).await?;
            let status =
                crate::protocol::wire::status_flags(&ok).unwrap_or(backend.greeting.status);
            debug!(%peer, user, id = backend.greeting.connection_id, "client logged in");
            let database = response.database;
            let mut session = Session::new(
                ctx,
                client,
                *backend,
                session_caps,
                status,
                nonce,
                user,
                peer,
                database,
            );
            session.ticket = ticket;
            Ok(Some(session))
        }
        Served::Refused(err) => {
            // The backend's own refusal (unknown database, too many connections, ...).
            write_packet(client.get_mut(), seq, &err).await?;
            Ok(None)
        }
    }
}

/// The backend connection that serves a client who has passed the proxy's checks, and the
/// answer to its login: the greeting's connection when it is fresh (logged in now) or warm with
/// the client's settings, else a warm one with them, else a new one. The ticket, when the pool is
/// on, lets the session give the connection back.
async fn backend_for(
    ctx: &Context,
    greeter: Greeter,
    response: &HandshakeResponse<'_>,
) -> Result<Served, crate::backend::BackendError> {
    let warm = match greeter {
        Greeter::Fresh(fresh) => return log_in(ctx, *fresh, response).await,
        Greeter::Warm(warm) => {
            if warm.ticket.key == PoolKey::of(&warm.backend, response) {
                Some(*warm)
            } else {
                // Another driver or character set: the greeted connection stays warm for a
                // client like the one it served, and this one gets a connection of its own.
                let key = PoolKey::of(&warm.backend, response);
                ctx.pool.put_back(*warm);
                ctx.pool.take(key).await
            }
        }
    };
    match warm {
        Some(warm) => match ctx.pool.check_out(warm, response.database).await? {
            Checkout::Ready(warm, ok) => {
                let Warm {
                    backend, ticket, ..
                } = *warm;
                Ok(Served::Ready(Box::new(backend), ok, Some(ticket)))
            }
            // The server's refusal of the database, as a login with it would have been
            // refused; the connection is back in the pool.
            Checkout::Refused(err) => Ok(Served::Refused(err)),
        },
        None => {
            let fresh = ctx.spares.take(ctx.config.backend_connect_timeout).await?;
            log_in(ctx, fresh, response).await
        }
    }
}

/// Logs a connection that has only greeted in with the client's settings.
async fn log_in(
    ctx: &Context,
    fresh: Fresh,
    response: &HandshakeResponse<'_>,
) -> Result<Served, crate::backend::BackendError> {
    let Fresh { mut backend, .. } = fresh;
    let target = backend.target.clone();
    match backend.login(&target, response).await? {
        LoginReply::Ok(ok) => {
            ctx.pool.missed();
            let ticket = ctx
                .pool
                .enabled()
                .then(|| ctx.pool.ticket(PoolKey::of(&backend, response), &ok));
            Ok(Served::Ready(Box::new(backend), ok, ticket))
        }
        LoginReply::Err(err) => Ok(Served::Refused(err)),
    }
}

/// What the backend made of a client's login.
enum Served {
    /// Logged in: the connection, the OK to answer the client with, the pool's ticket.
    Ready(Box<Backend>, BytesMut, Option<Ticket>),
    /// The server's ERR (unknown database, too many connections, ...), for the client.
    Refused(BytesMut),
}

/// The plugin under which the client's first response can be checked, or `None` when the
/// client must be asked to switch to `mysql_native_password` (the plugin of the greeting).
///
/// A client that names another plugin than the greeting's may have sent a response for it (MySQL
/// 8 clients send a caching_sha2_password scramble of our nonce, which the proxy can check when
/// it knows the password) or nothing at all, waiting to be switched (libmariadb); the server
/// answers the latter with an AuthSwitchRequest, and so does the proxy.
pub fn checkable_plugin(
    ctx: &Context,
    user: &str,
    plugin_auth: bool,
    named: Option<&[u8]>,
    response: &[u8],
) -> Option<Plugin> {
    match named.map(Plugin::from_name) {
        None if !plugin_auth => Some(Plugin::Native),
        Some(Some(Plugin::Native)) => Some(Plugin::Native),
        Some(Some(Plugin::CachingSha2))
            if !response.is_empty() && can_check(ctx, user, Plugin::CachingSha2) =>
        {
            Some(Plugin::CachingSha2)
        }
        _ => None,
    }
}

/// Whether the proxy can check a response made with `plugin` for this user.
pub fn can_check(ctx: &Context, user: &str, plugin: Plugin) -> bool {
    match ctx.find_user(user) {
        Some(u) => matches!(u.secret, Secret::Plain(_)) || plugin == Plugin::Native,
        None => true,
    }
}

/// Checks a client's response against the configured users.
pub fn check_password(
    ctx: &Context,
    user: &str,
    plugin: Plugin,
    nonce: &[u8],
    response: &[u8],
) -> bool {
    match ctx.find_user(user) {
        Some(u) => match &u.secret {
            Secret::Plain(pw) => auth::verify(plugin, nonce, pw, response),
            Secret::NativeHash(h) => {
                plugin == Plugin::Native && auth::verify_native_hash(nonce, h, response)
            }
        },
        None => false,
    }
}

pub fn auth_switch_request(nonce: &[u8; 20]) -> BytesMut {
    let mut out = BytesMut::with_capacity(48);
    out.put_u8(0xFE);
    out.put_slice(NATIVE_PASSWORD.as_bytes());
    out.put_u8(0);
    out.put_slice(nonce);
    out.put_u8(0);
    out
}

pub fn access_denied(user: &str, peer: Peer, using_password: bool) -> ErrorPacket {
    ErrorPacket::new(
        ER_ACCESS_DENIED_ERROR,
        "28000",
        format!(
            "Access denied for user '{user}'@'{}' (using password: {})",
            peer.host(),
            if using_password { "YES" } else { "NO" }
        ),
    )
}
