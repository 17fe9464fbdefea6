//! What the backend must provide for the watcher to follow its binlog, and how to say what is
//! missing: one line, naming each problem and its fix, so an operator can act on it.

use std::collections::HashMap;

/// The server variables the check reads (`SHOW GLOBAL VARIABLES`, which needs no privilege).
pub const VARIABLES: [&str; 6] = [
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "server_id",
    "version",
];

/// One unmet prerequisite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// `log_bin` is off.
    LogBin,
    /// `binlog_format` is not ROW (the value).
    BinlogFormat(String),
    /// `binlog_row_image` is not FULL (the value).
    RowImage(String),
    /// `binlog_row_metadata` is not FULL (the value); checked only where the server has it.
    RowMetadata(String),
    /// The user may not read the binlog position (`SHOW MASTER STATUS`).
    ReplicationClient,
    /// The user may not register as a replica and read the binlog.
    ReplicationSlave,
}

impl Missing {
    /// The problem and its fix; `grantee` is the backend user, quoted (`'app'@'%'`).
    pub fn describe(&self, grantee: &str) -> String {
        match self {
            Missing::LogBin => {
                "log_bin is OFF: turn the binary log on (`log_bin = mysql-bin` and a \
                                `server_id` under [mysqld] in my.cnf, then restart the server)"
                    .to_string()
            }
            Missing::BinlogFormat(v) => format!(
                "binlog_format is {v}, needs ROW (`binlog_format = ROW` in my.cnf, or \
                 SET GLOBAL binlog_format = 'ROW')"
            ),
            Missing::RowImage(v) => format!(
                "binlog_row_image is {v}, needs FULL (`binlog_row_image = FULL` in my.cnf, or \
                 SET GLOBAL binlog_row_image = 'FULL')"
            ),
            Missing::RowMetadata(v) => format!(
                "binlog_row_metadata is {v}, needs FULL (`binlog_row_metadata = FULL` in my.cnf, \
                 or SET GLOBAL binlog_row_metadata = 'FULL')"
            ),
            Missing::ReplicationClient => format!(
                "the backend user {grantee} may not read the binlog position: \
                 GRANT REPLICATION CLIENT ON *.* TO {grantee} (BINLOG MONITOR on MariaDB, of \
                 which REPLICATION CLIENT is an alias)"
            ),
            Missing::ReplicationSlave => format!(
                "the backend user {grantee} may not read the binlog: \
                 GRANT REPLICATION SLAVE ON *.* TO {grantee}"
            ),
        }
    }
}

/// The problems `SHOW GLOBAL VARIABLES` reveals. Names are matched case-insensitively; a
/// variable the server does not have is not a problem (except `log_bin`, which every server
/// has), so `binlog_row_metadata` is checked only where it exists (MariaDB 10.5+, MySQL 8).
pub fn check_variables(vars: &HashMap<String, String>) -> Vec<Missing> {
    let get = |name: &str| {
        vars.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    let is = |v: &str, want: &str| v.eq_ignore_ascii_case(want);
    let mut missing = Vec::new();
    match get("log_bin") {
        Some(v) if is(v, "ON") || v == "1" => {}
        _ => missing.push(Missing::LogBin),
    }
    if let Some(v) = get("binlog_format") {
        if !is(v, "ROW") {
            missing.push(Missing::BinlogFormat(v.to_ascii_uppercase()));
        }
    }
    if let Some(v) = get("binlog_row_image") {
        if !is(v, "FULL") {
            missing.push(Missing::RowImage(v.to_ascii_uppercase()));
        }
    }
    if let Some(v) = get("binlog_row_metadata") {
        if !is(v, "FULL") {
            missing.push(Missing::RowMetadata(v.to_ascii_uppercase()));
        }
    }
    missing
}

/// The one line logged when the watcher cannot follow the binlog.
pub fn summary(missing: &[Missing], grantee: &str) -> String {
    let problems: Vec<String> = missing.iter().map(|m| m.describe(grantee)).collect();
    format!(
        "binlog: not following the backend's binlog, running in poll mode (rows written around \
         this proxy reach streams at each table's vt_poller_interval; writes through this proxy \
         stay prompt): {}. See docs/guide/operating.md, \"Binlog\"",
        problems.join("; ")
    )
}

/// `user@host` as `CURRENT_USER()` returns it, quoted for a GRANT: `'user'@'host'`.
pub fn grantee(current_user: &str) -> String {
    let (user, host) = current_user.rsplit_once('@').unwrap_or((current_user, "%"));
    format!(
        "'{}'@'{}'",
        user.replace('\'', "''"),
        host.replace('\'', "''")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn good() -> Vec<(&'static str, &'static str)> {
        vec![
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "FULL"),
            ("binlog_row_metadata", "FULL"),
            ("server_id", "1"),
        ]
    }

    #[test]
    fn a_good_server_misses_nothing() {
        assert_eq!(check_variables(&vars(&good())), vec![]);
        // Case does not matter; a server without binlog_row_metadata is not held to it.
        let v = vars(&[
            ("LOG_BIN", "on"),
            ("binlog_format", "row"),
            ("binlog_row_image", "full"),
        ]);
        assert_eq!(check_variables(&v), vec![]);
    }

    #[test]
    fn each_problem_is_named() {
        let mut v = good();
        v[0].1 = "OFF";
        v[1].1 = "MIXED";
        v[2].1 = "minimal";
        v[3].1 = "NO_LOG";
        assert_eq!(
            check_variables(&vars(&v)),
            vec![
                Missing::LogBin,
                Missing::BinlogFormat("MIXED".into()),
                Missing::RowImage("MINIMAL".into()),
                Missing::RowMetadata("NO_LOG".into()),
            ]
        );
        assert_eq!(check_variables(&vars(&[])), vec![Missing::LogBin]);
    }

    #[test]
    fn the_line_says_what_and_how() {
        let g = grantee("app@%");
        assert_eq!(g, "'app'@'%'");
        let line = summary(
            &[
                Missing::BinlogFormat("STATEMENT".into()),
                Missing::ReplicationSlave,
            ],
            &g,
        );
        assert!(!line.contains('\n'));
        assert!(line.contains("poll mode"), "{line}");
        assert!(
            line.contains("binlog_format is STATEMENT, needs ROW"),
            "{line}"
        );
        assert!(
            line.contains("GRANT REPLICATION SLAVE ON *.* TO 'app'@'%'"),
            "{line}"
        );
        assert!(Missing::ReplicationClient
            .describe(&g)
            .contains("GRANT REPLICATION CLIENT ON *.* TO 'app'@'%'"));
        assert!(Missing::LogBin.describe(&g).contains("log_bin is OFF"));
    }

    #[test]
    fn grantees_are_quoted() {
        assert_eq!(grantee("root@localhost"), "'root'@'localhost'");
        assert_eq!(grantee("o'brien@10.0.0.%"), "'o''brien'@'10.0.0.%'");
        assert_eq!(grantee("a@b@c"), "'a@b'@'c'");
        assert_eq!(grantee("nohost"), "'nohost'@'%'");
    }
}
