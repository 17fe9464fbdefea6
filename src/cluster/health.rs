//! Whether one server can take msgproxy's writes now: it answers, `read_only` is off, and on a
//! Galera node it is synced with its cluster and ready (`wsrep_local_state` 4, `wsrep_ready`
//! ON). A node that is joining, donating or cut off from the primary component answers
//! queries but refuses or stalls writes; a replica has `read_only` on until a failover tool
//! promotes it. msgproxy only reads these: it never changes a server's role.

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::config::BackendTarget;

/// Connecting and each question give up after this long: a server that takes longer is not
/// one to move to.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// A server's answer to the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Writable: the proxy may use it.
    Usable,
    /// Not now, and why (for the logs).
    Unusable(String),
}

impl Health {
    pub fn is_usable(&self) -> bool {
        *self == Health::Usable
    }
}

/// What the server says about itself: the variables and status values the verdict needs.
pub fn verdict(variables: &HashMap<String, String>, status: &HashMap<String, String>) -> Health {
    let on = |v: Option<&String>| {
        v.is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1" || v.eq_ignore_ascii_case("YES"))
    };
    if on(variables.get("read_only")) {
        return Health::Unusable("read_only is ON".into());
    }
    if on(variables.get("wsrep_on")) {
        let state = status.get("wsrep_local_state").map(String::as_str);
        if state != Some("4") {
            let comment = status
                .get("wsrep_local_state_comment")
                .map(String::as_str)
                .unwrap_or("unknown");
            return Health::Unusable(format!(
                "the Galera node is not synced (wsrep_local_state {}, {comment})",
                state.unwrap_or("?")
            ));
        }
        if !on(status.get("wsrep_ready")) {
            return Health::Unusable("the Galera node is not ready (wsrep_ready OFF)".into());
        }
    }
    Health::Usable
}

/// One server's checker: keeps its connection between checks (a check is then one round trip,
/// not a login), and makes a new one after any failure.
pub struct Checker {
    target: BackendTarget,
    conn: Option<Conn>,
}

impl Checker {
    pub fn new(target: BackendTarget) -> Checker {
        Checker { target, conn: None }
    }

    /// Asks the server; any failure (unreachable, timed out, an error) is an unusable answer.
    pub async fn check(&mut self) -> Health {
        match tokio::time::timeout(CHECK_TIMEOUT, self.ask()).await {
            Ok(Ok(health)) => health,
            Ok(Err(e)) => {
                self.conn = None;
                Health::Unusable(format!("cannot ask it: {e}"))
            }
            Err(_) => {
                // The connection may be stuck mid-answer: never reuse it.
                self.conn = None;
                Health::Unusable(format!("no answer within {CHECK_TIMEOUT:?}"))
            }
        }
    }

    async fn ask(&mut self) -> mysql_async::Result<Health> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                let opts = self.target.mysql_async_opts();
                self.conn.insert(Conn::new(opts).await?)
            }
        };
        // SHOW ... WHERE works on MySQL and on MariaDB with or without Galera (the wsrep rows are
        // simply absent where there is none).
        let variables: HashMap<String, String> = conn
            .query("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'wsrep_on')")
            .await?
            .into_iter()
            .map(|(k, v): (String, String)| (k.to_ascii_lowercase(), v))
            .collect();
        let status: HashMap<String, String> = if variables.contains_key("wsrep_on") {
            conn.query(
                "SHOW GLOBAL STATUS WHERE Variable_name IN \
                 ('wsrep_local_state', 'wsrep_local_state_comment', 'wsrep_ready')",
            )
            .await?
            .into_iter()
            .map(|(k, v): (String, String)| (k.to_ascii_lowercase(), v))
            .collect()
        } else {
            HashMap::new()
        };
        Ok(verdict(&variables, &status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_plain_server_is_usable_unless_read_only() {
        assert!(verdict(&map(&[("read_only", "OFF")]), &map(&[])).is_usable());
        assert!(!verdict(&map(&[("read_only", "ON")]), &map(&[])).is_usable());
        // MariaDB without a Galera provider has wsrep_on OFF: no wsrep status is needed.
        assert!(verdict(
            &map(&[("read_only", "OFF"), ("wsrep_on", "OFF")]),
            &map(&[])
        )
        .is_usable());
    }

    #[test]
    fn a_galera_node_must_be_synced_and_ready() {
        let vars = map(&[("read_only", "OFF"), ("wsrep_on", "ON")]);
        let synced = map(&[("wsrep_local_state", "4"), ("wsrep_ready", "ON")]);
        assert!(verdict(&vars, &synced).is_usable());
        let joining = map(&[
            ("wsrep_local_state", "1"),
            ("wsrep_local_state_comment", "Joining"),
            ("wsrep_ready", "OFF"),
        ]);
        assert_eq!(
            verdict(&vars, &joining),
            Health::Unusable("the Galera node is not synced (wsrep_local_state 1, Joining)".into())
        );
        let not_ready = map(&[("wsrep_local_state", "4"), ("wsrep_ready", "OFF")]);
        assert!(!verdict(&vars, &not_ready).is_usable());
        // No status at all from a node that says it runs wsrep: not usable.
        assert!(!verdict(&vars, &map(&[])).is_usable());
    }
}
