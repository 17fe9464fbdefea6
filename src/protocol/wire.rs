//! Small pieces of the wire format: length-encoded integers and strings, and the OK / ERR / EOF
//! packets the proxy writes itself or needs to look into.

use bytes::{BufMut, BytesMut};

/// First payload byte of an OK packet.
pub const OK_HEADER: u8 = 0x00;
/// First payload byte of an EOF packet (and of the OK packet that replaces it with DEPRECATE_EOF).
pub const EOF_HEADER: u8 = 0xFE;
/// First payload byte of an ERR packet.
pub const ERR_HEADER: u8 = 0xFF;
/// First payload byte of a LOCAL INFILE request.
pub const LOCAL_INFILE_HEADER: u8 = 0xFB;

/// A cursor over a payload that never panics: every read returns `None` past the end.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub fn remaining(&self) -> &'a [u8] {
        self.buf
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.buf.split_first()?;
        self.buf = rest;
        Some(b)
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Some(head)
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A length-encoded integer. `0xFB` (NULL) and `0xFF` are not integers and give `None`.
    pub fn lenenc_int(&mut self) -> Option<u64> {
        match self.u8()? {
            n @ 0..=0xFA => Some(n as u64),
            0xFC => self.uint_le(2),
            0xFD => self.uint_le(3),
            0xFE => self.uint_le(8),
            _ => None,
        }
    }

    fn uint_le(&mut self, n: usize) -> Option<u64> {
        let b = self.bytes(n)?;
        Some(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64))
    }

    pub fn lenenc_bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.lenenc_int()?;
        self.bytes(usize::try_from(n).ok()?)
    }

    /// Bytes up to a NUL (consumed, not returned); `None` if there is no NUL.
    pub fn null_terminated(&mut self) -> Option<&'a [u8]> {
        let pos = self.buf.iter().position(|&b| b == 0)?;
        let s = &self.buf[..pos];
        self.buf = &self.buf[pos + 1..];
        Some(s)
    }

    /// Bytes up to a NUL, or all that is left when there is none (MySQL tolerates both).
    pub fn null_terminated_or_rest(&mut self) -> &'a [u8] {
        match self.null_terminated() {
            Some(s) => s,
            None => std::mem::take(&mut self.buf),
        }
    }
}

pub fn put_lenenc_int(out: &mut BytesMut, n: u64) {
    match n {
        0..=0xFA => out.put_u8(n as u8),
        0xFB..=0xFFFF => {
            out.put_u8(0xFC);
            out.put_u16_le(n as u16);
        }
        0x1_0000..=0xFF_FFFF => {
            out.put_u8(0xFD);
            out.put_uint_le(n, 3);
        }
        _ => {
            out.put_u8(0xFE);
            out.put_u64_le(n);
        }
    }
}

pub fn put_lenenc_bytes(out: &mut BytesMut, b: &[u8]) {
    put_lenenc_int(out, b.len() as u64);
    out.put_slice(b);
}

/// An error the proxy sends on its own account (server errors are relayed as they are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPacket {
    pub code: u16,
    pub sql_state: [u8; 5],
    pub message: String,
}

impl ErrorPacket {
    pub fn new(code: u16, sql_state: &str, message: impl Into<String>) -> Self {
        let mut state = *b"HY000";
        if sql_state.len() == 5 {
            state.copy_from_slice(sql_state.as_bytes());
        }
        ErrorPacket {
            code,
            sql_state: state,
            message: message.into(),
        }
    }

    /// Encodes the payload. `with_sql_state` is false only before the handshake has agreed on
    /// the 4.1 protocol (an error sent instead of the greeting carries no SQLSTATE).
    pub fn encode(&self, with_sql_state: bool) -> BytesMut {
        let mut out = BytesMut::with_capacity(9 + self.message.len());
        out.put_u8(ERR_HEADER);
        out.put_u16_le(self.code);
        if with_sql_state {
            out.put_u8(b'#');
            out.put_slice(&self.sql_state);
        }
        out.put_slice(self.message.as_bytes());
        out
    }

    /// Parses an ERR payload (with SQLSTATE, as sent after a 4.1 handshake).
    pub fn parse(payload: &[u8]) -> Option<ErrorPacket> {
        let mut r = Reader::new(payload);
        if r.u8()? != ERR_HEADER {
            return None;
        }
        let code = r.u16()?;
        let mut state = *b"HY000";
        if r.remaining().first() == Some(&b'#') {
            r.u8();
            state.copy_from_slice(r.bytes(5)?);
        }
        Some(ErrorPacket {
            code,
            sql_state: state,
            message: String::from_utf8_lossy(r.remaining()).into_owned(),
        })
    }
}

impl std::fmt::Display for ErrorPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ERROR {} ({}): {}",
            self.code,
            String::from_utf8_lossy(&self.sql_state),
            self.message
        )
    }
}

/// Encodes a plain OK packet payload (protocol 4.1, no session-state information).
pub fn ok_packet(affected_rows: u64, last_insert_id: u64, status: u16, warnings: u16) -> BytesMut {
    let mut out = BytesMut::with_capacity(11);
    out.put_u8(OK_HEADER);
    put_lenenc_int(&mut out, affected_rows);
    put_lenenc_int(&mut out, last_insert_id);
    out.put_u16_le(status);
    out.put_u16_le(warnings);
    out
}

/// The server status flags carried by an OK packet, or by an EOF packet / the OK packet that
/// ends a result set (header 0xFE). `None` when the payload is not one of those.
pub fn status_flags(payload: &[u8]) -> Option<u16> {
    let mut r = Reader::new(payload);
    match r.u8()? {
        EOF_HEADER if payload.len() == 5 => {
            // Classic EOF: warnings (2), status (2). The OK packet that replaces it under
            // DEPRECATE_EOF is at least 7 bytes long.
            r.u16()?;
            r.u16()
        }
        OK_HEADER | EOF_HEADER => {
            r.lenenc_int()?;
            r.lenenc_int()?;
            r.u16()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenenc_round_trip() {
        for n in [
            0u64,
            250,
            251,
            65535,
            65536,
            0xFF_FFFF,
            0x100_0000,
            u64::MAX,
        ] {
            let mut out = BytesMut::new();
            put_lenenc_int(&mut out, n);
            assert_eq!(Reader::new(&out).lenenc_int(), Some(n), "{n}");
        }
    }

    #[test]
    fn reader_never_panics_on_short_input() {
        let mut r = Reader::new(&[0xFE, 1, 2]);
        assert_eq!(r.lenenc_int(), None);
        assert_eq!(Reader::new(&[]).u32(), None);
        assert_eq!(Reader::new(&[1, 2, 3]).null_terminated(), None);
    }

    #[test]
    fn error_packet_round_trip() {
        let e = ErrorPacket::new(1045, "28000", "Access denied");
        assert_eq!(ErrorPacket::parse(&e.encode(true)), Some(e));
    }

    #[test]
    fn status_of_ok_and_eof() {
        let ok = ok_packet(3, 7, 0x0002, 1);
        assert_eq!(status_flags(&ok), Some(0x0002));
        assert_eq!(status_flags(&[0xFE, 0, 0, 0x0A, 0]), Some(0x000A));
        // DEPRECATE_EOF: an OK packet with the EOF header.
        assert_eq!(status_flags(&[0xFE, 0, 0, 0x08, 0, 0, 0]), Some(0x0008));
        assert_eq!(status_flags(&[0xFF, 1, 2]), None);
    }
}

/// Splits a text-protocol row into its values (`None` for SQL NULL). `None` if malformed.
pub fn text_row_values(payload: &[u8]) -> Option<Vec<Option<&[u8]>>> {
    let mut r = Reader::new(payload);
    let mut values = Vec::new();
    while !r.is_empty() {
        if r.remaining().first() == Some(&0xFB) {
            r.u8();
            values.push(None);
        } else {
            values.push(Some(r.lenenc_bytes()?));
        }
    }
    Some(values)
}

/// The length of the first `n` values of a text-protocol row, so the rest can be cut off.
pub fn text_row_prefix_len(payload: &[u8], n: usize) -> Option<usize> {
    let mut r = Reader::new(payload);
    for _ in 0..n {
        if r.remaining().first() == Some(&0xFB) {
            r.u8();
        } else {
            r.lenenc_bytes()?;
        }
    }
    Some(payload.len() - r.remaining().len())
}

/// A text-protocol row split after its first `n` values: their length, and the values after
/// them. One pass over the row, for a caller that needs both.
pub fn text_row_split(payload: &[u8], n: usize) -> Option<(usize, Vec<Option<&[u8]>>)> {
    let prefix = text_row_prefix_len(payload, n)?;
    let rest = text_row_values(&payload[prefix..])?;
    Some((prefix, rest))
}

#[cfg(test)]
mod row_tests {
    use super::*;

    #[test]
    fn splits_rows_with_nulls() {
        let mut row = BytesMut::new();
        put_lenenc_bytes(&mut row, b"12");
        row.put_u8(0xFB);
        put_lenenc_bytes(&mut row, b"abc");
        let values = text_row_values(&row).unwrap();
        assert_eq!(values, vec![Some(&b"12"[..]), None, Some(&b"abc"[..])]);
        assert_eq!(text_row_prefix_len(&row, 2), Some(4));
        assert_eq!(text_row_split(&row, 2), Some((4, vec![Some(&b"abc"[..])])));
        assert_eq!(text_row_split(&row, 3), Some((row.len(), vec![])));
        assert_eq!(text_row_split(&row, 4), None);
        assert_eq!(text_row_values(&row[..row.len() - 1]), None);
    }
}
