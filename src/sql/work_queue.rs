//! The work-queue statements of MESSAGING.md §9-§10, msgproxy's own (Vitess has none):
//!
//! ```text
//! STREAM {* | ident [, ident ...]} FROM table_ref [WHERE condition]      (§12: the column list and
//!                                                                        the condition)
//! NACK table_ref id [, id ...] [DELAY seconds]
//! EXTEND table_ref id [, id ...] BY seconds
//! REDRIVE table_ref [id [, id ...]]
//!
//! seconds = an unsigned number (`10`, `0.5`, `1e3`), at most 100 years
//! ```
//!
//! Ids are `ACK`'s (the same literals, the same quoting). Also here: how each of msgproxy's own
//! statements is written ([`usage`]), for the syntax errors that name it.

use super::{ErrorAt, Parser, VirtualStatement};
use crate::sql::lexer::TokenKind;
use crate::sql::Keyword;

/// How each of msgproxy's own statements is written, by its first keyword (the classifier's):
/// what a syntax error in one says it expects (MESSAGING.md §3, §6, §9, §10).
pub(super) fn usage(keyword: Keyword) -> Option<&'static str> {
    Some(match keyword {
        Keyword::Stream => "STREAM {* | column[, column ...]} FROM table [WHERE condition]",
        Keyword::Ack => "ACK table id[, id ...]",
        Keyword::Nack => "NACK table id[, id ...] [DELAY seconds]",
        Keyword::Extend => "EXTEND table id[, id ...] BY seconds",
        Keyword::Redrive => "REDRIVE table [id[, id ...]]",
        _ => return None,
    })
}

/// The longest delay a statement may give: 100 years, like the table options' (nanoseconds
/// since 1970 end in 2262; past a century "never" is meant, and `now + delay` stays far from
/// overflow).
const MAX_SECONDS: f64 = 100.0 * 365.0 * 24.0 * 60.0 * 60.0;

/// A number of seconds written in a statement (`DELAY 10`, `BY 0.5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds {
    /// The same, in nanoseconds (never negative, at most 100 years).
    pub nanos: i64,
}

impl<'a> Parser<'a> {
    /// `NACK`, `EXTEND` or `REDRIVE` after its first word `first`; `None` for any other word.
    pub(super) fn work_queue_statement(
        &mut self,
        first: crate::sql::lexer::Token,
    ) -> Result<Option<VirtualStatement>, ErrorAt> {
        let statement = if self.is_keyword(first, "NACK") {
            let table = self.table_ref()?;
            let ids = self.ids()?;
            let after = self.peek();
            let delay = if self.is_keyword(after, "DELAY") {
                self.next();
                Some(self.seconds()?)
            } else {
                None
            };
            VirtualStatement::Nack { table, ids, delay }
        } else if self.is_keyword(first, "EXTEND") {
            let table = self.table_ref()?;
            let ids = self.ids()?;
            self.expect_keyword("BY")?;
            let by = self.seconds()?;
            VirtualStatement::Extend { table, ids, by }
        } else if self.is_keyword(first, "REDRIVE") {
            let table = self.table_ref()?;
            let ids = match self.peek().kind {
                TokenKind::Eof | TokenKind::Punct(b';') => Vec::new(),
                _ => self.ids()?,
            };
            VirtualStatement::Redrive { table, ids }
        } else {
            return Ok(None);
        };
        Ok(Some(statement))
    }

    /// What `STREAM` sends: `*` (`None`), or a list of column names (§12).
    pub(super) fn stream_columns(&mut self) -> Result<Option<Vec<String>>, ErrorAt> {
        if self.peek().kind == TokenKind::Punct(b'*') {
            self.next();
            return Ok(None);
        }
        let mut columns = Vec::new();
        loop {
            let token = self.next();
            columns.push(self.identifier(token, false)?);
            if self.peek().kind != TokenKind::Punct(b',') {
                return Ok(Some(columns));
            }
            self.next();
        }
    }

    /// `WHERE condition` after `STREAM ... FROM t`, to the end of the statement (one `;` may end
    /// it), as written: the server evaluates it, inside parentheses in the statements msgproxy
    /// writes. So that it can only ever be one expression there, it may not hold a comment
    /// (an executable one could hide a `)` from this check), a `;`, or a `)` without its `(`.
    pub(super) fn stream_condition(&mut self) -> Result<Option<String>, ErrorAt> {
        let after = self.peek();
        if !self.is_keyword(after, "WHERE") {
            return Ok(None);
        }
        let mut prev_end = self.next().end;
        let mut start = None;
        let mut end = prev_end;
        let mut depth = 0usize;
        loop {
            let token = self.peek();
            let gap = self.sql.get(prev_end..token.start).unwrap_or_default();
            if let Some(at) = gap.iter().position(|&b| !crate::sql::lexer::is_space(b)) {
                return Err(ErrorAt {
                    offset: prev_end + at,
                    line: token.line,
                });
            }
            match token.kind {
                TokenKind::Eof | TokenKind::Punct(b';') => {
                    if start.is_none() || depth != 0 {
                        return Err(token.into());
                    }
                    break;
                }
                TokenKind::Invalid => return Err(token.into()),
                TokenKind::Punct(b'(') => depth += 1,
                TokenKind::Punct(b')') => {
                    depth = depth.checked_sub(1).ok_or(ErrorAt::from(token))?;
                }
                _ => {}
            }
            self.next();
            start.get_or_insert(token.start);
            end = token.end;
            prev_end = token.end;
        }
        let start = start.unwrap_or(end);
        let bytes = self.sql.get(start..end).unwrap_or_default();
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(Some(text.to_string())),
            Err(e) => Err(ErrorAt {
                offset: start + e.valid_up_to(),
                line: after.line,
            }),
        }
    }

    /// An unsigned number of seconds, at most [`MAX_SECONDS`].
    fn seconds(&mut self) -> Result<Seconds, ErrorAt> {
        let token = self.next();
        if token.kind != TokenKind::Number {
            return Err(token.into());
        }
        let secs: f64 = self
            .text(token)?
            .parse()
            .map_err(|_| ErrorAt::from(token))?;
        if !secs.is_finite() || !(0.0..=MAX_SECONDS).contains(&secs) {
            return Err(token.into());
        }
        Ok(Seconds {
            nanos: (secs * 1e9).round() as i64,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::sql::{parse_virtual, AckId, TableName, VirtualStatement};

    use super::Seconds;

    fn t(name: &str) -> TableName {
        TableName {
            schema: None,
            name: name.into(),
        }
    }

    fn n(id: &str) -> AckId {
        AckId::Literal(id.into())
    }

    #[test]
    fn the_statements_parse() {
        assert_eq!(
            parse_virtual(b"NACK q 1, 2"),
            Ok(VirtualStatement::Nack {
                table: t("q"),
                ids: vec![n("1"), n("2")],
                delay: None
            })
        );
        assert_eq!(
            parse_virtual(b"nack q 1 delay 1.5;"),
            Ok(VirtualStatement::Nack {
                table: t("q"),
                ids: vec![n("1")],
                delay: Some(Seconds {
                    nanos: 1_500_000_000
                })
            })
        );
        assert_eq!(
            parse_virtual(b"EXTEND q 3 BY 60"),
            Ok(VirtualStatement::Extend {
                table: t("q"),
                ids: vec![n("3")],
                by: Seconds {
                    nanos: 60_000_000_000
                }
            })
        );
        assert_eq!(
            parse_virtual(b"REDRIVE q"),
            Ok(VirtualStatement::Redrive {
                table: t("q"),
                ids: vec![]
            })
        );
        assert_eq!(
            parse_virtual(b"REDRIVE q 'a', 7;"),
            Ok(VirtualStatement::Redrive {
                table: t("q"),
                ids: vec![
                    AckId::String {
                        written: "'a'".into(),
                        value: b"a".to_vec()
                    },
                    n("7")
                ]
            })
        );
    }

    #[test]
    fn streams_that_choose() {
        assert_eq!(
            parse_virtual(b"STREAM id, `pay load` FROM q WHERE topic = 'a;b' AND (t IN (1, 2));"),
            Ok(VirtualStatement::Stream {
                table: t("q"),
                columns: Some(vec!["id".into(), "pay load".into()]),
                condition: Some("topic = 'a;b' AND (t IN (1, 2))".into()),
            })
        );
        assert_eq!(
            parse_virtual(b"STREAM * FROM q"),
            Ok(VirtualStatement::Stream {
                table: t("q"),
                columns: None,
                condition: None,
            })
        );
    }

    #[test]
    fn errors_say_what_the_statement_expects() {
        for (sql, near, usage) in [
            ("NACK q", "", "NACK table id[, id ...] [DELAY seconds]"),
            (
                "NACK q 1 DELAY -1",
                "-1",
                "NACK table id[, id ...] [DELAY seconds]",
            ),
            (
                "NACK q 1 DELAY 1e40",
                "1e40",
                "NACK table id[, id ...] [DELAY seconds]",
            ),
            ("EXTEND q 1", "", "EXTEND table id[, id ...] BY seconds"),
            (
                "EXTEND q 1 BY x",
                "x",
                "EXTEND table id[, id ...] BY seconds",
            ),
            ("REDRIVE q 1,", "", "REDRIVE table [id[, id ...]]"),
            ("ACK q abc", "abc", "ACK table id[, id ...]"),
            (
                "STREAM x FROM q WHERE (a",
                "",
                "STREAM {* | column[, column ...]} FROM table [WHERE condition]",
            ),
            (
                "STREAM * FROM q WHERE a) OR (b",
                ") OR (b",
                "STREAM {* | column[, column ...]} FROM table [WHERE condition]",
            ),
            (
                "STREAM * FROM q WHERE a /*!99999 ) */",
                "/*!99999 ) */",
                "STREAM {* | column[, column ...]} FROM table [WHERE condition]",
            ),
            (
                "STREAM * FROM q WHERE a = 1; DROP TABLE q",
                "DROP TABLE q",
                "STREAM {* | column[, column ...]} FROM table [WHERE condition]",
            ),
        ] {
            let e = parse_virtual(sql.as_bytes()).unwrap_err();
            assert_eq!((e.near.as_str(), e.expects), (near, Some(usage)), "{sql}");
            assert_eq!(
                e.message(),
                format!(
                    "You have an error in your SQL syntax; msgproxy expects {usage}; check the \
                     statement near '{near}' at line 1"
                )
            );
        }
    }
}
