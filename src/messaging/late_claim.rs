//! A claim that took too long to commit sends nothing.
//!
//! A claim sets each row's `time_next` from the clock read when it began (MESSAGING.md §5), and
//! only after its `COMMIT` returns do the rows go to the client. Normally that takes
//! milliseconds, and the client has the whole ack window plus the backoff before another
//! stream may claim the row again. A `COMMIT` can take seconds, though: on Galera it waits for
//! the cluster to certify it, and while a node is dying the cluster stops writes for
//! `evs.suspect_timeout`; a lock wait or an overloaded server does the same. Sent after such a
//! commit, a row could be claimed and sent again by another proxy less than one ack wait after
//! this client got it: two deliveries within one ack window, and in a FIFO group two messages
//! of one key in flight at once.
//!
//! So a row whose `time_next` is nearer than [`SHARE_LEFT`] of `vt_ack_wait` when the commit
//! returns is not sent, and comes back to every stream when its `time_next` passes, soon. Its
//! `epoch` is set back ([`give_back_sql`]): an attempt that sent nothing must not count towards
//! `vt_max_attempts`, or a message could die without ever being delivered. The share is below
//! one whole ack wait because with `vt_min_backoff=0` a claim leaves exactly one ack wait, minus
//! the commit's own time.

use std::time::Duration;

use super::table::MessageTable;

/// The least part of `vt_ack_wait` a claimed row must have left before its `time_next` when its
/// claim commits, for it to be sent (9 tenths).
const SHARE_LEFT: (i64, i64) = (9, 10);

/// Whether a row claimed with `time_next` must not be sent, its claim having committed at
/// `committed_at` (Unix ns), with this `ack_wait`.
pub(super) fn too_late(time_next: i64, committed_at: i64, ack_wait: Duration) -> bool {
    let ack_wait_ns = i64::try_from(ack_wait.as_nanos()).unwrap_or(i64::MAX);
    let needed = ack_wait_ns / SHARE_LEFT.1 * SHARE_LEFT.0;
    time_next.saturating_sub(committed_at) < needed
}

/// The statement that sets back the `epoch` of rows a late claim did not send: `late` holds each
/// row's key, its `epoch` before the claim and the `time_next` the claim set. Only rows still as
/// the claim left them change: a row claimed again meanwhile, or buried as dead by another proxy
/// once its `time_next` passed (a late claim's may already have), keeps its epoch, or it would
/// be dead with fewer attempts than it has had. `None` when no key can be written as a literal.
pub(super) fn give_back_sql(def: &MessageTable, late: &[LateRow]) -> Option<String> {
    let mut before = String::new();
    let mut claimed = String::new();
    let mut due = String::new();
    for row in late {
        let literal = def.id_literal(&row.key)?;
        before.push_str(&format!(" WHEN {literal} THEN {}", row.epoch));
        claimed.push_str(&format!(
            " WHEN {literal} THEN {}",
            row.epoch.saturating_add(1)
        ));
        due.push_str(&format!(" WHEN {literal} THEN {}", row.time_next));
    }
    let ids = def.ids_sql(late.iter().map(|row| &row.key[..]))?;
    Some(format!(
        "UPDATE {table} SET `epoch` = CASE `id`{before} END WHERE {ids} AND `epoch` = CASE `id`{claimed} END AND `time_next` = CASE `id`{due} END",
        table = def.by_primary_key(),
    ))
}

/// A row a late claim did not send.
pub(super) struct LateRow {
    pub key: Box<[u8]>,
    /// Its `epoch` before the claim.
    pub epoch: i64,
    /// The `time_next` the claim set.
    pub time_next: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn a_quick_claim_sends_its_rows() {
        let ack_wait = Duration::from_secs(30);
        let start = 1_000 * S;
        // ack wait + a backoff of 30 s, committed 5 ms later
        assert!(!too_late(start + 60 * S, start + 5_000_000, ack_wait));
        // vt_min_backoff=0: one ack wait exactly, committed 5 ms later
        assert!(!too_late(start + 30 * S, start + 5_000_000, ack_wait));
    }

    #[test]
    fn a_claim_that_committed_late_sends_nothing() {
        let ack_wait = Duration::from_secs(2);
        let start = 1_000 * S;
        // ack wait 2 s + backoff 0.5 s; the commit took 1 s: 1.5 s left of the 1.8 s needed
        assert!(too_late(start + 2 * S + S / 2, start + S, ack_wait));
        // 0.7 s: 1.8 s left, just enough
        assert!(!too_late(
            start + 2 * S + S / 2,
            start + 7 * S / 10,
            ack_wait
        ));
        // time_next already passed when the commit returned
        assert!(too_late(start + 2 * S, start + 3 * S, ack_wait));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        assert!(!too_late(i64::MAX, i64::MIN, Duration::from_secs(30)));
        assert!(too_late(i64::MIN, i64::MAX, Duration::from_secs(30)));
        assert!(too_late(0, 0, Duration::MAX));
        assert!(!too_late(0, 0, Duration::ZERO));
    }
}
