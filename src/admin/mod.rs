//! The operator's page (`--admin-listen`, docs/OPERATOR.md): every message table's depth and
//! dead letters, the last minutes' rates as charts, the stream groups and their lag, what failed
//! to load, and the two actions a person needs when something is stuck (redrive, seek), served
//! by the proxy itself over a small HTTP/1.1 handler (HTTPS with `--admin-tls`).
//!
//! - `http` — reading a request with bounds, writing an answer with safe headers.
//! - `auth` — logins (the proxy's users, or `--admin-token`) and the forms' anti-forgery checks.
//! - `history` — the ring of counter samples behind the charts.
//! - `chart` — the charts, as inline SVG.
//! - `page` — the HTML, every name escaped.
//! - `actions` — redrive and seek: asked, done, logged.
//!
//! Like the metrics endpoint, it bounds what it spends: [`MAX_CONNECTIONS`] requests at once
//! (the permit taken before `accept`), [`TIMEOUT`] per connection, bounded heads and bodies. A
//! page costs no query per table: the figures are what the engine already holds (its per-table
//! depth counted at each purge tick once the page is served), plus one read of the stream
//! groups' table.

pub mod actions;
pub mod auth;
pub mod chart;
pub mod history;
pub mod http;
pub mod page;

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use self::actions::{Action, ActionLog};
use self::auth::{Auth, Denied, Principal};
use self::history::History;
use self::http::{Request, Response};
use self::page::{TableFigures, TableView, View};
use crate::config::{AdminSettings, User};
use crate::messaging::engine::{Engine, Lookup};
use crate::metrics::{BinlogView, ProxyMetrics};
use crate::streams::engine::StreamEngine;

/// Requests served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// Time for one connection (reading, answering); an action's backend work counts too.
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// Longest wait for the stream groups' table before the page shows this proxy's groups only.
const GROUPS_TIMEOUT: Duration = Duration::from_secs(2);

/// What the page reads and acts on.
pub struct Admin {
    pub settings: AdminSettings,
    auth: Auth,
    pub engine: Option<Arc<Engine>>,
    pub streams: Option<Arc<StreamEngine>>,
    pub binlog: Option<BinlogView>,
    pub proxy: Arc<ProxyMetrics>,
    pub history: Arc<History>,
    log: Arc<ActionLog>,
}

impl Admin {
    pub fn new(
        settings: AdminSettings,
        users: Vec<User>,
        engine: Option<Arc<Engine>>,
        streams: Option<Arc<StreamEngine>>,
        binlog: Option<BinlogView>,
        proxy: Arc<ProxyMetrics>,
    ) -> Admin {
        let auth = Auth::new(users, settings.token.clone());
        Admin {
            settings,
            auth,
            engine,
            streams,
            binlog,
            proxy,
            history: Arc::new(History::default()),
            log: Arc::new(ActionLog::default()),
        }
    }

    /// One request's answer.
    pub async fn respond(&self, request: &Request) -> Response {
        let who = self.auth.check(request);
        match (request.method.as_str(), request.path.as_str()) {
            ("GET" | "HEAD", "/") => {
                let who = match who {
                    Ok(p) => Some(p),
                    Err(Denied::Missing) if self.settings.public_read => None,
                    Err(denied) => return self.refuse_login(request, denied),
                };
                let all = request.query.split('&').any(|p| p == "all=1");
                let started = std::time::Instant::now();
                let view = self.view(who.as_ref(), all).await;
                let gathered = started.elapsed();
                let mut html = page::render(&view);
                page::add_timings(&mut html, gathered, started.elapsed() - gathered);
                Response::html(200, html)
            }
            ("POST", "/action") => {
                let who = match who {
                    Ok(p) => p,
                    Err(denied) => return self.refuse_login(request, denied),
                };
                self.action(request, &who).await
            }
            ("GET" | "HEAD", "/healthz") => Response::text(200, "ok\n"),
            (_, "/" | "/action" | "/healthz") => Response::text(405, "method not allowed\n"),
            _ => Response::text(404, "not found; the page is at /\n"),
        }
    }

    fn refuse_login(&self, request: &Request, denied: Denied) -> Response {
        if denied == Denied::Wrong {
            info!(
                "operator's page: {} {}: wrong credentials",
                request.method, request.path
            );
        }
        let body = page::message_page(
            "Sign in",
            "<p>Sign in with one of msgproxy's users (as on its MySQL port) or with the admin token as the password.</p>",
        );
        Response::html(401, body).with_header(
            "WWW-Authenticate",
            "Basic realm=\"msgproxy\", charset=\"UTF-8\"",
        )
    }

    /// A form posted to `/action`: refused, asked, or done.
    async fn action(&self, request: &Request, who: &Principal) -> Response {
        let refuse = |status: u16, why: &str| {
            Response::html(
                status,
                page::message_page(
                    "Refused",
                    &format!("<p class=\"err\">{}</p>", page::escape(why)),
                ),
            )
        };
        if !self.settings.actions_allowed() {
            return refuse(
                403,
                "actions are refused on this listener: it is not loopback and not TLS (see --admin-tls, --admin-allow-insecure-actions)",
            );
        }
        if let Err(why) = auth::same_origin(request) {
            info!(user = %who.name(), "operator's page: action refused, another site's request: {why}");
            return refuse(403, &format!("a request from another site ({why})"));
        }
        if !self
            .auth
            .form_token_ok(who, request.form("csrf").as_deref())
        {
            info!(user = %who.name(), "operator's page: action refused, no valid form token");
            return refuse(
                403,
                "the form's token is missing or stale (msgproxy restarted?): load the page again",
            );
        }
        let form = |name: &str| request.form(name);
        let action = match Action::from_form(&form) {
            Ok(a) => a,
            Err(why) => return refuse(400, &why),
        };
        if request.form("confirm").as_deref() != Some("yes") {
            return match actions::consequence(
                &action,
                self.engine.as_deref(),
                self.streams.as_deref(),
            ) {
                Ok(c) => Response::html(
                    200,
                    actions::confirm_page(&action, &c, &self.auth.form_token(who)),
                ),
                Err(why) => refuse(409, &why),
            };
        }
        // In a task of its own: once confirmed, an action runs to its end and is logged even if
        // the browser goes away or the connection's time runs out meanwhile.
        let (engine, streams, log, name) = (
            self.engine.clone(),
            self.streams.clone(),
            self.log.clone(),
            who.name(),
        );
        let task_action = action.clone();
        let outcome = tokio::spawn(async move {
            let outcome =
                actions::perform(&task_action, engine.as_deref(), streams.as_deref()).await;
            actions::record(&log, &name, &task_action, &outcome);
            outcome
        })
        .await
        .unwrap_or_else(|e| Err(format!("the action's task failed: {e}")));
        let (status, title, text) = match &outcome {
            Ok(o) => (200, "Done", o.clone()),
            Err(e) => (409, "Failed", e.clone()),
        };
        Response::html(
            status,
            page::message_page(
                title,
                &format!(
                    "<p>{}</p><p id=\"outcome\">{}</p>",
                    page::escape(&action.describe()),
                    page::escape(&text)
                ),
            ),
        )
    }

    /// Everything the page shows, gathered now; `all`: every table, not only the
    /// [`page::TABLE_ROWS`] with the most to look at.
    pub async fn view(&self, who: Option<&Principal>, all: bool) -> View {
        let now_ms = crate::binlog::unix_ms();
        let now_ns = (now_ms as i64).saturating_mul(1_000_000);
        let mut tables = self.tables(now_ns);
        let (loaded_tables, table_streams) = page::totals(&tables);
        let hidden_tables = if all {
            0
        } else {
            page::keep_the_busiest(&mut tables)
        };
        let (groups, groups_error) = self.groups().await;
        let binlog = self.binlog.as_ref().map(|b| {
            use crate::binlog::BinlogMode;
            match &b.status.borrow().mode {
                BinlogMode::Starting => ("starting".to_string(), None),
                BinlogMode::Following => ("following".to_string(), None),
                BinlogMode::PollOnly(why) => ("poll only".to_string(), Some(why.clone())),
                BinlogMode::Reconnecting(why) => (
                    "reconnecting".to_string(),
                    Some(format!("reconnecting: {why}")),
                ),
                BinlogMode::Stopped => ("stopped".to_string(), None),
            }
        });
        let form_token = match (who, self.settings.actions_allowed()) {
            (Some(p), true) => Some(self.auth.form_token(p)),
            _ => None,
        };
        let actions_off = if !self.settings.actions_allowed() {
            Some("this listener is neither loopback nor TLS".to_string())
        } else if who.is_none() {
            Some("sign in to act".to_string())
        } else {
            None
        };
        let rates = self.history.rates(now_ms);
        // The x axis spans the samples there are (at least a minute, at most the ring's ten
        // minutes), so a proxy started a moment ago shows its first minutes across the chart.
        let full = (history::SAMPLES as f64) * history::SAMPLE_EVERY.as_secs_f64();
        let oldest = rates
            .first()
            .and_then(|s| s.first())
            .map_or(0.0, |p| -p.0 + history::SAMPLE_EVERY.as_secs_f64());
        View {
            tables,
            hidden_tables,
            loaded_tables,
            table_streams,
            groups,
            groups_error,
            binlog,
            rates,
            span_seconds: oldest.clamp(60.0, full),
            recent_actions: self.log.recent(),
            who: who.map(Principal::name),
            form_token,
            actions_off,
            client_connections: self.proxy.open_connections(),
            proxy_name: self
                .streams
                .as_ref()
                .map(|s| s.me.clone())
                .unwrap_or_default(),
            now_ns,
        }
    }

    fn tables(&self, now_ns: i64) -> Vec<TableView> {
        let Some(engine) = &self.engine else {
            return Vec::new();
        };
        let mut tables: Vec<TableView> = engine
            .tables()
            .into_iter()
            .filter_map(|((schema, name), lookup)| {
                let figures = match lookup {
                    Lookup::Loaded(m) => {
                        let s = m.snapshot();
                        let c = m.stats().snapshot();
                        let def = m.definition();
                        Ok(TableFigures {
                            options: def.options.to_comment_summary(),
                            streams: s.subscribers,
                            cached: s.cached,
                            depth: m.depth(),
                            dead: s.dead,
                            can_die: def.options.max_attempts.is_some(),
                            oldest_due_age: s
                                .oldest_due_ns
                                .map(|_| s.oldest_due_age_seconds(now_ns)),
                            sent: c.sent,
                            acked: c.acked,
                            redelivered: c.redelivered,
                            dead_lettered: c.dead_lettered,
                            redriven: c.redriven,
                            purged: c.purged,
                        })
                    }
                    Lookup::Broken(why) => Err(why),
                    Lookup::NotMessageTable => return None,
                };
                Some(TableView {
                    schema,
                    name,
                    figures,
                })
            })
            .collect();
        tables.sort_by(|a, b| (&a.schema, &a.name).cmp(&(&b.schema, &b.name)));
        tables
    }

    /// Every group (`SHOW STREAM GROUPS`), or this proxy's own with the reason the table could
    /// not be read.
    async fn groups(&self) -> (Vec<crate::streams::engine::GroupInfo>, Option<String>) {
        let Some(streams) = &self.streams else {
            return (Vec::new(), None);
        };
        match tokio::time::timeout(GROUPS_TIMEOUT, streams.show()).await {
            Ok(Ok(mut all)) => {
                all.sort_by(|a, b| a.key.cmp(&b.key));
                (all, None)
            }
            Ok(Err(e)) => (streams.local_groups(), Some(e.message)),
            Err(_) => (
                streams.local_groups(),
                Some(format!(
                    "the stream groups' table did not answer within {GROUPS_TIMEOUT:?}; showing this proxy's groups"
                )),
            ),
        }
    }
}

/// Serves the page on `listener` until `shutdown`; HTTPS when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    admin: Arc<Admin>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: CancellationToken,
) {
    if let Some(engine) = &admin.engine {
        engine.set_count_depths(true);
    }
    tokio::spawn(history::run(
        admin.history.clone(),
        admin.engine.clone(),
        admin.streams.clone(),
        shutdown.clone(),
    ));
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let tracker = TaskTracker::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => {
                backoff = Duration::from_millis(10);
                a
            }
            Err(e) => {
                warn!("operator's page: accept failed: {e}; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let admin = admin.clone();
        let tls = tls.clone();
        tracker.spawn(async move {
            let served = tokio::time::timeout(TIMEOUT, async {
                match tls {
                    Some(acceptor) => match acceptor.accept(tcp).await {
                        Ok(stream) => answer(stream, &admin).await,
                        Err(e) => debug!(%peer, "operator's page: TLS handshake failed: {e}"),
                    },
                    None => answer(tcp, &admin).await,
                }
            })
            .await;
            if served.is_err() {
                debug!(%peer, "operator's page: request timed out");
            }
            drop(permit);
        });
    }
    tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(2), tracker.wait()).await;
}

/// Reads one request from `stream` and answers it.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, admin: &Admin) {
    let (response, head_only) = match http::read_request(&mut stream).await {
        Ok(request) => (admin.respond(&request).await, request.method == "HEAD"),
        Err(Some(refusal)) => (refusal, false),
        Err(None) => return,
    };
    let _ = stream.write_all(&response.to_bytes(!head_only)).await;
    let _ = stream.shutdown().await;
}
