//! The front door: the accept loop (connection limit, back-off on accept errors, graceful
//! shutdown) and, in submodules, everything one client session does.

mod backend_sessions;
mod change_user;
mod conflicts;
mod context;
mod dispatch;
mod event_streams;
mod execute;
mod greeting;
mod interrupts;
mod login;
mod messages;
mod ops;
mod peer;
mod pool;
mod refusal;
mod result_client;
mod session;
pub mod spares;
mod table_writes;
pub mod tls;
mod tracker;
mod unix_socket;
mod work_queue;

pub use context::Context;
pub use peer::Peer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::protocol::commands::ER_CON_COUNT_ERROR;
use crate::protocol::wire::ErrorPacket;

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
