//! The groups this proxy serves, and the statements on them.
//!
//! A group exists in the store (msgproxy's own table) from its first `STREAM ... GROUP` (or
//! `SEEK`) until `DROP GROUP`. A proxy with streams of a group runs one task for it
//! ([`Group::run`]): it takes the group's lease, loads its progress, reads the binlog from there
//! with a reader of its own (and on the table's shared reader once it has caught up with it:
//! `shared.rs`), hands events to the group's streams, and saves the progress every
//! [`SAVE_EVERY`] (so an `ACK` is durable within 100 ms). A proxy that cannot take the lease
//! keeps trying; its streams wait, and take over from the durable progress once the serving
//! proxy is gone. A group with no streams and nothing in flight for [`IDLE_AFTER`] gives its
//! lease up and stops reading.
//!
//! An `ACK` through the serving proxy is applied to the group's state at once, with no backend
//! round trip. Through another proxy it (and a `SEEK`) is queued in the requests table
//! (`requests.rs`) and answered by the serving proxy's poller (`request_poller.rs`) within about
//! 50 ms; a proxy taking a group over applies what was queued for its predecessor first.
//!
//! Everything follows the backend in use (`crate::cluster`): the store's pool, the readers, and
//! at a switch every serving group saves, and resumes on the new server by GTID (`resume.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Opts;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::filter;
use super::group::{GroupState, Progress, StreamId};
use super::locate::{self, Target};
use super::reader::{self, Event, ReaderError, ReaderMsg, ReaderTarget};
use super::registry::{Registry, StreamLookup, StreamTable};
use super::requests::{self, Answer, Asked, Requests};
use super::shared::{Piece, SharedReaders};
use super::store::{GroupKey, GroupRow, Store, RENEW_EVERY};
use crate::cluster::{Backends, SharedPool};
use crate::sql::Filter;

/// How often a serving group saves its progress when it changed.
pub const SAVE_EVERY: Duration = Duration::from_millis(50);
/// How often a proxy that waits for a group's lease asks for it again.
const CLAIM_EVERY: Duration = Duration::from_millis(500);
/// A group without streams and with nothing in flight this long stops being served here (lease
/// released, reader closed). Short: while this proxy keeps a group without streams, streams that
/// joined it through another proxy wait and get nothing, as when consumers reconnect through a
/// load balancer to the other proxy (it was 30 s, and such groups stalled that long). Serving it
/// again costs a claim, a load and re-reading the binlog from the saved position.
const IDLE_AFTER: Duration = Duration::from_secs(2);
/// How often the stream tables are read again.
const RELOAD_EVERY: Duration = Duration::from_secs(10);
/// How long an `ACK` through a proxy that does not serve the group waits for the serving
/// proxy's answer before it answers "queued" (the serving proxy reads requests every
/// [`requests::POLL_EVERY`]; longer means it is dying or its lease is moving).
pub const ACK_ANSWER_WAIT: Duration = Duration::from_secs(1);
/// The same for a `SEEK`, which the serving proxy must first find in its binlog (`EARLIEST`,
/// `TIMESTAMP` and `EVENT` read it from its oldest file).
pub const SEEK_ANSWER_WAIT: Duration = Duration::from_secs(5);
/// How often such a statement looks for the answer.
const ANSWER_POLL_EVERY: Duration = Duration::from_millis(10);

/// What an `ACK` or a `SEEK` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Applied (here, or by the serving proxy): the affected rows (events newly acked; 0 for a
    /// `SEEK`).
    Done(u64),
    /// Handed to the proxy `owner` serving the group, which did not answer in time: it, or the
    /// next proxy to serve the group, applies it when it reads it.
    Queued { owner: String },
}

/// Why a statement on a group failed: the error to send (code, SQLSTATE, message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamError {
    pub code: u16,
    pub sqlstate: &'static str,
    pub message: String,
}

impl StreamError {
    fn new(code: u16, sqlstate: &'static str, message: impl Into<String>) -> StreamError {
        StreamError {
            code,
            sqlstate,
            message: message.into(),
        }
    }

    fn backend(e: impl std::fmt::Display) -> StreamError {
        StreamError::new(
            crate::protocol::commands::ER_UNKNOWN_ERROR,
            "HY000",
            format!("msgproxy could not reach its stream-groups table on the backend: {e}"),
        )
    }
}

/// Where a group is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Waiting for the lease; `Some`: the proxy that holds it.
    Waiting(Option<String>),
    /// Holding the lease, the binlog reader not yet open.
    Starting,
    Serving,
    /// The group cannot go on (its position left the binlog, ...): the message for its streams.
    Failed(String),
    /// Holding the lease, waiting for the server in use to apply transactions the group needs
    /// (why, for `SHOW STREAM GROUPS`); its streams wait.
    Behind(String),
    /// `DROP GROUP`, or the proxy is stopping.
    Gone(String),
}

struct Inner {
    mode: Mode,
    state: Option<GroupState>,
    streams: HashSet<StreamId>,
    next_stream: StreamId,
    /// A `SEEK` for the task to apply.
    /// A `SEEK` for the task to apply: the position, and the server it is a position of.
    seek: Option<(Progress, String)>,
    /// When the last stream left.
    idle_since: Option<Instant>,
}

/// One group served (or waited for) by this proxy.
pub struct Group {
    pub key: GroupKey,
    table: Mutex<Arc<StreamTable>>,
    pub filter: Option<Filter>,
    inner: Mutex<Inner>,
    /// Wakes the group's streams: events, room, or a change of mode.
    pub changed: Notify,
    /// Wakes the group's task: a seek, or a stream left.
    control: Notify,
    stop: CancellationToken,
    /// Cancelled when the group's task has ended, its last save and lease release done: a new
    /// task for the same group on this proxy waits for it (see `join`).
    finished: CancellationToken,
}

/// A figure of a group for `SHOW STREAM GROUPS` and metrics.
#[derive(Debug, Clone)]
pub struct GroupInfo {
    pub key: GroupKey,
    pub filter: String,
    pub position: u64,
    /// Events read and not done.
    pub behind: u64,
    /// Seconds since the oldest unread event committed, when known.
    pub oldest_age: Option<f64>,
    pub in_flight: u64,
    pub streams: u64,
    pub serving: Option<String>,
    pub status: String,
    pub sent: u64,
    pub redelivered: u64,
    pub acked: u64,
    /// Where the group resumes: the saved file and offset, their server and GTID state.
    pub resume_from: String,
}

impl Group {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn table(&self) -> Arc<StreamTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn mode(&self) -> Mode {
        self.lock().mode.clone()
    }

    /// The next batch for `stream`, if there is one now.
    pub fn try_batch(&self, stream: StreamId) -> Option<Vec<Arc<Event>>> {
        let options = self.table().options.clone();
        let mut inner = self.lock();
        let state = inner.state.as_mut()?;
        if !state.has_waiting() || !state.has_room(stream, options.max_unacked) {
            return None;
        }
        let batch = state.take_batch(
            stream,
            options.batch_size,
            options.max_unacked,
            Instant::now(),
            options.ack_wait,
        );
        (!batch.is_empty()).then_some(batch)
    }

    /// Applies an `ACK` to the group's state if this proxy serves it: how many were newly
    /// acked, or `None` when it does not (no state: waiting for the lease, or being given up).
    pub fn ack_here(&self, ids: &[u64]) -> Option<u64> {
        let mut inner = self.lock();
        // The state exists while this proxy holds the lease (a group being given up takes no
        // more acks: its last save may be done).
        if matches!(inner.mode, Mode::Gone(_)) {
            return None;
        }
        let state = inner.state.as_mut()?;
        let n = state.ack(ids);
        // Streams wait for events, or for room under max_unacked: an ack matters to them only
        // when events wait (a stream may have room for them now). Waking every stream of the
        // group at every ACK cost two thread wake-ups an event.
        let wake = n > 0 && state.has_waiting();
        drop(inner);
        if wake {
            self.changed.notify_waiters();
        }
        Some(n)
    }

    /// A stream leaves: what it held is sent again.
    pub fn leave(&self, stream: StreamId) {
        let mut inner = self.lock();
        inner.streams.remove(&stream);
        if inner.streams.is_empty() {
            inner.idle_since = Some(Instant::now());
        }
        if let Some(state) = inner.state.as_mut() {
            state.stream_gone(stream);
        }
        drop(inner);
        self.changed.notify_waiters();
        self.control.notify_one();
    }

    fn info(&self) -> GroupInfo {
        let inner = self.lock();
        let now = crate::binlog::unix_ms() as f64 / 1000.0;
        let (position, behind, in_flight, oldest, sent, redelivered, acked) = match &inner.state {
            Some(s) => (
                s.floor(),
                s.outstanding() as u64,
                s.in_flight() as u64,
                s.oldest_outstanding_timestamp(),
                s.sent,
                s.redelivered,
                s.acked_count,
            ),
            None => (0, 0, 0, None, 0, 0, 0),
        };
        let (status, serving) = match &inner.mode {
            Mode::Serving => ("serving".to_owned(), None),
            Mode::Starting => ("opening the binlog".to_owned(), None),
            Mode::Waiting(owner) => ("waiting for the lease".to_owned(), owner.clone()),
            Mode::Behind(why) => (why.clone(), None),
            Mode::Failed(why) | Mode::Gone(why) => (why.clone(), None),
        };
        GroupInfo {
            key: self.key.clone(),
            filter: self
                .filter
                .as_ref()
                .map(Filter::canonical)
                .unwrap_or_default(),
            position,
            behind,
            oldest_age: oldest.map(|t| (now - f64::from(t)).max(0.0)),
            in_flight,
            streams: inner.streams.len() as u64,
            serving,
            status,
            sent,
            redelivered,
            acked,
            resume_from: String::new(),
        }
    }
}

/// The event-stream engine of one proxy.
pub struct StreamEngine {
    /// The server in use's pool (it follows a switch).
    pool: SharedPool,
    backends: Arc<Backends>,
    /// The server in use's identity (`resume::identify`), by switch count.
    here: tokio::sync::Mutex<Option<(u64, String)>>,
    registry: Registry,
    store: Store,
    /// `ACK`s handed between proxies (`requests.rs`).
    requests: Requests,
    groups: Mutex<HashMap<GroupKey, Arc<Group>>>,
    /// This proxy's name in leases: host, process and a random part.
    pub me: String,
    /// The tables' shared readers, for groups at the head of the binlog.
    shared: Arc<SharedReaders>,
    shutdown: CancellationToken,
    table_ready: tokio::sync::OnceCell<()>,
    /// The groups' tasks: at shutdown each saves its group's progress and gives its lease up
    /// (so another proxy takes over at once, not when the lease runs out); [`Self::stopped`]
    /// waits for that.
    tasks: tokio_util::task::TaskTracker,
}

impl StreamEngine {
    /// Starts the engine: the registry and its periodic reload. `groups_table` is the
    /// `--stream-groups-table` flag.
    pub fn start(
        backends: &Arc<Backends>,
        groups_table: &str,
        shutdown: CancellationToken,
    ) -> Arc<StreamEngine> {
        let pool = SharedPool::new(
            backends,
            Box::new(|backend| {
                let constraints = mysql_async::PoolConstraints::new(1, 16).unwrap_or_default();
                mysql_async::Pool::new(
                    backend
                        .mysql_async_opts()
                        .client_found_rows(true)
                        .setup(vec!["SET time_zone = '+00:00'"])
                        .pool_opts(mysql_async::PoolOpts::default().with_constraints(constraints)),
                )
            }),
            shutdown.clone(),
        );
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "msgproxy".into());
        let me = format!(
            "{host}:{}:{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let engine = Arc::new(StreamEngine {
            store: Store::new(pool.clone(), groups_table),
            requests: Requests::new(pool.clone(), groups_table),
            pool,
            backends: backends.clone(),
            here: tokio::sync::Mutex::new(None),
            registry: Registry::default(),
            groups: Mutex::new(HashMap::new()),
            me,
            shared: SharedReaders::new(backends.clone(), shutdown.clone()),
            shutdown,
            table_ready: tokio::sync::OnceCell::new(),
            tasks: tokio_util::task::TaskTracker::new(),
        });
        // Stream tables are read when a statement names one the registry does not know, and
        // then again every RELOAD_EVERY (for changed options) — only once some are known: a
        // proxy whose clients never use event streams never asks (information_schema.TABLES
        // opens every table of the server).
        let periodic = engine.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = periodic.shutdown.cancelled() => break,
                    _ = tokio::time::sleep(RELOAD_EVERY) => {}
                }
                if periodic.registry.is_empty() {
                    continue;
                }
                if let Err(e) = periodic.registry.reload(&periodic.pool.current()).await {
                    tracing::debug!("loading the stream tables failed: {e}");
                }
            }
        });
        tokio::spawn(engine.clone().answer_requests());
        engine
    }

    /// How binlog readers connect to the server in use now.
    fn reader_opts(&self) -> Opts {
        self.backends.current().mysql_async_opts().into()
    }

    /// The server in use's identity (`@@hostname:@@port`), asked once per switch.
    async fn here(&self) -> Result<String, StreamError> {
        let generation = self.backends.generation();
        let mut known = self.here.lock().await;
        if let Some((g, id)) = known.as_ref() {
            if *g == generation {
                return Ok(id.clone());
            }
        }
        let mut conn = mysql_async::Conn::new(self.reader_opts())
            .await
            .map_err(StreamError::backend)?;
        let id = super::resume::identify(&mut conn)
            .await
            .map_err(StreamError::backend)?;
        let _ = conn.disconnect().await;
        *known = Some((generation, id.clone()));
        Ok(id)
    }

    /// Waits (at most `limit`) for the groups' tasks to save and let go after the shutdown
    /// token fired.
    pub async fn stopped(&self, limit: Duration) {
        self.tasks.close();
        let _ = tokio::time::timeout(limit, self.tasks.wait()).await;
    }

    /// The stream table `schema`.`name`; a miss reads the tables again first (a table created a
    /// moment ago).
    pub async fn lookup(&self, schema: &str, name: &str) -> StreamLookup {
        match self.registry.lookup(schema, name) {
            StreamLookup::NotStreamTable => {
                if let Err(e) = self.registry.reload(&self.pool.current()).await {
                    warn!("loading the stream tables failed: {e}");
                }
                self.registry.lookup(schema, name)
            }
            found => found,
        }
    }

    async fn ready(&self) -> Result<(), StreamError> {
        self.table_ready
            .get_or_try_init(|| async {
                self.store.ensure_table().await?;
                self.requests.ensure_table().await
            })
            .await
            .map(|_| ())
            .map_err(StreamError::backend)
    }

    /// Whether the server's binlog can carry event streams; the error names what is missing.
    async fn check_server(&self) -> Result<(), StreamError> {
        let mut conn = self.pool.get_conn().await.map_err(StreamError::backend)?;
        let names = crate::binlog::prereq::VARIABLES
            .iter()
            .map(|v| format!("'{v}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let vars: HashMap<String, String> = conn
            .query::<(String, String), _>(format!(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"
            ))
            .await
            .map_err(StreamError::backend)?
            .into_iter()
            .collect();
        let mut problems: Vec<String> = crate::binlog::prereq::check_variables(&vars)
            .iter()
            .map(|m| m.describe("msgproxy's backend user"))
            .collect();
        let mariadb = vars.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("version") && v.to_lowercase().contains("mariadb")
        });
        if !mariadb {
            problems.push(
                "the server is not MariaDB: event ids are made from MariaDB's GTIDs (gtid_domain_id, seq_no)"
                    .into(),
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StreamError::new(
                crate::protocol::commands::ER_UNKNOWN_ERROR,
                "HY000",
                format!(
                    "event streams cannot follow this server's binlog: {}",
                    problems.join("; ")
                ),
            ))
        }
    }

    /// Joins a stream to the group (creating it at `start` if new): the group and the stream's
    /// number in it.
    pub async fn join(
        self: &Arc<Self>,
        key: GroupKey,
        table: Arc<StreamTable>,
        filter: Option<Filter>,
        start: Target,
    ) -> Result<(Arc<Group>, StreamId), StreamError> {
        self.ready().await?;
        self.check_server().await?;
        let canonical = filter.as_ref().map(Filter::canonical).unwrap_or_default();
        let row = match self.store.load(&key).await.map_err(StreamError::backend)? {
            Some(row) => row,
            None => {
                let progress = locate::resolve(&self.reader_opts(), &key.schema, &key.table, start)
                    .await
                    .map_err(|e| {
                        StreamError::new(
                            crate::protocol::commands::ER_UNKNOWN_ERROR,
                            "HY000",
                            format!(
                                "cannot find where group '{}' starts in the binlog: {e}",
                                key.group
                            ),
                        )
                    })?;
                let here = self.here().await?;
                self.store
                    .create(&key, &canonical, &progress, &here)
                    .await
                    .map_err(StreamError::backend)?
                    .ok_or_else(|| StreamError::backend("the new group's row is not there"))?
            }
        };
        if row.filter != canonical {
            let shown = |f: &str| {
                if f.is_empty() {
                    "no filter".to_owned()
                } else {
                    format!("WHERE {f}")
                }
            };
            return Err(StreamError::new(
                crate::protocol::commands::ER_WRONG_ARGUMENTS,
                "HY000",
                format!(
                    "group '{}' of {} was created with {}, not {}: a group's filter is fixed at its creation; use another group name, or DROP GROUP first",
                    key.group,
                    table.qualified(),
                    shown(&row.filter),
                    shown(&canonical)
                ),
            ));
        }
        // The stream is added under the map's lock: a task giving an idle group up takes the
        // same lock and looks at the group's streams once more (see `give_up_if_idle`).
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let group = {
            match groups.get(&key) {
                Some(g) if !matches!(g.mode(), Mode::Gone(_)) => g.clone(),
                previous => {
                    // A group given up here may still be saving and releasing its lease: the
                    // new task waits for that, or the release would drop the lease under it
                    // (same proxy, same owner) and another proxy would take the group over
                    // while this one serves it, sending its events again at once.
                    let previous = previous.cloned();
                    let group = Arc::new(Group {
                        key: key.clone(),
                        table: Mutex::new(table.clone()),
                        filter,
                        inner: Mutex::new(Inner {
                            mode: Mode::Waiting(None),
                            state: None,
                            streams: HashSet::new(),
                            next_stream: 1,
                            seek: None,
                            idle_since: None,
                        }),
                        changed: Notify::new(),
                        control: Notify::new(),
                        stop: self.shutdown.child_token(),
                        finished: CancellationToken::new(),
                    });
                    groups.insert(key.clone(), group.clone());
                    self.tasks.spawn(self.clone().run(group.clone(), previous));
                    group
                }
            }
        };
        *group.table.lock().unwrap_or_else(|e| e.into_inner()) = table;
        let stream = {
            let mut inner = group.lock();
            let id = inner.next_stream;
            inner.next_stream += 1;
            inner.streams.insert(id);
            inner.idle_since = None;
            id
        };
        drop(groups);
        Ok((group, stream))
    }

    /// `ACK t GROUP 'g' ids`: how many were newly acked. Through the proxy serving the group
    /// it is applied at once; through another it is handed to the serving proxy
    /// (`requests.rs`) and its answer awaited for at most [`ACK_ANSWER_WAIT`].
    pub async fn ack(&self, key: &GroupKey, ids: &[u64]) -> Result<Outcome, StreamError> {
        let group = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        if let Some(n) = group.and_then(|g| g.ack_here(ids)) {
            return Ok(Outcome::Done(n));
        }
        self.ready().await?;
        match self.store.load(key).await.map_err(StreamError::backend)? {
            // (This proxy itself while it places the group and has no state for it: before its
            // first events, or after a failed move; nothing is in flight then.)
            Some(GroupRow {
                owner: Some(owner), ..
            }) if owner != self.me => {
                let asked = Asked::Ack(ids.to_vec());
                self.ask_serving(key, &asked, owner, ACK_ANSWER_WAIT).await
            }
            // Nobody serves it, so nothing of it is in flight: nothing to ack.
            Some(row) => {
                tracing::debug!(
                    "ACK of {} id(s) of group {key:?} answered 0: {}",
                    ids.len(),
                    if row.owner.is_some() {
                        "this proxy is placing it and has no state yet"
                    } else {
                        "nobody serves it"
                    }
                );
                Ok(Outcome::Done(0))
            }
            None => Err(StreamError::new(
                crate::protocol::commands::ER_UNKNOWN_ERROR,
                "HY000",
                format!(
                    "there is no group '{}' on `{}`.`{}`; STREAM ... GROUP creates it",
                    key.group, key.schema, key.table
                ),
            )),
        }
    }

    /// An `ACK` or `SEEK` of a group another proxy (`owner`) serves: queued for it in the
    /// requests table (durable from then on), then its answer, polled for until `wait` has
    /// passed.
    async fn ask_serving(
        &self,
        key: &GroupKey,
        asked: &Asked,
        owner: String,
        wait: Duration,
    ) -> Result<Outcome, StreamError> {
        let request = self
            .requests
            .submit(key, asked, &self.me)
            .await
            .map_err(StreamError::backend)?;
        let deadline = Instant::now() + wait;
        loop {
            // (No look at once: the serving proxy reads requests every 50 ms.)
            tokio::time::sleep(ANSWER_POLL_EVERY).await;
            // Read errors are waited out like a missing answer: the request is written, and the
            // serving proxy (or its successor) applies it whatever this one learns.
            match self.requests.answer_of(request).await {
                Ok(Some(Answer::Done(n))) => {
                    tracing::debug!("request {request} of group {key:?} answered: {n} done");
                    return Ok(Outcome::Done(n));
                }
                Ok(Some(Answer::Failed(why))) => {
                    return Err(StreamError::new(
                        crate::protocol::commands::ER_UNKNOWN_ERROR,
                        "HY000",
                        why,
                    ))
                }
                Ok(None) => {}
                Err(e) => tracing::debug!("reading the answer to ACK request {request}: {e}"),
            }
            if Instant::now() >= deadline {
                info!(
                    "request {request} for group '{}' of `{}`.`{}` queued: {owner}, which serves it, did not answer within {wait:?}",
                    key.group, key.schema, key.table
                );
                return Ok(Outcome::Queued { owner });
            }
        }
    }

    /// `SEEK`: moves the group (creating it if new, without a filter); what it had in flight is
    /// dropped. A group another proxy serves is moved by that proxy (its next save would undo a
    /// move written behind its back): the `SEEK` is handed to it as an `ACK` is.
    pub async fn seek(&self, key: &GroupKey, to: Target) -> Result<Outcome, StreamError> {
        self.ready().await?;
        self.check_server().await?;
        let local = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        let served_here = local.as_ref().is_some_and(|g| g.lock().state.is_some());
        if !served_here {
            // The serving proxy's next save would undo a SEEK written behind its back: it is
            // handed to that proxy. (This proxy as the owner: its group task is placing the
            // group on the server, and takes the SEEK from its row.)
            if let Some(GroupRow {
                owner: Some(owner), ..
            }) = self.store.load(key).await.map_err(StreamError::backend)?
            {
                if owner != self.me {
                    let asked = Asked::Seek(to);
                    return self.ask_serving(key, &asked, owner, SEEK_ANSWER_WAIT).await;
                }
            }
        }
        self.seek_here(key, to).await.map(|()| Outcome::Done(0))
    }

    /// `SEEK` of a group nobody else serves.
    async fn seek_here(&self, key: &GroupKey, to: Target) -> Result<(), StreamError> {
        let (progress, here) = self.resolve_seek(key, to).await?;
        let existed = self
            .store
            .seek(key, &progress, &here)
            .await
            .map_err(StreamError::backend)?;
        if !existed
            && self
                .store
                .create(key, "", &progress, &here)
                .await
                .map_err(StreamError::backend)?
                .is_none()
        {
            return Err(StreamError::backend("the group's row is not there"));
        }
        let group = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        if let Some(group) = group {
            group.lock().seek = Some((progress, here));
            group.control.notify_one();
        }
        Ok(())
    }

    /// Where a `SEEK` to `to` moves the group on the server in use, and that server.
    async fn resolve_seek(
        &self,
        key: &GroupKey,
        to: Target,
    ) -> Result<(Progress, String), StreamError> {
        // The position and the server it is saved with must be the same server's.
        let generation = self.backends.generation();
        let here = self.here().await?;
        let progress = locate::resolve(&self.reader_opts(), &key.schema, &key.table, to)
            .await
            .map_err(|e| {
                StreamError::new(
                    crate::protocol::commands::ER_UNKNOWN_ERROR,
                    "HY000",
                    format!("cannot find that position in the binlog: {e}"),
                )
            })?;
        if self.backends.generation() != generation {
            return Err(StreamError::new(
                crate::protocol::commands::ER_UNKNOWN_ERROR,
                "HY000",
                format!(
                    "the backend in use changed while SEEK looked for that position; SEEK group '{}' again",
                    key.group
                ),
            ));
        }
        Ok((progress, here))
    }

    /// `DROP GROUP`: whether the group existed. Its streams here end.
    pub async fn drop_group(&self, key: &GroupKey) -> Result<bool, StreamError> {
        self.ready().await?;
        let existed = self.store.delete(key).await.map_err(StreamError::backend)?;
        self.requests
            .forget(key)
            .await
            .map_err(StreamError::backend)?;
        let group = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        if let Some(group) = group {
            group.lock().mode = Mode::Gone(format!("group '{}' was dropped", key.group));
            group.stop.cancel();
            group.changed.notify_waiters();
        }
        Ok(existed)
    }

    /// Every group: the store's rows, with this proxy's figures for the groups it serves.
    pub async fn show(&self) -> Result<Vec<GroupInfo>, StreamError> {
        self.ready().await?;
        let rows = self.store.all().await.map_err(StreamError::backend)?;
        let local: HashMap<GroupKey, GroupInfo> = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|g| (g.key.clone(), g.info()))
            .collect();
        Ok(rows
            .into_iter()
            .map(|row| match local.get(&row.key) {
                Some(info) if info.status == "serving" => GroupInfo {
                    serving: Some(self.me.clone()),
                    resume_from: super::resume::describe(&row.progress.resume, &row.anchor),
                    ..info.clone()
                },
                Some(info) => GroupInfo {
                    position: row.progress.floor,
                    serving: row.owner.clone(),
                    resume_from: super::resume::describe(&row.progress.resume, &row.anchor),
                    ..info.clone()
                },
                None => GroupInfo {
                    key: row.key.clone(),
                    filter: row.filter.clone(),
                    position: row.progress.floor,
                    behind: 0,
                    oldest_age: None,
                    in_flight: 0,
                    streams: 0,
                    serving: row.owner.clone(),
                    status: if row.owner.is_some() {
                        "served by another proxy".into()
                    } else {
                        "idle".into()
                    },
                    sent: 0,
                    redelivered: 0,
                    acked: 0,
                    resume_from: super::resume::describe(&row.progress.resume, &row.anchor),
                },
            })
            .collect())
    }

    /// The groups this proxy knows, for metrics.
    pub fn local_groups(&self) -> Vec<GroupInfo> {
        let mut all: Vec<GroupInfo> = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|g| g.info())
            .collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }
}

#[path = "group_task.rs"]
mod group_task;

#[path = "request_poller.rs"]
mod request_poller;
