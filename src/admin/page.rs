//! The page itself: what it shows is gathered first into a [`View`] (no lock is held while the
//! HTML is written), then written as plain HTML with one `<style>` block and no script. Every
//! name that comes from the database (schemas, tables, groups, filters, reasons) goes through
//! [`escape`]. Each figure is also in a `data-` attribute of its row, so scripts and tests read
//! the numbers without scraping the text.

use std::fmt::Write;

use super::actions::ActionRecord;
use super::chart;
use super::history::SERIES;
use crate::messaging::depth::{Depth, DEPTH_CAP};
use crate::streams::engine::GroupInfo;

/// Seconds between the page's own reloads.
pub const REFRESH_SECONDS: u32 = 5;

/// One message table's figures.
#[derive(Debug, Clone, Default)]
pub struct TableFigures {
    pub options: String,
    /// Open `STREAM`s through this proxy.
    pub streams: usize,
    /// Due rows in this proxy's cache (a lower bound of the due rows).
    pub cached: usize,
    /// Counted in the table at the last purge tick, when the page asks the engine to.
    pub depth: Option<Depth>,
    /// Dead rows (with `vt_max_attempts`), counted at the last purge tick.
    pub dead: Option<u64>,
    pub can_die: bool,
    pub oldest_due_age: Option<f64>,
    pub sent: u64,
    pub acked: u64,
    pub redelivered: u64,
    pub dead_lettered: u64,
    pub redriven: u64,
    pub purged: u64,
}

/// One row of the tables' list: its figures, or why it did not load.
#[derive(Debug, Clone)]
pub struct TableView {
    pub schema: String,
    pub name: String,
    pub figures: Result<TableFigures, String>,
}

/// How many of `tables` are loaded, and their open streams.
pub fn totals(tables: &[TableView]) -> (usize, usize) {
    let loaded = tables.iter().filter_map(|t| t.figures.as_ref().ok());
    let streams = loaded.clone().map(|f| f.streams).sum();
    (loaded.count(), streams)
}

/// Tables listed by default; the rest (the quietest) behind a link, so the page of a proxy
/// with thousands of tables stays small.
pub const TABLE_ROWS: usize = 200;

/// Keeps the [`TABLE_ROWS`] tables with the most to look at (not loaded, then the most dead,
/// due, in flight, the oldest waiting), in name order; how many were left out.
pub fn keep_the_busiest(tables: &mut Vec<TableView>) -> usize {
    if tables.len() <= TABLE_ROWS {
        return 0;
    }
    let weight = |t: &TableView| match &t.figures {
        Err(_) => (1, u64::MAX, 0, 0, 0),
        Ok(f) => (
            0,
            f.dead.unwrap_or(0),
            f.depth.map_or(f.cached as u64, |d| d.due),
            f.depth.map_or(0, |d| d.in_flight),
            f.oldest_due_age.map_or(0, |a| a as u64),
        ),
    };
    tables.sort_by_key(|t| std::cmp::Reverse(weight(t)));
    let hidden = tables.len() - TABLE_ROWS;
    tables.truncate(TABLE_ROWS);
    tables.sort_by(|a, b| (&a.schema, &a.name).cmp(&(&b.schema, &b.name)));
    hidden
}

/// Everything one page shows.
#[derive(Debug, Default)]
pub struct View {
    pub tables: Vec<TableView>,
    /// Tables left out of `tables` (the quietest; `?all=1` lists them).
    pub hidden_tables: usize,
    /// Of all tables (listed or not): how many are loaded, and their open streams here.
    pub loaded_tables: usize,
    pub table_streams: usize,
    /// The stream groups, or why they could not be read (with the groups this proxy knows).
    pub groups: Vec<GroupInfo>,
    pub groups_error: Option<String>,
    pub binlog: Option<(String, Option<String>)>,
    /// Per [`SERIES`], the rates over the last minutes.
    pub rates: Vec<Vec<(f64, f64)>>,
    pub span_seconds: f64,
    pub recent_actions: Vec<ActionRecord>,
    /// Who is looking; `None`: the public read-only view.
    pub who: Option<String>,
    /// The token for the forms; `None`: no action forms (not logged in, or actions refused on
    /// this listener).
    pub form_token: Option<String>,
    /// Why actions are not offered, when they are not.
    pub actions_off: Option<String>,
    pub client_connections: u64,
    pub proxy_name: String,
    pub now_ns: i64,
}

/// Whether a group's status is a failure (the group task's message) rather than one of the
/// ordinary states `StreamEngine::show` names.
pub fn group_failed(status: &str) -> bool {
    !matches!(
        status,
        "serving"
            | "opening the binlog"
            | "waiting for the lease"
            | "served by another proxy"
            | "idle"
    )
}

/// `s` safe inside HTML text and double-quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str =
    "body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}\
table{border-collapse:collapse;background:#fff;font-variant-numeric:tabular-nums}\
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}\
th{background:#eee}td.n,th.n{text-align:left}tr.bad td{background:#fee}tr.warn td{background:#ffd}\
.charts{display:flex;flex-wrap:wrap;gap:1em}.chart{margin:0;width:320px}\
.chart svg{width:300px;height:60px;display:block}.frame{fill:#fff;stroke:#ccc}\
.line{fill:none;stroke:#36c;stroke-width:1.5}.empty{font-size:10px;fill:#999}\
.muted{color:#777}.err{color:#a00}form{display:inline;margin:0}\
button{font-size:12px}.wide{overflow-x:auto}\
td.opts{max-width:16em;overflow:hidden;text-overflow:ellipsis}td.why{white-space:normal;max-width:60em}.confirm{background:#fff;border:1px solid #c99;padding:1em;max-width:50em}";

/// The whole page.
pub fn render(v: &View) -> String {
    let mut h = String::with_capacity(4096 + v.tables.len() * 400 + v.groups.len() * 300);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>msgproxy</title><style>{STYLE}</style></head><body>\
         <h1>msgproxy <span class=\"muted\">{}</span></h1><p class=\"muted\">",
        escape(&v.proxy_name)
    );
    match &v.who {
        Some(who) => {
            let _ = write!(h, "Signed in as <b>{}</b>. ", escape(who));
        }
        None => h.push_str("Read-only view. "),
    }
    let _ = write!(
        h,
        "{} client connections. Reloads every {REFRESH_SECONDS} s.",
        v.client_connections
    );
    if let Some(why) = &v.actions_off {
        let _ = write!(h, " Actions are off: {}.", escape(why));
    }
    h.push_str("</p>");
    render_errors(&mut h, v);
    render_charts(&mut h, v);
    render_tables(&mut h, v);
    render_groups(&mut h, v);
    render_actions(&mut h, v);
    h.push_str("</body></html>");
    h
}

fn render_errors(h: &mut String, v: &View) {
    let broken: Vec<&TableView> = v.tables.iter().filter(|t| t.figures.is_err()).collect();
    let failed_groups: Vec<&GroupInfo> = v
        .groups
        .iter()
        .filter(|g| group_failed(&g.status))
        .collect();
    let binlog_problem = v.binlog.as_ref().and_then(|(_, p)| p.as_ref());
    h.push_str("<h2 id=\"errors\">Problems</h2>");
    if broken.is_empty()
        && failed_groups.is_empty()
        && binlog_problem.is_none()
        && v.groups_error.is_none()
    {
        h.push_str("<p class=\"muted\" data-problems=\"0\">None.</p>");
        return;
    }
    let _ = write!(
        h,
        "<ul class=\"err\" data-problems=\"{}\">",
        broken.len() + failed_groups.len() + usize::from(binlog_problem.is_some())
    );
    if let Some(p) = binlog_problem {
        let _ = write!(h, "<li>binlog: {}</li>", escape(p));
    }
    for t in broken {
        if let Err(why) = &t.figures {
            let _ = write!(
                h,
                "<li data-broken=\"{}.{}\">table <b>{}.{}</b> did not load: {}</li>",
                escape(&t.schema),
                escape(&t.name),
                escape(&t.schema),
                escape(&t.name),
                escape(why)
            );
        }
    }
    for g in failed_groups {
        let _ = write!(
            h,
            "<li>group <b>{}</b> on {}.{}: {}</li>",
            escape(&g.key.group),
            escape(&g.key.schema),
            escape(&g.key.table),
            escape(&g.status)
        );
    }
    if let Some(e) = &v.groups_error {
        let _ = write!(h, "<li>stream groups: {}</li>", escape(e));
    }
    h.push_str("</ul>");
}

fn render_charts(h: &mut String, v: &View) {
    let _ = write!(
        h,
        "<h2>Last {} (per second)</h2><div class=\"charts\">",
        if v.span_seconds <= 90.0 {
            format!("{:.0} seconds", v.span_seconds)
        } else {
            format!("{:.0} minutes", v.span_seconds / 60.0)
        }
    );
    for (i, title) in SERIES.iter().enumerate() {
        let points = v.rates.get(i).map(Vec::as_slice).unwrap_or_default();
        h.push_str(&chart::line_chart(title, "/s", points, v.span_seconds));
    }
    h.push_str("</div>");
}

/// A depth figure, "≥" when the count stopped at the cap.
fn depth_cell(n: u64) -> String {
    if n >= DEPTH_CAP {
        format!("≥{n}")
    } else {
        n.to_string()
    }
}

fn render_tables(h: &mut String, v: &View) {
    let (loaded, streams) = (v.loaded_tables, v.table_streams);
    let _ = write!(
        h,
        "<h2 id=\"tables\">Message tables ({loaded} loaded, {} in all; {streams} streams on this proxy)</h2>",
        v.tables.len() + v.hidden_tables
    );
    if v.hidden_tables > 0 {
        let _ = write!(
            h,
            "<p class=\"muted\" data-hidden-tables=\"{n}\">The {TABLE_ROWS} with the most to look at; \
             {n} quieter tables are not listed (<a href=\"/?all=1\">list them all</a>).</p>",
            n = v.hidden_tables
        );
    }
    if v.tables.is_empty() {
        h.push_str("<p class=\"muted\">No vitess_message tables.</p>");
        return;
    }
    h.push_str(
        "<div class=\"wide\"><table><tr><th class=\"n\">table</th><th title=\"unacked and due now, counted in the table\">due</th>\
         <th title=\"sent, ack wait not over\">in flight</th><th title=\"never sent, due later\">scheduled</th>\
         <th title=\"sent vt_max_attempts times, never acked\">dead</th><th title=\"acked, waiting for vt_purge_after\">acked, awaiting purge</th>\
         <th title=\"age of the oldest due message this proxy holds\">oldest due</th><th>streams</th>\
         <th>sent</th><th>acked</th><th>redelivered</th><th>dead-lettered</th><th>purged</th><th></th><th class=\"n\">options</th></tr>",
    );
    for t in &v.tables {
        let full = format!("{}.{}", t.schema, t.name);
        let f = match &t.figures {
            Ok(f) => f,
            Err(why) => {
                let _ = write!(
                    h,
                    "<tr class=\"bad\" data-table=\"{}\" data-status=\"broken\"><td class=\"n\">{}</td>\
                     <td class=\"n err why\" colspan=\"15\">not loaded: {}</td></tr>",
                    escape(&full),
                    escape(&full),
                    escape(why)
                );
                continue;
            }
        };
        let dead = f.dead.unwrap_or(0);
        let class = if dead > 0 {
            " class=\"bad\""
        } else if f.oldest_due_age.is_some_and(|a| a > 60.0) {
            " class=\"warn\""
        } else {
            ""
        };
        let (due, in_flight, scheduled, acked) = match f.depth {
            Some(d) => (
                depth_cell(d.due),
                depth_cell(d.in_flight),
                depth_cell(d.scheduled),
                depth_cell(d.acked),
            ),
            None => (format!("≥{}", f.cached), "…".into(), "…".into(), "…".into()),
        };
        let counted = f.depth.map_or(String::new(), |d| {
            format!(
                " data-counted-age=\"{:.1}\"",
                v.now_ns.saturating_sub(d.at_ns).max(0) as f64 / 1e9
            )
        });
        let _ = write!(
            h,
            "<tr{class} data-table=\"{}\" data-status=\"loaded\" data-due=\"{}\" data-in-flight=\"{}\" \
             data-scheduled=\"{}\" data-dead=\"{}\" data-acked-unpurged=\"{}\" data-streams=\"{}\" \
             data-sent=\"{}\" data-acked=\"{}\" data-redelivered=\"{}\" data-dead-lettered=\"{}\" data-redriven=\"{}\"{counted}>\
             <td class=\"n\">{}</td><td>{due}</td><td>{in_flight}</td><td>{scheduled}</td><td>{}</td><td>{acked}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>",
            escape(&full),
            f.depth.map_or(String::new(), |d| d.due.to_string()),
            f.depth.map_or(String::new(), |d| d.in_flight.to_string()),
            f.depth.map_or(String::new(), |d| d.scheduled.to_string()),
            f.dead.map_or(String::new(), |d| d.to_string()),
            f.depth.map_or(String::new(), |d| d.acked.to_string()),
            f.streams,
            f.sent,
            f.acked,
            f.redelivered,
            f.dead_lettered,
            f.redriven,
            escape(&full),
            if f.can_die { f.dead.map_or("…".into(), |d| d.to_string()) } else { "–".into() },
            f.oldest_due_age.map_or("–".into(), |a| format!("{a:.1} s")),
            f.streams,
            f.sent,
            f.acked,
            f.redelivered,
            f.dead_lettered,
            f.purged,
        );
        if let Some(token) = &v.form_token {
            if f.can_die && dead > 0 {
                let _ = write!(
                    h,
                    "<form method=\"post\" action=\"/action\"><input type=\"hidden\" name=\"action\" value=\"redrive\">\
                     <input type=\"hidden\" name=\"schema\" value=\"{}\"><input type=\"hidden\" name=\"table\" value=\"{}\">\
                     <input type=\"hidden\" name=\"csrf\" value=\"{token}\"><button>Redrive {dead} dead…</button></form>",
                    escape(&t.schema),
                    escape(&t.name),
                );
            }
        }
        let _ = write!(
            h,
            "</td><td class=\"n muted opts\" title=\"{o}\">{o}</td></tr>",
            o = escape(&f.options)
        );
    }
    h.push_str("</table></div>");
}

fn render_groups(h: &mut String, v: &View) {
    let streams: u64 = v.groups.iter().map(|g| g.streams).sum();
    let _ = write!(
        h,
        "<h2 id=\"groups\">Stream groups ({}; {streams} streams on this proxy)</h2>",
        v.groups.len()
    );
    if v.groups.is_empty() {
        h.push_str("<p class=\"muted\">No event-stream groups.</p>");
        return;
    }
    h.push_str(
        "<div class=\"wide\"><table><tr><th class=\"n\">table</th><th class=\"n\">group</th><th class=\"n\">filter</th>\
         <th>position</th><th title=\"events read and not acked\">behind</th><th>oldest unread</th>\
         <th>in flight</th><th>streams</th><th>sent</th><th>acked</th><th>redelivered</th>\
         <th class=\"n\">status</th><th class=\"n\">served by</th><th></th></tr>",
    );
    for g in &v.groups {
        let table = format!("{}.{}", g.key.schema, g.key.table);
        let class = if group_failed(&g.status) {
            " class=\"bad\""
        } else {
            ""
        };
        let _ = write!(
            h,
            "<tr{class} data-group=\"{}/{}\" data-position=\"{}\" data-behind=\"{}\" data-in-flight=\"{}\" data-streams=\"{}\">\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n muted opts\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n muted\">{}</td><td>",
            escape(&table),
            escape(&g.key.group),
            g.position,
            g.behind,
            g.in_flight,
            g.streams,
            escape(&table),
            escape(&g.key.group),
            escape(&g.filter),
            g.position,
            g.behind,
            g.oldest_age.map_or("–".into(), |a| format!("{a:.1} s")),
            g.in_flight,
            g.streams,
            g.sent,
            g.acked,
            g.redelivered,
            escape(&g.status),
            escape(g.serving.as_deref().unwrap_or("")),
        );
        if let Some(token) = &v.form_token {
            let _ = write!(
                h,
                "<form method=\"post\" action=\"/action\"><input type=\"hidden\" name=\"action\" value=\"seek\">\
                 <input type=\"hidden\" name=\"schema\" value=\"{}\"><input type=\"hidden\" name=\"table\" value=\"{}\">\
                 <input type=\"hidden\" name=\"group\" value=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{token}\">\
                 <select name=\"to\"><option value=\"latest\">latest</option><option value=\"earliest\">earliest</option>\
                 <option value=\"event\">event…</option></select> <input name=\"event\" size=\"10\" placeholder=\"event id\">\
                 <button>Seek…</button></form>",
                escape(&g.key.schema),
                escape(&g.key.table),
                escape(&g.key.group),
            );
        }
        h.push_str("</td></tr>");
    }
    h.push_str("</table></div>");
}

fn render_actions(h: &mut String, v: &View) {
    h.push_str("<h2 id=\"actions\">Recent actions</h2>");
    if v.recent_actions.is_empty() {
        h.push_str("<p class=\"muted\">None since this proxy started.</p>");
        return;
    }
    h.push_str("<table><tr><th class=\"n\">when (UTC)</th><th class=\"n\">who</th><th class=\"n\">what</th><th class=\"n\">outcome</th></tr>");
    for a in v.recent_actions.iter().rev() {
        let _ = write!(
            h,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n{}\">{}</td></tr>",
            escape(&a.when),
            escape(&a.who),
            escape(&a.what),
            if a.ok { "" } else { " err" },
            escape(&a.outcome)
        );
    }
    h.push_str("</table>");
}

/// Adds to a rendered page how long it took: gathering the figures (the stream groups' table
/// read included) and writing the HTML. Written after the page, so it says so at its very end.
pub fn add_timings(html: &mut String, gathered: std::time::Duration, written: std::time::Duration) {
    const END: &str = "</body></html>";
    if html.ends_with(END) {
        html.truncate(html.len() - END.len());
    }
    let (g, w) = (gathered.as_secs_f64() * 1e3, written.as_secs_f64() * 1e3);
    let _ = write!(
        html,
        "<p class=\"muted\" id=\"timings\" data-gather-ms=\"{g:.2}\" data-render-ms=\"{w:.2}\">\
         Figures gathered in {g:.1} ms, page written in {w:.1} ms.</p>{END}"
    );
}

/// A page of its own for a question or an answer (confirmations, results, refusals).
pub fn message_page(title: &str, body_html: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>msgproxy: {t}</title>\
         <style>{STYLE}</style></head><body><h1>{t}</h1>{body_html}<p><a href=\"/\">Back to the overview</a></p></body></html>",
        t = escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::store::GroupKey;

    fn hostile() -> &'static str {
        "<script>alert(\"x\")</script>'&"
    }

    #[test]
    fn every_name_is_escaped() {
        let group = GroupInfo {
            key: GroupKey {
                schema: hostile().into(),
                table: hostile().into(),
                group: hostile().into(),
            },
            filter: hostile().into(),
            position: 1,
            behind: 2,
            oldest_age: Some(1.5),
            in_flight: 0,
            streams: 1,
            serving: Some(hostile().into()),
            status: format!("failed: {}", hostile()),
            sent: 0,
            redelivered: 0,
            acked: 0,
            resume_from: String::new(),
        };
        let v = View {
            tables: vec![
                TableView {
                    schema: hostile().into(),
                    name: hostile().into(),
                    figures: Ok(TableFigures {
                        options: hostile().into(),
                        can_die: true,
                        dead: Some(3),
                        ..Default::default()
                    }),
                },
                TableView {
                    schema: "db".into(),
                    name: hostile().into(),
                    figures: Err(hostile().into()),
                },
            ],
            groups: vec![group],
            groups_error: Some(hostile().into()),
            binlog: Some(("poll_only".into(), Some(hostile().into()))),
            who: Some(hostile().into()),
            form_token: Some("tok".into()),
            proxy_name: hostile().into(),
            recent_actions: vec![ActionRecord {
                when: hostile().into(),
                who: hostile().into(),
                what: hostile().into(),
                outcome: hostile().into(),
                ok: false,
            }],
            ..Default::default()
        };
        let page = render(&v);
        assert!(!page.contains("<script"), "{page}");
        assert!(!page.contains("\"x\""), "{page}");
        assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#39;&amp;"));
        assert!(page.contains("Redrive 3 dead"));
        assert!(page.contains("data-problems=\"3\""), "{page}");
    }

    #[test]
    fn a_long_list_keeps_the_busiest_tables() {
        let mut tables: Vec<TableView> = (0..TABLE_ROWS + 50)
            .map(|i| TableView {
                schema: "db".into(),
                name: format!("t{i:04}"),
                figures: Ok(TableFigures {
                    dead: Some(u64::from(i == 7)),
                    ..Default::default()
                }),
            })
            .collect();
        tables.push(TableView {
            schema: "zz".into(),
            name: "broken".into(),
            figures: Err("why".into()),
        });
        assert_eq!(totals(&tables), (TABLE_ROWS + 50, 0));
        assert_eq!(keep_the_busiest(&mut tables), 51);
        assert_eq!(tables.len(), TABLE_ROWS);
        assert!(tables.iter().any(|t| t.name == "t0007"));
        assert!(tables.iter().any(|t| t.name == "broken"));
        assert!(tables
            .windows(2)
            .all(|w| w[0].name < w[1].name || w[0].schema < w[1].schema));
        let page = render(&View {
            tables,
            hidden_tables: 51,
            ..Default::default()
        });
        assert!(page.contains("data-hidden-tables=\"51\""), "{page}");
    }

    #[test]
    fn figures_are_in_data_attributes_and_caps_show() {
        let v = View {
            tables: vec![TableView {
                schema: "db".into(),
                name: "q".into(),
                figures: Ok(TableFigures {
                    depth: Some(Depth {
                        due: DEPTH_CAP,
                        in_flight: 2,
                        scheduled: 0,
                        acked: 7,
                        at_ns: 0,
                    }),
                    streams: 1,
                    ..Default::default()
                }),
            }],
            ..Default::default()
        };
        let page = render(&v);
        assert!(
            page.contains(&format!("data-due=\"{DEPTH_CAP}\" data-in-flight=\"2\"")),
            "{page}"
        );
        assert!(page.contains("data-acked-unpurged=\"7\""));
        assert!(page.contains(&format!("≥{DEPTH_CAP}")));
        // No form without a token (public view).
        assert!(!page.contains("<form"));
    }
}
