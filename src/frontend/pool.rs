//! Warm backend connections: logged in, reset, kept for the next client (issue 23).
//!
//! A fresh backend connection costs a TCP handshake, the server's greeting and a login: more than
//! the whole of a short client session. With `--pool-size N` a client that leaves cleanly leaves
//! its backend connection here, reset to the state a fresh login gives, and the next client with
//! the same session settings is served by it without any of that.
//!
//! **What must match.** The server shapes its packets by the capabilities and character set of
//! the login (EOF or not, multi-results, found rows, session tracking, MariaDB's extended
//! metadata...), and neither can be changed after it. So a connection serves only a client whose
//! login would give the same [`PoolKey`]: the capabilities the backend session gets, the MariaDB
//! capabilities, the collation and the max packet size. The database is not part of the key: it
//! is set at checkout (`COM_INIT_DB`, or `COM_CHANGE_USER` for none). Connection attributes are
//! not either: the server keeps those of the connection's first login (ARCHITECTURE.md says so).
//!
//! **Thread ids.** The client is greeted before the proxy knows its settings, and the greeting
//! carries a thread id. A client is greeted with the most recently returned warm connection (of
//! whatever key); if its login matches that connection's key — one application, one driver, the
//! usual case — that connection serves it and `CONNECTION_ID()` equals the handshake's id, as
//! without the pool. Otherwise it is served by another connection (warm of its key, or new) and
//! `CONNECTION_ID()` differs from the id in the handshake; the greeted connection goes back
//! untouched. With no warm connection at all the greeting comes from a spare (`spares`) as without
//! the pool.
//!
//! **Reset.** A session goes back only when the client said goodbye (`COM_QUIT`: one that just
//! closes its connection is an aborted client, whose session ends with it), outside a transaction, with nothing unread from the backend, and
//! without anything the reset is not known to undo (`COM_SET_OPTION`, `COM_CHANGE_USER`, `XA`,
//! `SET ROLE`, which MariaDB 10.11 keeps across both resets);
//! anything else closes the connection. Then `COM_RESET_CONNECTION` (MariaDB rolls back, drops
//! temporary tables, frees prepared statements, clears user and session variables, releases
//! locks and restores the login's character set) when the session's database is known, or
//! `COM_CHANGE_USER` as the proxy's backend user with no database (the same reset, and a known
//! database) when it is not. A connection whose reset fails is closed.
//!
//! **The backend address** is held here in one place ([`Pool::retarget`]): connections of an
//! earlier backend are never handed out, and those out with clients are closed when they come back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::backend::{Backend, BackendError, LoginReply};
use crate::config::BackendTarget;
use crate::metrics::ProxyMetrics;
use crate::protocol::handshake::HandshakeResponse;

/// How long a reset may take before the connection is closed instead.
const RESET_TIMEOUT: Duration = Duration::from_secs(5);

/// What a backend session's packets are shaped by: a warm connection serves only a client whose
/// login would give the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolKey {
    capabilities: u32,
    mariadb_capabilities: u32,
    collation: u8,
    max_packet_size: u32,
}

impl PoolKey {
    /// The key of a login with `client`'s handshake response on `backend`.
    pub fn of(backend: &Backend, client: &HandshakeResponse<'_>) -> PoolKey {
        PoolKey {
            capabilities: backend.session_capabilities(client.capabilities).bits(),
            mariadb_capabilities: backend.session_mariadb_capabilities(client.mariadb_capabilities),
            collation: client.collation,
            max_packet_size: client.max_packet_size,
        }
    }
}

/// What a session must keep to give its connection back.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub key: PoolKey,
    /// The server's OK to the connection's login: what a fresh login with this key answers, and
    /// so what a client served from the pool is answered.
    pub login_ok: BytesMut,
    generation: u64,
}

/// A logged-in backend connection in the state of a fresh login.
pub struct Warm {
    pub backend: Backend,
    pub ticket: Ticket,
    /// The database it is in.
    pub database: Option<Vec<u8>>,
    idle_since: Instant,
}

/// The database a client asked for at login, as the session tracks it (`None`: not known).
pub type KnownDatabase = Option<Option<Vec<u8>>>;

/// What checking out a warm connection for a client gave.
pub enum Checkout {
    /// Ready, in the client's database: the OK to answer the client's login with.
    Ready(Box<Warm>, BytesMut),
    /// The server refused the client's database (`COM_INIT_DB`'s error, as a login with it
    /// would have been refused); the connection was not changed and is back in the pool.
    Refused(BytesMut),
}

/// The warm connections of one proxy.
pub struct Pool {
    /// Most connections kept idle; 0 turns the pool off.
    size: usize,
    /// How long a connection is kept idle before it is closed.
    idle_lifetime: Duration,
    target: Mutex<BackendTarget>,
    /// Bumped by [`Pool::retarget`]: a ticket of an older generation is a connection to an
    /// earlier backend.
    generation: AtomicU64,
    /// Most recently returned last.
    idle: Mutex<Vec<Warm>>,
    reaping: AtomicBool,
    metrics: Arc<ProxyMetrics>,
    shutdown: CancellationToken,
}

impl Pool {
    pub fn new(
        target: BackendTarget,
        size: usize,
        idle_lifetime: Duration,
        metrics: Arc<ProxyMetrics>,
        shutdown: CancellationToken,
    ) -> Arc<Pool> {
        Arc::new(Pool {
            size,
            idle_lifetime,
            target: Mutex::new(target),
            generation: AtomicU64::new(0),
            idle: Mutex::new(Vec::new()),
            reaping: AtomicBool::new(false),
            metrics,
            shutdown,
        })
    }

    pub fn enabled(&self) -> bool {
        self.size > 0
    }

    fn target(&self) -> BackendTarget {
        self.target
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The backend changed (failover): every idle connection is closed, and those out with
    /// clients are closed when they come back.
    pub fn retarget(&self, target: BackendTarget) {
        *self.target.lock().unwrap_or_else(|e| e.into_inner()) = target;
        self.generation.fetch_add(1, Ordering::AcqRel);
        let gone = std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        self.metrics.pool_idle_now(0);
        for warm in gone {
            self.discard(warm.backend);
        }
    }

    /// A ticket for a connection just logged in with `key` (its OK is `login_ok`).
    pub fn ticket(&self, key: PoolKey, login_ok: &[u8]) -> Ticket {
        Ticket {
            key,
            login_ok: BytesMut::from(login_ok),
            generation: self.generation.load(Ordering::Acquire),
        }
    }

    /// The warm connection to greet a client with: the most recently returned one that is
    /// still open, of any key.
    pub async fn take_any(&self) -> Option<Warm> {
        self.take_where(|_| true).await
    }

    /// A warm connection of `key`, if there is one still open.
    pub async fn take(&self, key: PoolKey) -> Option<Warm> {
        self.take_where(|w| w.ticket.key == key).await
    }

    async fn take_where(&self, wanted: impl Fn(&Warm) -> bool) -> Option<Warm> {
        if !self.enabled() {
            return None;
        }
        loop {
            let mut warm = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let at = idle.iter().rposition(&wanted)?;
                let warm = idle.remove(at);
                self.metrics.pool_idle_now(idle.len());
                warm
            };
            // The server may have ended it meanwhile (wait_timeout, KILL, restart).
            if super::spares::still_open(&mut warm.backend).await {
                return Some(warm);
            }
            self.metrics.pool_discarded();
        }
    }

    /// Readies a warm connection for a client that asked for `database` at login.
    pub async fn check_out(
        &self,
        mut warm: Warm,
        database: Option<&[u8]>,
    ) -> Result<Checkout, BackendError> {
        let database = database.filter(|d| !d.is_empty());
        if warm.database.as_deref() != database {
            match database {
                Some(db) => match warm.backend.init_db(db).await? {
                    Ok(()) => warm.database = Some(db.to_vec()),
                    Err(refusal) => {
                        self.put_back(warm);
                        return Ok(Checkout::Refused(refusal));
                    }
                },
                None => {
                    let target = self.target();
                    let collation = Some(u16::from(warm.ticket.key.collation));
                    match warm
                        .backend
                        .change_user(&target, b"", collation, None)
                        .await?
                    {
                        LoginReply::Ok(_) => warm.database = None,
                        LoginReply::Err(_) => return Err(BackendError::Protocol),
                    }
                }
            }
        }
        self.metrics.pool_hit();
        let ok = warm.ticket.login_ok.clone();
        Ok(Checkout::Ready(Box::new(warm), ok))
    }

    /// A client was served without the pool's help (a new connection logged in).
    pub fn missed(&self) {
        if self.enabled() {
            self.metrics.pool_miss();
        }
    }

    /// Takes back a warm connection that nothing was done on (greeted a client that did not
    /// log in, or whose settings differ).
    pub fn put_back(&self, mut warm: Warm) {
        warm.idle_since = Instant::now();
        self.keep(warm);
    }

    /// A session left cleanly: its connection is reset in a task of its own and kept. `database`
    /// is the session's database if the proxy is certain of it.
    pub fn give_back(self: &Arc<Self>, backend: Backend, ticket: Ticket, database: KnownDatabase) {
        if !self.enabled() || self.shutdown.is_cancelled() || !self.current(&ticket) {
            return self.discard(backend);
        }
        let pool = self.clone();
        tokio::spawn(async move {
            let mut backend = backend;
            let reset =
                tokio::time::timeout(RESET_TIMEOUT, pool.reset(&mut backend, &ticket, database))
                    .await;
            match reset {
                Ok(Ok(database)) => {
                    pool.metrics.pool_reset();
                    pool.keep(Warm {
                        backend,
                        ticket,
                        database,
                        idle_since: Instant::now(),
                    });
                }
                Ok(Err(e)) => {
                    debug!("a backend connection could not be reset, closing it: {e}");
                    pool.discard(backend);
                }
                Err(_) => {
                    debug!("a backend connection's reset took over {RESET_TIMEOUT:?}, closing it");
                    pool.metrics.pool_discarded();
                }
            }
        });
    }

    /// Resets a session's connection; the database it is in afterwards.
    async fn reset(
        &self,
        backend: &mut Backend,
        ticket: &Ticket,
        database: KnownDatabase,
    ) -> Result<Option<Vec<u8>>, BackendError> {
        match database {
            Some(database) => {
                backend.reset_connection().await?;
                Ok(database)
            }
            None => {
                let target = self.target();
                let collation = Some(u16::from(ticket.key.collation));
                match backend.change_user(&target, b"", collation, None).await? {
                    LoginReply::Ok(_) => Ok(None),
                    LoginReply::Err(_) => Err(BackendError::Protocol),
                }
            }
        }
    }

    fn current(&self, ticket: &Ticket) -> bool {
        ticket.generation == self.generation.load(Ordering::Acquire)
    }

    /// Keeps a warm connection, closing the oldest when the pool is full.
    fn keep(&self, warm: Warm) {
        if self.shutdown.is_cancelled() || !self.current(&warm.ticket) {
            return self.discard(warm.backend);
        }
        let extra = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.push(warm);
            let extra = (idle.len() > self.size).then(|| idle.remove(0));
            self.metrics.pool_idle_now(idle.len());
            extra
        };
        if let Some(oldest) = extra {
            self.discard(oldest.backend);
        }
    }

    /// Closes a connection the pool will not keep (politely: COM_QUIT), counting it.
    fn discard(&self, backend: Backend) {
        self.metrics.pool_discarded();
        tokio::spawn(backend.quit());
    }

    /// While the proxy runs: closes connections idle past the idle lifetime, and every one at
    /// shutdown. Started once, by the server.
    pub async fn reap(self: Arc<Self>) {
        if !self.enabled() || self.reaping.swap(true, Ordering::AcqRel) {
            return;
        }
        let tick = (self.idle_lifetime / 4).max(Duration::from_millis(100));
        loop {
            let stopping = tokio::select! {
                _ = tokio::time::sleep(tick) => false,
                _ = self.shutdown.cancelled() => true,
            };
            let now = Instant::now();
            let gone: Vec<Warm> = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let (gone, kept) = std::mem::take(&mut *idle).into_iter().partition(|w| {
                    stopping || now.saturating_duration_since(w.idle_since) >= self.idle_lifetime
                });
                *idle = kept;
                self.metrics.pool_idle_now(idle.len());
                gone
            };
            for warm in gone {
                if stopping {
                    // Awaited here: the drain waits for this task, then the process exits.
                    self.metrics.pool_discarded();
                    warm.backend.quit().await;
                } else {
                    self.discard(warm.backend);
                }
            }
            if stopping {
                return;
            }
        }
    }
}
