//! MariaDB GTIDs (`domain-server-seq`): the binlog watcher keeps the GTID of the last committed
//! transaction it handled in each replication domain, so that on another server (a Galera node
//! with `log_slave_updates` and `wsrep_gtid_mode`, or a promoted replica) it can resume right
//! after it: file names and offsets mean nothing on another server, GTIDs mean the same
//! transaction everywhere.

use std::collections::BTreeMap;
use std::fmt;

/// One transaction's GTID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

/// The last GTID of each domain: the form of `@@gtid_binlog_pos` and of
/// `@slave_connect_state`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidState {
    domains: BTreeMap<u32, (u32, u64)>,
}

impl GtidState {
    /// Reads `@@gtid_binlog_pos` (`0-1-10,100-1-7`; empty for none). `None` when unreadable.
    pub fn parse(text: &str) -> Option<GtidState> {
        let mut state = GtidState::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let mut fields = part.splitn(3, '-');
            let domain = fields.next()?.parse().ok()?;
            let server = fields.next()?.parse().ok()?;
            let seq = fields.next()?.parse().ok()?;
            state.domains.insert(domain, (server, seq));
        }
        Some(state)
    }

    /// A transaction committed: it is now the last of its domain.
    pub fn committed(&mut self, gtid: Gtid) {
        self.domains.insert(gtid.domain, (gtid.server, gtid.seq));
    }

    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The last seq_no of `domain`, if the state has the domain.
    pub fn seq(&self, domain: u32) -> Option<u64> {
        self.domains.get(&domain).map(|(_, seq)| *seq)
    }

    /// The last GTID of `domain`.
    pub fn get(&self, domain: u32) -> Option<Gtid> {
        self.domains.get(&domain).map(|(server, seq)| Gtid {
            domain,
            server: *server,
            seq: *seq,
        })
    }

    /// Each domain and its last seq_no.
    pub fn seqs(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.domains.iter().map(|(d, (_, seq))| (*d, *seq))
    }
}

/// The session statements that make the next binlog dump start right after `state` (a dump by
/// GTID): in strict mode the server fails (1236) when it does not have those transactions,
/// instead of guessing. The binlog watcher and the event-stream groups both resume this way.
pub fn dump_after(state: &GtidState) -> [String; 2] {
    [
        format!("SET @slave_connect_state = '{state}'"),
        "SET @slave_gtid_strict_mode = 1".to_string(),
    ]
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (domain, (server, seq)) in &self.domains {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{domain}-{server}-{seq}")?;
        }
        Ok(())
    }
}

/// The GTID a MariaDB GTID event (type 162) announces: its body starts with seq_no (8 bytes)
/// and domain_id (4), little-endian; the server id is the event header's.
pub fn from_event(server: u32, body: &[u8]) -> Option<Gtid> {
    let seq = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?);
    Some(Gtid {
        domain,
        server,
        seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_keeps_the_last_of_each_domain() {
        let mut s = GtidState::parse("100-1-7, 0-1-10").unwrap();
        assert_eq!(s.to_string(), "0-1-10,100-1-7");
        s.committed(Gtid {
            domain: 100,
            server: 2,
            seq: 8,
        });
        s.committed(Gtid {
            domain: 3,
            server: 3,
            seq: 1,
        });
        assert_eq!(s.to_string(), "0-1-10,3-3-1,100-2-8");
        assert!(GtidState::parse("").unwrap().is_empty());
        assert_eq!(GtidState::parse("1-2"), None);
        assert_eq!(GtidState::parse("a-b-c"), None);
    }

    #[test]
    fn gtid_event_body() {
        let mut body = 42u64.to_le_bytes().to_vec();
        body.extend_from_slice(&100u32.to_le_bytes());
        body.push(1);
        assert_eq!(
            from_event(7, &body),
            Some(Gtid {
                domain: 100,
                server: 7,
                seq: 42
            })
        );
        assert_eq!(from_event(7, &body[..10]), None);
    }
}
