//! What a person can do from the page when something is stuck: redrive a table's dead letters
//! (MESSAGING.md §9, `REDRIVE t`) and move a stream group (STREAMS.md §3, `SEEK`). Each is asked
//! first (a page that says what will happen, with a button that sends the same form again with
//! `confirm=yes`), then done with the proxy's own backend user, logged (one `info` line naming
//! who, what and the outcome) and kept in a short list the page shows.

use std::collections::VecDeque;
use std::sync::Mutex;

use mysql_async::prelude::Queryable;
use tracing::{info, warn};

use super::page::{escape, message_page};
use crate::messaging::dead_letter;
use crate::messaging::engine::{Engine, Lookup};
use crate::messaging::manager::TableManager;
use crate::messaging::state;
use crate::streams::engine::{Outcome, StreamEngine};
use crate::streams::locate::Target;
use crate::streams::store::GroupKey;

/// Actions the page lists.
const KEPT: usize = 20;

/// One action, as the page lists it.
#[derive(Debug, Clone)]
pub struct ActionRecord {
    /// UTC, to the second.
    pub when: String,
    pub who: String,
    pub what: String,
    pub outcome: String,
    pub ok: bool,
}

/// The last [`KEPT`] actions.
#[derive(Debug, Default)]
pub struct ActionLog(Mutex<VecDeque<ActionRecord>>);

impl ActionLog {
    pub fn push(&self, record: ActionRecord) {
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == KEPT {
            log.pop_front();
        }
        log.push_back(record);
    }

    pub fn recent(&self) -> Vec<ActionRecord> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// An action a form asks for, read and checked (names exist, targets parse) before anything is
/// done.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Redrive { schema: String, table: String },
    Seek { key: GroupKey, to: Target },
}

/// A form field, or a 400 naming it.
fn field(form: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<String, String> {
    form(name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("the form has no {name}"))
}

impl Action {
    /// The action a form names.
    pub fn from_form(form: &dyn Fn(&str) -> Option<String>) -> Result<Action, String> {
        let schema = field(form, "schema")?;
        let table = field(form, "table")?;
        match field(form, "action")?.as_str() {
            "redrive" => Ok(Action::Redrive { schema, table }),
            "seek" => {
                let group = field(form, "group")?;
                let to = match field(form, "to")?.as_str() {
                    "earliest" => Target::Earliest,
                    "latest" => Target::Latest,
                    "event" => Target::Event(
                        field(form, "event")?
                            .trim()
                            .parse()
                            .map_err(|_| "the event id must be a number".to_string())?,
                    ),
                    other => {
                        return Err(format!(
                            "cannot seek to '{other}': use earliest, latest or event"
                        ))
                    }
                };
                Ok(Action::Seek {
                    key: GroupKey {
                        schema,
                        table,
                        group,
                    },
                    to,
                })
            }
            other => Err(format!("no action '{other}': redrive or seek")),
        }
    }

    /// What it does, in a line (plain text, escaped where shown).
    pub fn describe(&self) -> String {
        match self {
            Action::Redrive { schema, table } => {
                format!("REDRIVE `{schema}`.`{table}` (all its dead messages)")
            }
            Action::Seek { key, to } => format!(
                "SEEK `{}`.`{}` GROUP '{}' TO {}",
                key.schema,
                key.table,
                key.group,
                match to {
                    Target::Earliest => "EARLIEST".to_string(),
                    Target::Latest => "LATEST".to_string(),
                    Target::Event(n) => format!("EVENT {n}"),
                    Target::Timestamp(t) => format!("TIMESTAMP {t}"),
                }
            ),
        }
    }

    /// The form fields that ask for it again.
    fn hidden_fields(&self) -> String {
        let hidden = |n: &str, v: &str| {
            format!(
                "<input type=\"hidden\" name=\"{n}\" value=\"{}\">",
                escape(v)
            )
        };
        match self {
            Action::Redrive { schema, table } => {
                hidden("action", "redrive") + &hidden("schema", schema) + &hidden("table", table)
            }
            Action::Seek { key, to } => {
                let (to, event) = match to {
                    Target::Earliest => ("earliest", String::new()),
                    Target::Latest => ("latest", String::new()),
                    Target::Event(n) => ("event", n.to_string()),
                    Target::Timestamp(_) => ("latest", String::new()),
                };
                hidden("action", "seek")
                    + &hidden("schema", &key.schema)
                    + &hidden("table", &key.table)
                    + &hidden("group", &key.group)
                    + &hidden("to", to)
                    + &hidden("event", &event)
            }
        }
    }
}

/// The page that asks "do this?", with the form that does it.
pub fn confirm_page(action: &Action, consequence: &str, form_token: &str) -> String {
    let body = format!(
        "<div class=\"confirm\"><p>{}</p><p>{}</p><form method=\"post\" action=\"/action\">{}\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"confirm\" value=\"yes\">\
         <button id=\"confirm\">Yes, do it</button></form> <a href=\"/\">No, go back</a></div>",
        escape(&action.describe()),
        escape(consequence),
        action.hidden_fields(),
        escape(form_token),
    );
    message_page("Confirm", &body)
}

/// What confirming would do, in a sentence; `Err` when it cannot be done at all.
pub fn consequence(
    action: &Action,
    engine: Option<&Engine>,
    streams: Option<&StreamEngine>,
) -> Result<String, String> {
    match action {
        Action::Redrive { schema, table } => {
            let manager = loaded(engine, schema, table)?;
            let def = manager.definition();
            if def.options.max_attempts.is_none() {
                return Err(format!(
                    "`{schema}`.`{table}` has no vt_max_attempts: none of its messages can be dead"
                ));
            }
            let dead = manager
                .snapshot()
                .dead
                .map_or("its dead messages".to_string(), |n| {
                    format!("its {n} dead messages (as last counted)")
                });
            let from = def.dead_letter.as_ref().map_or(String::new(), |_| {
                " moved back from its dead-letter table".into()
            });
            Ok(format!(
                "Every dead message of the table becomes due again now with epoch 0{from}: {dead} will be sent to consumers again."
            ))
        }
        Action::Seek { key, .. } => {
            if streams.is_none() {
                return Err("event streams are not running in this proxy".into());
            }
            Ok(format!(
                "Group '{}' moves at once; what it has in flight is dropped, and its consumers read from the new position (events before it are skipped, after it read again).",
                key.group
            ))
        }
    }
}

fn loaded(
    engine: Option<&Engine>,
    schema: &str,
    table: &str,
) -> Result<std::sync::Arc<TableManager>, String> {
    let engine = engine.ok_or("the message engine is not running")?;
    match engine.lookup(schema, table) {
        Lookup::Loaded(m) => Ok(m),
        Lookup::Broken(why) => Err(format!("`{schema}`.`{table}` is not loaded: {why}")),
        Lookup::NotMessageTable => Err(format!("`{schema}`.`{table}` is not a message table")),
    }
}

/// Does `action`; the outcome in a sentence, or why it failed.
pub async fn perform(
    action: &Action,
    engine: Option<&Engine>,
    streams: Option<&StreamEngine>,
) -> Result<String, String> {
    match action {
        Action::Redrive { schema, table } => {
            let manager = loaded(engine, schema, table)?;
            let engine = engine.ok_or("the message engine is not running")?;
            let n = redrive_all(engine, &manager).await?;
            Ok(format!("{n} dead messages redriven"))
        }
        Action::Seek { key, to } => {
            let streams = streams.ok_or("event streams are not running in this proxy")?;
            match streams.seek(key, *to).await.map_err(|e| e.message)? {
                Outcome::Done(_) => Ok(format!("group '{}' moved", key.group)),
                Outcome::Queued { owner } => Ok(format!(
                    "group '{}': the SEEK is queued for {owner}, which serves the group and did not answer in time; it or the proxy that takes the group over applies it",
                    key.group
                )),
            }
        }
    }
}

/// `REDRIVE t` on the engine's pool: in place, or moved back from the dead-letter table in one
/// transaction (both statements or neither), as `frontend::work_queue` does on a session.
async fn redrive_all(engine: &Engine, manager: &TableManager) -> Result<u64, String> {
    let def = manager.definition();
    let now = state::now_ns();
    let mut conn = engine
        .pool()
        .get_conn()
        .await
        .map_err(|e| format!("cannot reach the backend: {e}"))?;
    let redriven = match &def.dead_letter {
        None => {
            conn.query_drop(dead_letter::redrive_in_place(&def, None, now))
                .await
                .map_err(|e| e.to_string())?;
            conn.affected_rows()
        }
        Some(dl) => {
            let [insert, delete] = dead_letter::redrive_moved(&def, dl, None, now);
            let mut tx = conn
                .start_transaction(mysql_async::TxOpts::default())
                .await
                .map_err(|e| e.to_string())?;
            tx.query_drop(&insert).await.map_err(|e| e.to_string())?;
            let n = tx.affected_rows();
            tx.query_drop(&delete).await.map_err(|e| e.to_string())?;
            tx.commit().await.map_err(|e| e.to_string())?;
            n
        }
    };
    manager.stats().record_redriven(redriven);
    // The binlog shows the rows due again when it is followed; a poll covers the rest.
    manager.request_poll();
    manager.count_now().await;
    Ok(redriven)
}

/// Logs an action's outcome and keeps it for the page.
pub fn record(log: &ActionLog, who: &str, action: &Action, outcome: &Result<String, String>) {
    let what = action.describe();
    match outcome {
        Ok(o) => info!(user = who, "operator's page: {what}: {o}"),
        Err(e) => warn!(user = who, "operator's page: {what} failed: {e}"),
    }
    log.push(ActionRecord {
        when: utc_now(),
        who: who.to_string(),
        what,
        outcome: outcome.clone().unwrap_or_else(|e| e),
        ok: outcome.is_ok(),
    });
}

/// Now as `YYYY-MM-DD HH:MM:SS` UTC, without a date library.
fn utc_now() -> String {
    let secs = crate::binlog::unix_ms() / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn forms_become_actions_or_clear_refusals() {
        assert_eq!(
            Action::from_form(&form(&[
                ("action", "redrive"),
                ("schema", "db"),
                ("table", "q")
            ])),
            Ok(Action::Redrive {
                schema: "db".into(),
                table: "q".into()
            })
        );
        let seek = Action::from_form(&form(&[
            ("action", "seek"),
            ("schema", "db"),
            ("table", "ev"),
            ("group", "g"),
            ("to", "event"),
            ("event", " 42 "),
        ]))
        .unwrap();
        assert_eq!(seek.describe(), "SEEK `db`.`ev` GROUP 'g' TO EVENT 42");
        for (pairs, says) in [
            (&[("action", "redrive"), ("schema", "db")][..], "no table"),
            (
                &[("action", "drop"), ("schema", "db"), ("table", "q")],
                "no action 'drop'",
            ),
            (
                &[
                    ("action", "seek"),
                    ("schema", "db"),
                    ("table", "q"),
                    ("group", "g"),
                    ("to", "x"),
                ],
                "cannot seek to 'x'",
            ),
            (
                &[
                    ("action", "seek"),
                    ("schema", "db"),
                    ("table", "q"),
                    ("group", "g"),
                    ("to", "event"),
                    ("event", "x"),
                ],
                "must be a number",
            ),
        ] {
            let err = Action::from_form(&form(pairs)).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn the_confirmation_repeats_the_action_escaped() {
        let a = Action::Redrive {
            schema: "d\"b".into(),
            table: "<q>".into(),
        };
        let page = confirm_page(&a, "x", "tok");
        assert!(
            page.contains("name=\"table\" value=\"&lt;q&gt;\""),
            "{page}"
        );
        assert!(
            page.contains("name=\"schema\" value=\"d&quot;b\""),
            "{page}"
        );
        assert!(page.contains("name=\"confirm\" value=\"yes\""));
        assert!(!page.contains("<q>"));
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_now().len(), 19);
        assert!(utc_now().starts_with("20"));
    }
}
