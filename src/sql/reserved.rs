//! The words MariaDB does not take as an unquoted table name.
//!
//! Measured, not copied from the manual: every word of `information_schema.KEYWORDS` on MariaDB 10.11 was
//! tried as `SELECT * FROM <word>`, and these are the ones that fail with a syntax error (1064) instead of
//! "table doesn't exist" (plus `DUAL`, which names the dummy table). The list depends on the server version
//! and on `sql_mode=ORACLE`; the default mode is what the proxy models. A word written right after
//! `schema.`, or right before `.table`, is an identifier whatever it spells (`mydb.select`), and a
//! backtick-quoted name is never reserved.

use std::cmp::Ordering;

/// Upper case, sorted by bytes (checked by a test), for a binary search.
#[rustfmt::skip]
static RESERVED: &[&str] = &[
    "ACCESSIBLE", "ADD", "ALL", "ALTER", "ANALYZE", "AND", "AS", "ASC", "ASENSITIVE", "BEFORE", "BETWEEN",
    "BIGINT", "BINARY", "BLOB", "BOTH", "BY", "CALL", "CASCADE", "CASE", "CHANGE", "CHAR", "CHARACTER", "CHECK",
    "COLLATE", "COLUMN", "CONDITION", "CONSTRAINT", "CONTINUE", "CONVERT", "CREATE", "CROSS", "CURRENT_DATE",
    "CURRENT_ROLE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "CURRENT_USER", "CURSOR", "DATABASES", "DAY_HOUR",
    "DAY_MICROSECOND", "DAY_MINUTE", "DAY_SECOND", "DEC", "DECIMAL", "DECLARE", "DEFAULT", "DELAYED", "DELETE",
    "DELETE_DOMAIN_ID", "DESC", "DESCRIBE", "DETERMINISTIC", "DISTINCT", "DISTINCTROW", "DIV", "DOUBLE",
    "DO_DOMAIN_IDS", "DROP", "DUAL", "EACH", "ELSE", "ELSEIF", "ENCLOSED", "ESCAPED", "EXCEPT", "EXISTS",
    "EXIT", "EXPLAIN", "FALSE", "FETCH", "FLOAT", "FLOAT4", "FLOAT8", "FOR", "FORCE", "FOREIGN", "FROM",
    "FULLTEXT", "GRANT", "GROUP", "HAVING", "HIGH_PRIORITY", "HOUR_MICROSECOND", "HOUR_MINUTE", "HOUR_SECOND",
    "IF", "IGNORE", "IGNORE_DOMAIN_IDS", "IN", "INDEX", "INFILE", "INNER", "INOUT", "INSENSITIVE", "INSERT",
    "INT", "INT1", "INT2", "INT3", "INT4", "INT8", "INTEGER", "INTERSECT", "INTERVAL", "INTO", "IS", "ITERATE",
    "JOIN", "KEY", "KEYS", "KILL", "LEADING", "LEAVE", "LEFT", "LIKE", "LIMIT", "LINEAR", "LINES", "LOAD",
    "LOCALTIME", "LOCALTIMESTAMP", "LOCK", "LONG", "LONGBLOB", "LONGTEXT", "LOOP", "LOW_PRIORITY",
    "MASTER_DEMOTE_TO_REPLICA", "MASTER_DEMOTE_TO_SLAVE", "MASTER_SSL_VERIFY_SERVER_CERT", "MATCH", "MAXVALUE",
    "MEDIUMBLOB", "MEDIUMINT", "MEDIUMTEXT", "MIDDLEINT", "MINUTE_MICROSECOND", "MINUTE_SECOND", "MOD",
    "MODIFIES", "NATURAL", "NOT", "NO_WRITE_TO_BINLOG", "NULL", "NUMERIC", "OFFSET", "ON", "OPTIMIZE",
    "OPTIONALLY", "OR", "ORDER", "OUT", "OUTER", "OUTFILE", "OVER", "PAGE_CHECKSUM", "PARSE_VCOL_EXPR",
    "PARTITION", "PORTION", "PRECISION", "PRIMARY", "PROCEDURE", "PURGE", "RANGE", "READ", "READS",
    "READ_WRITE", "REAL", "RECURSIVE", "REFERENCES", "REF_SYSTEM_ID", "REGEXP", "RELEASE", "RENAME", "REPEAT",
    "REPLACE", "REQUIRE", "RESIGNAL", "RESTRICT", "RETURN", "RETURNING", "REVOKE", "RIGHT", "RLIKE", "ROWS",
    "ROW_NUMBER", "SCHEMAS", "SECOND_MICROSECOND", "SELECT", "SENSITIVE", "SEPARATOR", "SET", "SHOW", "SIGNAL",
    "SMALLINT", "SPATIAL", "SPECIFIC", "SQL", "SQLEXCEPTION", "SQLSTATE", "SQLWARNING", "SQL_BIG_RESULT",
    "SQL_CALC_FOUND_ROWS", "SQL_SMALL_RESULT", "SSL", "STARTING", "STATS_AUTO_RECALC", "STATS_PERSISTENT",
    "STATS_SAMPLE_PAGES", "STRAIGHT_JOIN", "TABLE", "TERMINATED", "THEN", "TINYBLOB", "TINYINT", "TINYTEXT",
    "TO", "TRAILING", "TRIGGER", "TRUE", "UNDO", "UNION", "UNIQUE", "UNLOCK", "UNSIGNED", "UPDATE", "USAGE",
    "USE", "USING", "UTC_DATE", "UTC_TIME", "UTC_TIMESTAMP", "VALUES", "VARBINARY", "VARCHAR", "VARCHARACTER",
    "VARYING", "WHEN", "WHERE", "WHILE", "WITH", "WRITE", "XOR", "YEAR_MONTH", "ZEROFILL",
];

/// Whether `word` (any case) is reserved. Never allocates.
pub(super) fn is_reserved(word: &[u8]) -> bool {
    RESERVED
        .binary_search_by(|candidate| cmp_upper(candidate.as_bytes(), word))
        .is_ok()
}

/// Compares an upper-case `candidate` with `word` as if `word` were upper case too.
fn cmp_upper(candidate: &[u8], word: &[u8]) -> Ordering {
    candidate
        .iter()
        .copied()
        .cmp(word.iter().map(u8::to_ascii_uppercase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_and_upper_case() {
        for pair in RESERVED.windows(2) {
            assert!(pair[0].as_bytes() < pair[1].as_bytes(), "{pair:?}");
        }
        for word in RESERVED {
            assert_eq!(word.to_ascii_uppercase(), *word);
        }
    }

    #[test]
    fn lookup_ignores_case() {
        for word in [
            "select",
            "SELECT",
            "Where",
            "null",
            "from",
            "dual",
            "sql_big_result",
            "int1",
        ] {
            assert!(is_reserved(word.as_bytes()), "{word}");
        }
        for word in [
            "stream",
            "ack",
            "vitess_message",
            "t",
            "",
            "selects",
            "selec",
            "status",
            "é",
        ] {
            assert!(!is_reserved(word.as_bytes()), "{word}");
        }
    }
}
