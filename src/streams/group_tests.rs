use super::*;
use crate::streams::reader::event_id;

fn pos(p: u64) -> BinlogPosition {
    BinlogPosition {
        file: "bin.000001".into(),
        pos: p,
    }
}

fn ev(seq: u64, ordinal: u64) -> Arc<Event> {
    Arc::new(Event {
        id: event_id(seq, ordinal),
        domain: 0,
        tx_start: pos(seq * 100),
        timestamp: seq as u32,
        columns: Vec::new().into(),
        values: Vec::new(),
    })
}

fn ids(batch: &[Arc<Event>]) -> Vec<u64> {
    batch.iter().map(|e| e.id).collect()
}

fn fresh() -> GroupState {
    GroupState::new(Progress {
        floor: 0,
        resume: pos(4),
        acked: vec![],
    })
}

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn competing_streams_share_in_order_and_batches_are_bounded() {
    let mut g = fresh();
    g.committed((0..5).map(|i| ev(1, i)).collect(), pos(150), |_| true);
    let now = Instant::now();
    let a = g.take_batch(1, 2, 1000, now, WAIT);
    let b = g.take_batch(2, 2, 1000, now, WAIT);
    let c = g.take_batch(1, 10, 3, now, WAIT);
    assert_eq!(ids(&a), vec![event_id(1, 0), event_id(1, 1)]);
    assert_eq!(ids(&b), vec![event_id(1, 2), event_id(1, 3)]);
    // max_unacked 3: stream 1 holds 2, so one more.
    assert_eq!(ids(&c), vec![event_id(1, 4)]);
    assert!(!g.has_room(1, 3));
}

#[test]
fn floor_resume_and_acks() {
    let mut g = fresh();
    g.committed(vec![ev(1, 0), ev(1, 1)], pos(150), |_| true);
    g.committed(vec![ev(2, 0)], pos(250), |_| true);
    let now = Instant::now();
    let batch = g.take_batch(1, 10, 1000, now, WAIT);
    assert_eq!(batch.len(), 3);
    // Ack the middle one: the floor stays at the first, which is still outstanding.
    assert_eq!(g.ack(&[event_id(1, 1)]), 1);
    assert_eq!(g.ack(&[event_id(1, 1), 999]), 0);
    let p = g.snapshot();
    assert_eq!(p.floor, event_id(1, 0));
    assert_eq!(p.resume, pos(100));
    assert_eq!(p.acked, vec![event_id(1, 1)]);
    // A restart from that progress sees the transaction again and skips the acked event.
    let mut again = GroupState::new(p);
    again.committed(vec![ev(1, 0), ev(1, 1)], pos(150), |_| true);
    again.committed(vec![ev(2, 0)], pos(250), |_| true);
    assert_eq!(
        ids(&again.take_batch(1, 10, 1000, now, WAIT)),
        vec![event_id(1, 0), event_id(2, 0)]
    );
    // Everything acked: the floor is past the last event, resume at the end read.
    assert_eq!(g.ack(&[event_id(1, 0), event_id(2, 0)]), 2);
    let p = g.snapshot();
    assert_eq!(
        (p.floor, p.resume.clone(), p.acked),
        (event_id(2, 0) + 1, pos(250), vec![])
    );
}

#[test]
fn filtered_events_count_as_done() {
    let mut g = fresh();
    g.committed(vec![ev(1, 0), ev(1, 1), ev(1, 2)], pos(150), |e| {
        e.id == event_id(1, 1)
    });
    assert_eq!(g.outstanding(), 1);
    assert_eq!(g.floor(), event_id(1, 1));
    g.ack(&[event_id(1, 1)]);
    assert_eq!(g.floor(), event_id(1, 2) + 1);
}

#[test]
fn redelivery_after_the_deadline_and_when_a_stream_leaves() {
    let mut g = fresh();
    g.committed(vec![ev(1, 0), ev(1, 1)], pos(150), |_| true);
    let now = Instant::now();
    assert_eq!(g.take_batch(1, 1, 1000, now, WAIT).len(), 1);
    assert_eq!(g.take_batch(2, 1, 1000, now, WAIT).len(), 1);
    assert!(g.take_batch(3, 10, 1000, now, WAIT).is_empty());
    assert_eq!(g.expire(now + Duration::from_secs(1)), Some(now + WAIT));
    assert_eq!(g.expire(now + WAIT), None);
    // Both wait again, the lower id first, for any stream.
    assert_eq!(
        ids(&g.take_batch(3, 10, 1000, now + WAIT, WAIT)),
        vec![event_id(1, 0), event_id(1, 1)]
    );
    g.stream_gone(3);
    assert!(g.has_room(3, 1));
    assert_eq!(g.take_batch(4, 10, 1000, now, WAIT).len(), 2);
    assert_eq!((g.sent, g.redelivered), (6, 4));
}

#[test]
fn the_window_bounds_what_is_read() {
    let mut g = fresh();
    g.committed((0..10).map(|i| ev(1, i)).collect(), pos(150), |_| true);
    assert!(!g.wants_more(10));
    assert!(g.wants_more(11));
}

#[test]
fn binlog_positions_order_by_file_number_then_offset() {
    let at = |file: &str, pos: u64| BinlogPosition {
        file: file.into(),
        pos,
    };
    assert!(position_before(
        &at("bin.000001", 900),
        &at("bin.000002", 4)
    ));
    assert!(position_before(
        &at("bin.000001", 4),
        &at("bin.000001", 900)
    ));
    assert!(!position_before(
        &at("bin.000001", 900),
        &at("bin.000001", 900)
    ));
    // Past its zero padding the number gets a digit more: still later.
    assert!(position_before(
        &at("bin.999999", 900),
        &at("bin.1000000", 4)
    ));
}

#[test]
fn reading_never_goes_back() {
    let mut g = fresh();
    g.committed(vec![ev(2, 0)], pos(250), |_| true);
    // A reader started again behind (after leaving a shared reader) reads it again.
    g.committed(vec![ev(2, 0)], pos(250), |_| true);
    g.progress(pos(150));
    assert_eq!(g.read_upto(), &pos(250));
    assert_eq!(g.outstanding(), 1, "an event read twice is held once");
}

#[test]
fn done_is_the_newest_transaction_acked_or_below_the_floor() {
    let mut g = fresh();
    assert_eq!(g.done(), None, "nothing read: the domain is not known");
    g.committed(vec![ev(5, 0), ev(5, 1), ev(6, 0)], pos(700), |_| true);
    // Everything below the first event read is done: a server without transaction 4 would
    // give its next one ids below the floor.
    assert_eq!(
        g.done(),
        Some(crate::streams::resume::Done { domain: 0, seq: 4 })
    );
    assert_eq!(g.ack(&[event_id(6, 0)]), 1);
    assert_eq!(
        g.done(),
        Some(crate::streams::resume::Done { domain: 0, seq: 6 })
    );
}

#[test]
fn a_rebased_group_keeps_its_acks_and_what_is_in_flight() {
    let mut g = fresh();
    g.committed(vec![ev(1, 0), ev(1, 1), ev(2, 0)], pos(250), |_| true);
    let now = Instant::now();
    assert_eq!(g.take_batch(1, 10, 1000, now, WAIT).len(), 3);
    assert_eq!(g.ack(&[event_id(1, 1)]), 1);
    // Another server's binlog, from a position before what was read (its own file names).
    let other = BinlogPosition {
        file: "other-bin.000007".into(),
        pos: 4,
    };
    g.rebase(other.clone());
    assert_eq!(g.read_upto(), &other);
    // Saved from now on: positions of the new server only, not the old start of what is in
    // flight.
    assert_eq!(g.snapshot().resume, other);
    // Reading again there: the acked event and those in flight are not waiting again ...
    let on_other = |e: Arc<Event>| {
        let mut e = (*e).clone();
        e.tx_start.file = "other-bin.000007".into();
        Arc::new(e)
    };
    g.committed(
        [ev(1, 0), ev(1, 1), ev(2, 0), ev(3, 0)]
            .into_iter()
            .map(on_other)
            .collect(),
        BinlogPosition {
            file: "other-bin.000007".into(),
            pos: 400,
        },
        |_| true,
    );
    let next = g.take_batch(2, 10, 1000, now, WAIT);
    assert_eq!(ids(&next), vec![event_id(3, 0)], "only the new event");
    // Read again there, the oldest outstanding event resumes at its start on that server.
    assert_eq!(
        g.snapshot().resume,
        BinlogPosition {
            file: "other-bin.000007".into(),
            pos: 100,
        }
    );
    // ... those in flight come back only at their deadline, and acks still count.
    assert!(g.take_batch(2, 10, 1000, now + WAIT / 2, WAIT).is_empty());
    assert_eq!(g.ack(&[event_id(1, 0), event_id(1, 1)]), 1);
    assert_eq!(g.expire(now + WAIT), None);
    assert_eq!(
        ids(&g.take_batch(2, 10, 1000, now + WAIT, WAIT)),
        vec![event_id(2, 0), event_id(3, 0)]
    );
}
