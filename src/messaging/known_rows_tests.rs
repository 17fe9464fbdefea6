//! Tests of what the manager knows of its rows: the replay of recent changes around a poll.

use super::*;

const MS: i64 = 1_000_000;

fn due_row(key: &str) -> ChangedRow {
    ChangedRow {
        key: key.as_bytes().into(),
        priority: None,
        time_next: None,
        time_acked: None,
    }
}

/// The binlog showed a row a moment before its commit was visible; a poll that starts in
/// that moment reads a snapshot without it. The row must stay due, not wait for the next
/// poll.
#[test]
fn a_row_seen_just_before_a_poll_survives_the_polls_snapshot() {
    let mut st = KnownRows::new(100);
    let now = state::now_ns();
    st.note_change(now, LateChange::Changed(due_row("7")));
    st.apply_changed(due_row("7"), now, now + 1000 * MS);
    assert_eq!(st.cache.len(), 1);
    st.begin_poll(now + MS);
    let again = st.finish_poll(Vec::new(), Vec::new(), 100, |n| n + 1000 * MS);
    assert!(!again);
    assert_eq!(st.cache.len(), 1, "the row is still due after the poll");
}

/// Changes older than the window were visible to the poll: its snapshot decides (here: the
/// row was acked by a statement the snapshot saw).
#[test]
fn changes_older_than_the_window_are_not_applied_again() {
    let mut st = KnownRows::new(100);
    let now = state::now_ns();
    st.note_change(now, LateChange::Changed(due_row("7")));
    st.apply_changed(due_row("7"), now, now + 1000 * MS);
    st.begin_poll(now + RECENT_WINDOW_NS + MS);
    st.finish_poll(Vec::new(), Vec::new(), 100, |n| n + 1000 * MS);
    assert_eq!(st.cache.len(), 0);
}

/// Replayed in order: a row inserted and then acked just before the poll stays acked.
#[test]
fn recent_changes_are_applied_in_order() {
    let mut st = KnownRows::new(100);
    let now = state::now_ns();
    st.note_change(now, LateChange::Changed(due_row("7")));
    let mut acked = due_row("7");
    acked.time_acked = Some(now);
    st.note_change(now + MS, LateChange::Changed(acked));
    st.begin_poll(now + 2 * MS);
    st.finish_poll(Vec::new(), Vec::new(), 100, |n| n + 1000 * MS);
    assert_eq!(st.cache.len(), 0);
}

/// A row being claimed when the poll starts: the replayed insert must not become the
/// "newest news" its batch applies when done (that would put a sent row back as due).
#[test]
fn replay_skips_rows_in_flight() {
    let mut st = KnownRows::new(100);
    let now = state::now_ns();
    st.note_change(now, LateChange::Changed(due_row("7")));
    st.in_flight.insert(b"7".as_slice().into());
    st.begin_poll(now + MS);
    st.finish_poll(Vec::new(), Vec::new(), 100, |n| n + 1000 * MS);
    assert!(st.changed_in_flight.is_empty());
    assert_eq!(st.cache.len(), 0);
}

#[test]
fn recent_changes_are_bounded() {
    let mut st = KnownRows::new(100);
    let now = state::now_ns();
    for i in 0..MAX_RECENT + 5 {
        st.note_change(now, LateChange::Deleted(i.to_string().into_bytes().into()));
    }
    assert_eq!(st.recent.len(), MAX_RECENT);
}

/// Rows short of a batch wait for the claim in flight, for a moment at most; a full batch does
/// not wait, and a hold that has run out wakes nobody.
#[test]
fn rows_short_of_a_batch_wait_briefly_for_the_claim_in_flight() {
    let mut st = KnownRows::new(100);
    let now = state::now_ns();
    st.apply_changed(due_row("1"), now, now + 1000 * MS);
    assert!(
        !st.holds_for_claim(10),
        "no claim in flight: nothing to wait for"
    );
    assert_eq!(st.hold_ends(), None);
    st.in_flight.insert(b"0".as_slice().into());
    st.claiming_since = Some(std::time::Instant::now());
    assert!(st.holds_for_claim(10));
    assert!(!st.holds_for_claim(1), "a full batch goes at once");
    assert!(st.hold_ends().is_some());
    // A claim in flight for longer than the hold keeps nothing back.
    st.claiming_since = Some(std::time::Instant::now() - CLAIM_HOLD * 2);
    assert!(!st.holds_for_claim(10));
    assert_eq!(
        st.hold_ends(),
        None,
        "a hold already over is no reason to wake"
    );
    // Its end clears it.
    st.in_flight.clear();
    st.in_flight_removed();
    assert_eq!(st.claiming_since, None);
}
