//! Backend connections that no client logged in on, kept for the next client (issue 23).
//!
//! A client's greeting carries its backend connection's thread id, so that `CONNECTION_ID()`, the
//! process list and `KILL` agree with the handshake (ARCHITECTURE.md): the backend connection
//! must exist, its greeting read, before the client is greeted. But a client that never logs in
//! (a port scanner, a load balancer's TCP check, a wrong password) must cost the server nothing:
//! no handshake of its own, and no aborted connection, which the server counts against the
//! proxy's host up to `max_connect_errors` and then blocks it. So the connection such a client
//! was greeted with is not closed: it comes back here, still in the server's handshake (nothing
//! was written to it), and greets the next client. A stream of failed or abandoned connections
//! therefore uses one backend connection, whatever their number.
//!
//! The server ends a connection that does not log in within its `connect_timeout` (10 s by
//! default) and counts it as aborted, so a spare is kept at most [`MAX_AGE`]; then, and at
//! shutdown, it logs in as the proxy's backend user and quits, which the server records as the
//! ordinary connection it is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::backend::{Backend, BackendError};
use crate::cluster::Backends;
use crate::protocol::handshake::HandshakeResponse;

/// How long a spare is kept: half of the server's default `connect_timeout`, so it is logged in
/// well before the server would end it.
pub const MAX_AGE: Duration = Duration::from_secs(5);

/// Spares kept at most; more (after a burst of failed logins) are logged in and closed at once.
pub const MAX_SPARES: usize = 8;

/// A backend connection, connected and greeted, never logged in.
pub struct Fresh {
    pub backend: Backend,
    /// When it was connected: the server's `connect_timeout` runs from then.
    opened: Instant,
}

impl Fresh {
    /// A connection just made.
    pub fn new(backend: Backend) -> Fresh {
        Fresh {
            backend,
            opened: Instant::now(),
        }
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.opened) >= MAX_AGE
    }
}

/// The spares of one proxy.
pub struct Spares {
    /// New connections go to the server in use; spares of an earlier one are not handed out.
    backends: Arc<Backends>,
    list: Mutex<Vec<Fresh>>,
    /// A task retires expired spares while there are any.
    reaping: AtomicBool,
    shutdown: CancellationToken,
}

impl Spares {
    pub fn new(backends: Arc<Backends>, shutdown: CancellationToken) -> Arc<Spares> {
        Arc::new(Spares {
            backends,
            list: Mutex::new(Vec::new()),
            reaping: AtomicBool::new(false),
            shutdown,
        })
    }

    /// A backend connection to greet a client with: the newest spare that is still usable, or
    /// a new connection.
    pub async fn take(self: &Arc<Self>, timeout: Duration) -> Result<Fresh, BackendError> {
        loop {
            let spare = self.list.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some(mut spare) = spare else {
                break;
            };
            if spare.expired(Instant::now())
                || spare.backend.generation != self.backends.generation()
            {
                self.retire(spare);
                continue;
            }
            if still_open(&mut spare.backend).await {
                return Ok(spare);
            }
        }
        // Read before connecting: after a switch during the connect, the connection counts as
        // the old server's and is not handed out again.
        let generation = self.backends.generation();
        let mut backend = Backend::connect(&self.backends.current(), timeout).await?;
        backend.generation = generation;
        Ok(Fresh::new(backend))
    }

    /// Takes back a connection no client logged in on.
    pub fn give_back(self: &Arc<Self>, spare: Fresh) {
        if spare.expired(Instant::now()) || self.shutdown.is_cancelled() {
            return self.retire(spare);
        }
        let extra = {
            let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
            list.push(spare);
            if list.len() > MAX_SPARES {
                Some(list.remove(0))
            } else {
                None
            }
        };
        if let Some(oldest) = extra {
            self.retire(oldest);
        }
        if !self.reaping.swap(true, Ordering::AcqRel) {
            let spares = self.clone();
            tokio::spawn(async move { spares.reap().await });
        }
    }

    /// While there are spares: retires each as it expires, or all at shutdown.
    async fn reap(self: Arc<Self>) {
        loop {
            let oldest = {
                let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
                list.iter().map(|s| s.opened).min()
            };
            let Some(oldest) = oldest else {
                self.reaping.store(false, Ordering::Release);
                // A spare given back between the look and the store would have no reaper.
                if self
                    .list
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty()
                    || self.reaping.swap(true, Ordering::AcqRel)
                {
                    return;
                }
                continue;
            };
            let stopping = tokio::select! {
                _ = tokio::time::sleep_until((oldest + MAX_AGE).into()) => false,
                _ = self.shutdown.cancelled() => true,
            };
            let now = Instant::now();
            let gone: Vec<Fresh> = {
                let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
                let (gone, kept) = std::mem::take(&mut *list)
                    .into_iter()
                    .partition(|s| stopping || s.expired(now));
                *list = kept;
                gone
            };
            for spare in gone {
                self.retire(spare);
            }
        }
    }

    /// Logs a spare in as the proxy's backend user and quits, in a task of its own: the server
    /// then sees a connection that ended well, not one that never logged in.
    fn retire(&self, spare: Fresh) {
        tokio::spawn(async move {
            let mut backend = spare.backend;
            let target = backend.target.clone();
            let greeting = &backend.greeting;
            let response = HandshakeResponse {
                capabilities: greeting.capabilities,
                max_packet_size: 1 << 24,
                collation: greeting.collation,
                user: b"",
                auth_response: b"",
                database: None,
                auth_plugin: None,
                connect_attrs: None,
                mariadb_capabilities: 0,
            };
            let id = greeting.connection_id;
            match tokio::time::timeout(Duration::from_secs(5), backend.login(&target, &response))
                .await
            {
                Ok(Ok(_)) => backend.quit().await,
                Ok(Err(e)) => debug!(id, "a spare backend connection could not log in: {e}"),
                Err(_) => debug!(id, "a spare backend connection did not log in within 5 s"),
            }
        });
    }
}

/// Whether a spare's connection is still open and silent (the server has not ended it): a read
/// that would wait is the answer, anything else (an error packet, the end) means it is gone.
async fn still_open(backend: &mut Backend) -> bool {
    if !backend.conn.buffered().is_empty() {
        return false;
    }
    matches!(
        tokio::time::timeout(Duration::ZERO, backend.conn.fill()).await,
        Err(_elapsed)
    )
}
