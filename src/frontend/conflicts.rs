//! msgproxy's own writes on a session's connection (ACK, NACK, EXTEND, REDRIVE) against a
//! server that may refuse them for a conflict: on Galera, a write that loses certification to
//! another node's (two proxies on two nodes acking or claiming the same rows) fails with 1213
//! at commit, and InnoDB's deadlocks fail the same way. Outside the client's transaction the
//! statement is the whole transaction and rolled back whole, so it is run again, a few times,
//! before the client sees the error; inside it, the server's error goes to the client, whose
//! transaction it rolled back.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use super::session::{Session, SessionEnd};

/// ER_LOCK_DEADLOCK: a deadlock, or a Galera certification failure.
pub const ER_LOCK_DEADLOCK: u16 = 1213;

/// Runs after the first failure; the client gets the last error after these.
pub const CONFLICT_RETRIES: u32 = 3;

/// The pause before retry `n` (from 1): a few milliseconds, growing, so that two proxies that
/// collided do not collide again in step.
pub fn conflict_pause(n: u32) -> Duration {
    let base = 5u64 << n.min(6);
    Duration::from_millis(base + rand::random::<u64>() % base)
}

/// The error code of a response that is one ERR packet (with its 4-byte header), if it is.
pub fn error_code(response: &[u8]) -> Option<u16> {
    match response {
        [_, _, _, _, 0xFF, lo, hi, ..] => Some(u16::from_le_bytes([*lo, *hi])),
        _ => None,
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// Sends `sql` and relays its answer but for its end, which is returned (as
    /// [`Session::forward_results_holding_end`]); a conflict outside a transaction of the
    /// client's is retried first.
    pub(super) async fn run_retrying_conflicts(
        &mut self,
        sql: &[u8],
    ) -> Result<bytes::BytesMut, SessionEnd> {
        let own_transaction = !self.relay.in_transaction();
        let first_seq = self.relay.next_seq;
        let mut retries = 0;
        loop {
            self.send_statement(sql).await?;
            let end = self.forward_results_holding_end().await?;
            if !own_transaction
                || retries >= CONFLICT_RETRIES
                || error_code(&end) != Some(ER_LOCK_DEADLOCK)
            {
                return Ok(end);
            }
            retries += 1;
            debug!(
                retries,
                "a message statement lost a write conflict; running it again"
            );
            // The held error never reached the client: the next answer takes its place.
            self.relay.next_seq = first_seq;
            tokio::time::sleep(conflict_pause(retries)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_of_err_packets_only() {
        let err =
            crate::protocol::wire::ErrorPacket::new(1213, "40001", "Deadlock found").encode(true);
        let mut packet = vec![err.len() as u8, 0, 0, 1];
        packet.extend_from_slice(&err);
        assert_eq!(error_code(&packet), Some(1213));
        assert_eq!(error_code(&[7, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]), None);
        assert_eq!(error_code(&[]), None);
    }

    #[test]
    fn pauses_are_short_and_grow() {
        for n in 1..=CONFLICT_RETRIES {
            let p = conflict_pause(n);
            assert!(p >= Duration::from_millis(5 << n) && p < Duration::from_millis(10 << n));
        }
    }
}
