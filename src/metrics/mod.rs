//! Prometheus metrics: the per-proxy counters ([`ProxyMetrics`], bumped by the front door and
//! the sessions), the page that renders them with the per-table counters and gauges
//! ([`Registry::render`]), and the HTTP endpoint that serves it (`http`).
//!
//! Counting costs the hot paths one relaxed atomic add each — no lock, no allocation, no label
//! lookup; every label and every gauge is worked out at scrape time. Per table, the counters
//! live in `messaging::stats` (owned by the table's manager) and the gauges are read from the
//! manager's state (`TableManager::snapshot`).
//!
//! - `exposition` — the text format.
//! - `http` — `GET /metrics` over a small HTTP/1.1 handler (bounded request size, timeouts, a
//!   limit on concurrent scrapes).

pub mod exposition;
pub mod http;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tokio::sync::watch;

use crate::binlog::{BinlogActivity, BinlogMode, BinlogStatus};
use crate::messaging::engine::{Engine, Lookup};
use crate::messaging::stats::LATENCY_BUCKETS;
use crate::sql::{Keyword, KEYWORDS};
use exposition::{Exposition, Kind};

/// Slots of the statements-by-keyword counters: one per [`Keyword`] (`Other` is the last).
const KEYWORD_SLOTS: usize = Keyword::Other as usize + 1;

/// Why a backend connection failed, for `msgproxy_backend_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendErrorKind {
    /// A client's backend connection could not be opened or logged in (refused, unreachable,
    /// timed out, broken during the login).
    Connect,
    /// A client's backend connection broke mid-session, or sent something malformed.
    Lost,
}

/// The proxy-wide counters. One per process, shared by the front door and every session.
#[derive(Debug)]
pub struct ProxyMetrics {
    /// When the proxy started (Unix seconds).
    started_unix: f64,
    connections_accepted: AtomicU64,
    connections_closed: AtomicU64,
    connections_refused: AtomicU64,
    logins_failed: AtomicU64,
    statements: [AtomicU64; KEYWORD_SLOTS],
    backend_connect_errors: AtomicU64,
    backend_lost: AtomicU64,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        ProxyMetrics {
            started_unix: crate::binlog::unix_ms() as f64 / 1000.0,
            connections_accepted: AtomicU64::new(0),
            connections_closed: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            logins_failed: AtomicU64::new(0),
            statements: std::array::from_fn(|_| AtomicU64::new(0)),
            backend_connect_errors: AtomicU64::new(0),
            backend_lost: AtomicU64::new(0),
        }
    }
}

/// Counts one client connection as open until dropped.
pub struct ConnectionGuard(Arc<ProxyMetrics>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections_closed.fetch_add(1, Relaxed);
    }
}

impl ProxyMetrics {
    /// A client connection was accepted and will be served; open until the guard drops.
    pub fn connection_opened(self: &Arc<Self>) -> ConnectionGuard {
        self.connections_accepted.fetch_add(1, Relaxed);
        ConnectionGuard(self.clone())
    }

    /// A client was turned away: `max_connections` reached.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Relaxed);
    }

    /// A login (or COM_CHANGE_USER) was denied.
    pub fn login_failed(&self) {
        self.logins_failed.fetch_add(1, Relaxed);
    }

    /// One `COM_QUERY`, by its first keyword.
    pub fn statement(&self, keyword: Keyword) {
        if let Some(slot) = self.statements.get(keyword as usize) {
            slot.fetch_add(1, Relaxed);
        }
    }

    /// Client connections open now.
    pub fn open_connections(&self) -> u64 {
        let closed = self.connections_closed.load(Relaxed);
        self.connections_accepted
            .load(Relaxed)
            .saturating_sub(closed)
    }

    pub fn backend_error(&self, kind: BackendErrorKind) {
        match kind {
            BackendErrorKind::Connect => &self.backend_connect_errors,
            BackendErrorKind::Lost => &self.backend_lost,
        }
        .fetch_add(1, Relaxed);
    }
}

/// The binlog watcher as the metrics see it.
pub struct BinlogView {
    pub status: watch::Receiver<BinlogStatus>,
    pub activity: Arc<BinlogActivity>,
}

/// Everything one scrape reads.
pub struct Registry {
    pub proxy: Arc<ProxyMetrics>,
    pub engine: Option<Arc<Engine>>,
    pub binlog: Option<BinlogView>,
    /// The event-stream groups this proxy knows (docs/STREAMS.md).
    pub streams: Option<Arc<crate::streams::engine::StreamEngine>>,
    /// The configured servers and the one in use (docs/CLUSTERS.md).
    pub backends: Option<Arc<crate::cluster::Backends>>,
}

/// One table's row of the page, gathered before any family is written (each family's samples
/// must be together).
struct TableRow {
    schema: String,
    name: String,
    loaded: bool,
    state: crate::messaging::stats::ManagerSnapshot,
    stats: crate::messaging::stats::StatsSnapshot,
}

impl Registry {
    /// The whole page, in the Prometheus text format.
    pub fn render(&self) -> String {
        let now_ms = crate::binlog::unix_ms();
        let mut e = Exposition::new();
        self.render_proxy(&mut e);
        self.render_backends(&mut e);
        self.render_binlog(&mut e, now_ms);
        self.render_tables(&mut e, now_ms);
        self.render_stream_groups(&mut e);
        e.finish()
    }

    fn render_proxy(&self, e: &mut Exposition) {
        let p = &self.proxy;
        e.family(
            "msgproxy_start_time_seconds",
            Kind::Gauge,
            "When this msgproxy process started, in Unix seconds.",
        );
        e.sample("msgproxy_start_time_seconds", &[], p.started_unix);
        let accepted = p.connections_accepted.load(Relaxed);
        let closed = p.connections_closed.load(Relaxed);
        e.family(
            "msgproxy_client_connections",
            Kind::Gauge,
            "Client connections open now (logging in, idle, running a statement or streaming).",
        );
        e.sample(
            "msgproxy_client_connections",
            &[],
            accepted.saturating_sub(closed),
        );
        e.family(
            "msgproxy_client_connections_total",
            Kind::Counter,
            "Client connections accepted and served.",
        );
        e.sample("msgproxy_client_connections_total", &[], accepted);
        e.family(
            "msgproxy_client_connections_refused_total",
            Kind::Counter,
            "Client connections refused with error 1040 because max_connections were open.",
        );
        e.sample(
            "msgproxy_client_connections_refused_total",
            &[],
            p.connections_refused.load(Relaxed),
        );
        e.family(
            "msgproxy_client_logins_failed_total",
            Kind::Counter,
            "Logins and COM_CHANGE_USER the proxy denied (wrong password, unknown user).",
        );
        e.sample(
            "msgproxy_client_logins_failed_total",
            &[],
            p.logins_failed.load(Relaxed),
        );
        e.family(
            "msgproxy_statements_total",
            Kind::Counter,
            "Text-protocol statements (COM_QUERY) by first keyword; 'other' is everything the \
             proxy does not tell apart. Prepared statements are not counted.",
        );
        for &(name, keyword) in KEYWORDS {
            let n = p.statements[keyword as usize].load(Relaxed);
            e.sample("msgproxy_statements_total", &[("keyword", name)], n);
        }
        let other = p.statements[Keyword::Other as usize].load(Relaxed);
        e.sample("msgproxy_statements_total", &[("keyword", "other")], other);
        e.family(
            "msgproxy_backend_errors_total",
            Kind::Counter,
            "Client sessions' backend connections that failed: kind=connect (could not be \
             opened; the client got error 1429) or kind=lost (broke mid-session; the client \
             got error 1158).",
        );
        let connect = p.backend_connect_errors.load(Relaxed);
        e.sample(
            "msgproxy_backend_errors_total",
            &[("kind", "connect")],
            connect,
        );
        let lost = p.backend_lost.load(Relaxed);
        e.sample("msgproxy_backend_errors_total", &[("kind", "lost")], lost);
        let binlog_reconnects = self.binlog_reconnects();
        e.family(
            "msgproxy_reconnects_total",
            Kind::Counter,
            "Reconnects: binlog streams opened again after the first, plus backend \
             connections that could not be opened (kind=connect of msgproxy_backend_errors_total).",
        );
        e.sample(
            "msgproxy_reconnects_total",
            &[],
            binlog_reconnects.saturating_add(connect),
        );
    }

    fn binlog_reconnects(&self) -> u64 {
        self.binlog
            .as_ref()
            .map_or(0, |b| b.status.borrow().sessions.saturating_sub(1))
    }

    fn render_backends(&self, e: &mut Exposition) {
        let Some(backends) = &self.backends else {
            return;
        };
        let servers = backends.servers();
        e.family(
            "msgproxy_backend_in_use",
            Kind::Gauge,
            "1 for the server new sessions, the engine and the binlog watcher use now; 0 for the other servers of --backend.",
        );
        for s in &servers {
            e.sample(
                "msgproxy_backend_in_use",
                &[("backend", &s.address)],
                u64::from(s.in_use),
            );
        }
        if servers.iter().any(|s| s.usable.is_some()) {
            e.family(
                "msgproxy_backend_usable",
                Kind::Gauge,
                "Whether the server answered the last check as usable (reachable, read_only OFF, on Galera synced and ready); only with several servers.",
            );
            for s in &servers {
                if let Some(usable) = s.usable {
                    e.sample(
                        "msgproxy_backend_usable",
                        &[("backend", &s.address)],
                        u64::from(usable),
                    );
                }
            }
        }
        e.family(
            "msgproxy_backend_switches_total",
            Kind::Counter,
            "Moves from one server of --backend to another.",
        );
        e.sample(
            "msgproxy_backend_switches_total",
            &[],
            backends.generation(),
        );
    }

    fn render_binlog(&self, e: &mut Exposition, now_ms: u64) {
        let Some(binlog) = &self.binlog else {
            return;
        };
        let status = binlog.status.borrow().clone();
        e.family(
            "msgproxy_binlog_mode",
            Kind::Gauge,
            "The binlog watcher's mode: 1 for the current one. following = writes by anyone \
             reach streams at once; poll_only = a prerequisite is missing (see the log), rows \
             written around the proxy wait for the poller; reconnecting = the stream broke.",
        );
        let current = match status.mode {
            BinlogMode::Starting => "starting",
            BinlogMode::Following => "following",
            BinlogMode::PollOnly(_) => "poll_only",
            BinlogMode::Reconnecting(_) => "reconnecting",
            BinlogMode::Stopped => "stopped",
        };
        for mode in [
            "starting",
            "following",
            "poll_only",
            "reconnecting",
            "stopped",
        ] {
            e.sample(
                "msgproxy_binlog_mode",
                &[("mode", mode)],
                u64::from(mode == current),
            );
        }
        if let Some(position) = &status.position {
            e.family(
                "msgproxy_binlog_position",
                Kind::Gauge,
                "Offset in the binlog file (label) where the last transaction read ends; a \
                 reconnect resumes there.",
            );
            e.sample(
                "msgproxy_binlog_position",
                &[("file", &position.file)],
                position.pos,
            );
        }
        e.family(
            "msgproxy_binlog_lag_seconds",
            Kind::Gauge,
            "How far behind the server the last binlog event was when the proxy read it (read \
             time minus the event's timestamp; one-second resolution). 0 before any event.",
        );
        e.sample(
            "msgproxy_binlog_lag_seconds",
            &[],
            binlog.activity.lag_seconds(),
        );
        if let Some(idle) = binlog.activity.idle_seconds(now_ms) {
            e.family(
                "msgproxy_binlog_last_read_age_seconds",
                Kind::Gauge,
                "Seconds since the binlog stream last delivered an event or heartbeat (the \
                 server sends a heartbeat every 2 s; a stream silent for 10 s is reopened).",
            );
            e.sample("msgproxy_binlog_last_read_age_seconds", &[], idle);
        }
        e.family(
            "msgproxy_binlog_sessions_total",
            Kind::Counter,
            "Binlog streams opened (1 + reconnects).",
        );
        e.sample("msgproxy_binlog_sessions_total", &[], status.sessions);
    }

    /// One sample per family per event-stream group this proxy serves or waits for (the same
    /// figures as `SHOW STREAM GROUPS`). Counters count since this proxy last took the group.
    fn render_stream_groups(&self, e: &mut Exposition) {
        let Some(streams) = &self.streams else {
            return;
        };
        let groups = streams.local_groups();
        type Field = fn(&crate::streams::engine::GroupInfo) -> exposition::Value;
        let families: &[(&str, Kind, &str, Field)] = &[
            ("msgproxy_stream_group_serving", Kind::Gauge,
             "1 while this proxy serves the group (holds its lease), 0 while its streams here wait or it has stopped.",
             |g| u64::from(g.status == "serving").into()),
            ("msgproxy_stream_group_position", Kind::Gauge,
             "The group's position: the lowest event id it has not finished (every event below it is acked or skipped by its filter).",
             |g| g.position.into()),
            ("msgproxy_stream_group_behind", Kind::Gauge,
             "Events of the group read from the binlog and not yet acked (waiting or in flight).",
             |g| g.behind.into()),
            ("msgproxy_stream_group_oldest_unread_age_seconds", Kind::Gauge,
             "Seconds since the oldest event the group has not finished was committed (0 when none).",
             |g| g.oldest_age.unwrap_or(0.0).into()),
            ("msgproxy_stream_group_in_flight", Kind::Gauge,
             "Events sent to the group's streams and not yet acked.",
             |g| g.in_flight.into()),
            ("msgproxy_stream_group_streams", Kind::Gauge,
             "Open STREAM ... GROUP connections of the group on this proxy.",
             |g| g.streams.into()),
            ("msgproxy_stream_events_sent_total", Kind::Counter,
             "Events handed to the group's streams by this proxy (first deliveries and redeliveries).",
             |g| g.sent.into()),
            ("msgproxy_stream_events_redelivered_total", Kind::Counter,
             "Of msgproxy_stream_events_sent_total, events handed out again (not acked within ack_wait, or their stream went away).",
             |g| g.redelivered.into()),
            ("msgproxy_stream_events_acked_total", Kind::Counter,
             "Events of the group newly acked through this proxy.",
             |g| g.acked.into()),
        ];
        for (name, kind, help, field) in families {
            e.family(name, *kind, help);
            for g in &groups {
                let labels = [
                    ("schema", g.key.schema.as_str()),
                    ("table", g.key.table.as_str()),
                    ("group", g.key.group.as_str()),
                ];
                e.sample(name, &labels, field(g));
            }
        }
    }

    fn render_tables(&self, e: &mut Exposition, now_ms: u64) {
        let Some(engine) = &self.engine else {
            return;
        };
        let rows: Vec<TableRow> = engine
            .tables()
            .into_iter()
            .map(|((schema, name), lookup)| match lookup {
                Lookup::Loaded(m) => TableRow {
                    schema,
                    name,
                    loaded: true,
                    state: m.snapshot(),
                    stats: m.stats().snapshot(),
                },
                _ => TableRow {
                    schema,
                    name,
                    loaded: false,
                    state: Default::default(),
                    stats: Default::default(),
                },
            })
            .collect();
        let now_ns = (now_ms as i64).saturating_mul(1_000_000);
        type Field = fn(&TableRow, i64) -> exposition::Value;
        let families: &[(&str, Kind, &str, Field)] = &[
            ("msgproxy_message_table_loaded", Kind::Gauge,
             "1 if the vitess_message table is loaded, 0 if its definition is invalid (the reason is in the log and in SHOW MESSAGE TABLES).",
             |r, _| u64::from(r.loaded).into()),
            ("msgproxy_message_due", Kind::Gauge,
             "Due messages in the proxy's cache, not yet handed to a stream. The cache holds at most vt_cache_size rows, so with a larger backlog this is a lower bound of the table's due messages.",
             |r, _| r.state.cached.into()),
            ("msgproxy_message_in_flight", Kind::Gauge,
             "Messages handed to a stream whose claim has not finished.",
             |r, _| r.state.in_flight.into()),
            ("msgproxy_message_scheduled", Kind::Gauge,
             "Messages due within the next poll interval (sent ones waiting for their ack wait, scheduled ones), as far as the proxy knows.",
             |r, _| r.state.scheduled.into()),
            ("msgproxy_message_unacked_held", Kind::Gauge,
             "With vt_max_unacked: messages this proxy's streams hold, sent and not yet acked, until their ack or their ack wait (0 without the option).",
             |r, _| r.state.held_unacked.into()),
            ("msgproxy_message_dead", Kind::Gauge,
             "With vt_max_attempts: dead messages (in place, or in the vt_dead_letter table) as counted at the last purge tick (0 without the option).",
             |r, _| r.state.dead.unwrap_or(0).into()),
            ("msgproxy_message_keys_in_flight", Kind::Gauge,
             "With vt_group_col: FIFO groups with a message sent and within its ack wait, as counted at the last purge tick (0 without the option).",
             |r, _| r.state.keys_in_flight.unwrap_or(0).into()),
            ("msgproxy_message_subscribers", Kind::Gauge,
             "Open STREAMs on the table through this proxy.",
             |r, _| r.state.subscribers.into()),
            ("msgproxy_message_oldest_due_age_seconds", Kind::Gauge,
             "Seconds since the oldest due message in the proxy's cache became due (0 when none waits); a row with a NULL or 0 time_next (due since it was written) is aged from when this proxy first saw it.",
             |r, now| r.state.oldest_due_age_seconds(now).into()),
            ("msgproxy_message_sent_total", Kind::Counter,
             "Messages claimed and written to a stream by this proxy (first deliveries and redeliveries).",
             |r, _| r.stats.sent.into()),
            ("msgproxy_message_redelivered_total", Kind::Counter,
             "Of msgproxy_message_sent_total, messages sent again because they were not acked within their ack wait (epoch above 0 at the claim).",
             |r, _| r.stats.redelivered.into()),
            ("msgproxy_message_acked_total", Kind::Counter,
             "Messages acked through this proxy (affected rows of ACK, and of UPDATEs through the proxy that name the table and time_acked). Acks made straight on the server or through another proxy are not counted.",
             |r, _| r.stats.acked.into()),
            ("msgproxy_message_purged_total", Kind::Counter,
             "Acked messages deleted by this proxy's purger.",
             |r, _| r.stats.purged.into()),
            ("msgproxy_message_claims_total", Kind::Counter,
             "Batches handed to this proxy's streams, each claimed in one transaction (a durable commit on the server); msgproxy_message_sent_total / msgproxy_message_claims_total is the messages a claim carries.",
             |r, _| r.stats.claims.into()),
            ("msgproxy_message_nacked_total", Kind::Counter,
             "Messages given back through this proxy with NACK (affected rows).",
             |r, _| r.stats.nacked.into()),
            ("msgproxy_message_extended_total", Kind::Counter,
             "Messages kept longer through this proxy with EXTEND (affected rows).",
             |r, _| r.stats.extended.into()),
            ("msgproxy_message_redriven_total", Kind::Counter,
             "Dead messages made due again through this proxy with REDRIVE (affected rows).",
             |r, _| r.stats.redriven.into()),
            ("msgproxy_message_dead_lettered_total", Kind::Counter,
             "Messages this proxy's claims found sent vt_max_attempts times without an ack: marked dead in place, or moved to vt_dead_letter.",
             |r, _| r.stats.dead_lettered.into()),
        ];
        for (name, kind, help, field) in families {
            e.family(name, *kind, help);
            for r in &rows {
                let labels = [("schema", r.schema.as_str()), ("table", r.name.as_str())];
                e.sample(name, &labels, field(r, now_ns));
            }
        }
        let name = "msgproxy_message_delivery_latency_seconds";
        e.family(
            name,
            Kind::Histogram,
            "Time from a message becoming due (its time_next) to this proxy writing it to a \
             stream, for first deliveries.",
        );
        for r in rows.iter().filter(|r| r.loaded) {
            let labels = [("schema", r.schema.as_str()), ("table", r.name.as_str())];
            e.histogram(
                name,
                &labels,
                &LATENCY_BUCKETS,
                &r.stats.latency_cumulative,
                r.stats.latency_sum_seconds,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/grafana-dashboard.json queries only metrics this module writes (a renamed metric
    /// would leave a panel empty without a word).
    #[test]
    fn the_grafana_dashboard_names_only_metrics_that_exist() {
        let dashboard = include_str!("../../docs/grafana-dashboard.json");
        let source = include_str!("mod.rs");
        let names: Vec<&str> = dashboard
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("msgproxy_"))
            .collect();
        assert!(names.len() > 10, "{names:?}");
        for name in names {
            let base = name.strip_suffix("_bucket").unwrap_or(name);
            assert!(
                source.contains(&format!("\"{base}\"")),
                "the dashboard queries {name}, which msgproxy does not export"
            );
        }
    }

    #[test]
    fn every_keyword_has_a_slot() {
        for &(_, keyword) in KEYWORDS {
            assert!((keyword as usize) < KEYWORD_SLOTS, "{keyword}");
        }
    }

    #[test]
    fn proxy_counters_render() {
        let proxy = Arc::new(ProxyMetrics::default());
        let guard = proxy.connection_opened();
        let _second = proxy.connection_opened();
        drop(guard);
        proxy.statement(Keyword::Select);
        proxy.statement(Keyword::Select);
        proxy.statement(Keyword::Other);
        proxy.backend_error(BackendErrorKind::Connect);
        let backends = crate::cluster::Backends::new(vec![
            crate::config::BackendTarget::parse("mysql://root@db1:3306/test").unwrap(),
            crate::config::BackendTarget::parse("mysql://root@db2:3306/test").unwrap(),
        ]);
        let page = Registry {
            streams: None,
            proxy,
            engine: None,
            binlog: None,
            backends: Some(backends),
        }
        .render();
        for line in [
            "msgproxy_client_connections 1\n",
            "msgproxy_client_connections_total 2\n",
            "msgproxy_statements_total{keyword=\"select\"} 2\n",
            "msgproxy_statements_total{keyword=\"insert\"} 0\n",
            "msgproxy_statements_total{keyword=\"other\"} 1\n",
            "msgproxy_backend_errors_total{kind=\"connect\"} 1\n",
            "msgproxy_reconnects_total 1\n",
            "msgproxy_backend_in_use{backend=\"db1:3306\"} 1\n",
            "msgproxy_backend_in_use{backend=\"db2:3306\"} 0\n",
            "msgproxy_backend_switches_total 0\n",
        ] {
            assert!(page.contains(line), "{line:?} missing from:\n{page}");
        }
        // Every sample line belongs to the family declared last before it.
        let mut family = String::new();
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap_or_default().to_string();
            } else if !line.starts_with('#') {
                assert!(line.starts_with(&family), "{line} outside {family}");
            }
        }
    }
}
