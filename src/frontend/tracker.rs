//! What a session remembers between commands, as plain data: the current database, what its
//! prepared statements do (write message tables, `KILL QUERY`), the message tables its open
//! transaction may have written, and whether a reset would undo everything it did. Each method
//! takes what a command was and what the server answered (`failed`: an ERR); nothing here
//! touches a socket, so the rules are unit-tested on their own (below).
//!
//! The message-table parts are generic over the table type `M` only so that the tests need no
//! message engine; sessions use the default, [`TableManager`].

use std::collections::HashMap;
use std::sync::Arc;

use super::interrupts::PreparedKills;
use crate::messaging::manager::TableManager;
use crate::sql::current_db::{may_change_database, may_hold_several, use_target};
use crate::sql::{Classification, Keyword};

/// What the proxy knows of the session's current database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CurrentDb {
    /// Certainly this one (`None`: no database selected).
    Known(Option<String>),
    /// Something the session did may have changed it: ask the server before relying on it.
    Unknown,
}

impl CurrentDb {
    /// From a database name as the client sent it (login, COM_INIT_DB, COM_CHANGE_USER, `USE`):
    /// empty is none. A name that is not ASCII is left for the server to tell: the client wrote it
    /// in its own character set, which the proxy does not follow, and the server converts it.
    pub fn named(name: &[u8]) -> CurrentDb {
        if name.is_empty() {
            CurrentDb::Known(None)
        } else if name.is_ascii() {
            CurrentDb::Known(Some(String::from_utf8_lossy(name).into_owned()))
        } else {
            CurrentDb::Unknown
        }
    }

    /// The database when it is known for certain (`Some(None)`: none selected).
    pub fn known(&self) -> Option<Option<&str>> {
        match self {
            CurrentDb::Known(db) => Some(db.as_deref()),
            CurrentDb::Unknown => None,
        }
    }
}

/// The session state that outlives one command (see the module doc).
pub struct SessionTracker<M = TableManager> {
    /// Used to resolve unqualified message table names: known only while certain (see
    /// `sql::current_db`), else asked of the server when needed.
    current_db: CurrentDb,
    /// Whether the server runs several statements in one COM_QUERY for this session
    /// (CLIENT_MULTI_STATEMENTS, switched by COM_SET_OPTION): only then can a later statement of a
    /// query change the current database.
    multi_statements: bool,
    /// Whether the session has prepared a statement that may change the current database (a
    /// prepared `USE`, `DROP DATABASE`, ...): from then on every COM_STMT_EXECUTE forgets it.
    /// Cleared when the server frees the session's statements.
    risky_prepared: bool,
    /// While the engine polls instead of following the binlog: the message tables this
    /// session's prepared statements may write, so that executing one asks for a poll as a text
    /// `INSERT` does.
    prepared_writes: PreparedWrites<M>,
    /// This session's prepared `KILL QUERY` statements: executing one ends a stream as the text
    /// form does.
    prepared_kills: PreparedKills,
    /// Message tables this session may have written in its open transaction; their managers are
    /// told when it commits.
    pending_notify: Vec<Arc<M>>,
    /// The session did something a reset is not known to undo (`COM_SET_OPTION`,
    /// `COM_CHANGE_USER`, `XA`, `SET ROLE`, a STREAM left mid-way): its backend connection is
    /// closed, never pooled.
    unresettable: bool,
}

/// The message tables a session's prepared statements may write.
struct PreparedWrites<M> {
    /// By statement id, for the binary protocol.
    by_id: HashMap<u32, Vec<Arc<M>>>,
    /// For every SQL `PREPARE` of the session together (`EXECUTE name` is not traced to its
    /// `PREPARE`: a table too many costs one poll).
    by_sql: Vec<Arc<M>>,
}

impl<M> Default for PreparedWrites<M> {
    fn default() -> Self {
        PreparedWrites {
            by_id: HashMap::new(),
            by_sql: Vec::new(),
        }
    }
}

/// Appends the tables of `more` not in `to` yet (the same table, by identity, once).
fn add_distinct<M>(to: &mut Vec<Arc<M>>, more: impl IntoIterator<Item = Arc<M>>) {
    for m in more {
        if !to.iter().any(|p| Arc::ptr_eq(p, &m)) {
            to.push(m);
        }
    }
}

impl<M> SessionTracker<M> {
    /// A session that logged in with `database` (empty: none) and the client's
    /// CLIENT_MULTI_STATEMENTS capability.
    pub fn new(database: &[u8], multi_statements: bool) -> Self {
        SessionTracker {
            current_db: CurrentDb::named(database),
            multi_statements,
            risky_prepared: false,
            prepared_writes: PreparedWrites::default(),
            prepared_kills: PreparedKills::default(),
            pending_notify: Vec::new(),
            unresettable: false,
        }
    }

    pub fn current_db(&self) -> &CurrentDb {
        &self.current_db
    }

    /// The server said which database is current (`SELECT DATABASE()`).
    pub fn learned_db(&mut self, db: Option<String>) {
        self.current_db = CurrentDb::Known(db);
    }

    /// Whether `sql` may be several statements the server runs one after another.
    pub fn may_be_several(&self, sql: &[u8]) -> bool {
        self.multi_statements && may_hold_several(sql)
    }

    /// After a relayed COM_QUERY: what it did to the current database. A plain `USE db` that
    /// succeeded names it; anything that may have changed it otherwise (including a failed
    /// multi-statement query, whose first statements ran) makes it unknown. Costs the hot path
    /// nothing but a scan for `;` when the session has multi-statements on.
    pub fn after_query(&mut self, sql: &[u8], classification: Classification, failed: bool) {
        let several = self.may_be_several(sql);
        if classification.keyword == Keyword::Use && !several {
            match use_target(sql) {
                Some(db) if !failed => self.current_db = CurrentDb::named(db.as_bytes()),
                // A single USE that failed changed nothing.
                Some(_) => {}
                None => self.current_db = CurrentDb::Unknown,
            }
        } else if several || may_change_database(classification.keyword, sql) {
            self.current_db = CurrentDb::Unknown;
        }
    }

    /// After a statement too long to hold, of which only `head` was seen: a `USE` may follow in
    /// a part the proxy never read.
    pub fn after_long_query(&mut self, keyword: Keyword, head: &[u8]) {
        if self.multi_statements || may_change_database(keyword, head) {
            self.current_db = CurrentDb::Unknown;
        }
    }

    /// After a relayed COM_INIT_DB of `name`.
    pub fn after_init_db(&mut self, name: &[u8], failed: bool) {
        if !failed {
            self.current_db = CurrentDb::named(name);
        }
    }

    /// After a relayed COM_RESET_CONNECTION. The server keeps the database there, but the proxy
    /// need not rely on that: the next unqualified ACK/STREAM asks. Prepared statements are gone.
    pub fn after_reset_connection(&mut self) {
        self.current_db = CurrentDb::Unknown;
        self.server_reset();
    }

    /// After a relayed COM_SET_OPTION with `option` (its two bytes):
    /// MYSQL_OPTION_MULTI_STATEMENTS_ON is 0, _OFF is 1.
    pub fn after_set_option(&mut self, option: Option<&[u8]>, failed: bool) {
        match option {
            Some([0, 0]) if !failed => self.multi_statements = true,
            Some([1, 0]) if !failed => self.multi_statements = false,
            _ => {}
        }
    }

    /// After a COM_CHANGE_USER the server accepted: the session starts afresh in `database`.
    pub fn after_change_user(&mut self, database: &[u8], multi_statements: bool) {
        self.current_db = CurrentDb::named(database);
        self.multi_statements = multi_statements;
        self.server_reset();
    }

    /// After a COM_STMT_PREPARE of `sql` (first keyword `keyword`), which the server answered
    /// with statement `id` (`None`: refused).
    pub fn after_prepare(&mut self, sql: &[u8], keyword: Keyword, id: Option<u32>) {
        if may_change_database(keyword, sql) {
            self.risky_prepared = true;
        }
        if let (Some(id), Keyword::Kill) = (id, keyword) {
            self.prepared_kills.prepared(id, sql);
        }
    }

    /// After a COM_STMT_EXECUTE (`kills`: the binary execute, not the bulk one, whose
    /// parameters the proxy does not read) of `statement` with `payload` (command byte
    /// included). Returns the connection whose query the server accepted to kill, if the
    /// statement is a prepared `KILL QUERY`.
    pub fn after_execute(
        &mut self,
        statement: Option<u32>,
        payload: &[u8],
        kills: bool,
        failed: bool,
    ) -> Option<u64> {
        if self.risky_prepared {
            self.current_db = CurrentDb::Unknown;
        }
        // Read even when the server refused: the types bound now apply to later executions.
        let kill = match statement {
            Some(id) if kills => self.prepared_kills.target(id, payload),
            _ => None,
        };
        kill.filter(|_| !failed)
    }

    /// After a COM_STMT_CLOSE of `statement`.
    pub fn after_close(&mut self, statement: Option<u32>) {
        if let Some(id) = statement {
            self.prepared_writes.by_id.remove(&id);
            self.prepared_kills.closed(id);
        }
    }

    /// The server started the session afresh (COM_RESET_CONNECTION, COM_CHANGE_USER, or one
    /// refused): its prepared statements are gone, and an open transaction with them.
    pub fn server_reset(&mut self) {
        self.risky_prepared = false;
        self.prepared_writes = PreparedWrites::default();
        self.prepared_kills = PreparedKills::default();
        self.pending_notify.clear();
    }

    /// The session did something a reset is not known to undo.
    pub fn mark_unresettable(&mut self) {
        self.unresettable = true;
    }

    /// Whether the session's backend connection must be closed rather than pooled.
    pub fn unresettable(&self) -> bool {
        self.unresettable
    }

    /// Adds tables to those this session's open transaction may have written.
    pub fn note_written(&mut self, written: Vec<Arc<M>>) {
        add_distinct(&mut self.pending_notify, written);
    }

    /// The tables to poll now: once no transaction is open (`in_transaction` false), those its
    /// writes went to, forgotten here; none after a rollback.
    pub fn committed(&mut self, in_transaction: bool, rolled_back: bool) -> Vec<Arc<M>> {
        if in_transaction {
            return Vec::new();
        }
        let written = std::mem::take(&mut self.pending_notify);
        if rolled_back {
            Vec::new()
        } else {
            written
        }
    }

    /// A SQL `PREPARE` that may write these tables.
    pub fn prepared_sql_writes(&mut self, written: Vec<Arc<M>>) {
        add_distinct(&mut self.prepared_writes.by_sql, written);
    }

    /// The tables any of the session's SQL `PREPARE`s may write (`EXECUTE name` may run any).
    pub fn sql_prepared_writes(&self) -> &[Arc<M>] {
        &self.prepared_writes.by_sql
    }

    /// A COM_STMT_PREPARE, answered with statement `id`, that may write these tables.
    pub fn prepared_writes(&mut self, id: u32, written: Vec<Arc<M>>) {
        if !written.is_empty() {
            self.prepared_writes.by_id.insert(id, written);
        }
    }

    /// The tables executing statement `id` may write.
    pub fn written_by(&self, id: Option<u32>) -> Vec<Arc<M>> {
        id.and_then(|id| self.prepared_writes.by_id.get(&id))
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::classify;

    fn tracker(database: &str) -> SessionTracker<u32> {
        SessionTracker::new(database.as_bytes(), false)
    }

    fn query(t: &mut SessionTracker<u32>, sql: &str, failed: bool) {
        t.after_query(sql.as_bytes(), classify(sql.as_bytes()), failed);
    }

    #[test]
    fn the_login_database_is_known_and_non_ascii_names_are_left_to_the_server() {
        assert_eq!(tracker("").current_db(), &CurrentDb::Known(None));
        assert_eq!(tracker("app").current_db().known(), Some(Some("app")));
        assert_eq!(tracker("café").current_db(), &CurrentDb::Unknown);
    }

    #[test]
    fn use_names_the_database_only_when_it_succeeds() {
        let mut t = tracker("a");
        query(&mut t, "USE b", true);
        assert_eq!(t.current_db().known(), Some(Some("a")), "a failed USE");
        query(&mut t, "USE b", false);
        assert_eq!(t.current_db().known(), Some(Some("b")));
        query(&mut t, "SELECT 1", false);
        assert_eq!(
            t.current_db().known(),
            Some(Some("b")),
            "a SELECT changes nothing"
        );
        query(&mut t, "DROP DATABASE b", false);
        assert_eq!(t.current_db(), &CurrentDb::Unknown);
        t.learned_db(Some("c".into()));
        assert_eq!(t.current_db().known(), Some(Some("c")));
    }

    #[test]
    fn with_multi_statements_a_use_in_several_statements_is_not_followed() {
        let mut t = SessionTracker::<u32>::new(b"a", true);
        query(&mut t, "SELECT 1", false);
        assert_eq!(t.current_db().known(), Some(Some("a")));
        query(&mut t, "SELECT 1; USE b", false);
        assert_eq!(t.current_db(), &CurrentDb::Unknown);

        // COM_SET_OPTION switches it; a refused one changes nothing.
        let mut t = tracker("a");
        t.after_set_option(Some(&[0, 0]), true);
        query(&mut t, "SELECT 1; USE b", false);
        assert_eq!(t.current_db().known(), Some(Some("a")));
        t.after_set_option(Some(&[0, 0]), false);
        query(&mut t, "SELECT 1; USE b", false);
        assert_eq!(t.current_db(), &CurrentDb::Unknown);
        t.after_set_option(Some(&[1, 0]), false);
        t.after_init_db(b"d", false);
        assert!(!t.may_be_several(b"SELECT 1; SELECT 2"));
    }

    #[test]
    fn a_long_statement_seen_only_in_part_forgets_the_database_when_it_may_change_it() {
        let mut t = tracker("a");
        t.after_long_query(Keyword::Insert, b"INSERT INTO t VALUES (1)");
        assert_eq!(t.current_db().known(), Some(Some("a")));
        t.after_long_query(Keyword::Drop, b"DROP DATABASE a");
        assert_eq!(t.current_db(), &CurrentDb::Unknown);
        let mut t = SessionTracker::<u32>::new(b"a", true);
        t.after_long_query(Keyword::Insert, b"INSERT INTO t VALUES (1)");
        assert_eq!(t.current_db(), &CurrentDb::Unknown);
    }

    #[test]
    fn init_db_reset_and_change_user() {
        let mut t = tracker("a");
        t.after_init_db(b"b", true);
        assert_eq!(t.current_db().known(), Some(Some("a")));
        t.after_init_db(b"b", false);
        assert_eq!(t.current_db().known(), Some(Some("b")));
        t.after_reset_connection();
        assert_eq!(t.current_db(), &CurrentDb::Unknown);
        t.after_change_user(b"c", true);
        assert_eq!(t.current_db().known(), Some(Some("c")));
        assert!(t.may_be_several(b"SELECT 1; SELECT 2"));
    }

    #[test]
    fn executing_a_prepared_use_forgets_the_database_until_the_server_resets() {
        let mut t = tracker("a");
        t.after_prepare(b"SELECT ?", Keyword::Select, Some(1));
        assert_eq!(
            t.after_execute(Some(1), &[0x17, 1, 0, 0, 0], true, false),
            None
        );
        assert_eq!(t.current_db().known(), Some(Some("a")));
        // Refused by the server, still risky: the client may prepare it again.
        t.after_prepare(b"USE b", Keyword::Use, None);
        t.after_execute(Some(1), &[0x17, 1, 0, 0, 0], true, false);
        assert_eq!(t.current_db(), &CurrentDb::Unknown);
        t.after_change_user(b"a", false);
        t.after_execute(Some(1), &[0x17, 1, 0, 0, 0], true, false);
        assert_eq!(t.current_db().known(), Some(Some("a")));
    }

    #[test]
    fn a_prepared_kill_names_its_target_when_the_server_accepts_it() {
        let mut t = tracker("");
        let execute = [0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0];
        t.after_prepare(b"KILL QUERY 42", Keyword::Kill, None);
        assert_eq!(
            t.after_execute(Some(1), &execute, true, false),
            None,
            "refused"
        );
        t.after_prepare(b"KILL QUERY 42", Keyword::Kill, Some(1));
        assert_eq!(
            t.after_execute(Some(1), &execute, true, true),
            None,
            "failed"
        );
        assert_eq!(
            t.after_execute(Some(1), &execute, false, false),
            None,
            "bulk"
        );
        assert_eq!(t.after_execute(Some(1), &execute, true, false), Some(42));
        t.after_close(Some(1));
        assert_eq!(
            t.after_execute(Some(1), &execute, true, false),
            None,
            "closed"
        );
    }

    #[test]
    fn written_tables_are_polled_once_committed_and_never_after_a_rollback() {
        let (a, b) = (Arc::new(1), Arc::new(2));
        let mut t = tracker("");
        t.note_written(vec![a.clone(), b.clone()]);
        t.note_written(vec![a.clone()]);
        assert!(
            t.committed(true, false).is_empty(),
            "the transaction is open"
        );
        let polled = t.committed(false, false);
        assert_eq!(polled.len(), 2, "each table once");
        assert!(t.committed(false, false).is_empty(), "told once");
        t.note_written(vec![a.clone()]);
        assert!(t.committed(false, true).is_empty(), "rolled back");
        assert!(t.committed(false, false).is_empty(), "and forgotten");
        t.note_written(vec![b.clone()]);
        t.server_reset();
        assert!(
            t.committed(false, false).is_empty(),
            "a reset ends the transaction"
        );
    }

    #[test]
    fn prepared_writes_are_kept_by_statement_until_closed_or_reset() {
        let (a, b) = (Arc::new(1), Arc::new(2));
        let mut t = tracker("");
        t.prepared_writes(1, vec![a.clone()]);
        t.prepared_writes(2, vec![]);
        t.prepared_sql_writes(vec![b.clone()]);
        t.prepared_sql_writes(vec![b.clone()]);
        assert_eq!(t.written_by(Some(1)).len(), 1);
        assert!(t.written_by(Some(2)).is_empty());
        assert!(t.written_by(None).is_empty());
        assert_eq!(t.sql_prepared_writes().len(), 1);
        t.after_close(Some(1));
        assert!(t.written_by(Some(1)).is_empty());
        t.prepared_writes(1, vec![a.clone()]);
        t.server_reset();
        assert!(t.written_by(Some(1)).is_empty());
        assert!(t.sql_prepared_writes().is_empty());
    }

    #[test]
    fn unresettable_sticks() {
        let mut t = tracker("");
        assert!(!t.unresettable());
        t.mark_unresettable();
        t.server_reset();
        assert!(t.unresettable());
    }
}
