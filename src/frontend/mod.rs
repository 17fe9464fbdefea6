//! The front door: the accept loop (connection limit, back-off on accept errors, graceful
//! shutdown) and, in submodules, everything one client session does.

mod backend_sessions;
mod change_user;
mod conflicts;
mod event_streams;
mod interrupts;
mod login;
mod messages;
mod ops;
mod pool;
mod refusal;
mod result_client;
mod session;
pub mod spares;
pub mod tls;
mod unix_socket;
mod work_queue;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::{Config, Secret, User};
use crate::protocol::commands::ER_CON_COUNT_ERROR;
use crate::protocol::wire::ErrorPacket;

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

/// Who is at the other end of a client connection: for the logs, and for the `'user'@'host'`
/// of access-denied errors.
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    Tcp(SocketAddr),
    /// A client on the proxy's Unix socket.
    Socket,
}

impl Peer {
    /// The host part of `'user'@'host'`, as the server names it: the address, or `localhost`
    /// for a socket client.
    pub fn host(&self) -> String {
        match self {
            Peer::Tcp(addr) => addr.ip().to_string(),
            Peer::Socket => "localhost".into(),
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Socket => f.write_str("unix socket"),
        }
    }
}

/// A client connection just accepted, on either listener.
enum Accepted {
    Tcp(TcpStream),
    Socket(UnixStream),
}

/// Where clients connect: bound first, so that a proxy that cannot listen fails before it
/// touches the backend.
pub struct Listeners {
    tcp: TcpListener,
    socket: Option<unix_socket::SocketListener>,
}

impl Listeners {
    pub async fn bind(config: &crate::config::Config) -> std::io::Result<Listeners> {
        let tcp = TcpListener::bind(config.listen).await?;
        let socket = match &config.listen_socket {
            Some(path) => Some(unix_socket::SocketListener::bind(path)?),
            None => None,
        };
        Ok(Listeners { tcp, socket })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The Unix socket clients may also connect to (`--listen-socket`).
    pub fn socket_path(&self) -> Option<&std::path::Path> {
        self.socket.as_ref().map(|s| s.path())
    }

    async fn accept(&self) -> std::io::Result<(Accepted, Peer)> {
        let socket = async {
            match &self.socket {
                Some(s) => s.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = self.tcp.accept() => r.map(|(tcp, addr)| (Accepted::Tcp(tcp), Peer::Tcp(addr))),
            r = socket => r.map(|unix| (Accepted::Socket(unix), Peer::Socket)),
        }
    }
}

/// The listeners and what the sessions share, ready to serve.
pub struct Server {
    listeners: Listeners,
    ctx: Arc<Context>,
}

/// How long busy sessions may take to finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

impl Server {
    pub fn new(listeners: Listeners, ctx: Context) -> Server {
        Server {
            listeners,
            ctx: Arc::new(ctx),
        }
    }

    /// Accepts clients until shutdown, then waits (bounded) for sessions to finish.
    pub async fn run(self) {
        let permits = Arc::new(Semaphore::new(self.ctx.config.max_connections));
        let tracker = TaskTracker::new();
        // Tracked, so that the drain waits for it to close the idle connections politely.
        tracker.spawn(self.ctx.pool.clone().reap());
        let mut backoff = Duration::from_millis(10);
        loop {
            let accepted = tokio::select! {
                r = self.listeners.accept() => r,
                _ = self.ctx.shutdown.cancelled() => break,
            };
            let (client, peer) = match accepted {
                Ok(a) => {
                    backoff = Duration::from_millis(10);
                    a
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little instead of spinning.
                    warn!("accept failed: {e}; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            };
            match permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    let ctx = self.ctx.clone();
                    let open = ctx.metrics.connection_opened();
                    tracker.spawn(async move {
                        match client {
                            Accepted::Tcp(tcp) => {
                                let _ = tcp.set_nodelay(true);
                                login::serve(ctx, tcp, peer).await
                            }
                            Accepted::Socket(unix) => login::serve(ctx, unix, peer).await,
                        }
                        drop(open);
                        drop(permit);
                    });
                }
                Err(_) => {
                    self.ctx.metrics.connection_refused();
                    let err = too_many_connections(self.ctx.config.max_connections);
                    let refusals = self.ctx.refusals.clone();
                    match client {
                        Accepted::Tcp(tcp) => tracker.spawn(refusals.refuse(tcp, err)),
                        Accepted::Socket(unix) => tracker.spawn(refusals.refuse(unix, err)),
                    };
                }
            }
        }
        // Stop listening at once, as mysqld does: a client arriving during the drain is refused
        // (and the socket file is gone) rather than left waiting in the backlog until exit.
        let Server { listeners, .. } = self;
        drop(listeners);
        tracker.close();
        info!(
            "shutting down: waiting for {} session(s) to finish",
            tracker.len()
        );
        if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait())
            .await
            .is_err()
        {
            warn!("sessions still busy after {DRAIN_TIMEOUT:?}; closing them");
        }
    }
}

/// The error of a client over `--max-connections`, as the server's for an ordinary user over
/// its `max_connections`.
fn too_many_connections(max: usize) -> ErrorPacket {
    ErrorPacket::new(
        ER_CON_COUNT_ERROR,
        "08004",
        format!("Too many connections: msgproxy serves at most {max} clients (--max-connections)"),
    )
}
