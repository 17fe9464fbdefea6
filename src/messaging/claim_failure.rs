//! When a claim statement fails (`stream`'s claim, or a filtered stream's find): the transaction is rolled
//! back, and the server's error decides whether the stream ends or only this batch is lost.

use bytes::BytesMut;
use tracing::{debug, warn};

use crate::backend::{Backend, BackendError};
use crate::protocol::wire::ErrorPacket;

/// How a claim abandons its transaction. Spelled out so that the session's `completion_type`
/// (which the client may have set to chain a new transaction, or to disconnect) does not apply.
pub(super) const ROLLBACK: &str = "ROLLBACK AND NO CHAIN NO RELEASE";

/// Why one batch could not be claimed.
pub(super) enum BatchError {
    Backend(BackendError),
    /// The server rejected a claim statement in a way that will not get better (a column is
    /// gone, the table is gone): end the stream with that error.
    Fatal(BytesMut),
    /// The claim failed for a passing reason (lock wait timeout, deadlock): nothing to tell the
    /// client; the rows come back through the poller.
    Transient,
}

/// Rolls back after a failed claim statement. Errors about the table's shape end the stream;
/// others (lock wait timeout, deadlock) only cost this batch, whose rows come back later.
pub(super) async fn rollback_after(
    backend: &mut Backend,
    deprecate_eof: bool,
    err: BytesMut,
) -> BatchError {
    if let Err(e) = backend.query(ROLLBACK, deprecate_eof).await {
        return BatchError::Backend(e);
    }
    let parsed = ErrorPacket::parse(&err);
    match parsed.as_ref().map(|e| e.code) {
        // ER_BAD_FIELD_ERROR, ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR, ER_TABLEACCESS_DENIED_ERROR;
        // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION (the session is READ ONLY) and
        // ER_OPTION_PREVENTS_STATEMENT (the server is `read_only`): this session cannot claim.
        Some(1054 | 1146 | 1049 | 1142 | 1792 | 1290) => BatchError::Fatal(err),
        // ER_LOCK_DEADLOCK: on Galera, also a claim that lost certification to another node's
        // claim or ack of the same rows (both locked them, each on its own node: SKIP LOCKED
        // is local). The COMMIT failed, so nothing was claimed and nothing is sent; with two
        // proxies on two nodes this is ordinary, not worth a warning.
        Some(1213) => {
            debug!(
                "claim lost a write conflict (deadlock or Galera certification); nothing was sent"
            );
            BatchError::Transient
        }
        _ => {
            if let Some(e) = parsed {
                warn!("claim failed, the batch will be retried: {e}");
            }
            BatchError::Transient
        }
    }
}
