//! Packet framing: a 3-byte little-endian payload length, a 1-byte sequence id, then the payload.
//!
//! A logical packet of 16 MiB − 1 bytes or more is split into physical packets of exactly
//! [`MAX_PAYLOAD`] bytes followed by a shorter one (possibly empty). The proxy mostly moves physical
//! packets around unchanged, so this module deals in physical packets and leaves reassembly to the
//! few callers that need a whole logical packet (the handshake).

use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest payload of one physical packet; a payload of exactly this size means "more follows".
pub const MAX_PAYLOAD: usize = 0xFF_FFFF;
/// Size of the packet header.
pub const HEADER_LEN: usize = 4;

/// Reads physical packets from a byte stream through one reusable buffer.
///
/// The buffer is a `BytesMut`, so a packet handed out with [`PacketReader::next_packet`] is split off
/// without copying.
pub struct PacketReader<R> {
    inner: R,
    buf: BytesMut,
    /// Longest wait for more bytes of something already begun (see [`PacketReader::fill_to`]).
    idle_timeout: Option<Duration>,
}

/// One physical packet: its sequence id and payload (the header is not included).
#[derive(Debug)]
pub struct Packet {
    pub seq: u8,
    pub payload: BytesMut,
}

impl Packet {
    /// Whether a further physical packet continues this logical packet.
    pub fn continues(&self) -> bool {
        self.payload.len() == MAX_PAYLOAD
    }
}

impl<R> PacketReader<R> {
    pub fn new(inner: R) -> Self {
        PacketReader {
            inner,
            buf: BytesMut::with_capacity(16 * 1024),
            idle_timeout: None,
        }
    }

    /// Bounds how long [`PacketReader::fill_to`] waits for more bytes once some of what it waits
    /// for has arrived (a packet begun, then silence), like the server's `net_read_timeout`.
    /// Waiting for the first byte of the next packet is not bounded: an idle client is not a
    /// stuck one.
    pub fn set_idle_timeout(&mut self, timeout: Option<Duration>) {
        self.idle_timeout = timeout;
    }

    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// Bytes already read from the stream but not yet consumed.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Gives up the inner stream and whatever was read ahead (needed for the TLS upgrade, where
    /// nothing may have been read ahead).
    pub fn into_parts(self) -> (R, BytesMut) {
        (self.inner, self.buf)
    }

    /// Renumbers the packet whose header starts the buffer (at least [`HEADER_LEN`] bytes must be
    /// buffered, else nothing changes): the relay passes an answer to a statement of the proxy's
    /// own on with the sequence ids of the client's command.
    pub fn set_buffered_seq(&mut self, seq: u8) {
        if let Some(byte) = self.buf.get_mut(HEADER_LEN - 1) {
            *byte = seq;
        }
    }

    /// Takes up to `max` already-buffered bytes (used to stream a large packet through piecewise).
    pub fn take_buffered(&mut self, max: usize) -> BytesMut {
        let n = max.min(self.buf.len());
        self.buf.split_to(n)
    }
}

impl<R: AsyncRead + Unpin> PacketReader<R> {
    /// Reads more bytes into the buffer; `Ok(0)` means the peer closed the stream.
    pub async fn fill(&mut self) -> std::io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(64 * 1024);
        }
        self.inner.read_buf(&mut self.buf).await
    }

    /// Makes sure at least `n` bytes are buffered. Fails with `UnexpectedEof` if the stream ends
    /// first, and with `TimedOut` if, with some bytes already buffered, none arrive within the
    /// idle timeout.
    pub async fn fill_to(&mut self, n: usize) -> std::io::Result<()> {
        while self.buf.len() < n {
            self.buf.reserve(n - self.buf.len());
            let begun = !self.buf.is_empty();
            let read = self.inner.read_buf(&mut self.buf);
            let got = match self.idle_timeout {
                Some(limit) if begun => {
                    tokio::time::timeout(limit, read).await.map_err(|_| {
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("a packet was begun and then nothing came for {limit:?}"),
                        )
                    })??
                }
                _ => read.await?,
            };
            if got == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// The header of the next packet, once at least the header is buffered: (payload length, seq).
    pub async fn peek_header(&mut self) -> std::io::Result<(usize, u8)> {
        self.fill_to(HEADER_LEN).await?;
        Ok(parse_header(&self.buf))
    }

    /// Reads one whole physical packet.
    pub async fn next_packet(&mut self) -> std::io::Result<Packet> {
        let (len, seq) = self.peek_header().await?;
        self.fill_to(HEADER_LEN + len).await?;
        self.buf.advance(HEADER_LEN);
        let payload = self.buf.split_to(len);
        Ok(Packet { seq, payload })
    }

    /// Reads one whole physical packet, header included, as raw bytes ready to forward.
    pub async fn next_raw_packet(&mut self) -> std::io::Result<BytesMut> {
        let (len, _) = self.peek_header().await?;
        self.fill_to(HEADER_LEN + len).await?;
        Ok(self.buf.split_to(HEADER_LEN + len))
    }

    /// Reads a whole logical packet (joining continuation packets); returns the last sequence id.
    ///
    /// `limit` bounds the joined payload, and it is checked against each physical packet's
    /// header before that packet's body is read or buffer space reserved for it: a peer that
    /// announces 16 MiB before logging in gets an error, not 16 MiB of the proxy's memory.
    pub async fn next_logical_packet(&mut self, limit: usize) -> std::io::Result<Packet> {
        let mut joined: Option<Packet> = None;
        loop {
            let (len, _) = self.peek_header().await?;
            let so_far = joined.as_ref().map_or(0, |p| p.payload.len());
            if so_far.saturating_add(len) > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("packet larger than the {limit} bytes allowed here"),
                ));
            }
            let next = self.next_packet().await?;
            let more = next.continues();
            let packet = match joined.take() {
                None => next,
                Some(mut first) => {
                    first.seq = next.seq;
                    first.payload.unsplit(next.payload);
                    first
                }
            };
            if !more {
                return Ok(packet);
            }
            joined = Some(packet);
        }
    }
}

/// Parses a packet header: (payload length, sequence id). `header` must hold at least 4 bytes.
pub fn parse_header(header: &[u8]) -> (usize, u8) {
    let len = header[0] as usize | (header[1] as usize) << 8 | (header[2] as usize) << 16;
    (len, header[3])
}

/// Appends `payload` to `out` as one logical packet (split into physical packets as needed),
/// starting at sequence id `seq`; returns the sequence id that follows.
pub fn encode_packet(out: &mut BytesMut, mut seq: u8, payload: &[u8]) -> u8 {
    let mut rest = payload;
    loop {
        let chunk = rest.len().min(MAX_PAYLOAD);
        out.reserve(HEADER_LEN + chunk);
        out.put_uint_le(chunk as u64, 3);
        out.put_u8(seq);
        out.put_slice(&rest[..chunk]);
        seq = seq.wrapping_add(1);
        rest = &rest[chunk..];
        if chunk < MAX_PAYLOAD {
            return seq;
        }
    }
}

/// Writes `payload` as one logical packet and flushes; returns the next sequence id.
pub async fn write_packet<W: AsyncWrite + Unpin>(
    w: &mut W,
    seq: u8,
    payload: &[u8],
) -> std::io::Result<u8> {
    let mut out = BytesMut::with_capacity(payload.len() + HEADER_LEN);
    let next = encode_packet(&mut out, seq, payload);
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_packets_split_across_reads() {
        let mut wire = BytesMut::new();
        encode_packet(&mut wire, 0, b"hello");
        encode_packet(&mut wire, 1, b"");
        let (client, mut server) = tokio::io::duplex(3);
        let writer = tokio::spawn(async move { server.write_all(&wire).await });
        let mut reader = PacketReader::new(client);
        let p = reader.next_packet().await.unwrap();
        assert_eq!((p.seq, &p.payload[..]), (0, &b"hello"[..]));
        let p = reader.next_packet().await.unwrap();
        assert_eq!((p.seq, p.payload.len()), (1, 0));
        writer.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn logical_packet_limit_is_checked_before_the_body_is_read() {
        // Only the header of an announced 16 MiB packet arrives: the limit must refuse it at
        // once rather than wait for (and buffer) the body.
        let header = [0xff, 0xff, 0xff, 0x01];
        let (client, mut server) = tokio::io::duplex(64);
        server.write_all(&header).await.unwrap();
        let mut reader = PacketReader::new(client);
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            reader.next_logical_packet(64 * 1024),
        )
        .await
        .expect("refused without waiting for the body");
        let err = read.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            reader.buf.capacity() < 1024 * 1024,
            "no room reserved for the body"
        );
        drop(server);

        // A payload of exactly the limit passes; one byte more does not.
        let mut wire = BytesMut::new();
        encode_packet(&mut wire, 0, &[1u8; 100]);
        let mut reader = PacketReader::new(&wire[..]);
        assert_eq!(
            reader.next_logical_packet(100).await.unwrap().payload.len(),
            100
        );
        let mut reader = PacketReader::new(&wire[..]);
        assert!(reader.next_logical_packet(99).await.is_err());
    }

    #[tokio::test]
    async fn a_begun_packet_that_stalls_times_out_an_idle_reader_does_not() {
        let (client, mut server) = tokio::io::duplex(64);
        let mut reader = PacketReader::new(client);
        reader.set_idle_timeout(Some(Duration::from_millis(100)));
        // Nothing sent: waiting for the next packet is not bounded by the idle timeout.
        let idle = tokio::time::timeout(Duration::from_millis(500), reader.peek_header());
        assert!(idle.await.is_err(), "an idle reader keeps waiting");
        // A header announcing 10 bytes, then 3 of them, then silence.
        server.write_all(&[10, 0, 0, 0, 1, 2, 3]).await.unwrap();
        let err = reader.next_packet().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn splits_and_joins_large_packets() {
        let payload = vec![7u8; MAX_PAYLOAD + 10];
        let mut wire = BytesMut::new();
        let next = encode_packet(&mut wire, 3, &payload);
        assert_eq!(next, 5);
        assert_eq!(wire.len(), payload.len() + 2 * HEADER_LEN);
        let mut reader = PacketReader::new(&wire[..]);
        let p = reader.next_logical_packet(usize::MAX).await.unwrap();
        assert_eq!(p.payload.len(), payload.len());
        assert_eq!(p.seq, 4);
    }

    #[tokio::test]
    async fn exact_multiple_gets_an_empty_trailer() {
        let payload = vec![1u8; MAX_PAYLOAD];
        let mut wire = BytesMut::new();
        assert_eq!(encode_packet(&mut wire, 0, &payload), 2);
        assert_eq!(wire.len(), MAX_PAYLOAD + 2 * HEADER_LEN);
    }

    #[tokio::test]
    async fn truncated_stream_is_an_error_not_a_panic() {
        let wire = [5u8, 0, 0, 0, b'a'];
        let mut reader = PacketReader::new(&wire[..]);
        let err = reader.next_packet().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
