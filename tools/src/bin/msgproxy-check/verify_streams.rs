//! The event-stream workload's history and its verdict (docs/STREAMS.md; section numbers there).
//!
//! The history is the clients' records (one file per client in `logs/streams/`, one record a
//! line) plus, from the database at the end, each group's saved position and the keys an InnoDB
//! stream table holds. Every row a producer inserts carries a `key` of its own (unique in the
//! run), so each delivery can be matched with its insert. The checks:
//! - `not delivered`: a committed insert (its INSERT or COMMIT got OK; or it was delivered to
//!   another group of its table; or it is stored in an InnoDB stream table) never reached a
//!   group (2: every group receives every event; 3: at least once).
//! - `skipped`: such an insert lies below the group's final saved position (the lowest event
//!   not done), yet the group never delivered it (3: the saved position never passes an event
//!   that is not acked).
//! - `phantom`: a delivered key no producer inserted, one inserted in a transaction that rolled
//!   back, or one delivered from the wrong table (1, 2).
//! - `event id`: one key under two event ids, or two keys under one (2: the same id in every
//!   proxy, after restarts and replays).
//! - `commit order`: an insert whose INSERT (or COMMIT) got OK before another insert was even
//!   sent has the larger event id (2: ids increase in commit order).
//! - `delivery order`: within a group, an event delivered for the first time more than `slack`
//!   after an event with a larger id was delivered for the first time (2: in commit order), unless
//!   a stream of the group ended in between (an event sent into a dying connection comes back
//!   later, legitimately; the proxy cannot tell, and neither can the client).
//! - `early redelivery`: an event delivered again within `ack_wait - slack` of its previous
//!   delivery with no stream of its group ended (up to `slack` after the redelivery: the end is
//!   logged when its consumer notices it) and no fault in between (3).
//! - `delivered after ack`: an event delivered again more than `slack` after its ACK got OK,
//!   with no fault that may lose the proxy's last 100 ms of acks in between (3). An ACK answered
//!   "queued" (OK with a warning: the serving proxy did not answer within 1 s) does not count here:
//!   the contract applies it when the serving proxy reads it, and until then the events may come
//!   back; nor does one whose affected rows are fewer than its ids (the contract answers 0 for
//!   an event the serving proxy has not read yet, and sends it again).
//! - `ack lost`: an event whose ACK got OK is above the group's final saved position and not
//!   among its acked ids (3: an `ACK` is durable within 100 ms; a queued one is applied later, but
//!   is not lost either) — checked as "every acked event
//!   is below the final position", since the drain waits for the position to pass them all.

use std::collections::{BTreeMap, HashMap, HashSet};

/// One client record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    /// A producer is about to send a statement inserting `key` into `table`.
    Try { table: String, key: u64 },
    /// The INSERT (or its transaction's COMMIT) returned OK.
    Committed { key: u64 },
    /// Inserted in a transaction that was never sent COMMIT (it rolled back or died).
    RolledBack { key: u64 },
    /// A stream row reached a consumer of `group` (`table/name`) in stream session `session`.
    Delivered {
        group: String,
        session: String,
        eid: u64,
        key: u64,
    },
    /// An `ACK ... GROUP` covering `eid` returned OK.
    Acked { group: String, eid: u64 },
    /// An `ACK ... GROUP` covering `eid` returned OK with a warning: queued for the proxy serving
    /// the group, which had not answered within 1 s.
    AckQueued { group: String, eid: u64 },
    /// An `ACK ... GROUP` covering `eid` returned OK with fewer affected rows than ids: some of
    /// them (which, the client cannot tell) were not acked (already acked, or not read yet by
    /// a proxy that has just taken the group over: docs/STREAMS.md). Checked by neither check.
    AckUnconfirmed { group: String, eid: u64 },
    /// A stream session ended (error, disconnect or fault).
    SessionEnd { group: String, session: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Microseconds since the run started (one clock for every client).
    pub t_us: u64,
    pub rec: Rec,
}

impl Rec {
    /// The record as its log line's fields (after the time).
    pub fn to_line(&self) -> String {
        match self {
            Rec::Try { table, key } => format!("try {table} {key}"),
            Rec::Committed { key } => format!("ok {key}"),
            Rec::RolledBack { key } => format!("rb {key}"),
            Rec::Delivered {
                group,
                session,
                eid,
                key,
            } => format!("dl {group} {session} {eid} {key}"),
            Rec::Acked { group, eid } => format!("ack {group} {eid}"),
            Rec::AckQueued { group, eid } => format!("ackq {group} {eid}"),
            Rec::AckUnconfirmed { group, eid } => format!("acku {group} {eid}"),
            Rec::SessionEnd { group, session } => format!("end {group} {session}"),
        }
    }
}

/// Parses `<µs> <record>`.
pub fn parse_line(line: &str) -> Option<Entry> {
    let f: Vec<&str> = line.split(' ').collect();
    let t_us = f.first()?.parse().ok()?;
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    let s = |i: usize| f.get(i).map(|v| v.to_string());
    let (rec, fields) = match *f.get(1)? {
        "try" => (
            Rec::Try {
                table: s(2)?,
                key: n(3)?,
            },
            4,
        ),
        "ok" => (Rec::Committed { key: n(2)? }, 3),
        "rb" => (Rec::RolledBack { key: n(2)? }, 3),
        "dl" => (
            Rec::Delivered {
                group: s(2)?,
                session: s(3)?,
                eid: n(4)?,
                key: n(5)?,
            },
            6,
        ),
        "ack" => (
            Rec::Acked {
                group: s(2)?,
                eid: n(3)?,
            },
            4,
        ),
        "ackq" => (
            Rec::AckQueued {
                group: s(2)?,
                eid: n(3)?,
            },
            4,
        ),
        "acku" => (
            Rec::AckUnconfirmed {
                group: s(2)?,
                eid: n(3)?,
            },
            4,
        ),
        "end" => (
            Rec::SessionEnd {
                group: s(2)?,
                session: s(3)?,
            },
            4,
        ),
        _ => return None,
    };
    (f.len() == fields).then_some(Entry { t_us, rec })
}

/// Every record of every `*.log` file in `dir`, in time order.
pub fn read_dir(dir: &std::path::Path) -> Result<Vec<Entry>, String> {
    use std::io::BufRead;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("read {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file =
            std::fs::File::open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
        for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| format!("read {}: {e}", path.display()))?;
            out.push(parse_line(&line).ok_or_else(|| {
                format!("{}:{}: malformed record {line:?}", path.display(), n + 1)
            })?);
        }
    }
    out.sort_by_key(|e| e.t_us);
    Ok(out)
}

/// What the database says at the end.
#[derive(Debug, Default, Clone)]
pub struct Final {
    /// Each group's saved position (`floor`: the lowest event id not done), by `table/name`.
    pub floors: HashMap<String, u64>,
    /// The keys stored in each table that keeps its rows (InnoDB), by table.
    pub stored: HashMap<String, HashSet<u64>>,
}

pub struct Limits {
    pub ack_wait_us: u64,
    pub slack_us: u64,
    /// The tables and, for each, its groups (`table/name`).
    pub groups: Vec<(String, Vec<String>)>,
    /// Times of the faults that may cost a proxy its last unsaved acks or its in-flight state
    /// (proxy SIGKILL, server restart or crash, a killed backend connection).
    pub state_faults_us: Vec<u64>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub tried: usize,
    pub committed: usize,
    pub rolled_back: usize,
    pub deliveries: usize,
    pub redeliveries: usize,
    pub acks: usize,
    pub sessions_ended: usize,
    /// Per group: distinct events delivered.
    pub per_group: BTreeMap<String, usize>,
    pub violations: BTreeMap<&'static str, Vec<String>>,
}

impl Report {
    #[cfg(test)]
    pub fn violation_count(&self) -> usize {
        self.violations.values().map(Vec::len).sum()
    }

    fn violate(&mut self, check: &'static str, what: String) {
        self.violations.entry(check).or_default().push(what);
    }
}

fn secs(us: u64) -> String {
    format!("{:.3} s", us as f64 / 1e6)
}

/// One delivery within a group.
#[derive(Debug, Clone, Copy)]
struct Delivery<'a> {
    t: u64,
    eid: u64,
    key: u64,
    session: &'a str,
}

/// The first `ACK` of an event that got OK: when, and whether it was only queued.
#[derive(Debug, Clone, Copy)]
struct Ack {
    t: u64,
    queued: bool,
}

/// Whether any of the sorted `times` lies in `[from, to]`.
fn any_between(times: &[u64], from: u64, to: u64) -> bool {
    let i = times.partition_point(|&t| t < from);
    times.get(i).is_some_and(|&t| t <= to)
}

pub fn verify(history: &[Entry], fin: &Final, limits: &Limits) -> Report {
    let mut r = Report::default();
    let mut tried: HashMap<u64, (&str, u64)> = HashMap::new();
    let mut committed: HashMap<u64, u64> = HashMap::new();
    let mut rolled_back = HashSet::new();
    let mut deliveries: BTreeMap<&str, Vec<Delivery>> = BTreeMap::new();
    let mut acks: HashMap<&str, HashMap<u64, Ack>> = HashMap::new();
    let mut ends: HashMap<&str, Vec<u64>> = HashMap::new();
    for e in history {
        match &e.rec {
            Rec::Try { table, key } => {
                tried.insert(*key, (table.as_str(), e.t_us));
            }
            Rec::Committed { key } => {
                committed.insert(*key, e.t_us);
            }
            Rec::RolledBack { key } => {
                rolled_back.insert(*key);
            }
            Rec::Delivered {
                group,
                session,
                eid,
                key,
            } => deliveries.entry(group).or_default().push(Delivery {
                t: e.t_us,
                eid: *eid,
                key: *key,
                session,
            }),
            Rec::Acked { group, eid } => {
                // The first answered ACK counts (one queued before it does not).
                let ack = acks.entry(group).or_default().entry(*eid).or_insert(Ack {
                    t: e.t_us,
                    queued: false,
                });
                if ack.queued {
                    *ack = Ack {
                        t: e.t_us,
                        queued: false,
                    };
                }
            }
            Rec::AckQueued { group, eid } => {
                acks.entry(group).or_default().entry(*eid).or_insert(Ack {
                    t: e.t_us,
                    queued: true,
                });
            }
            Rec::SessionEnd { group, .. } => ends.entry(group).or_default().push(e.t_us),
            Rec::AckUnconfirmed { .. } => {}
        }
    }
    let mut faults = limits.state_faults_us.clone();
    faults.sort_unstable();
    r.tried = tried.len();
    r.committed = committed.len();
    r.rolled_back = rolled_back.len();
    r.sessions_ended = ends.values().map(Vec::len).sum();
    r.acks = acks.values().map(HashMap::len).sum();

    // Event ids, across every group of a table: one per key and one key per id.
    let mut eid_of: HashMap<u64, u64> = HashMap::new();
    let mut key_of: HashMap<(&str, u64), u64> = HashMap::new();
    let table_of_group = |g: &str| g.split('/').next().unwrap_or("").to_string();
    for (group, ds) in &deliveries {
        for d in ds {
            if let Some(&other) = eid_of.get(&d.key) {
                if other != d.eid {
                    r.violate(
                        "event id",
                        format!(
                            "key {}: delivered as event {other} and as event {} ({group})",
                            d.key, d.eid
                        ),
                    );
                }
            } else {
                eid_of.insert(d.key, d.eid);
            }
            let table = group.split('/').next().unwrap_or("");
            match key_of.get(&(table, d.eid)) {
                Some(&k) if k != d.key => r.violate(
                    "event id",
                    format!(
                        "event {} of {table}: delivered with key {k} and with key {}",
                        d.eid, d.key
                    ),
                ),
                Some(_) => {}
                None => {
                    key_of.insert((table, d.eid), d.key);
                }
            }
        }
    }

    // Phantoms.
    for (group, ds) in &deliveries {
        let table = table_of_group(group);
        let mut seen = HashSet::new();
        for d in ds {
            if !seen.insert(d.key) {
                continue;
            }
            match tried.get(&d.key) {
                None => r.violate(
                    "phantom",
                    format!(
                        "{group}: event {} (key {}) delivered, never inserted",
                        d.eid, d.key
                    ),
                ),
                Some((t, _)) if *t != table => r.violate(
                    "phantom",
                    format!(
                        "{group}: event {} (key {}) delivered, but inserted into {t}",
                        d.eid, d.key
                    ),
                ),
                _ => {}
            }
            if rolled_back.contains(&d.key) {
                r.violate(
                    "phantom",
                    format!(
                        "{group}: event {} (key {}) delivered at {}, but inserted in a transaction that rolled back",
                        d.eid,
                        d.key,
                        secs(d.t)
                    ),
                );
            }
        }
    }

    // Commit order: an OK seen before another insert was sent means a smaller event id.
    let mut oks: Vec<(u64, u64)> = committed
        .iter()
        .filter_map(|(k, &t)| eid_of.get(k).map(|&e| (t, e)))
        .collect();
    oks.sort_unstable();
    let mut tries: Vec<(u64, u64, u64)> = tried
        .iter()
        .filter_map(|(k, &(_, t))| eid_of.get(k).map(|&e| (t, e, *k)))
        .collect();
    tries.sort_unstable();
    let mut i = 0;
    let mut max_before: Option<(u64, u64)> = None; // (eid, ok time)
    for &(t, eid, key) in &tries {
        while i < oks.len() && oks[i].0 < t {
            if max_before.is_none_or(|(e, _)| oks[i].1 > e) {
                max_before = Some((oks[i].1, oks[i].0));
            }
            i += 1;
        }
        if let Some((e, ok_t)) = max_before {
            // One table's ids and another's share the GTID sequence, so the order holds across tables.
            if e >= eid {
                r.violate(
                    "commit order",
                    format!(
                        "key {key} (event {eid}) was sent at {}, after an insert of event {e} got OK at {}",
                        secs(t),
                        secs(ok_t)
                    ),
                );
            }
        }
    }

    // For a committed insert no group delivered (so its id is unknown): the smallest id of an
    // insert sent after its OK, which its own id is below.
    let mut suffix_min = vec![u64::MAX; tries.len() + 1];
    for i in (0..tries.len()).rev() {
        suffix_min[i] = suffix_min[i + 1].min(tries[i].1);
    }
    let below: HashMap<u64, u64> = committed
        .iter()
        .filter(|(k, _)| !eid_of.contains_key(k))
        .filter_map(|(&k, &t_ok)| {
            let i = tries.partition_point(|&(t, _, _)| t <= t_ok);
            (suffix_min[i] != u64::MAX).then_some((k, suffix_min[i]))
        })
        .collect();

    // Per group.
    for (table, groups) in &limits.groups {
        // Inserts known to be committed in this table.
        let mut must: HashMap<u64, &str> = HashMap::new();
        for (&k, _) in committed.iter() {
            if tried.get(&k).is_some_and(|(t, _)| t == table) {
                must.insert(k, "its INSERT or COMMIT got OK");
            }
        }
        for g in groups {
            for d in deliveries.get(g.as_str()).into_iter().flatten() {
                if !rolled_back.contains(&d.key) {
                    must.entry(d.key).or_insert("delivered to another group");
                }
            }
        }
        for &k in fin.stored.get(table).into_iter().flatten() {
            must.entry(k).or_insert("stored in the table");
        }
        for g in groups {
            let ds: &[Delivery] = deliveries.get(g.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            verify_group(
                &mut r, g, ds, &must, &eid_of, &below, fin, limits, &acks, &ends, &faults,
            );
        }
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn verify_group(
    r: &mut Report,
    group: &str,
    ds: &[Delivery],
    must: &HashMap<u64, &str>,
    eid_of: &HashMap<u64, u64>,
    below: &HashMap<u64, u64>,
    fin: &Final,
    limits: &Limits,
    acks: &HashMap<&str, HashMap<u64, Ack>>,
    ends: &HashMap<&str, Vec<u64>>,
    faults: &[u64],
) {
    let no_ends = Vec::new();
    let ends = ends.get(group).unwrap_or(&no_ends);
    let no_acks = HashMap::new();
    let acks = acks.get(group).unwrap_or(&no_acks);
    r.deliveries += ds.len();
    let delivered: HashSet<u64> = ds.iter().map(|d| d.key).collect();
    r.per_group.insert(group.to_string(), delivered.len());
    let floor = fin.floors.get(group).copied();

    // Every committed insert, at least once.
    let mut missing: Vec<(u64, &str)> = must
        .iter()
        .filter(|(k, _)| !delivered.contains(k))
        .map(|(&k, &why)| (k, why))
        .collect();
    missing.sort_unstable();
    for (k, why) in missing {
        match (eid_of.get(&k), floor) {
            (Some(&eid), Some(f)) if eid < f => r.violate(
                "skipped",
                format!("{group}: event {eid} (key {k}; {why}) is below the group's position {f}, never delivered to it"),
            ),
            (None, Some(f)) if below.get(&k).is_some_and(|&b| b < f) => r.violate(
                "skipped",
                format!(
                    "{group}: key {k} ({why}) committed before event {} was sent, and the group's position {f} passed that event; never delivered to any group",
                    below[&k]
                ),
            ),
            _ => r.violate(
                "not delivered",
                format!("{group}: key {k} ({why}) never delivered to the group"),
            ),
        }
    }

    // Order of first deliveries, redeliveries' timing, deliveries after an ack.
    let mut last: HashMap<u64, u64> = HashMap::new();
    let mut max_first: Option<(u64, u64, &str)> = None; // (eid, time, session), largest eid so far
    let mut pending: Vec<(u64, u64, &str)> = Vec::new(); // first deliveries within the slack
    for d in ds {
        // Fold in first deliveries old enough to order against this one.
        pending.retain(|&(eid, t, s)| {
            if t + limits.slack_us < d.t {
                if max_first.is_none_or(|(e, _, _)| eid > e) {
                    max_first = Some((eid, t, s));
                }
                false
            } else {
                true
            }
        });
        match last.get(&d.eid).copied() {
            None => {
                if let Some((e, t, s)) = max_first {
                    if e > d.eid && !any_between(ends, t.saturating_sub(limits.ack_wait_us), d.t) {
                        r.violate(
                            "delivery order",
                            format!(
                                "{group}: event {} first delivered at {} ({}), after event {e} at {} ({s}), no stream of the group ended between",
                                d.eid,
                                secs(d.t),
                                d.session,
                                secs(t)
                            ),
                        );
                    }
                }
                // Within one session the order is exact: no slack.
                pending.push((d.eid, d.t, d.session));
            }
            Some(prev) => {
                r.redeliveries += 1;
                // A stream's end counts up to `slack` after the redelivery: the proxy hands what
                // an ending stream held to another stream at once, and that consumer may log its
                // delivery before the ending stream's consumer has noticed the end.
                if d.t - prev + limits.slack_us < limits.ack_wait_us
                    && !any_between(ends, prev, d.t + limits.slack_us)
                    && !any_between(faults, prev, d.t)
                {
                    r.violate(
                        "early redelivery",
                        format!(
                            "{group}: event {} delivered at {} and again at {} ({} later; ack wait {}), no stream ended and no fault between",
                            d.eid,
                            secs(prev),
                            secs(d.t),
                            secs(d.t - prev),
                            secs(limits.ack_wait_us)
                        ),
                    );
                }
            }
        }
        if let Some(&Ack {
            t: ta,
            queued: false,
        }) = acks.get(&d.eid)
        {
            if d.t > ta + limits.slack_us && !any_between(faults, ta.saturating_sub(1_000_000), d.t)
            {
                r.violate(
                    "delivered after ack",
                    format!(
                        "{group}: event {} acked (OK at {}), delivered again at {} ({}), no fault between",
                        d.eid,
                        secs(ta),
                        secs(d.t),
                        d.session
                    ),
                );
            }
        }
        last.insert(d.eid, d.t);
    }
    // Same-session order, exact.
    let mut by_session: HashMap<&str, u64> = HashMap::new();
    let mut first_seen = HashSet::new();
    for d in ds {
        if !first_seen.insert(d.eid) {
            continue;
        }
        if let Some(&prev) = by_session.get(d.session) {
            if prev > d.eid {
                let t_prev = ds.iter().find(|x| x.eid == prev).map_or(0, |x| x.t);
                if !any_between(ends, t_prev.saturating_sub(limits.ack_wait_us), d.t) {
                    r.violate(
                        "delivery order",
                        format!(
                            "{group}: session {} got event {} first at {}, after event {prev}; no stream of the group ended between",
                            d.session,
                            d.eid,
                            secs(d.t)
                        ),
                    );
                }
            }
        }
        let e = by_session.entry(d.session).or_insert(d.eid);
        *e = (*e).max(d.eid);
    }

    // Acks kept: the final position has passed every acked event.
    if let Some(f) = floor {
        let mut kept: Vec<(u64, Ack)> = acks
            .iter()
            .filter(|(&eid, _)| eid >= f)
            .map(|(&eid, &ack)| (eid, ack))
            .collect();
        kept.sort_unstable_by_key(|(eid, _)| *eid);
        for (eid, ack) in kept.into_iter().take(50) {
            r.violate(
                "ack lost",
                format!(
                    "{group}: event {eid} acked (OK{} at {}), but the group's final position is {f}",
                    if ack.queued { ", queued" } else { "" },
                    secs(ack.t)
                ),
            );
        }
    } else if !acks.is_empty() {
        r.violate(
            "ack lost",
            format!(
                "{group}: {} events acked, but the group has no saved position",
                acks.len()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = "t/g1";

    fn at(t_ms: u64, rec: Rec) -> Entry {
        Entry {
            t_us: t_ms * 1000,
            rec,
        }
    }
    fn tr(t: u64, key: u64) -> Entry {
        at(
            t,
            Rec::Try {
                table: "t".into(),
                key,
            },
        )
    }
    fn ok(t: u64, key: u64) -> Entry {
        at(t, Rec::Committed { key })
    }
    fn dl(t: u64, session: &str, eid: u64, key: u64) -> Entry {
        at(
            t,
            Rec::Delivered {
                group: G.into(),
                session: session.into(),
                eid,
                key,
            },
        )
    }
    fn ack(t: u64, eid: u64) -> Entry {
        at(
            t,
            Rec::Acked {
                group: G.into(),
                eid,
            },
        )
    }
    fn end(t: u64, session: &str) -> Entry {
        at(
            t,
            Rec::SessionEnd {
                group: G.into(),
                session: session.into(),
            },
        )
    }

    fn limits() -> Limits {
        Limits {
            ack_wait_us: 2_000_000,
            slack_us: 500_000,
            groups: vec![("t".into(), vec![G.into()])],
            state_faults_us: Vec::new(),
        }
    }

    fn fin(floor: u64) -> Final {
        Final {
            floors: [(G.to_string(), floor)].into_iter().collect(),
            stored: HashMap::new(),
        }
    }

    /// Two committed inserts, delivered in order and acked.
    fn clean() -> Vec<Entry> {
        vec![
            tr(0, 1),
            ok(5, 1),
            tr(10, 2),
            ok(15, 2),
            dl(20, "s1", 100, 1),
            dl(21, "s2", 200, 2),
            ack(30, 100),
            ack(31, 200),
        ]
    }

    fn checks(h: &[Entry], f: &Final) -> Vec<&'static str> {
        let mut h = h.to_vec();
        h.sort_by_key(|e| e.t_us);
        verify(&h, f, &limits()).violations.into_keys().collect()
    }

    #[test]
    fn lines_round_trip() {
        for e in clean()
            .into_iter()
            .chain([end(40, "s1"), at(1, Rec::RolledBack { key: 3 })])
        {
            let line = format!("{} {}", e.t_us, e.rec.to_line());
            assert_eq!(parse_line(&line), Some(e));
        }
        assert_eq!(parse_line("1 dl g s 5"), None);
        assert_eq!(parse_line("1 ok 5 extra"), None);
    }

    #[test]
    fn a_clean_history_passes() {
        let mut h = clean();
        // A rolled-back insert, never seen.
        h.extend([tr(40, 3), at(41, Rec::RolledBack { key: 3 })]);
        // An event sent into a stream that died comes back later, after a larger one; the
        // larger one is sent again after the ack wait.
        h.extend([tr(50, 4), ok(55, 4), tr(60, 5), ok(65, 5)]);
        h.extend([dl(70, "s3", 500, 5), end(80, "s4"), dl(2000, "s3", 400, 4)]);
        h.extend([dl(2600, "s3", 500, 5), ack(2700, 400), ack(2701, 500)]);
        assert_eq!(checks(&h, &fin(501)), Vec::<&str>::new());
    }

    /// An event held by a stream that ends goes to another stream at once; the ending stream's
    /// consumer may log the end after the other one logged the delivery.
    #[test]
    fn a_stream_end_logged_just_after_the_redelivery_excuses_it() {
        let handed = with(&[
            dl(20, "s1", 100, 1),
            dl(21, "s1", 200, 2),
            dl(25, "s2", 100, 1),
            end(26, "s1"),
            ack(30, 100),
            ack(31, 200),
        ]);
        assert_eq!(checks(&handed, &fin(201)), Vec::<&str>::new());
        // An end long after it does not.
        let mut late = handed.clone();
        late.retain(|e| !matches!(e.rec, Rec::SessionEnd { .. }));
        late.push(end(900_000, "s1"));
        assert_eq!(checks(&late, &fin(201)), vec!["early redelivery"]);
    }

    /// `clean()` with its deliveries and acks replaced.
    fn with(after: &[Entry]) -> Vec<Entry> {
        let mut h: Vec<Entry> = clean()
            .into_iter()
            .filter(|e| matches!(e.rec, Rec::Try { .. } | Rec::Committed { .. }))
            .collect();
        h.extend_from_slice(after);
        h
    }

    #[test]
    fn each_broken_promise_is_caught() {
        let h = clean();
        // Not delivered to the group (and not below its position).
        let lost = with(&[dl(20, "s1", 100, 1), ack(30, 100)]);
        assert_eq!(checks(&lost, &fin(101)), vec!["not delivered"]);
        // Below the group's position yet never delivered: skipped (its id is known from the
        // table's other group, which got it).
        let mut two = lost.clone();
        for (t, eid, key) in [(22, 100, 1), (23, 200, 2)] {
            two.push(at(
                t,
                Rec::Delivered {
                    group: "t/g2".into(),
                    session: "x".into(),
                    eid,
                    key,
                },
            ));
        }
        let mut l = limits();
        l.groups = vec![("t".into(), vec![G.into(), "t/g2".into()])];
        let mut f = fin(201);
        f.floors.insert("t/g2".into(), 201);
        let v: Vec<_> = verify(&two, &f, &l).violations.into_keys().collect();
        assert_eq!(v, vec!["skipped"]);
        // Never delivered to any group, but an insert sent after its OK is below the position.
        // (Key 1's OK at 5 ms came before key 2 was sent at 10 ms.)
        let gone = with(&[dl(21, "s1", 200, 2), ack(31, 200)]);
        assert_eq!(checks(&gone, &fin(201)), vec!["skipped"]);
        let v = checks(&gone, &fin(200));
        assert!(
            v.contains(&"not delivered") && !v.contains(&"skipped"),
            "{v:?}"
        );
        // A rolled-back insert delivered.
        let mut rb = h.clone();
        rb.extend([
            tr(40, 3),
            at(41, Rec::RolledBack { key: 3 }),
            dl(42, "s1", 300, 3),
        ]);
        assert_eq!(checks(&rb, &fin(301)), vec!["phantom"]);
        // Never inserted.
        let mut never = h.clone();
        never.push(dl(42, "s1", 300, 9));
        assert_eq!(checks(&never, &fin(301)), vec!["phantom"]);
        // Out of order within a stream, no stream ended.
        let order = with(&[dl(20, "s1", 200, 2), dl(900, "s1", 100, 1)]);
        assert_eq!(checks(&order, &fin(201)), vec!["delivery order"]);
        // ... and across the streams of the group, beyond the slack.
        let order2 = with(&[dl(20, "s2", 200, 2), dl(900, "s1", 100, 1)]);
        assert_eq!(checks(&order2, &fin(201)), vec!["delivery order"]);
        // ... which a stream that ended in between excuses.
        let mut order3 = order2.clone();
        order3.push(end(100, "s9"));
        assert_eq!(checks(&order3, &fin(201)), Vec::<&str>::new());
        // Ids against commit order (key 1's OK came before key 2 was sent), and one key under
        // two ids.
        let ids = with(&[
            dl(20, "s1", 300, 1),
            dl(21, "s1", 400, 1),
            dl(22, "s1", 200, 2),
        ]);
        let v = checks(&ids, &fin(401));
        assert!(
            v.contains(&"commit order") && v.contains(&"event id"),
            "{v:?}"
        );
        // Sent again within the ack wait, nothing ended; and after its ack.
        let mut early = h.clone();
        early.push(dl(1000, "s2", 100, 1));
        assert_eq!(
            checks(&early, &fin(201)),
            vec!["delivered after ack", "early redelivery"]
        );
        // Sent again long after its ack, no fault.
        let mut after = h.clone();
        after.push(dl(5000, "s2", 100, 1));
        assert_eq!(checks(&after, &fin(201)), vec!["delivered after ack"]);
        // ... which a proxy kill in between excuses.
        let mut l = limits();
        l.state_faults_us = vec![3_000_000];
        after.sort_by_key(|e| e.t_us);
        assert_eq!(verify(&after, &fin(201), &l).violation_count(), 0);
        // Acked, yet the final position has not passed it.
        assert_eq!(checks(&h, &fin(150)), vec!["ack lost"]);
    }

    /// An `ACK` answered "queued" is applied when the serving proxy reads it: until then its
    /// events may come back, but it must not be lost.
    #[test]
    fn a_queued_ack_may_see_its_event_again_but_is_not_lost() {
        let queued = |t, eid| {
            at(
                t,
                Rec::AckQueued {
                    group: G.into(),
                    eid,
                },
            )
        };
        let again = with(&[
            dl(20, "s1", 100, 1),
            dl(21, "s2", 200, 2),
            queued(30, 100),
            ack(31, 200),
            dl(5000, "s2", 100, 1),
        ]);
        assert_eq!(checks(&again, &fin(201)), Vec::<&str>::new());
        assert_eq!(checks(&again, &fin(100)), vec!["ack lost"]);
        // An answered ACK after the queued one counts from its own OK.
        let mut answered = again.clone();
        answered.extend([ack(6000, 100), dl(9000, "s1", 100, 1)]);
        assert_eq!(checks(&answered, &fin(201)), vec!["delivered after ack"]);
        let line = format!("7000 {}", queued(7, 100).rec.to_line());
        assert_eq!(parse_line(&line), Some(queued(7, 100)));
    }
}
