//! The binlog connection: checking prerequisites, choosing where to start, reading events into
//! a [`Follower`], and coming back after anything goes wrong.
//!
//! - **Start**: the current position (`SHOW MASTER STATUS`, or `SHOW BINARY LOG STATUS` on
//!   MySQL 8.4), under a replica server id drawn at random per process from `0x4D5xxxxx`
//!   (MariaDB drops an older replica that registers the same id, so two proxies must not share
//!   one).
//! - **Reconnect**: when the stream breaks (server restart, network, no heartbeat for
//!   [`STALL_TIMEOUT`]) the watcher reconnects with exponential backoff and jitter
//!   ([`Backoff`]) and resumes from the end of the last committed transaction it read, so
//!   nothing committed meanwhile is missed. If the server says that position is gone (error
//!   1236: purged, or the server was reset) it starts again from the current position. After any
//!   gap it asks every manager to poll, which also covers rows that became due meanwhile.
//! - **Prerequisites**: missing ones are logged in one line ([`prereq::summary`]) and the
//!   watcher stays in [`BinlogMode::PollOnly`], checking again every [`RECHECK_INTERVAL`].
//! - **Another server** (`crate::cluster` switched): the stream on the old server ends and
//!   the watcher resumes on the new one by MariaDB GTID, right after the last transaction it
//!   handled (`@slave_connect_state`, strict mode, so a server that lacks that transaction
//!   says so instead of starting elsewhere). Without a GTID to resume from (MySQL, or the new
//!   server does not have it) it logs so and starts from the new server's current position;
//!   the poll after every gap reads every message table back.
//! - **Shutdown**: every wait `select!`s on the proxy's cancellation token.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::Stream;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn, Opts, Row};

use super::gtid::GtidState;
use crate::cluster::{Backends, Current};
use mysql_common::binlog::events::Event;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::follow::{Ddl, Follower, Sink, TableHandle};
use super::prereq::{self, Missing};
use super::rows::RowChange;
use super::{BinlogActivity, BinlogMode, BinlogPosition, BinlogStatus};
use crate::messaging::engine::{Engine, Lookup};
use crate::messaging::manager::TableManager;
use crate::messaging::table::MessageTable;
use crate::sql::names_identifier;

/// How often the server sends a heartbeat when it has no events for us.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A stream silent for this long (no event, no heartbeat) is taken as broken.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How often prerequisites are checked again in poll mode.
pub const RECHECK_INTERVAL: Duration = Duration::from_secs(30);
/// Connecting and each setup query give up after this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A stream that lasted this long resets the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(30);

/// The running watcher: its status, and a way to wait for it to stop.
pub struct BinlogWatcher {
    status: watch::Receiver<BinlogStatus>,
    activity: Arc<BinlogActivity>,
    task: tokio::task::JoinHandle<()>,
}

impl BinlogWatcher {
    /// Starts following the binlog of the backend in use for `engine`, until `shutdown`.
    pub fn start(
        backends: Arc<Backends>,
        engine: Arc<Engine>,
        shutdown: CancellationToken,
    ) -> BinlogWatcher {
        let server_id = 0x4D50_0000 | (rand::random::<u32>() & 0x000F_FFFF);
        let (tx, rx) = watch::channel(BinlogStatus {
            mode: BinlogMode::Starting,
            position: None,
            server_id,
            sessions: 0,
        });
        let switches = backends.subscribe();
        let reload = Arc::new(Notify::new());
        let activity = Arc::new(BinlogActivity::default());
        tokio::spawn(reload_on_ddl(
            engine.clone(),
            reload.clone(),
            shutdown.clone(),
        ));
        let watcher = Watcher {
            switches,
            gtids: Arc::default(),
            engine,
            reload,
            shutdown,
            status: tx,
            server_id,
            activity: activity.clone(),
        };
        BinlogWatcher {
            status: rx,
            activity,
            task: tokio::spawn(watcher.run()),
        }
    }

    /// A receiver that sees every change of the status.
    pub fn subscribe(&self) -> watch::Receiver<BinlogStatus> {
        self.status.clone()
    }

    /// When the watcher last read an event or heartbeat (the lag metrics).
    pub fn activity(&self) -> Arc<BinlogActivity> {
        self.activity.clone()
    }

    /// Waits (at most `limit`) for the watcher to stop after the shutdown token fired.
    pub async fn stopped(self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.task).await;
    }
}

/// Exponential backoff with jitter, from [`Backoff::MIN`] to [`Backoff::MAX`].
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    pub const MIN: Duration = Duration::from_millis(100);
    pub const MAX: Duration = Duration::from_secs(5);

    pub fn new() -> Backoff {
        Backoff { next: Self::MIN }
    }

    /// The next wait: the current step with ±50 % jitter (so proxies that lost the same server
    /// do not come back in lockstep), within [MIN, MAX]; the step doubles.
    pub fn next_wait(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        let jitter = 0.5 + rand::random::<f64>();
        step.mul_f64(jitter).clamp(Self::MIN, Self::MAX)
    }

    pub fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

/// Why a stream could not be opened.
#[derive(Debug, thiserror::Error)]
enum OpenError {
    #[error("prerequisites missing")]
    Prerequisites(Vec<Missing>, String),
    #[error("the binlog position is gone: {0}")]
    PositionGone(String),
    #[error("{0}")]
    Failed(String),
}

/// How a stream ended.
enum End {
    Shutdown,
    /// Broken (the reason); resume from `at`.
    Lost {
        at: BinlogPosition,
        why: String,
    },
    /// The backend in use is another server now.
    Switched,
    /// The server no longer has the position (the reason).
    PositionGone {
        at: BinlogPosition,
        why: String,
    },
    /// The event reader panicked on an event after `at`: reading from `at` again would panic
    /// again.
    Unreadable {
        at: BinlogPosition,
    },
}

struct Watcher {
    /// The backend in use, and its switches.
    switches: watch::Receiver<Current>,
    /// The GTIDs of the last committed transactions read (MariaDB), kept by the reader: where
    /// to resume on another server.
    gtids: Arc<Mutex<Option<GtidState>>>,
    engine: Arc<Engine>,
    reload: Arc<Notify>,
    shutdown: CancellationToken,
    status: watch::Sender<BinlogStatus>,
    server_id: u32,
    activity: Arc<BinlogActivity>,
}

impl Watcher {
    async fn run(mut self) {
        info!(
            "binlog: watching the backend's binlog as replica server id {} ({:#x})",
            self.server_id, self.server_id
        );
        let mut resume: Option<BinlogPosition> = None;
        // The server `resume` is a position of (its switch count).
        let mut resume_generation = self.switches.borrow().generation;
        let mut backoff = Backoff::new();
        let mut told: Option<String> = None;
        let mut outage: Option<Instant> = None;
        let mut sessions = 0u64;
        // Set once anything went wrong or a stream ended: what happened meanwhile is polled for.
        let mut gap = false;
        while !self.shutdown.is_cancelled() {
            let wait = match self.open(resume.clone(), resume_generation).await {
                Ok((stream, start, generation)) => {
                    resume_generation = generation;
                    told = None;
                    if std::mem::take(&mut gap) {
                        // Whatever happened while no stream was open (rows that became due,
                        // writes before a new start position) is read back.
                        for m in self.engine.managers() {
                            m.request_poll();
                        }
                    }
                    // A GTID start has no file yet: the server names it in the first rotate.
                    let from = if start.file.is_empty() {
                        "the GTID above".to_string()
                    } else {
                        start.to_string()
                    };
                    match outage.take() {
                        Some(since) => info!(
                            "binlog: following again from {from} after {:.1?}; every message \
                             table is polled to cover the gap",
                            since.elapsed()
                        ),
                        None => info!("binlog: following from {from}"),
                    }
                    sessions += 1;
                    self.engine.set_binlog_following(true);
                    self.status.send_modify(|s| {
                        s.mode = BinlogMode::Following;
                        s.position = Some(start.clone());
                        s.sessions = sessions;
                    });
                    let opened = Instant::now();
                    let end = self.follow(stream, start.clone(), generation).await;
                    gap = true;
                    if opened.elapsed() > HEALTHY_AFTER {
                        backoff.reset();
                    }
                    match end {
                        End::Shutdown => break,
                        End::Switched => {
                            info!(
                                "binlog: the backend in use is now {}; resuming there",
                                self.switches.borrow().target.address()
                            );
                            resume = Some(self.status.borrow().position.clone().unwrap_or(start));
                            self.set_mode(BinlogMode::Reconnecting(
                                "the backend in use changed".into(),
                            ));
                            outage = Some(Instant::now());
                            continue;
                        }
                        End::Lost { at, why } => {
                            warn!("binlog: the stream broke at {at} ({why}); reconnecting");
                            resume = Some(at);
                            self.set_mode(BinlogMode::Reconnecting(why));
                        }
                        End::PositionGone { at, why } => {
                            warn!(
                                "binlog: the server no longer has position {at} ({why}); \
                                 starting again from its current position"
                            );
                            resume = None;
                            self.set_mode(BinlogMode::Reconnecting(why));
                        }
                        End::Unreadable { at } => {
                            let why = format!(
                                "an event after {at} could not be read (the reader panicked)"
                            );
                            warn!(
                                "binlog: {why}; starting again from the server's current \
                                 position (the tables are polled for what was skipped)"
                            );
                            resume = None;
                            self.set_mode(BinlogMode::Reconnecting(why));
                        }
                    }
                    outage = Some(Instant::now());
                    backoff.next_wait()
                }
                Err(OpenError::Prerequisites(missing, grantee)) => {
                    let line = prereq::summary(&missing, &grantee);
                    if told.as_ref() != Some(&line) {
                        warn!("{line}");
                        told = Some(line.clone());
                    }
                    self.set_mode(BinlogMode::PollOnly(line));
                    gap = true;
                    backoff.reset();
                    RECHECK_INTERVAL
                }
                Err(OpenError::PositionGone(why)) => {
                    warn!(
                        "binlog: the server no longer has the position to resume from ({why}); \
                         starting again from its current position"
                    );
                    resume = None;
                    gap = true;
                    backoff.next_wait()
                }
                Err(OpenError::Failed(why)) => {
                    gap = true;
                    if outage.is_none() {
                        warn!(
                            "binlog: cannot follow the backend's binlog yet ({why}); retrying \
                             with backoff"
                        );
                        outage = Some(Instant::now());
                    } else {
                        debug!("binlog: reconnect failed: {why}");
                    }
                    self.set_mode(BinlogMode::Reconnecting(why));
                    backoff.next_wait()
                }
            };
            // A switch ends the wait: the new server is writable now.
            let mut switches = self.switches.clone();
            switches.borrow_and_update();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = switches.changed() => {}
                _ = self.shutdown.cancelled() => break,
            }
        }
        self.set_mode(BinlogMode::Stopped);
    }

    fn set_mode(&self, mode: BinlogMode) {
        self.engine
            .set_binlog_following(mode == BinlogMode::Following);
        self.status.send_if_modified(|s| {
            let changed = s.mode != mode;
            s.mode = mode;
            changed
        });
    }

    /// Connects to the backend in use, checks the prerequisites and opens the stream at
    /// `resume` (a position on the server of switch `resume_generation`): there, or on another
    /// server right after the last GTID read, or else at the current position. Returns the
    /// stream, where it starts and the switch count of its server.
    async fn open(
        &mut self,
        resume: Option<BinlogPosition>,
        resume_generation: u64,
    ) -> Result<(BinlogStream, BinlogPosition, u64), OpenError> {
        let failed =
            |what: &str, e: &dyn std::fmt::Display| OpenError::Failed(format!("{what}: {e}"));
        let server = self.switches.borrow_and_update().clone();
        let opts: Opts = server.target.mysql_async_opts().into();
        let mut conn = within(Conn::new(opts))
            .await
            .map_err(|e| failed("cannot connect", &e))?;
        let names = prereq::VARIABLES
            .iter()
            .map(|v| format!("'{v}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let vars: HashMap<String, String> = within(conn.query::<(String, String), _>(format!(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"
        )))
        .await
        .map_err(|e| failed("cannot read the server's variables", &e))?
        .into_iter()
        .collect();
        let mut missing = prereq::check_variables(&vars);
        let current_user: Option<String> = within(conn.query_first("SELECT CURRENT_USER()"))
            .await
            .ok()
            .flatten();
        let grantee = prereq::grantee(current_user.as_deref().unwrap_or("?@%"));
        // Read before the position: a transaction committed between the two is then read again
        // after a switch (harmless), never skipped.
        let server_gtids: Option<GtidState> =
            within(conn.query_first::<Option<String>, _>("SELECT @@gtid_binlog_pos"))
                .await
                .ok()
                .flatten()
                .flatten()
                .and_then(|text| GtidState::parse(&text));
        let current = match within(current_position(&mut conn)).await {
            Ok(p) => p,
            Err(e) if is_access_denied(&e) => {
                missing.push(Missing::ReplicationClient);
                None
            }
            Err(e) => return Err(failed("cannot read the binlog position", &e)),
        };
        if !missing.is_empty() {
            // The dump is not tried with something else missing, so its privilege is probed:
            // the line then names everything to fix at once.
            if !self.may_replicate().await {
                missing.push(Missing::ReplicationSlave);
            }
            return Err(OpenError::Prerequisites(missing, grantee));
        }
        // On another server than the one `resume` is a position of: by GTID, or from scratch.
        let mut by_gtid: Option<GtidState> = None;
        let resume = match resume {
            Some(p) if server.generation != resume_generation => {
                let last = self.gtids.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match last {
                    Some(g) if !g.is_empty() && server_gtids.is_some() => {
                        info!(
                            "binlog: resuming on {} after GTID {g} (the last transaction read \
                             on the previous server, at {p})",
                            server.target.address()
                        );
                        by_gtid = Some(g);
                    }
                    _ => warn!(
                        "binlog: cannot resume on {} where the previous server's stream ended \
                         ({p}): no GTID to resume from (MariaDB GTIDs are needed); following \
                         from its current position, and every message table is polled",
                        server.target.address()
                    ),
                }
                None
            }
            // A GTID start whose stream ended before the server named its file: no position.
            Some(p) if p.file.is_empty() => None,
            other => other,
        };
        let start = match (&by_gtid, resume, current) {
            // The server tells the file and offset in the stream's first (artificial) rotate.
            (Some(_), _, _) => BinlogPosition {
                file: String::new(),
                pos: 4,
            },
            (None, Some(p), _) => p,
            (None, None, Some(p)) => {
                // From the current position: the GTID state is the server's now.
                *self.gtids.lock().unwrap_or_else(|e| e.into_inner()) = server_gtids;
                p
            }
            (None, None, None) => {
                return Err(OpenError::Prerequisites(vec![Missing::LogBin], grantee))
            }
        };
        if vars.get("server_id").and_then(|v| v.parse::<u32>().ok()) == Some(self.server_id) {
            // The backend itself has our id (only by chance): a replica may not share it.
            self.server_id ^= 1;
            self.status.send_modify(|s| s.server_id = self.server_id);
        }
        let mariadb = vars
            .get("version")
            .is_some_and(|v| v.to_ascii_lowercase().contains("mariadb"));
        let mut setup = vec![format!(
            "SET @master_heartbeat_period = {}",
            HEARTBEAT.as_nanos()
        )];
        if mariadb {
            // Announce a GTID-aware replica: MariaDB then sends its GTID events as they are
            // instead of replacing them with BEGIN and dummy events.
            setup.push("SET @mariadb_slave_capability = 4".to_string());
        }
        if let Some(gtids) = &by_gtid {
            // A dump by GTID: the server starts right after these transactions, and in strict
            // mode fails (1236) when it does not have them, instead of guessing.
            setup.extend(super::gtid::dump_after(gtids));
        }
        for sql in setup {
            within(conn.query_drop(sql))
                .await
                .map_err(|e| failed("cannot set up the binlog session", &e))?;
        }
        // mysql_async sets @master_binlog_checksum itself, so events come with their checksums
        // and its reader strips them.
        let request = BinlogStreamRequest::new(self.server_id)
            .with_filename(start.file.as_bytes())
            .with_pos(start.pos);
        match within(conn.get_binlog_stream(request)).await {
            Ok(stream) => Ok((stream, start, server.generation)),
            Err(e) if is_access_denied(&e) => Err(OpenError::Prerequisites(
                vec![Missing::ReplicationSlave],
                grantee,
            )),
            Err(e) if is_position_gone(&e) => Err(OpenError::PositionGone(e.to_string())),
            Err(e) => Err(failed("cannot open the binlog stream", &e)),
        }
    }

    /// Whether the user may register as a replica and dump the binlog: asked for a file that
    /// does not exist, the server checks the privilege first and then fails on the name (or on
    /// the binlog being off). Unsure answers count as yes.
    async fn may_replicate(&self) -> bool {
        let opts: Opts = self.switches.borrow().target.mysql_async_opts().into();
        let Ok(conn) = within(Conn::new(opts)).await else {
            return true;
        };
        let request = BinlogStreamRequest::new(self.server_id)
            .with_filename(b"msgproxy-privilege-probe.000001")
            .with_pos(4)
            .with_non_blocking();
        match within(conn.get_binlog_stream(request)).await {
            Err(e) => !is_access_denied(&e),
            Ok(mut stream) => {
                let first = tokio::time::timeout(CONNECT_TIMEOUT, next_event(&mut stream)).await;
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.close()).await;
                !matches!(first, Ok(Some(Err(e))) if is_access_denied(&e))
            }
        }
    }

    /// Reads the stream until it ends. The reading runs in a task of its own, so that a panic
    /// in the event parser (a malformed event) costs a reconnect, not the watcher.
    async fn follow(&self, stream: BinlogStream, start: BinlogPosition, generation: u64) -> End {
        let sink = EngineSink {
            engine: self.engine.clone(),
            reload: self.reload.clone(),
        };
        let status = self.status.clone();
        let shutdown = self.shutdown.clone();
        let activity = self.activity.clone();
        let mut switches = self.switches.clone();
        switches.borrow_and_update();
        let task = tokio::spawn(read_stream(
            stream,
            start.clone(),
            sink,
            status,
            Watched {
                shutdown,
                switches,
                generation,
                gtids: self.gtids.clone(),
            },
            activity,
        ));
        match task.await {
            Ok(end) => end,
            // The parser panics on the same event however often it is read again: resuming at
            // the last committed position would only repeat the panic. Starting again from the
            // server's current position skips it; the reopen polls every table, so what the
            // skipped events said is read back from the tables themselves.
            Err(e) if e.is_panic() => End::Unreadable {
                at: self.status.borrow().position.clone().unwrap_or(start),
            },
            Err(e) => End::Lost {
                at: self.status.borrow().position.clone().unwrap_or(start),
                why: format!("the event reader failed: {e}"),
            },
        }
    }
}

/// What ends a stream from outside, and where the reader leaves the GTIDs it read.
struct Watched {
    shutdown: CancellationToken,
    switches: watch::Receiver<Current>,
    /// The switch count of the server the stream is on.
    generation: u64,
    gtids: Arc<Mutex<Option<GtidState>>>,
}

async fn read_stream(
    mut stream: BinlogStream,
    start: BinlogPosition,
    sink: EngineSink,
    status: watch::Sender<BinlogStatus>,
    watched: Watched,
    activity: Arc<BinlogActivity>,
) -> End {
    let Watched {
        shutdown,
        mut switches,
        generation,
        gtids,
    } = watched;
    // A switch between opening the stream and here would otherwise go unnoticed.
    if switches.borrow_and_update().generation != generation {
        return End::Switched;
    }
    let known = gtids.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut follower: Follower<Arc<TableManager>> =
        Follower::new(&start).with_gtids(known.clone().unwrap_or_default());
    // Only MariaDB has GTIDs to resume from (the server answered `@@gtid_binlog_pos`).
    let keep_gtids = known.is_some();
    loop {
        let next = tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.close()).await;
                return End::Shutdown;
            }
            // The old server may be gone or read-only now: what it still sends is not read;
            // the new server's stream starts right after the last transaction handled here.
            _ = switches.changed() => {
                drop(stream);
                return End::Switched;
            }
            next = tokio::time::timeout(STALL_TIMEOUT, next_event(&mut stream)) => next,
        };
        let event = match next {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(e))) if is_position_gone(&e) => {
                return End::PositionGone {
                    at: follower.position(),
                    why: e.to_string(),
                };
            }
            Ok(Some(Err(e))) => {
                return End::Lost {
                    at: follower.position(),
                    why: e.to_string(),
                };
            }
            Ok(None) => {
                return End::Lost {
                    at: follower.position(),
                    why: "the server ended the stream".to_string(),
                };
            }
            Err(_) => {
                return End::Lost {
                    at: follower.position(),
                    why: format!("no event or heartbeat for {STALL_TIMEOUT:?}"),
                };
            }
        };
        activity.read(event_timestamp(&event), super::unix_ms());
        follower.handle(&event, &sink);
        if let Some(position) = follower.take_moved() {
            status.send_modify(|s| s.position = Some(position));
            if keep_gtids {
                *gtids.lock().unwrap_or_else(|e| e.into_inner()) = Some(follower.gtids().clone());
            }
        }
    }
}

/// The event's header timestamp; 0 for heartbeats, format descriptions and artificial events
/// (the server sends those at the start of a stream with the time the file was made, which
/// says nothing about how far behind the stream is).
fn event_timestamp(event: &Event) -> u32 {
    const FORMAT_DESCRIPTION_EVENT: u8 = 15;
    const HEARTBEAT_EVENT: u8 = 27;
    const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;
    let header = event.header();
    let artificial = header.flags_raw() & LOG_EVENT_ARTIFICIAL_F != 0 || header.log_pos() == 0;
    match header.event_type_raw() {
        FORMAT_DESCRIPTION_EVENT | HEARTBEAT_EVENT => 0,
        _ if artificial => 0,
        _ => header.timestamp(),
    }
}

async fn next_event(stream: &mut BinlogStream) -> Option<mysql_async::Result<Event>> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

/// Runs `fut` with [`CONNECT_TIMEOUT`].
async fn within<T>(
    fut: impl std::future::Future<Output = mysql_async::Result<T>>,
) -> Result<T, WithinError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
        Ok(r) => r.map_err(WithinError::Mysql),
        Err(_) => Err(WithinError::TimedOut),
    }
}

#[derive(Debug, thiserror::Error)]
enum WithinError {
    #[error(transparent)]
    Mysql(mysql_async::Error),
    #[error("no answer within {CONNECT_TIMEOUT:?}")]
    TimedOut,
}

trait ServerCode {
    fn server_code(&self) -> Option<u16>;
}

impl ServerCode for mysql_async::Error {
    fn server_code(&self) -> Option<u16> {
        match self {
            mysql_async::Error::Server(e) => Some(e.code),
            _ => None,
        }
    }
}

impl ServerCode for WithinError {
    fn server_code(&self) -> Option<u16> {
        match self {
            WithinError::Mysql(e) => e.server_code(),
            WithinError::TimedOut => None,
        }
    }
}

/// Access denied (1044, 1045), a missing privilege (1142, 1227).
fn is_access_denied(e: &impl ServerCode) -> bool {
    matches!(e.server_code(), Some(1044 | 1045 | 1142 | 1227))
}

/// ER_MASTER_FATAL_ERROR_READING_BINLOG: the position is purged, past the end, or otherwise not
/// there.
fn is_position_gone(e: &impl ServerCode) -> bool {
    e.server_code() == Some(1236)
}

/// `SHOW MASTER STATUS` (`SHOW BINARY LOG STATUS` on MySQL 8.4, which dropped the old name):
/// `None` when the binlog is off.
pub(crate) async fn current_position(
    conn: &mut Conn,
) -> mysql_async::Result<Option<BinlogPosition>> {
    let row: Option<Row> = match conn.query_first("SHOW MASTER STATUS").await {
        Err(e) if e.server_code() == Some(1064) => {
            conn.query_first("SHOW BINARY LOG STATUS").await?
        }
        r => r?,
    };
    Ok(row.and_then(|row| {
        let file: String = row.get_opt(0)?.ok()?;
        let pos: u64 = row.get_opt(1)?.ok()?;
        Some(BinlogPosition { file, pos })
    }))
}

/// Reloads the engine's tables after DDL, coalescing bursts: a `Notify` keeps one permit, so
/// any number of DDL events during a reload cause one more reload, not one each.
async fn reload_on_ddl(engine: Arc<Engine>, reload: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = reload.notified() => {}
            _ = shutdown.cancelled() => return,
        }
        if let Err(e) = engine.reload().await {
            warn!("binlog: reloading the message tables after DDL failed: {e}");
        }
    }
}

/// The engine as the follower's [`Sink`].
struct EngineSink {
    engine: Arc<Engine>,
    reload: Arc<Notify>,
}

impl TableHandle for Arc<TableManager> {
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other)
    }
}

impl Sink for EngineSink {
    type Table = Arc<TableManager>;

    fn lookup(&self, schema: &str, name: &str) -> Option<(Arc<TableManager>, Arc<MessageTable>)> {
        match self.engine.lookup(schema, name) {
            Lookup::Loaded(m) if !m.is_stopped() => {
                let def = m.definition();
                Some((m, def))
            }
            _ => None,
        }
    }

    fn apply(&self, table: &Arc<TableManager>, change: RowChange) {
        match change {
            RowChange::Changed(row) => table.row_changed(row),
            RowChange::Deleted(key) => table.row_deleted(&key),
        }
    }

    fn poll(&self, table: &Arc<TableManager>) {
        table.request_poll_after_commit();
    }

    fn poll_all(&self) {
        for m in self.engine.managers() {
            m.request_poll_after_commit();
        }
    }

    fn mentioned(&self, sql: &[u8]) -> Vec<Arc<TableManager>> {
        let mut tables = self.engine.tables_mentioned(sql);
        // The engine's test matches anywhere (a table `m` in every `CREATE`); here whole
        // identifiers only, since every statement of every client passes through.
        tables.retain(|m| names_identifier(sql, m.definition().name.as_bytes()));
        tables
    }

    fn schema_changed(&self, ddl: Option<Ddl<'_>>) {
        use crate::messaging::after_ddl::{self, AfterDdl};
        let plan = match ddl {
            Some(ddl) => {
                let schema = std::str::from_utf8(ddl.schema)
                    .ok()
                    .filter(|s| !s.is_empty());
                let effect = crate::sql::ddl_effect(ddl.sql, crate::sql::Quoting::DEFAULT);
                after_ddl::plan(&self.engine, ddl.sql, effect, schema)
            }
            None => AfterDdl::Catalog,
        };
        match plan {
            AfterDdl::Nothing => {}
            // A statement through this proxy was reloaded for already, before its OK; one made
            // around it is read here, by name, in a task of its own (reads are merged there).
            AfterDdl::Tables(keys) => {
                let engine = self.engine.clone();
                tokio::spawn(async move {
                    if let Err(e) = engine.reload_tables(keys).await {
                        warn!("binlog: reloading message tables after DDL failed: {e}");
                    }
                });
            }
            AfterDdl::Catalog => self.reload.notify_one(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_within_bounds() {
        let mut b = Backoff::new();
        let mut last_step = Duration::ZERO;
        for i in 0..20 {
            let step = b.next;
            assert!(step >= last_step, "the step never shrinks");
            last_step = step;
            let w = b.next_wait();
            assert!(w >= Backoff::MIN && w <= Backoff::MAX, "{i}: {w:?}");
            assert!(
                w >= step / 2 && w <= step.mul_f64(1.5),
                "{i}: {w:?} for {step:?}"
            );
        }
        assert_eq!(b.next, Backoff::MAX);
        b.reset();
        assert_eq!(b.next, Backoff::MIN);
    }

    #[test]
    fn server_error_classes() {
        let server = |code: u16| {
            mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: String::new(),
                state: "HY000".into(),
            })
        };
        assert!(is_access_denied(&server(1227)));
        assert!(is_access_denied(&server(1045)));
        assert!(!is_access_denied(&server(1236)));
        assert!(is_position_gone(&server(1236)));
        assert!(!is_position_gone(&WithinError::TimedOut));
    }
}
