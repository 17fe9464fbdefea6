//! A text-protocol result set sent to the client while it is being made (a message `STREAM`): its framing,
//! and what the session that owns the client connection must offer to send it.
//!
//! [`StreamedResult`] turns column definitions, rows and the end (EOF/OK, or an error) into packets with the
//! right sequence ids, and keeps them until they are taken; it does no I/O. The producer (the message stream)
//! fills it and hands what it took to a [`ResultClient`], which the session implements on its connection.

use std::future::Future;

use bytes::BytesMut;

use super::packet::encode_packet;
use super::wire::{self, put_lenenc_int};

/// The packets of one result set, framed and waiting to be sent.
pub struct StreamedResult {
    /// The sequence id of the next packet.
    seq: u8,
    /// The client asked for `CLIENT_DEPRECATE_EOF`: no EOF after the column definitions, and an OK packet
    /// (with the EOF header) at the end.
    deprecate_eof: bool,
    out: BytesMut,
}

impl StreamedResult {
    /// A result whose first packet has sequence id `first_seq` (the one after the client's statement).
    pub fn new(first_seq: u8, deprecate_eof: bool) -> Self {
        StreamedResult {
            seq: first_seq,
            deprecate_eof,
            out: BytesMut::new(),
        }
    }

    /// The column count, the definitions `columns` (as the server sent them), and, without
    /// `CLIENT_DEPRECATE_EOF`, the EOF packet that closes them with the server `status` flags.
    pub fn columns(&mut self, columns: &[BytesMut], status: u16) {
        let mut count = BytesMut::new();
        put_lenenc_int(&mut count, columns.len() as u64);
        self.packet(&count);
        for column in columns {
            self.packet(column);
        }
        if !self.deprecate_eof {
            self.packet(&eof_payload(status, 0));
        }
    }

    /// One row, as a text-protocol row payload.
    pub fn row(&mut self, payload: &[u8]) {
        self.packet(payload);
    }

    /// Ends the result with an ERR packet (its encoded payload).
    pub fn error(&mut self, payload: &[u8]) {
        self.packet(payload);
    }

    /// Ends the result normally: an EOF packet, or under `CLIENT_DEPRECATE_EOF` an OK packet with the EOF
    /// header.
    pub fn end(&mut self, status: u16, warnings: u16) {
        if self.deprecate_eof {
            let mut ok = wire::ok_packet(0, 0, status, warnings);
            ok[0] = wire::EOF_HEADER;
            self.packet(&ok);
        } else {
            self.packet(&eof_payload(status, warnings));
        }
    }

    /// The sequence id the client expects next: where a packet that continues the result (the
    /// session's error after a lost backend) starts.
    pub fn next_seq(&self) -> u8 {
        self.seq
    }

    /// Nothing is waiting to be sent.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// The packets framed since the last call, to be sent in this order.
    pub fn take(&mut self) -> BytesMut {
        self.out.split()
    }

    fn packet(&mut self, payload: &[u8]) {
        self.seq = encode_packet(&mut self.out, self.seq, payload);
    }
}

fn eof_payload(status: u16, warnings: u16) -> [u8; 5] {
    let [w0, w1] = warnings.to_le_bytes();
    let [s0, s1] = status.to_le_bytes();
    [wire::EOF_HEADER, w0, w1, s0, s1]
}

/// The client connection a streamed result goes to, as the session offers it.
pub trait ResultClient {
    /// Writes `packets` (framed by a [`StreamedResult`]) and flushes them.
    fn send(&mut self, packets: &[u8]) -> impl Future<Output = std::io::Result<()>>;

    /// Completes when the client sends anything or goes away: a client reading a streamed result sends
    /// nothing, so either way it is done with the result. Cancel-safe (it is raced against the producer's
    /// other work).
    fn left(&mut self) -> impl Future<Output = ()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::packet::parse_header;

    /// (sequence id, payload) of each packet in `bytes`.
    fn packets(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut found = Vec::new();
        while !bytes.is_empty() {
            let (len, seq) = parse_header(bytes);
            found.push((seq, bytes[4..4 + len].to_vec()));
            bytes = &bytes[4 + len..];
        }
        found
    }

    fn two_columns() -> Vec<BytesMut> {
        vec![
            BytesMut::from(&b"def-id"[..]),
            BytesMut::from(&b"def-payload"[..]),
        ]
    }

    #[test]
    fn column_definitions_end_with_eof_unless_deprecated() {
        let mut classic = StreamedResult::new(1, false);
        classic.columns(&two_columns(), 0x0002);
        assert_eq!(
            packets(&classic.take()),
            vec![
                (1, vec![2]),
                (2, b"def-id".to_vec()),
                (3, b"def-payload".to_vec()),
                (4, vec![0xFE, 0, 0, 0x02, 0]),
            ]
        );
        assert_eq!(classic.next_seq(), 5);

        let mut deprecated = StreamedResult::new(1, true);
        deprecated.columns(&two_columns(), 0x0002);
        assert_eq!(packets(&deprecated.take()).len(), 3);
        assert_eq!(deprecated.next_seq(), 4);
    }

    #[test]
    fn rows_and_the_error_continue_the_sequence_across_takes() {
        let mut result = StreamedResult::new(1, true);
        result.columns(&two_columns(), 0);
        result.take();
        assert!(result.is_empty());
        result.row(b"\x011\x01a");
        result.row(b"\x012\x01b");
        let rows = packets(&result.take());
        assert_eq!(
            rows,
            vec![(4, b"\x011\x01a".to_vec()), (5, b"\x012\x01b".to_vec())]
        );
        result.error(b"\xffERR");
        assert_eq!(packets(&result.take()), vec![(6, b"\xffERR".to_vec())]);
        assert_eq!(result.next_seq(), 7);
    }

    #[test]
    fn the_end_is_eof_or_an_ok_with_the_eof_header() {
        let mut classic = StreamedResult::new(9, false);
        classic.end(0x0022, 3);
        assert_eq!(
            packets(&classic.take()),
            vec![(9, vec![0xFE, 3, 0, 0x22, 0])]
        );

        let mut deprecated = StreamedResult::new(9, true);
        deprecated.end(0x0022, 3);
        let ok = packets(&deprecated.take());
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].1[0], 0xFE);
        assert_eq!(ok[0].1[1..], wire::ok_packet(0, 0, 0x0022, 3)[1..]);
    }

    #[test]
    fn the_sequence_id_wraps_after_255() {
        let mut result = StreamedResult::new(255, true);
        result.row(b"a");
        result.row(b"b");
        assert_eq!(
            packets(&result.take()),
            vec![(255, b"a".to_vec()), (0, b"b".to_vec())]
        );
    }
}
