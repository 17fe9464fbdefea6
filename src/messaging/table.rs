//! The definition of one message table (MESSAGING.md §1), validated from `information_schema` facts.
//!
//! This module does no I/O: the engine reads the table comment and `information_schema.COLUMNS`, and
//! [`validate`] (or [`from_comment`]) decides whether the table is a usable message table, which columns a
//! stream carries, and how to write SQL that names one row by its id.
//!
//! # Ids as keys
//!
//! The engine keeps ids as opaque byte keys (in the due cache, in claims and acks). A key must not depend on the
//! connection's character set, and it must be turned back into a literal that matches exactly that row. So:
//!
//! | id type | key (`key_sql`) | literal (`id_literal`) |
//! |---|---|---|
//! | integer, decimal, year | the value as text: `` `id` `` | the same text, if it is a plain number |
//! | binary, varbinary, blob, uuid, inet4/6 | `` HEX(`id`) `` | `X'…'` |
//! | text types (with a charset), `date`, `datetime`, `time` | `` HEX(`id`) `` | `_charset X'…'` |
//! | `timestamp` | `` UNIX_TIMESTAMP(`id`) ``: the instant | `FROM_UNIXTIME(…)` (`'0000-00-00 00:00:00'` for 0) |
//!
//! The text literal uses a charset introducer, not `CONVERT(X'…' USING cs)`: `CONVERT` yields the charset's
//! *default* collation with implicit coercibility, which clashes with a column of another collation of the same
//! charset (`ERROR 1267 Illegal mix of collations`, checked on MariaDB 10.11 with a `latin1_general_cs` id). An
//! introduced literal has literal coercibility, so the column's own collation decides the comparison. Because the
//! id is the whole primary key, that comparison matches exactly one row.
//!
//! A `timestamp` is an instant, shown in the session's time zone: its text would name another row (or none) in a
//! session of another zone, and claims run in the streaming client's own session while the poller's connections
//! have the server's default zone. So its key is the instant, and the literal turns it back into the session's
//! local time, which the server turns back into the instant. In a zone with daylight saving, a local time of
//! the hour repeated when clocks go back names two instants and the server picks one of them, so statements
//! that name rows by key also compare the instants ([`MessageTable::ids_sql`]): a claim never takes the other
//! row, but a session in such a zone cannot name the row the server does not pick (docs/guide/messaging.md: use a zone without
//! daylight saving, e.g. `'+00:00'`, for streams of `timestamp` ids).

use super::options::{MessageOptions, OptionsError};

/// One column of the table, from `information_schema.COLUMNS`, in table order (`ORDINAL_POSITION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    /// `COLUMN_NAME`, as the table spells it.
    pub name: String,
    /// `DATA_TYPE`, lowercase: `bigint`, `varchar`, `uuid`, ….
    pub data_type: String,
    /// `CHARACTER_SET_NAME`: set for the text types, `None` for numbers, binary strings, temporal types.
    pub charset: Option<String>,
    /// Whether the column is part of the primary key.
    pub in_primary_key: bool,
    /// Whether the server sets the column itself when a row is updated (`ON UPDATE
    /// CURRENT_TIMESTAMP`, in `EXTRA`).
    pub set_on_update: bool,
}

/// How the id column is turned into a key and back (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdKind {
    /// Integer, decimal and year ids: the key is the value's decimal text.
    Numeric,
    /// Ids compared as text: the key is the hex of the value in `charset`.
    Text {
        /// The column's character set; `utf8mb4` for types that have none (see the module docs).
        charset: String,
    },
    /// Binary ids: the key is the hex of the bytes.
    Binary,
    /// `timestamp` ids: the key is the instant, `UNIX_TIMESTAMP()`'s decimal text.
    Timestamp,
}

/// A loaded message table.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageTable {
    pub schema: String,
    pub name: String,
    pub options: MessageOptions,
    /// What `stream` sends, in order, spelled as the table spells them: `id` first.
    pub stream_columns: Vec<String>,
    /// Whether the table has a `priority` column (without one, every row has priority 0).
    pub has_priority: bool,
    pub id_kind: IdKind,
    /// An index whose first column is `time_next` (the RFC's `next_idx(time_next, epoch)`), if
    /// the table has one: the poller names it (see `poll`). Set by the engine after `validate`.
    pub next_index: Option<NextIndex>,
    /// The user columns (every column without a fixed role), in table order: what a dead
    /// message carries to the dead-letter table with its id.
    pub user_columns: Vec<String>,
    /// The `vt_dead_letter` table, checked. Set by the engine after `validate`
    /// (`dead_letter::attach`).
    pub dead_letter: Option<DeadLetter>,
    /// The `vt_group_col` column as the table spells it (FIFO groups, MESSAGING.md §11). The
    /// engine checks its index after `validate` ([`MessageTable::check_group_index`]).
    pub group_column: Option<String>,
    /// The index that starts with the group column (set by
    /// [`MessageTable::check_group_index`]): the poller names it.
    pub group_index: Option<String>,
}

/// An index that starts with `time_next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextIndex {
    pub name: String,
    /// Its second column is `epoch`, so "never sent" (`epoch` NULL or 0) narrows a range on it.
    pub then_epoch: bool,
}

impl NextIndex {
    /// Picks the index to use from `(index name, position from 1, column)` triples of one
    /// table, as `information_schema.STATISTICS` lists them. Prefers `(time_next, epoch)`.
    pub fn choose<'a>(columns: impl IntoIterator<Item = (&'a str, u32, &'a str)>) -> Option<Self> {
        let mut by_index: std::collections::BTreeMap<&str, Vec<(u32, &str)>> = Default::default();
        for (index, position, column) in columns {
            by_index.entry(index).or_default().push((position, column));
        }
        let mut found: Option<NextIndex> = None;
        for (name, mut cols) in by_index {
            cols.sort();
            let first = cols.first().map(|c| c.1);
            if !first.is_some_and(|c| c.eq_ignore_ascii_case("time_next")) {
                continue;
            }
            let then_epoch = cols
                .get(1)
                .is_some_and(|c| c.0 == 2 && c.1.eq_ignore_ascii_case("epoch"));
            if found.as_ref().is_none_or(|f| then_epoch && !f.then_epoch) {
                found = Some(NextIndex {
                    name: name.to_string(),
                    then_epoch,
                });
            }
        }
        found
    }
}

/// A message table's full name. Names are compared exactly, as the server does on Linux with
/// the default `lower_case_table_names=0`.
pub type TableKey = (String, String);

/// The `vt_dead_letter` table of a message table, checked against it at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Its name, in the message table's database.
    pub name: String,
    /// Which optional columns it has, spelled as it spells them: when the message died (Unix
    /// ns), how often it was sent, and why.
    pub dead_at: Option<String>,
    pub attempts: Option<String>,
    pub reason: Option<String>,
}

impl DeadLetter {
    /// `` `schema`.`dead letter` ``.
    pub fn qualified(&self, def: &MessageTable) -> String {
        format!("{}.{}", quote_ident(&def.schema), quote_ident(&self.name))
    }
}

/// Why a table is not a usable message table. Displays as "message table `s`.`t`: what is wrong;
/// what else is wrong": every problem found, so the table is fixed in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError {
    /// The table, quoted: `` `schema`.`name` ``.
    pub table: String,
    /// Never empty.
    pub problems: Vec<TableProblem>,
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "message table {}: ", self.table)?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for TableError {}

/// What is wrong with a message table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableProblem {
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error("missing required column {0}")]
    MissingColumn(&'static str),
    #[error("column {column} must be an integer type (bigint), not {data_type}")]
    NotBigint { column: String, data_type: String },
    #[error("column {column} must be an integer type, not {data_type}")]
    NotInteger { column: String, data_type: String },
    #[error("the primary key must be exactly (id), not ({0})")]
    PrimaryKey(String),
    #[error("the primary key must be exactly (id), but the table has none")]
    NoPrimaryKey,
    #[error("an id of type {0} is not supported: {1}")]
    UnsupportedId(String, &'static str),
    #[error(
        "column id is ON UPDATE CURRENT_TIMESTAMP: every claim and ack would give the message a new \
         id (drop the ON UPDATE clause: ALTER TABLE ... MODIFY id ... DEFAULT ... without it)"
    )]
    IdChangesOnUpdate,
    #[error("vt_message_cols names a column that does not exist: {0}")]
    NoSuchStreamColumn(String),
    #[error("vt_message_cols must start with id")]
    StreamColumnsStart,
    #[error("{0}")]
    DeadLetter(String),
    #[error("vt_group_col names a column that does not exist: {0}")]
    NoSuchGroupColumn(String),
    #[error("vt_group_col cannot be {0}, a column msgproxy manages; use a column of your own")]
    GroupColumnReserved(String),
    #[error(
        "vt_group_col={column} needs an index whose first column is {column}, then id, so that a \
         group's next message is found without a scan: ALTER TABLE {table} ADD INDEX \
         {column}_fifo ({column}, id)"
    )]
    NoGroupIndex { column: String, table: String },
}

/// Columns with a fixed role; everything else is a user column. `time_created` and `time_scheduled` are the old
/// Vitess columns: neither required, nor streamed by default, nor touched.
const SPECIAL: [&str; 7] = [
    "id",
    "time_next",
    "epoch",
    "time_acked",
    "priority",
    "time_created",
    "time_scheduled",
];

const INTEGER_TYPES: [&str; 6] = [
    "tinyint",
    "smallint",
    "mediumint",
    "int",
    "integer",
    "bigint",
];

#[cfg(test)]
/// Reads a table comment and validates the table in one step: `Ok(None)` when it is not a message table.
pub fn from_comment(
    schema: &str,
    name: &str,
    comment: &str,
    columns: &[ColumnInfo],
) -> Result<Option<MessageTable>, TableError> {
    match super::options::parse_comment(comment) {
        Ok(None) => Ok(None),
        Ok(Some(options)) => validate(schema, name, options, columns).map(Some),
        Err(e) => Err(broken_options(schema, name, e, columns)),
    }
}

/// The error of a table whose options are wrong: those problems, then what is wrong with its
/// columns (as far as they can be checked without its options).
pub fn broken_options(
    schema: &str,
    name: &str,
    errors: super::options::OptionsErrors,
    columns: &[ColumnInfo],
) -> TableError {
    let mut problems: Vec<TableProblem> = errors.0.into_iter().map(TableProblem::from).collect();
    problems.extend(column_problems(columns).err().unwrap_or_default());
    TableError {
        table: qualify(schema, name),
        problems,
    }
}

/// What [`column_problems`] finds out about a table that has none.
struct Columns<'a> {
    id: &'a ColumnInfo,
    id_kind: IdKind,
    has_priority: bool,
}

/// Checks the columns MESSAGING.md §1 requires, whatever the options: every problem found.
fn column_problems(columns: &[ColumnInfo]) -> Result<Columns<'_>, Vec<TableProblem>> {
    let mut problems = Vec::new();
    // MySQL column names are case-insensitive; compare that way, keep the table's spelling.
    let find = |wanted: &str| columns.iter().find(|c| same_name(&c.name, wanted));
    let mut required = Vec::new();
    for col in ["id", "time_next", "epoch", "time_acked"] {
        match find(col) {
            Some(c) => required.push(Some(c)),
            None => {
                problems.push(TableProblem::MissingColumn(col));
                required.push(None);
            }
        }
    }
    // Times are nanoseconds and need 64 bits; epoch is incremented on every send, and a narrower column
    // would fail the claim once it overflows — the contract asks for bigint.
    for col in required[1..].iter().flatten() {
        if col.data_type != "bigint" {
            problems.push(TableProblem::NotBigint {
                column: col.name.clone(),
                data_type: col.data_type.clone(),
            });
        }
    }
    let priority = find("priority");
    if let Some(p) = priority {
        if !INTEGER_TYPES.contains(&p.data_type.as_str()) {
            problems.push(TableProblem::NotInteger {
                column: p.name.clone(),
                data_type: p.data_type.clone(),
            });
        }
    }

    let pk: Vec<&str> = columns
        .iter()
        .filter(|c| c.in_primary_key)
        .map(|c| c.name.as_str())
        .collect();
    match pk.as_slice() {
        [] => problems.push(TableProblem::NoPrimaryKey),
        [only] if same_name(only, "id") => {}
        _ => problems.push(TableProblem::PrimaryKey(pk.join(", "))),
    }

    let mut id_kind_found = None;
    if let Some(id) = required[0] {
        match id_kind(id) {
            Ok(kind) => id_kind_found = Some(kind),
            Err(why) => problems.push(TableProblem::UnsupportedId(id.data_type.clone(), why)),
        }
        if id.set_on_update {
            problems.push(TableProblem::IdChangesOnUpdate);
        }
    }
    match (required[0], id_kind_found) {
        (Some(id), Some(id_kind)) if problems.is_empty() => Ok(Columns {
            id,
            id_kind,
            has_priority: priority.is_some(),
        }),
        _ => Err(problems),
    }
}

/// Checks a message table's columns against MESSAGING.md §1 and works out what a stream carries.
/// Reports every problem found.
pub fn validate(
    schema: &str,
    name: &str,
    options: MessageOptions,
    columns: &[ColumnInfo],
) -> Result<MessageTable, TableError> {
    let fail = |problems: Vec<TableProblem>| TableError {
        table: qualify(schema, name),
        problems,
    };
    let find = |wanted: &str| columns.iter().find(|c| same_name(&c.name, wanted));
    let checked = column_problems(columns);
    let mut problems = checked.as_ref().err().cloned().unwrap_or_default();

    let stream_columns: Vec<String> = match &options.message_cols {
        None => checked
            .as_ref()
            .ok()
            .map(|c| c.id)
            .into_iter()
            .chain(
                columns
                    .iter()
                    .filter(|c| !SPECIAL.iter().any(|s| same_name(&c.name, s))),
            )
            .map(|c| c.name.clone())
            .collect(),
        Some(wanted) => {
            // Any existing column may be streamed (as in Vitess), as long as the list starts with id.
            let mut cols = Vec::with_capacity(wanted.len());
            for w in wanted {
                match find(w) {
                    Some(col) => cols.push(col.name.clone()),
                    None => problems.push(TableProblem::NoSuchStreamColumn(w.clone())),
                }
            }
            if find("id").is_some() && !cols.first().is_some_and(|c| same_name(c, "id")) {
                problems.push(TableProblem::StreamColumnsStart);
            }
            cols
        }
    };
    let group_column = match &options.group_col {
        None => None,
        Some(wanted) => match find(wanted) {
            None => {
                problems.push(TableProblem::NoSuchGroupColumn(wanted.clone()));
                None
            }
            Some(col) if SPECIAL.iter().any(|s| same_name(&col.name, s)) => {
                problems.push(TableProblem::GroupColumnReserved(col.name.clone()));
                None
            }
            Some(col) => Some(col.name.clone()),
        },
    };
    match checked {
        Ok(c) if problems.is_empty() => Ok(MessageTable {
            schema: schema.to_string(),
            name: name.to_string(),
            options,
            stream_columns,
            has_priority: c.has_priority,
            id_kind: c.id_kind,
            next_index: None,
            user_columns: columns
                .iter()
                .filter(|c| !SPECIAL.iter().any(|s| same_name(&c.name, s)))
                .map(|c| c.name.clone())
                .collect(),
            dead_letter: None,
            group_column,
            group_index: None,
        }),
        _ => Err(fail(problems)),
    }
}

/// How the id column maps to a key, or why it cannot be used.
///
/// Types without a character set that are not numbers or binary strings (`date`, `datetime`, `time`, and any
/// type this list does not know) are keyed as text in `utf8mb4`: `HEX()` of such a value is the hex of its text
/// form, which is ASCII, and comparing the text literal with the column converts it back to the column's type.
/// `timestamp` is keyed by its instant instead (see the module docs). `uuid`, `inet4` and `inet6` are binary:
/// `HEX()` gives their binary form, and `X'…'` compares with them as that binary form — checked on MariaDB 10.11.
fn id_kind(id: &ColumnInfo) -> Result<IdKind, &'static str> {
    let ty = id.data_type.as_str();
    if INTEGER_TYPES.contains(&ty) || matches!(ty, "decimal" | "numeric" | "dec" | "fixed" | "year")
    {
        return Ok(IdKind::Numeric);
    }
    match ty {
        // Their text form does not always read back as the stored value, so a claim or ack could miss the row.
        "float" | "double" | "real" | "double precision" => {
            return Err("an approximate number cannot be matched exactly; use an integer type");
        }
        // HEX() of a bit value drops leading zero bytes, and X'…' then no longer equals the column.
        "bit" => return Err("use an integer or binary type"),
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "uuid"
        | "inet4" | "inet6" => {
            return Ok(IdKind::Binary);
        }
        "timestamp" => return Ok(IdKind::Timestamp),
        _ => {}
    }
    match &id.charset {
        // `varchar(n) character set binary` is a varbinary in disguise.
        Some(cs) if cs.eq_ignore_ascii_case("binary") => Ok(IdKind::Binary),
        Some(cs) => Ok(IdKind::Text {
            charset: cs.clone(),
        }),
        None => Ok(IdKind::Text {
            charset: "utf8mb4".to_string(),
        }),
    }
}

fn same_name(a: &str, b: &str) -> bool {
    // MySQL folds column names with Unicode-aware lowercase rules; ASCII folding alone would miss `É` vs `é`.
    a == b || a.to_lowercase() == b.to_lowercase()
}

pub(crate) fn qualify(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// An identifier in backticks, embedded backticks doubled: safe for any name, including spaces, unicode and
/// reserved words.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

impl MessageTable {
    /// With `vt_group_col`: checks that one of the table's indexes, given as `(index name,
    /// position from 1, column)` triples, starts with the group column and then `id` (or has
    /// nothing after it: InnoDB's secondary indexes end with the primary key anyway).
    pub fn check_group_index<'a>(
        mut self,
        indexes: impl IntoIterator<Item = (&'a str, u32, &'a str)>,
    ) -> Result<MessageTable, TableError> {
        let Some(group) = &self.group_column else {
            return Ok(self);
        };
        let mut by_index: std::collections::BTreeMap<&str, Vec<(u32, &str)>> = Default::default();
        for (index, position, column) in indexes {
            by_index.entry(index).or_default().push((position, column));
        }
        for cols in by_index.values_mut() {
            cols.sort();
        }
        let fits = by_index.iter().find(|(_, cols)| {
            let first = cols
                .first()
                .is_some_and(|c| c.0 == 1 && same_name(c.1, group));
            let then = match cols.get(1) {
                None => true,
                Some(c) => c.0 == 2 && same_name(c.1, self.id_column()),
            };
            first && then
        });
        if let Some((name, _)) = fits {
            self.group_index = Some(name.to_string());
            return Ok(self);
        }
        Err(TableError {
            table: self.qualified(),
            problems: vec![TableProblem::NoGroupIndex {
                column: group.clone(),
                table: self.qualified(),
            }],
        })
    }

    /// `` `schema`.`name` ``.
    pub fn qualified(&self) -> String {
        qualify(&self.schema, &self.name)
    }

    /// The table for a statement that names its rows by id (`id IN (...)`): with the primary key
    /// forced. Left to itself the optimizer may read such a statement through `ack_idx` or
    /// `next_idx` (it does on small tables), and a locking read or an UPDATE at the server's
    /// REPEATABLE READ then locks every row it scanned: all unacked rows, including one a
    /// producer's open transaction just inserted, which stalls claims and acks behind that
    /// transaction and can deadlock the producer.
    pub fn by_primary_key(&self) -> String {
        format!("{} FORCE INDEX (PRIMARY)", self.qualified())
    }

    /// The id column as the table spells it.
    pub fn id_column(&self) -> &str {
        // validate() puts id first; fall back to the canonical name rather than panic.
        self.stream_columns.first().map_or("id", String::as_str)
    }

    /// The SQL expression that yields the key of a row's id, independent of the connection's character set:
    /// `` `id` `` for numeric ids, `` HEX(`id`) `` otherwise.
    pub fn key_sql(&self) -> String {
        let id = quote_ident(self.id_column());
        match self.id_kind {
            IdKind::Numeric => id,
            IdKind::Text { .. } | IdKind::Binary => format!("HEX({id})"),
            IdKind::Timestamp => format!("UNIX_TIMESTAMP({id})"),
        }
    }

    /// The SQL literal that matches the row whose key (from [`key_sql`](Self::key_sql)) is `key`, or `None` if
    /// `key` is not a well-formed key for this table — so nothing that is not a key ever reaches the SQL text.
    pub fn id_literal(&self, key: &[u8]) -> Option<String> {
        match &self.id_kind {
            IdKind::Numeric => {
                is_plain_number(key).then(|| String::from_utf8_lossy(key).into_owned())
            }
            IdKind::Binary => is_hex(key).then(|| format!("X'{}'", String::from_utf8_lossy(key))),
            IdKind::Timestamp => {
                if key.first() == Some(&b'-') || !is_plain_number(key) {
                    None
                } else if is_zero(key) {
                    // The zero timestamp (no instant: FROM_UNIXTIME(0) is 1970-01-01, which a
                    // timestamp cannot hold).
                    Some(ZERO_TIMESTAMP.to_string())
                } else {
                    Some(format!("FROM_UNIXTIME({})", String::from_utf8_lossy(key)))
                }
            }
            IdKind::Text { charset } => (is_charset_name(charset) && is_hex(key))
                .then(|| format!("_{charset} X'{}'", String::from_utf8_lossy(key))),
        }
    }

    /// The SQL literal for a quoted id of `ACK` whose value (quotes and escapes undone) is `value`, written
    /// by a client whose `character_set_client` is `client_charset` — `None` when the caller did not ask,
    /// which it need not when `value` is ASCII: ASCII reads the same in every character set a client may
    /// use. `None` if `client_charset` is not a plain name.
    ///
    /// The literal means what the client's string meant, and no `sql_mode` reads it differently (it holds
    /// no quote and no backslash): it is [`id_literal`](Self::id_literal) of the value where that names
    /// the same thing — a plain number for a numeric id, `X'..'` for a binary one, `_charset X'..'` for
    /// text whose bytes are already in the column's character set (the client's, or ASCII in an
    /// ASCII-compatible one) — and otherwise the string itself, `_client_charset X'..'`, which the server
    /// converts and compares as it would have the client's literal (a `timestamp` id written as
    /// `'2024-01-01 00:00:00'` is read in the session's time zone, a number with spaces as a number).
    pub fn quoted_id_literal(&self, value: &[u8], client_charset: Option<&str>) -> Option<String> {
        let hex = hex_upper(value);
        let client = client_charset.unwrap_or("utf8mb4");
        let same_bytes = match &self.id_kind {
            IdKind::Numeric => is_plain_number(value),
            IdKind::Binary => true,
            IdKind::Timestamp => false,
            IdKind::Text { charset } => {
                charset.eq_ignore_ascii_case(client)
                    || (value.is_ascii() && is_ascii_compatible(charset))
            }
        };
        if same_bytes {
            let key = match self.id_kind {
                IdKind::Numeric => value,
                _ => hex.as_bytes(),
            };
            return self.id_literal(key);
        }
        is_charset_name(client).then(|| format!("_{client} X'{hex}'"))
    }

    /// The condition that selects exactly the rows with these keys: `` `id` IN (literals) `` —
    /// and for `timestamp` ids also the instants themselves, because in the hour a zone with
    /// daylight saving repeats a literal's local time names two instants and the server picks
    /// one (see the module docs): without it a claim or purge could take the other row. `None`
    /// if no key makes a literal.
    pub fn ids_sql<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Option<String> {
        let id = quote_ident(self.id_column());
        let mut literals = Vec::new();
        let mut instants = Vec::new();
        let mut zero = false;
        for key in keys {
            match self.id_literal(key) {
                // The zero timestamp has no instant (`UNIX_TIMESTAMP()` of it is NULL in a
                // comparison with constants): it is named by itself.
                Some(_) if self.id_kind == IdKind::Timestamp && is_zero(key) => zero = true,
                Some(literal) => {
                    literals.push(literal);
                    instants.push(String::from_utf8_lossy(key).into_owned());
                }
                None => {}
            }
        }
        let named = (!literals.is_empty()).then(|| {
            let mut sql = format!("{id} IN ({})", literals.join(", "));
            if self.id_kind == IdKind::Timestamp {
                // id_literal accepted each key, so each is a plain number.
                sql.push_str(&format!(
                    " AND {} IN ({})",
                    self.key_sql(),
                    instants.join(", ")
                ));
            }
            sql
        });
        let zero = zero.then(|| format!("{id} = {ZERO_TIMESTAMP}"));
        match (named, zero) {
            (Some(named), Some(zero)) => Some(format!("(({named}) OR {zero})")),
            (Some(named), None) => Some(format!("({named})")),
            (None, Some(zero)) => Some(zero),
            (None, None) => None,
        }
    }

    /// The stream columns, quoted and joined by `", "`, for a `SELECT`.
    pub fn select_list(&self) -> String {
        self.stream_columns
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The zero `timestamp`, whose `UNIX_TIMESTAMP()` key is 0 (with the column's fractional digits).
const ZERO_TIMESTAMP: &str = "'0000-00-00 00:00:00'";

/// Whether a `timestamp` key is the zero timestamp's (`0`, `0.000`).
fn is_zero(key: &[u8]) -> bool {
    key.iter().all(|b| matches!(b, b'0' | b'.'))
}

/// An optional `-`, digits, at most one `.`, at least one digit, nothing else (no spaces, no exponent).
fn is_plain_number(key: &[u8]) -> bool {
    let digits = key.strip_prefix(b"-").unwrap_or(key);
    let mut seen_digit = false;
    let mut seen_dot = false;
    for &b in digits {
        match b {
            b'0'..=b'9' => seen_digit = true,
            b'.' if !seen_dot => seen_dot = true,
            _ => return false,
        }
    }
    seen_digit
}

/// A character set name that may follow `_` as an introducer: letters, digits and `_` only.
fn is_charset_name(charset: &str) -> bool {
    !charset.is_empty()
        && charset
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether ASCII text is the same bytes in `charset`: all of MariaDB's character sets but the
/// fixed-width Unicode encodings (which clients cannot use either).
fn is_ascii_compatible(charset: &str) -> bool {
    !["ucs2", "utf16", "utf16le", "utf32"]
        .iter()
        .any(|wide| charset.eq_ignore_ascii_case(wide))
}

/// `bytes` as upper-case hex digits, as `HEX()` writes them.
pub(crate) fn hex_upper(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(hex, "{b:02X}");
    }
    hex
}

/// Hex digits in pairs (what `HEX()` yields); empty is the empty string.
fn is_hex(key: &[u8]) -> bool {
    key.len().is_multiple_of(2) && key.iter().all(u8::is_ascii_hexdigit)
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
