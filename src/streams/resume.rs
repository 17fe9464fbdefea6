//! Where a group resumes, on whichever server is in use (docs/STREAMS.md, "Moving with the
//! backend").
//!
//! A group's saved position is a binlog file and offset (`resume_file`, `resume_pos`), which
//! mean something only on the server that wrote that binlog. So the row also says which server
//! that is (`resume_server`), the GTID state at (or a little before) that position
//! (`resume_gtid`, from `BINLOG_GTID_POS`), and the newest transaction the group has done
//! (`done_gtid`). Event ids are GTID seq_nos, so they mean the same on every server of one GTID
//! domain: a group moved to another server by GTID goes on with the same ids.
//!
//! - **Same server** (or a row of the previous version, which names none): the file and offset.
//! - **Another server**: the binlog dump opens right after `resume_gtid` (strict mode, as the
//!   binlog watcher resumes: `crate::binlog::gtid::dump_after`), which gives the file and offset
//!   on that server ([`locate`]); what the group has done is skipped by its floor and acked ids.
//!   Only the table's GTID domain must be complete there ([`decide`]).
//! - **The server lacks the transactions** (a replica promoted without them, or purged): the
//!   group fails with a message that says to `SEEK` it; going on would skip events, or give new
//!   transactions the ids of acked ones.
//! - **The server is behind** (a lagging replica, or a node still catching up): the group waits
//!   for it, for [`BEHIND_GRACE`], then fails the same way (and still resumes if the server
//!   catches up later).

use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_core::Stream;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStreamRequest, Conn, Opts};
use mysql_common::binlog::events::{Event, RotateEvent};
use tokio::task::JoinHandle;

use crate::binlog::gtid::{dump_after, GtidState};
use crate::binlog::BinlogPosition;

/// How often a serving group asks the server for the GTID state at its resume position. Off the
/// delivery path, and not often: `BINLOG_GTID_POS` reads the binlog file up to the offset (about
/// 0.2-0.3 s at the end of a 200 MB file). A group moved to another server re-reads at most
/// this much more than it had to (at least once, never a skip).
pub const ASK_GTID_EVERY: Duration = Duration::from_secs(3);
/// How long a group waits for a server that has not yet applied what the group has done before
/// its streams get the error.
pub const BEHIND_GRACE: Duration = Duration::from_secs(10);

/// How the group's row says where it resumes, beyond the file and offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Anchor {
    /// The server the file and offset belong to (`@@hostname:@@port`); `None` in rows of the
    /// previous version (the file and offset are then taken on the server in use, as before).
    pub server: Option<String>,
    /// The GTID state at a position at or before the file and offset.
    pub gtid: Option<GtidState>,
    /// The newest transaction the group has done.
    pub done: Option<Done>,
}

impl Anchor {
    /// A position of `server` with nothing known beyond it (a `SEEK`'s).
    pub fn at(server: String) -> Anchor {
        Anchor {
            server: Some(server),
            gtid: None,
            done: None,
        }
    }
}

/// The newest transaction a group has done (every event up to it acked or filtered out, or
/// acked itself): its GTID domain and seq_no. A server without it would number its next
/// transactions with the ids of events the group has done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub domain: u32,
    pub seq: u64,
}

impl Done {
    /// `domain-seq_no`, as [`Done`]'s `Display` writes it.
    pub fn parse(text: &str) -> Option<Done> {
        let (domain, seq) = text.trim().split_once('-')?;
        Some(Done {
            domain: domain.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.domain, self.seq)
    }
}

/// Where a group starts on the server in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The saved file and offset are this server's.
    Here,
    /// Right after this GTID state ([`locate`] finds the file and offset).
    ByGtid(GtidState),
    /// The server has not applied what the group needs: wait, then fail.
    Behind { needs: String, has: String },
    /// The saved position is another server's and has no GTID state to move by.
    NoGtid { server: String },
}

/// Decides where a group saved as `saved` starts on the server `here`, whose binlog holds the
/// transactions up to `server_gtids` (`@@gtid_binlog_pos`).
///
/// Only the table's GTID domain (that of the group's done transaction) can hold its events, so
/// only there must the server have everything: other domains of the saved state that the
/// server never had are left out of the dump's start (a Galera node's local domain), and one it
/// is behind in starts from the server's own last GTID (reading more of it is harmless). While
/// the table's domain is not known (no event read yet), every shared domain counts as the
/// table's.
pub fn decide(saved: &Anchor, here: &str, server_gtids: &GtidState) -> Decision {
    let server = match &saved.server {
        None => return Decision::Here,
        Some(s) if s == here => return Decision::Here,
        Some(s) => s,
    };
    let Some(gtid) = &saved.gtid else {
        return Decision::NoGtid {
            server: server.clone(),
        };
    };
    let table_domain = saved.done.map(|d| d.domain);
    let is_table = |domain: u32| table_domain.is_none_or(|t| t == domain);
    let mut start = GtidState::default();
    let mut short: Vec<String> = Vec::new();
    for (domain, seq) in gtid.seqs() {
        match server_gtids.get(domain) {
            Some(has) if has.seq >= seq => {
                if let Some(g) = gtid.get(domain) {
                    start.committed(g);
                }
            }
            Some(has) if !is_table(domain) => start.committed(has),
            Some(_) => short.push(format!("domain {domain} up to seq_no {seq}")),
            None if table_domain == Some(domain) => {
                short.push(format!("domain {domain} up to seq_no {seq}"))
            }
            None => {}
        }
    }
    if let Some(done) = saved.done {
        let has = server_gtids.seq(done.domain);
        let counted = short
            .iter()
            .any(|s| s.starts_with(&format!("domain {} ", done.domain)));
        if has.is_none_or(|has| has < done.seq) && !counted {
            short.push(format!("domain {} up to seq_no {}", done.domain, done.seq));
        }
    }
    if !short.is_empty() {
        return Decision::Behind {
            needs: short.join(", "),
            has: if server_gtids.is_empty() {
                "none".into()
            } else {
                server_gtids.to_string()
            },
        };
    }
    Decision::ByGtid(start)
}

/// How the saved position shows in `SHOW STREAM GROUPS` (`Resume_from`).
pub fn describe(resume: &BinlogPosition, anchor: &Anchor) -> String {
    match (&anchor.server, &anchor.gtid) {
        (Some(server), Some(gtid)) => format!("{resume} on {server} (gtid {gtid})"),
        (Some(server), None) => format!("{resume} on {server}"),
        (None, _) => resume.to_string(),
    }
}

/// Why a server cannot resume a group by GTID.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// The server lacks (or purged) transactions of the state: its own message.
    #[error("{0}")]
    Missing(String),
    #[error("{0}")]
    Other(String),
}

/// The identity of the server behind `conn`: `@@hostname:@@port`. Not `@@server_id`: the nodes
/// of a Galera cluster with `wsrep_gtid_mode` share one. MariaDB has no server UUID; a host and
/// port is stable across restarts and is what an operator recognises in `SHOW STREAM GROUPS`.
/// (Two servers that report the same host and port, such as containers with one name, would be
/// taken for one: give them distinct hostnames.)
pub async fn identify(conn: &mut Conn) -> mysql_async::Result<String> {
    let id: Option<String> = conn
        .query_first("SELECT CONCAT(@@hostname, ':', @@port)")
        .await?;
    Ok(id.unwrap_or_default())
}

/// The server's `@@gtid_binlog_pos`.
async fn server_gtids(conn: &mut Conn) -> mysql_async::Result<GtidState> {
    let text: Option<Option<String>> = conn.query_first("SELECT @@gtid_binlog_pos").await?;
    Ok(text
        .flatten()
        .and_then(|t| GtidState::parse(&t))
        .unwrap_or_default())
}

/// What [`decide`] needs to know of a server: who it is and what its binlog holds.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// `@@hostname:@@port` ([`identify`]).
    pub identity: String,
    /// `@@gtid_binlog_pos`.
    pub gtids: GtidState,
}

/// Connects to the server of `opts` and reads its [`ServerState`]. Both on the one connection,
/// so that the identity and the GTID state are of the same server even while the backend in
/// use changes meanwhile.
pub async fn server_state(opts: &Opts) -> mysql_async::Result<ServerState> {
    let mut conn = Conn::new(opts.clone()).await?;
    let identity = identify(&mut conn).await?;
    let gtids = server_gtids(&mut conn).await?;
    let _ = conn.disconnect().await;
    Ok(ServerState { identity, gtids })
}

/// Where a group saved as `anchor` starts in the binlog of one server, and if it cannot start
/// there, why: [`decide`], then [`locate`] for a move by GTID.
#[derive(Debug)]
pub enum Place {
    /// The saved file and offset: they are this server's.
    Saved,
    /// Right after the GTID state `after`: the file and offset [`locate`] found there, or why
    /// it found none.
    ByGtid {
        after: GtidState,
        at: Result<BinlogPosition, LocateError>,
    },
    /// The server has not applied what the group needs ([`Decision::Behind`]).
    Behind { needs: String, has: String },
    /// The saved position is another server's, with no GTID state to move by
    /// ([`Decision::NoGtid`]).
    NoGtid { server: String },
}

/// Finds where a group saved as `anchor` starts on the server of `opts`, which is `server`
/// (read by [`server_state`]).
pub async fn find_place(opts: &Opts, anchor: &Anchor, server: &ServerState) -> Place {
    match decide(anchor, &server.identity, &server.gtids) {
        Decision::Here => Place::Saved,
        Decision::ByGtid(after) => {
            let at = locate(opts, &after).await;
            Place::ByGtid { after, at }
        }
        Decision::Behind { needs, has } => Place::Behind { needs, has },
        Decision::NoGtid { server } => Place::NoGtid { server },
    }
}

/// The GTID state at `at` in the server's binlog (`None`: the server does not know the position,
/// or the state is empty).
pub async fn gtid_at(opts: &Opts, at: &BinlogPosition) -> Result<Option<GtidState>, String> {
    let mut conn = Conn::new(opts.clone()).await.map_err(|e| e.to_string())?;
    let text: Option<Option<String>> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, ?)", (at.file.as_str(), at.pos))
        .await
        .map_err(|e| e.to_string())?;
    let _ = conn.disconnect().await;
    Ok(text
        .flatten()
        .and_then(|t| GtidState::parse(&t))
        .filter(|s| !s.is_empty()))
}

const ROTATE_EVENT: u8 = 4;
const MARIADB_GTID_EVENT: u8 = 162;
const LOG_EVENT_ARTIFICIAL_F: u16 = 0x20;

/// The file and offset right after `state` on the server of `opts`: where its first transaction
/// after the state starts, or its binlog's end when there is none yet. A non-blocking dump by
/// GTID in strict mode, so a server that lacks (or purged) a transaction of the state says so
/// (`LocateError::Missing`).
pub async fn locate(opts: &Opts, state: &GtidState) -> Result<BinlogPosition, LocateError> {
    let other = |e: mysql_async::Error| LocateError::Other(e.to_string());
    let mut conn = Conn::new(opts.clone()).await.map_err(other)?;
    // Read before the dump: if the dump finds no transaction after the state, none had been
    // written when this was read either (a later one is then read, never skipped).
    let end = crate::binlog::watcher::current_position(&mut conn)
        .await
        .map_err(other)?
        .ok_or_else(|| {
            LocateError::Other("the server's binary log is off (log_bin = OFF)".into())
        })?;
    conn.query_drop("SET @mariadb_slave_capability = 4")
        .await
        .map_err(other)?;
    for sql in dump_after(state) {
        conn.query_drop(sql).await.map_err(other)?;
    }
    let request = BinlogStreamRequest::new(super::reader::replica_id())
        .with_filename(b"")
        .with_pos(4)
        .with_non_blocking();
    let mut stream = match conn.get_binlog_stream(request).await {
        Ok(s) => s,
        Err(mysql_async::Error::Server(e)) if e.code == 1236 => {
            return Err(LocateError::Missing(e.message))
        }
        Err(e) => return Err(other(e)),
    };
    let mut file = String::new();
    let mut found = None;
    while let Some(event) = next(&mut stream).await {
        let event = match event {
            Ok(e) => e,
            Err(mysql_async::Error::Server(e)) if e.code == 1236 => {
                return Err(LocateError::Missing(e.message))
            }
            Err(e) => return Err(other(e)),
        };
        let header = event.header();
        match header.event_type_raw() {
            ROTATE_EVENT => {
                if let Ok(rotate) = event.read_event::<RotateEvent<'_>>() {
                    let mut name = rotate.name_raw();
                    if header.flags_raw() & LOG_EVENT_ARTIFICIAL_F != 0 || header.log_pos() == 0 {
                        name = crate::binlog::follow::strip_crc(&event, name);
                    }
                    file = String::from_utf8_lossy(name).into_owned();
                }
            }
            MARIADB_GTID_EVENT if !file.is_empty() => {
                let pos =
                    u64::from(header.log_pos()).saturating_sub(u64::from(header.event_size()));
                found = Some(BinlogPosition { file, pos });
                break;
            }
            _ => {}
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.close()).await;
    Ok(found.unwrap_or(end))
}

async fn next(stream: &mut mysql_async::BinlogStream) -> Option<mysql_async::Result<Event>> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

/// A serving group's GTID state at its resume position, asked every [`ASK_GTID_EVERY`] in a
/// task of its own (the group's saves go on meanwhile with the last answer: a state at an
/// earlier position, which only means reading a little more after a move).
#[derive(Default)]
pub struct GtidTracker {
    /// The last answer.
    pub known: Option<GtidState>,
    asked_for: Option<BinlogPosition>,
    asked_at: Option<Instant>,
    asking: Option<JoinHandle<Option<GtidState>>>,
}

impl GtidTracker {
    /// Starting from a saved state (the row's, valid for its position or an earlier one).
    pub fn new(known: Option<GtidState>) -> GtidTracker {
        GtidTracker {
            known,
            asked_for: None,
            asked_at: None,
            asking: None,
        }
    }

    /// Takes a finished answer in, and asks again when due and the position moved. Returns
    /// whether `known` changed.
    pub async fn tick(&mut self, opts: &Opts, resume: &BinlogPosition) -> bool {
        let mut changed = false;
        if self.asking.as_ref().is_some_and(JoinHandle::is_finished) {
            if let Some(Ok(Some(state))) = match self.asking.take() {
                Some(h) => Some(h.await),
                None => None,
            } {
                changed = self.known.as_ref() != Some(&state);
                self.known = Some(state);
            }
        }
        let due = self.asked_at.is_none_or(|t| t.elapsed() >= ASK_GTID_EVERY);
        if self.asking.is_none() && due && self.asked_for.as_ref() != Some(resume) {
            self.asked_for = Some(resume.clone());
            self.asked_at = Some(Instant::now());
            let (opts, at) = (opts.clone(), resume.clone());
            self.asking = Some(tokio::spawn(async move {
                match gtid_at(&opts, &at).await {
                    Ok(state) => state,
                    Err(e) => {
                        tracing::debug!("BINLOG_GTID_POS({at}): {e}");
                        None
                    }
                }
            }));
        }
        changed
    }
}

impl Drop for GtidTracker {
    fn drop(&mut self) {
        if let Some(h) = self.asking.take() {
            h.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(text: &str) -> GtidState {
        GtidState::parse(text).unwrap()
    }

    fn anchor(server: Option<&str>, gtid: Option<&str>, done: Option<&str>) -> Anchor {
        Anchor {
            server: server.map(str::to_owned),
            gtid: gtid.map(state),
            done: done.and_then(Done::parse),
        }
    }

    #[test]
    fn the_same_server_or_an_old_row_resumes_at_its_file_and_offset() {
        let here = state("0-1-100");
        assert_eq!(
            decide(&anchor(None, None, None), "a:3306", &here),
            Decision::Here
        );
        assert_eq!(
            decide(
                &anchor(Some("a:3306"), None, Some("0-500")),
                "a:3306",
                &here
            ),
            Decision::Here
        );
    }

    #[test]
    fn another_server_resumes_by_gtid_when_it_has_everything() {
        let saved = anchor(Some("a:3306"), Some("0-1-40"), Some("0-42"));
        assert_eq!(
            decide(&saved, "b:3306", &state("0-1-42")),
            Decision::ByGtid(state("0-1-40"))
        );
        // Other domains of the server do not matter.
        assert_eq!(
            decide(&saved, "b:3306", &state("0-2-90,7-3-5")),
            Decision::ByGtid(state("0-1-40"))
        );
    }

    #[test]
    fn domains_other_than_the_tables_do_not_hold_a_group_back() {
        // A Galera node's local domain 1 is unknown to node b; b is behind in domain 5, which
        // does not carry the table's events (domain 100 does).
        let saved = anchor(
            Some("a:3306"),
            Some("1-1-7,5-1-30,100-1-40"),
            Some("100-41"),
        );
        assert_eq!(
            decide(&saved, "b:3306", &state("5-2-20,100-1-41")),
            Decision::ByGtid(state("5-2-20,100-1-40"))
        );
    }

    #[test]
    fn a_server_without_what_the_group_did_is_behind() {
        // It has the resume point but not the newest transaction done.
        let saved = anchor(Some("a:3306"), Some("0-1-40"), Some("0-42"));
        assert_eq!(
            decide(&saved, "b:3306", &state("0-1-41")),
            Decision::Behind {
                needs: "domain 0 up to seq_no 42".into(),
                has: "0-1-41".into()
            }
        );
        // It lacks the resume point itself, in the table's domain.
        let saved = anchor(Some("a:3306"), Some("0-1-40,5-1-9"), Some("5-9"));
        assert_eq!(
            decide(&saved, "b:3306", &state("0-1-40,5-1-3")),
            Decision::Behind {
                needs: "domain 5 up to seq_no 9".into(),
                has: "0-1-40,5-1-3".into()
            }
        );
        // Without a known table domain, every shared domain counts.
        let saved = anchor(Some("a:3306"), Some("0-1-40"), None);
        assert!(matches!(
            decide(&saved, "b:3306", &state("0-1-39")),
            Decision::Behind { .. }
        ));
        // The table's domain missing altogether.
        let saved = anchor(Some("a:3306"), Some("0-1-40"), Some("0-40"));
        assert!(matches!(
            decide(&saved, "b:3306", &GtidState::default()),
            Decision::Behind { has, .. } if has == "none"
        ));
    }

    #[test]
    fn another_servers_position_without_a_gtid_cannot_move() {
        let saved = anchor(Some("a:3306"), None, Some("0-3"));
        assert_eq!(
            decide(&saved, "b:3306", &state("0-1-40")),
            Decision::NoGtid {
                server: "a:3306".into()
            }
        );
    }

    #[test]
    fn done_round_trips_and_rejects_junk() {
        let d = Done { domain: 3, seq: 77 };
        assert_eq!(Done::parse(&d.to_string()), Some(d));
        assert_eq!(Done::parse("3"), None);
        assert_eq!(Done::parse("x-1"), None);
        assert_eq!(Done::parse("1-2-3"), None);
    }

    #[test]
    fn resume_from_names_the_server_and_gtid_when_known() {
        let at = BinlogPosition {
            file: "bin.000002".into(),
            pos: 345,
        };
        assert_eq!(describe(&at, &Anchor::default()), "bin.000002:345");
        let a = anchor(Some("a:3306"), Some("0-1-9"), None);
        assert_eq!(describe(&at, &a), "bin.000002:345 on a:3306 (gtid 0-1-9)");
    }
}
