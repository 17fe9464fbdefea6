//! The clients' logs: one file per producer and consumer in the work dir's `logs/`, one event a
//! line, `<µs since the run started> <kind> <id> <who>`. The verdict is drawn from these files and
//! the database only, so a failed run can be re-read by hand (`--keep-workdir`, or kept
//! automatically on failure).
//!
//! Every time is read from one monotonic clock in this process, so comparing times of different
//! clients needs no allowance for clock skew; the slack in the checks only covers the time between
//! the proxy acting and a client seeing it.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A producer is about to send a statement inserting this id (logged before sending).
    Try,
    /// The INSERT (or the COMMIT of its transaction) returned OK: the message is committed.
    Committed,
    /// Inserted in a transaction that was opened with an OK BEGIN and never sent COMMIT: the
    /// message must never exist.
    RolledBack,
    /// A STREAM row with this id reached a consumer.
    Delivered,
    /// An ACK that covers this id is about to be sent (the FIFO workload: the proxy may release
    /// the message's key from here on).
    AckSent,
    /// An ACK that covered this id returned OK.
    Acked,
    /// An ACK that covered this id failed (error, or no answer in time): it may or may not have
    /// taken effect, by this time at the latest (the FIFO workload).
    AckFailed,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Try => "try",
            Kind::Committed => "ok",
            Kind::RolledBack => "rb",
            Kind::Delivered => "dl",
            Kind::AckSent => "as",
            Kind::Acked => "ack",
            Kind::AckFailed => "af",
        }
    }

    fn parse(tag: &str) -> Option<Kind> {
        Some(match tag {
            "try" => Kind::Try,
            "ok" => Kind::Committed,
            "rb" => Kind::RolledBack,
            "dl" => Kind::Delivered,
            "as" => Kind::AckSent,
            "ack" => Kind::Acked,
            "af" => Kind::AckFailed,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Microseconds since the run started.
    pub t_us: u64,
    pub kind: Kind,
    pub id: i64,
    pub who: String,
}

/// One client's log.
pub struct EventLog {
    out: BufWriter<File>,
    who: String,
    base: Instant,
}

impl EventLog {
    pub fn create(dir: &Path, who: &str, base: Instant) -> Result<EventLog, String> {
        let path = dir.join(format!("{who}.log"));
        let file = File::create(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        Ok(EventLog {
            out: BufWriter::new(file),
            who: who.to_string(),
            base,
        })
    }

    /// Logs `kind` for `id` now.
    pub fn log(&mut self, kind: Kind, id: i64) {
        let t = self.base.elapsed().as_micros() as u64;
        self.log_at(t, kind, id);
    }

    pub fn log_at(&mut self, t_us: u64, kind: Kind, id: i64) {
        // A write error would make the verdict wrong: better to stop loudly.
        writeln!(self.out, "{t_us} {} {id} {}", kind.tag(), self.who)
            .expect("cannot write a client log");
    }

    pub fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

/// Every event of every `*.log` file in `dir`.
pub fn read_dir(dir: &Path) -> Result<Vec<Event>, String> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("read {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    let mut events = Vec::new();
    for path in files {
        let file = File::open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
        for (n, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| format!("read {}: {e}", path.display()))?;
            let event = parse_line(&line)
                .ok_or_else(|| format!("{}:{}: malformed event {line:?}", path.display(), n + 1))?;
            events.push(event);
        }
    }
    events.sort_by_key(|e| e.t_us);
    Ok(events)
}

fn parse_line(line: &str) -> Option<Event> {
    let mut f = line.split(' ');
    let t_us = f.next()?.parse().ok()?;
    let kind = Kind::parse(f.next()?)?;
    let id = f.next()?.parse().ok()?;
    let who = f.next()?.to_string();
    if f.next().is_some() {
        return None;
    }
    Some(Event {
        t_us,
        kind,
        id,
        who,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let dir = std::env::temp_dir().join(format!("msgproxy-check-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let base = Instant::now();
        {
            let mut log = EventLog::create(&dir, "consumer-1", base).unwrap();
            log.log_at(5, Kind::Delivered, 42);
            log.log_at(7, Kind::Acked, 42);
        }
        {
            let mut log = EventLog::create(&dir, "producer-a", base).unwrap();
            log.log_at(1, Kind::Try, 42);
            log.log_at(3, Kind::Committed, 42);
            log.log_at(4, Kind::RolledBack, -3);
        }
        let events = read_dir(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let kinds: Vec<(u64, Kind, i64)> = events.iter().map(|e| (e.t_us, e.kind, e.id)).collect();
        assert_eq!(
            kinds,
            vec![
                (1, Kind::Try, 42),
                (3, Kind::Committed, 42),
                (4, Kind::RolledBack, -3),
                (5, Kind::Delivered, 42),
                (7, Kind::Acked, 42)
            ]
        );
        assert_eq!(events[3].who, "consumer-1");
        assert!(parse_line("1 dl 2").is_none());
        assert!(parse_line("1 zz 2 c").is_none());
    }
}
