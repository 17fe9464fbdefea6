//! What every session shares (the `Context`): configuration, the engines, the backend servers
//! and the connections kept for the next clients, and the proxy-wide counters.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{backend_sessions, interrupts, pool, refusal, spares, tls};
use crate::config::{Config, Secret, User};

/// What every session shares.
pub struct Context {
    pub config: Config,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Cancelled when the proxy shuts down; idle sessions close, busy ones finish their command.
    pub shutdown: CancellationToken,
    /// The message engine; `None` only in set-ups that want a bare relay.
    pub engine: Option<Arc<crate::messaging::engine::Engine>>,
    /// The event-stream engine (docs/STREAMS.md); `None` in set-ups without it.
    pub stream_engine: Option<Arc<crate::streams::engine::StreamEngine>>,
    /// The proxy-wide counters (Prometheus), bumped by the accept loop and the sessions.
    pub metrics: Arc<crate::metrics::ProxyMetrics>,
    /// The streams running through this proxy, for `KILL QUERY`.
    pub streams: Arc<interrupts::RunningStreams>,
    /// What `@@socket` reads as through the proxy (`sql::socket_literal`).
    pub socket_literal: Vec<u8>,
    /// How clients are turned away at connect (1040, 1429).
    pub refusals: refusal::Refusals,
    /// Where a session's relay asks about its backend connection (is it idle? end it), when
    /// there is an engine to ask through.
    pub backend_sessions: Option<Arc<dyn crate::relay::BackendSessions>>,
    /// Backend connections no client logged in on, for the next client.
    pub spares: Arc<spares::Spares>,
    /// The configured servers and the one in use (`crate::cluster`).
    pub backends: Arc<crate::cluster::Backends>,
    /// Warm backend connections clients left cleanly, reset, for the next clients.
    pub pool: Arc<pool::Pool>,
    implicit_root: User,
}

/// The warm pool follows the server in use (docs/CLUSTERS.md): after a switch its connections,
/// which are the old server's, are closed rather than handed to clients.
fn follow_switches(
    backends: &Arc<crate::cluster::Backends>,
    pool: &Arc<pool::Pool>,
    shutdown: &CancellationToken,
) {
    let mut switches = backends.subscribe();
    let (backends, pool, shutdown) = (backends.clone(), pool.clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = switches.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    pool.retarget(backends.current());
                }
            }
        }
    });
}

impl Context {
    /// What sessions share, over the servers the engine already follows.
    pub fn new(
        config: Config,
        shutdown: CancellationToken,
        engine: Option<Arc<crate::messaging::engine::Engine>>,
        backends: Arc<crate::cluster::Backends>,
    ) -> Result<Context, tls::TlsSetupError> {
        let tls = config.tls.as_ref().map(tls::acceptor).transpose()?;
        let socket_literal = crate::sql::socket_literal(config.listen_socket.as_deref());
        let refusals =
            refusal::Refusals::new(tls.clone(), config.handshake_timeout, refusal::MAX_GREETING);
        let backend_sessions = engine.as_ref().map(|engine| {
            Arc::new(backend_sessions::PoolSessions::new(engine.pool(), 0))
                as Arc<dyn crate::relay::BackendSessions>
        });
        let metrics: Arc<crate::metrics::ProxyMetrics> = Arc::default();
        let pool = pool::Pool::new(
            backends.current(),
            config.pool_size,
            config.pool_idle_lifetime,
            metrics.clone(),
            shutdown.clone(),
        );
        follow_switches(&backends, &pool, &shutdown);
        Ok(Context {
            backend_sessions,
            pool,
            refusals,
            spares: spares::Spares::new(backends.clone(), shutdown.clone()),
            backends,
            socket_literal,
            config,
            tls,
            shutdown,
            engine,
            stream_engine: None,
            metrics,
            streams: Arc::default(),
            implicit_root: User {
                name: "root".into(),
                secret: Secret::Plain(Vec::new()),
            },
        })
    }

    /// The server new backend connections go to now.
    pub fn backend_target(&self) -> crate::config::BackendTarget {
        self.backends.current()
    }

    /// Where a session whose backend connection was made at switch `generation` asks about it:
    /// nowhere once the engine's pool has moved to another server.
    pub fn backend_sessions_for(
        &self,
        generation: u64,
    ) -> Option<Arc<dyn crate::relay::BackendSessions>> {
        if generation == 0 {
            return self.backend_sessions.clone();
        }
        let engine = self.engine.as_ref()?;
        Some(Arc::new(backend_sessions::PoolSessions::new(
            engine.pool(),
            generation,
        )))
    }

    /// The configured user of that name; with no users configured, only `root` with an empty
    /// password (the config refuses that on anything but a loopback address).
    pub fn find_user(&self, name: &str) -> Option<&User> {
        if self.config.users.is_empty() {
            return (name == "root").then_some(&self.implicit_root);
        }
        self.config.users.iter().find(|u| u.name == name)
    }
}
