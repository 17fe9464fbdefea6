//! XA transactions in the binlog: their XIDs, read from the events and statements the server
//! writes, and the message tables of each transaction prepared and not yet committed.
//!
//! An XA transaction's rows are written at `XA PREPARE`, in a group that ends with an
//! XA_PREPARE_LOG_EVENT; `XA COMMIT` or `XA ROLLBACK` follows in a group of its own, possibly
//! much later and after other transactions were prepared. MariaDB 10.11 writes (checked with
//! `mariadb-binlog --hexdump` and `SHOW BINLOG EVENTS`):
//!
//! - the prepare event's body: `one_phase` (1 byte), formatID (4, little-endian),
//!   gtrid length (4), bqual length (4), then gtrid and bqual;
//! - the commit as a query event `XA COMMIT X'616263',X'',1` (gtrid and bqual in lower-case
//!   hex, then formatID), whatever form the client used; likewise `XA ROLLBACK` and `XA END`;
//! - `XA COMMIT ... ONE PHASE` as an ordinary `BEGIN` ... XID group. MySQL writes it as the
//!   rows followed by a prepare event with `one_phase` set, which is a commit.
//!
//! [`Xid`] is what both forms read to, so the commit finds its prepare.

use std::collections::HashMap;

use tracing::warn;

use super::follow::TableHandle;
use super::statement::after_words;

/// Prepared XA transactions remembered at most. Beyond it the oldest is forgotten; its commit
/// then finds no entry and polls every message table, like the commit of one prepared before
/// the follower started.
pub const MAX_PREPARED_XIDS: usize = 1024;

/// An XA transaction id as the server keeps it: formatID, gtrid, bqual (bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Xid {
    pub format_id: u32,
    pub gtrid: Vec<u8>,
    pub bqual: Vec<u8>,
}

/// An XA_PREPARE_LOG_EVENT, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XaPrepare {
    /// MySQL's `XA COMMIT ... ONE PHASE`: the transaction commits here.
    pub one_phase: bool,
    pub xid: Xid,
}

impl XaPrepare {
    /// Reads the event's body (bytes after the lengths, such as a checksum, are ignored).
    pub fn read(body: &[u8]) -> Option<XaPrepare> {
        let u32_at = |at: usize| {
            body.get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let one_phase = *body.first()? != 0;
        let format_id = u32_at(1)?;
        let gtrid_len = usize::try_from(u32_at(5)?).ok()?;
        let bqual_len = usize::try_from(u32_at(9)?).ok()?;
        let gtrid_end = 13usize.checked_add(gtrid_len)?;
        let gtrid = body.get(13..gtrid_end)?.to_vec();
        let bqual = body
            .get(gtrid_end..gtrid_end.checked_add(bqual_len)?)?
            .to_vec();
        Some(XaPrepare {
            one_phase,
            xid: Xid {
                format_id,
                gtrid,
                bqual,
            },
        })
    }
}

impl Xid {
    /// The XID an `XA PREPARE`/`COMMIT`/`ROLLBACK`/`END` statement names: `gtrid[, bqual[,
    /// formatID]]`, each string a hex literal (`X'..'`, `0x..`) or a quoted string, formatID a
    /// decimal or `0x` number (bqual defaults to empty, formatID to 1, as in the server).
    /// `None` for anything else, e.g. a string with a backslash, whose meaning depends on the
    /// writer's `sql_mode`: the caller must then assume nothing about which XID it was.
    pub fn from_statement(sql: &[u8]) -> Option<Xid> {
        let mut p = Parser {
            s: after_words(sql, 2),
        };
        let gtrid = p.string()?;
        let mut xid = Xid {
            format_id: 1,
            gtrid,
            bqual: Vec::new(),
        };
        if p.comma() {
            xid.bqual = p.string()?;
            if p.comma() {
                xid.format_id = p.number()?;
            }
        }
        p.at_end_of_xid().then_some(xid)
    }
}

/// Whether an `XA COMMIT` statement ends in `ONE PHASE` (its transaction was never prepared).
pub fn is_one_phase(sql: &[u8]) -> bool {
    let words: Vec<&[u8]> = sql
        .split(|b| b.is_ascii_whitespace() || *b == b';')
        .filter(|w| !w.is_empty())
        .collect();
    matches!(words.as_slice(), [.., one, phase]
        if one.eq_ignore_ascii_case(b"ONE") && phase.eq_ignore_ascii_case(b"PHASE"))
}

/// Reads an XID's parts off the front of `s`.
struct Parser<'a> {
    s: &'a [u8],
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while let Some((b, rest)) = self.s.split_first() {
            if !b.is_ascii_whitespace() {
                break;
            }
            self.s = rest;
        }
    }

    /// Takes a comma and the white space around it, if one is next.
    fn comma(&mut self) -> bool {
        let before = self.s;
        self.skip_space();
        match self.s.split_first() {
            Some((b',', rest)) => {
                self.s = rest;
                self.skip_space();
                true
            }
            _ => {
                self.s = before;
                false
            }
        }
    }

    /// Nothing, or a word (`ONE PHASE`, `SUSPEND`), or the end of the statement follows.
    fn at_end_of_xid(&self) -> bool {
        match self.s.first() {
            None => true,
            Some(b) => b.is_ascii_whitespace() || *b == b';',
        }
    }

    fn string(&mut self) -> Option<Vec<u8>> {
        match self.s {
            [b'x' | b'X', b'\'', rest @ ..] => {
                let end = rest.iter().position(|b| *b == b'\'')?;
                let digits = &rest[..end];
                self.s = &rest[end + 1..];
                // X'...' must have whole bytes (the server refuses an odd count).
                if digits.len() % 2 != 0 {
                    return None;
                }
                hex(digits)
            }
            [b'0', b'x', rest @ ..] => {
                let end = rest
                    .iter()
                    .position(|b| !b.is_ascii_hexdigit())
                    .unwrap_or(rest.len());
                let digits = &rest[..end];
                self.s = &rest[end..];
                if digits.is_empty() {
                    return None;
                }
                // 0x... with an odd count is read with a leading zero.
                let padded: Vec<u8> = std::iter::repeat_n(b'0', digits.len() % 2)
                    .chain(digits.iter().copied())
                    .collect();
                hex(&padded)
            }
            [q @ (b'\'' | b'"'), rest @ ..] => {
                let (value, left) = quoted(rest, *q)?;
                self.s = left;
                Some(value)
            }
            _ => None,
        }
    }

    fn number(&mut self) -> Option<u32> {
        let (digits, radix) = match self.s {
            [b'0', b'x', rest @ ..] => (rest, 16),
            _ => (self.s, 10),
        };
        let end = digits
            .iter()
            .position(|b| !char::from(*b).is_digit(radix))
            .unwrap_or(digits.len());
        let text = std::str::from_utf8(&digits[..end]).ok()?;
        let n = u32::from_str_radix(text, radix).ok()?;
        self.s = &digits[end..];
        Some(n)
    }
}

/// Hex digits to bytes (`None` if one is not a digit).
fn hex(digits: &[u8]) -> Option<Vec<u8>> {
    let nibble = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    digits
        .chunks(2)
        .map(|pair| match pair {
            [hi, lo] => Some((nibble(*hi)? << 4) | nibble(*lo)?),
            _ => None,
        })
        .collect()
}

/// A string's content up to its closing quote `q` (a doubled quote is one quote), and what
/// follows it. `None` if it is unterminated or holds a backslash.
fn quoted(s: &[u8], q: u8) -> Option<(Vec<u8>, &[u8])> {
    let mut value = Vec::new();
    let mut i = 0;
    loop {
        match *s.get(i)? {
            b'\\' => return None,
            b if b == q => {
                if s.get(i + 1) == Some(&q) {
                    value.push(q);
                    i += 2;
                } else {
                    return Some((value, &s[i + 1..]));
                }
            }
            b => {
                value.push(b);
                i += 1;
            }
        }
    }
}

/// The prepared XA transactions this follower saw, with the message tables each touched
/// (possibly none: its commit then polls nothing).
pub struct Prepared<T> {
    /// Each with its order of preparation, to forget the oldest when full.
    by_xid: HashMap<Xid, (u64, Vec<T>)>,
    next: u64,
    /// Whether forgetting one was logged (once is enough to explain the polls).
    told: bool,
}

impl<T> Default for Prepared<T> {
    fn default() -> Prepared<T> {
        Prepared {
            by_xid: HashMap::new(),
            next: 0,
            told: false,
        }
    }
}

impl<T: TableHandle> Prepared<T> {
    /// `xid` was prepared, having touched `tables`.
    pub fn prepared(&mut self, xid: Xid, tables: Vec<T>) {
        if let Some((_, known)) = self.by_xid.get_mut(&xid) {
            // Not expected (the server refuses a duplicate XID), unless its commit was not
            // recognised: polling the old tables too is merely generous.
            for t in tables {
                if !known.iter().any(|k| k.same(&t)) {
                    known.push(t);
                }
            }
            return;
        }
        if self.by_xid.len() >= MAX_PREPARED_XIDS {
            self.forget_oldest();
        }
        self.by_xid.insert(xid, (self.next, tables));
        self.next += 1;
    }

    /// `xid` committed or rolled back: its tables, or `None` if it is not known here (prepared
    /// before this follower started, or forgotten).
    pub fn finished(&mut self, xid: &Xid) -> Option<Vec<T>> {
        self.by_xid.remove(xid).map(|(_, tables)| tables)
    }

    /// A scan, but only when more than [`MAX_PREPARED_XIDS`] are prepared at once.
    fn forget_oldest(&mut self) {
        let Some(oldest) = self
            .by_xid
            .iter()
            .min_by_key(|(_, (seq, _))| *seq)
            .map(|(xid, _)| xid.clone())
        else {
            return;
        };
        self.by_xid.remove(&oldest);
        if !std::mem::replace(&mut self.told, true) {
            warn!(
                "binlog: more than {MAX_PREPARED_XIDS} XA transactions prepared and not \
                 committed; the oldest are forgotten, and their commits poll every message table"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(format_id: u32, gtrid: &[u8], bqual: &[u8]) -> Xid {
        Xid {
            format_id,
            gtrid: gtrid.to_vec(),
            bqual: bqual.to_vec(),
        }
    }

    #[test]
    fn prepare_events_as_mariadb_writes_them() {
        // `XA PREPARE X'01FF', X'bb', 5`, body from `mariadb-binlog --hexdump`.
        let body = [0, 5, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0x01, 0xff, 0xbb];
        assert_eq!(
            XaPrepare::read(&body),
            Some(XaPrepare {
                one_phase: false,
                xid: xid(5, b"\x01\xff", b"\xbb"),
            })
        );
        let mut one_phase = body;
        one_phase[0] = 1;
        assert!(XaPrepare::read(&one_phase).is_some_and(|p| p.one_phase));
        // A checksum left after the XID does not matter.
        let mut with_crc = body.to_vec();
        with_crc.extend_from_slice(&[0xb8, 0xe7, 0xfc, 0xa3]);
        assert_eq!(XaPrepare::read(&with_crc), XaPrepare::read(&body));
        // Short bodies and lengths past the end are unreadable, never a panic.
        for n in 0..body.len() {
            assert_eq!(XaPrepare::read(&body[..n]), None, "{n}");
        }
        let mut huge = body;
        huge[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(XaPrepare::read(&huge), None);
    }

    #[test]
    fn statements_name_the_xid_of_the_prepare_event() {
        let abc = xid(1, b"abc", b"");
        for (sql, want) in [
            // As the server writes them.
            ("XA COMMIT X'616263',X'',1", abc.clone()),
            ("XA ROLLBACK X'01ff',X'bb',5", xid(5, b"\x01\xff", b"\xbb")),
            ("XA END X'61',X'62',7", xid(7, b"a", b"b")),
            (
                "XA COMMIT X'626967',X'78',2147483647",
                xid(2147483647, b"big", b"x"),
            ),
            (
                "XA COMMIT X'6974277320227122',X'',0",
                xid(0, b"it's \"q\"", b""),
            ),
            // As a client may write them.
            ("XA COMMIT 'abc'", abc.clone()),
            ("xa commit \"abc\"", abc.clone()),
            ("XA COMMIT 'abc' ONE PHASE", abc.clone()),
            ("XA PREPARE 'abc' , '' , 1;", abc.clone()),
            ("/* c */ XA COMMIT 'abc'", abc.clone()),
            ("XA COMMIT 'it''s \"q\"','',0", xid(0, b"it's \"q\"", b"")),
            ("XA COMMIT 0x4142, 0x43, 0x10", xid(16, b"AB", b"C")),
            ("XA COMMIT 0x102", xid(1, b"\x01\x02", b"")),
            (
                "XA COMMIT x'C3A9', 'é'",
                xid(1, "é".as_bytes(), "é".as_bytes()),
            ),
        ] {
            assert_eq!(Xid::from_statement(sql.as_bytes()), Some(want), "{sql}");
        }
    }

    #[test]
    fn unreadable_xids_are_none() {
        for sql in [
            "XA COMMIT",
            "XA COMMIT abc",
            "XA COMMIT 'abc",
            "XA COMMIT 'a\\'bc'",
            "XA COMMIT X'616'",
            "XA COMMIT X'6g'",
            "XA COMMIT X'61",
            "XA COMMIT 0x",
            "XA COMMIT 'a',",
            "XA COMMIT 'a','b',",
            "XA COMMIT 'a','b',4294967296",
            "XA COMMIT 'a','b',-1",
            "XA COMMIT 'a''",
            "XA COMMIT 'a'x",
            "XA COMMIT B'0110'",
            "XA COMMIT _utf8mb4'a'",
        ] {
            assert_eq!(Xid::from_statement(sql.as_bytes()), None, "{sql}");
        }
    }

    #[test]
    fn one_phase_commits() {
        assert!(is_one_phase(b"XA COMMIT 'x' ONE PHASE"));
        assert!(is_one_phase(b"xa commit 'x' one  phase;"));
        assert!(!is_one_phase(b"XA COMMIT X'616263',X'',1"));
        assert!(!is_one_phase(b"XA COMMIT 'one phase'"));
        assert!(!is_one_phase(b""));
    }

    #[derive(Clone, Debug, PartialEq)]
    struct H(&'static str);

    impl TableHandle for H {
        fn same(&self, other: &Self) -> bool {
            self == other
        }
    }

    #[test]
    fn the_oldest_is_forgotten_when_full() {
        let mut p = Prepared::default();
        let n = |i: usize| xid(1, i.to_string().as_bytes(), b"");
        for i in 0..MAX_PREPARED_XIDS {
            p.prepared(n(i), vec![H("m")]);
        }
        assert_eq!(p.finished(&n(5)), Some(vec![H("m")]));
        p.prepared(n(5), vec![]);
        p.prepared(n(MAX_PREPARED_XIDS), vec![H("n")]);
        assert_eq!(p.by_xid.len(), MAX_PREPARED_XIDS);
        assert_eq!(p.finished(&n(0)), None, "the oldest is forgotten");
        assert_eq!(p.finished(&n(1)), Some(vec![H("m")]));
        assert_eq!(p.finished(&n(5)), Some(vec![]));
        assert_eq!(p.finished(&n(MAX_PREPARED_XIDS)), Some(vec![H("n")]));
        assert_eq!(p.finished(&n(1)), None, "forgotten at its commit");
    }

    #[test]
    fn a_second_prepare_of_one_xid_adds_its_tables() {
        let mut p = Prepared::default();
        p.prepared(xid(1, b"a", b""), vec![H("m")]);
        p.prepared(xid(1, b"a", b""), vec![H("m"), H("n")]);
        assert_eq!(p.finished(&xid(1, b"a", b"")), Some(vec![H("m"), H("n")]));
    }
}
