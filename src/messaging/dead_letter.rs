//! Dead messages (MESSAGING.md §9, `vt_max_attempts`): the SQL that marks them dead in place or
//! moves them to the `vt_dead_letter` table, and brings them back (`REDRIVE`). No I/O: the claim
//! (`stream`) and the session (`frontend::work_queue`) run these statements.
//!
//! A message is dead when a claim finds it due with `epoch >= vt_max_attempts`: it was sent that
//! many times and its last ack wait has passed. The claim holds the row locked (`FOR UPDATE`), so
//! marking or moving it there, in the claim's own transaction, is atomic across proxies.

use super::state;
use super::table::{quote_ident, DeadLetter, MessageTable, TableError, TableProblem};

/// What `reason` says for a message sent `vt_max_attempts` times.
pub const REASON: &str = "max attempts reached";

/// Checks the `vt_dead_letter` table named in the options, given its columns (`None`: it
/// does not exist), and keeps it. Without the option, the table as it is.
pub fn attach(
    mut def: MessageTable,
    columns: Option<&[String]>,
) -> Result<MessageTable, TableError> {
    let Some(name) = def.options.dead_letter.clone() else {
        return Ok(def);
    };
    match check(&def, &name, columns) {
        Ok(dl) => {
            def.dead_letter = Some(dl);
            Ok(def)
        }
        Err(problems) => Err(TableError {
            table: def.qualified(),
            problems: problems.into_iter().map(TableProblem::DeadLetter).collect(),
        }),
    }
}

/// Checks the dead-letter table's columns (`None`: no such table) against `def`: it needs
/// `id` and every user column of `def`. Returns the problems found.
fn check(
    def: &MessageTable,
    name: &str,
    columns: Option<&[String]>,
) -> Result<DeadLetter, Vec<String>> {
    let Some(columns) = columns else {
        return Err(vec![format!(
            "vt_dead_letter names table {} which does not exist in database {}; create it \
             with the columns id{}",
            quote_ident(name),
            quote_ident(&def.schema),
            def.user_columns
                .iter()
                .map(|c| format!(", {c}"))
                .collect::<String>()
        )]);
    };
    if name == def.name {
        return Err(vec![
            "vt_dead_letter must name another table, not the message table itself".into(),
        ]);
    }
    let find = |wanted: &str| {
        columns
            .iter()
            .find(|c| c.to_lowercase() == wanted.to_lowercase())
            .cloned()
    };
    let missing: Vec<String> = std::iter::once(def.id_column())
        .chain(def.user_columns.iter().map(String::as_str))
        .filter(|c| find(c).is_none())
        .map(str::to_string)
        .collect();
    if !missing.is_empty() {
        return Err(vec![format!(
            "vt_dead_letter table {} lacks column(s) {} of the message table",
            quote_ident(name),
            missing.join(", ")
        )]);
    }
    Ok(DeadLetter {
        name: name.to_string(),
        dead_at: find("dead_at"),
        attempts: find("attempts"),
        reason: find("reason"),
    })
}

/// The id and user columns, quoted and joined: what a dead message carries to the dead-letter
/// table and back.
fn carried(def: &MessageTable) -> String {
    std::iter::once(def.id_column())
        .chain(def.user_columns.iter().map(String::as_str))
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The claim's statements for the dead rows `ids` (an `ids_sql` condition), run in its
/// transaction after it locked them: moved to the dead-letter table (an `INSERT ... SELECT`, then a
/// `DELETE`), or marked dead in place (`time_next` = the bigint maximum).
pub fn bury(def: &MessageTable, ids: &str, now_ns: i64) -> Vec<String> {
    let Some(dl) = &def.dead_letter else {
        return vec![format!(
            "UPDATE {} SET `time_next` = {} WHERE {ids}",
            def.by_primary_key(),
            state::DEAD_TIME_NEXT
        )];
    };
    let mut into = carried(def);
    let mut values = carried(def);
    for (column, value) in [
        (&dl.dead_at, now_ns.to_string()),
        (&dl.attempts, "COALESCE(`epoch`, 0)".to_string()),
        (&dl.reason, format!("'{REASON}'")),
    ] {
        if let Some(column) = column {
            into.push_str(&format!(", {}", quote_ident(column)));
            values.push_str(&format!(", {value}"));
        }
    }
    vec![
        format!(
            "INSERT INTO {} ({into}) SELECT {values} FROM {} WHERE {ids}",
            dl.qualified(def),
            def.by_primary_key()
        ),
        format!(
            "DELETE {} FROM {} WHERE {ids}",
            def.qualified(),
            def.by_primary_key()
        ),
    ]
}

/// `REDRIVE` from the dead-letter table: the statements that move the rows whose ids are in
/// `ids` (a comma-separated list of id literals; `None`: all) back, due at `now_ns` with `epoch`
/// 0. The first one's affected rows are the messages redriven. The `DELETE` takes only rows now
/// back in the message table, so a message a claim moves to the dead-letter table meanwhile is
/// not lost.
pub fn redrive_moved(
    def: &MessageTable,
    dl: &DeadLetter,
    ids: Option<&str>,
    now_ns: i64,
) -> [String; 2] {
    let id = quote_ident(def.id_column());
    let filter =
        |alias: &str| ids.map_or(String::new(), |ids| format!(" AND {alias}{id} IN ({ids})"));
    let columns = carried(def);
    [
        format!(
            "INSERT INTO {} ({columns}, `time_next`, `epoch`, `time_acked`) SELECT {columns}, {now_ns}, 0, NULL FROM {} WHERE TRUE{}",
            def.qualified(),
            dl.qualified(def),
            filter(""),
        ),
        format!(
            "DELETE d FROM {} AS d JOIN {} AS m ON m.{id} = d.{id} WHERE {}{}",
            dl.qualified(def),
            def.qualified(),
            state::UNACKED_SQL.replace("`time_acked`", "m.`time_acked`"),
            filter("d."),
        ),
    ]
}

/// `REDRIVE` in place: dead rows (those whose ids are in `ids`, a comma-separated list of id
/// literals, or all) due at `now_ns` with `epoch` 0.
pub fn redrive_in_place(def: &MessageTable, ids: Option<&str>, now_ns: i64) -> String {
    // Without ids the dead rows are found by `time_next` (the poller's index serves it); with
    // ids by primary key.
    let (table, filter) = match ids {
        Some(ids) => (
            def.by_primary_key(),
            format!(" AND {} IN ({ids})", quote_ident(def.id_column())),
        ),
        None => (def.qualified(), String::new()),
    };
    format!(
        "UPDATE {table} SET `time_next` = {now_ns}, `epoch` = 0 WHERE {} AND {}{filter}",
        state::DEAD_SQL,
        state::UNACKED_SQL,
    )
}

/// The query counting `def`'s dead messages (in place, or in the dead-letter table); `None`
/// without `vt_max_attempts`. Run by the engine at each purge tick (see `TableManager::purge`),
/// not in the client's session: a client may not be allowed to read the dead-letter table, and a
/// table dropped a moment ago must not fail `SHOW MESSAGE TABLES`.
pub fn count_sql(def: &MessageTable) -> Option<String> {
    def.options.max_attempts?;
    Some(match &def.dead_letter {
        Some(dl) => format!("SELECT COUNT(*) FROM {}", dl.qualified(def)),
        None => format!(
            "SELECT COUNT(*) FROM {} WHERE {} AND {}",
            def.qualified(),
            state::DEAD_SQL,
            state::UNACKED_SQL
        ),
    })
}
