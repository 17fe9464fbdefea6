//! The fault schedule: which fault comes next and after how long, drawn from the run's seed so
//! that `--seed` replays the same sequence (the clients' timing around it is not replayable).
//!
//! Faults come in rounds: each round is every kind once, shuffled (the server faults only when the
//! checker owns the server), so even a one-minute run sees each kind and none twice in a row
//! by chance more than the shuffle allows.
//!
//! The server faults depend on what the servers are ([`ServerFaults`]): one throwaway server is
//! restarted or killed; a Galera node is killed or stopped and rejoins before the next fault (so
//! at most one node is ever down and the cluster keeps its quorum); a primary with a replica
//! fails over once, and the run goes on against the promoted server (there is no replica left to
//! fail over to, and building a new one from a backup is not msgproxy's business).

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL one proxy; start it again on the same port after `down` (its clients reconnect).
    KillProxy { proxy: usize, down: Duration },
    /// Stop the server cleanly (SIGTERM) and start it again.
    RestartServer,
    /// SIGKILL the server and start it again (crash recovery; acknowledged commits must survive).
    KillServer,
    /// Drop one consumer's STREAM and ACK connections, with whatever it had not acked yet.
    KillConsumer { consumer: usize },
    /// `KILL` one of the server's client connections (a proxy's backend connection, its binlog
    /// reader, or the direct producer's), chosen by `pick` among those present.
    KillBackendConnection { pick: u64 },
    /// Galera: SIGKILL node `node` (from 0), or stop it cleanly (`crash` false); start it again
    /// after `down` and wait until it has rejoined.
    BounceNode {
        node: usize,
        crash: bool,
        down: Duration,
    },
    /// Primary and replica: SIGKILL the primary; promote the replica after `detect`, as a
    /// failover tool would.
    FailOver { detect: Duration },
}

/// The server faults a run can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFaults {
    /// None: the server is `--backend`'s, not the checker's.
    None,
    /// Restart and SIGKILL the one throwaway server.
    Single,
    /// Kill or stop one of this many Galera nodes at a time.
    Galera { nodes: usize },
    /// Fail over once from the primary to the replica.
    Replica,
}

impl Fault {
    /// A short name for the summary's counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::KillProxy { .. } => "proxy SIGKILL+restart",
            Fault::RestartServer => "server restart",
            Fault::KillServer => "server SIGKILL+restart",
            Fault::KillConsumer { .. } => "consumer disconnect",
            Fault::KillBackendConnection { .. } => "backend connection KILL",
            Fault::BounceNode { crash: true, .. } => "node SIGKILL+rejoin",
            Fault::BounceNode { crash: false, .. } => "node stop+rejoin",
            Fault::FailOver { .. } => "primary SIGKILL+failover",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::KillProxy { proxy, down } => {
                write!(f, "SIGKILL proxy {proxy}, restart after {down:?}")
            }
            Fault::RestartServer => write!(f, "restart the server (SIGTERM)"),
            Fault::KillServer => write!(f, "SIGKILL the server, restart it"),
            Fault::KillConsumer { consumer } => write!(f, "disconnect consumer-{consumer}"),
            Fault::KillBackendConnection { .. } => write!(f, "KILL a backend connection"),
            Fault::BounceNode { node, crash, down } => write!(
                f,
                "{} node {}, start it again after {down:?}",
                if *crash { "SIGKILL" } else { "stop" },
                node + 1
            ),
            Fault::FailOver { detect } => {
                write!(
                    f,
                    "SIGKILL the primary, promote the replica after {detect:?}"
                )
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Proxy,
    Restart,
    Crash,
    Consumer,
    Backend,
    NodeKill,
    NodeStop,
    FailOver,
}

pub struct Schedule {
    rng: StdRng,
    round: Vec<Kind>,
    server_faults: ServerFaults,
    proxies: usize,
    consumers: usize,
}

impl Schedule {
    pub fn new(
        seed: u64,
        server_faults: ServerFaults,
        proxies: usize,
        consumers: usize,
    ) -> Schedule {
        Schedule {
            // A stream of its own, so that the workload's draws do not shift the schedule.
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_fa17),
            round: Vec::new(),
            server_faults,
            proxies,
            consumers,
        }
    }

    /// The pause before the next fault, and the fault.
    pub fn next_fault(&mut self) -> (Duration, Fault) {
        if self.round.is_empty() {
            self.round = vec![
                Kind::Proxy,
                Kind::Proxy,
                Kind::Consumer,
                Kind::Consumer,
                Kind::Backend,
            ];
            match self.server_faults {
                ServerFaults::None => {}
                ServerFaults::Single => self.round.extend([Kind::Restart, Kind::Crash]),
                ServerFaults::Galera { .. } => self.round.extend([Kind::NodeKill, Kind::NodeStop]),
                ServerFaults::Replica => self.round.push(Kind::FailOver),
            }
            self.round.shuffle(&mut self.rng);
        }
        let kind = self.round.pop().expect("a round is never empty");
        let pause = Duration::from_millis(self.rng.random_range(2000..5000));
        let fault = match kind {
            Kind::Proxy => Fault::KillProxy {
                proxy: self.rng.random_range(0..self.proxies),
                down: Duration::from_millis(self.rng.random_range(100..1500)),
            },
            Kind::Restart => Fault::RestartServer,
            Kind::Crash => Fault::KillServer,
            Kind::Consumer => Fault::KillConsumer {
                consumer: self.rng.random_range(0..self.consumers),
            },
            Kind::Backend => Fault::KillBackendConnection {
                pick: self.rng.random(),
            },
            Kind::NodeKill | Kind::NodeStop => Fault::BounceNode {
                node: match self.server_faults {
                    ServerFaults::Galera { nodes } => self.rng.random_range(0..nodes.max(1)),
                    _ => 0,
                },
                crash: kind == Kind::NodeKill,
                down: Duration::from_millis(self.rng.random_range(500..4000)),
            },
            Kind::FailOver => {
                // Once: afterwards there is no replica to fail over to.
                self.server_faults = ServerFaults::None;
                Fault::FailOver {
                    detect: Duration::from_millis(self.rng.random_range(300..2000)),
                }
            }
        };
        (pause, fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_schedule() {
        let draw = |seed| {
            let mut s = Schedule::new(seed, ServerFaults::Single, 2, 3);
            (0..20).map(|_| s.next_fault()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn each_round_has_every_kind() {
        let mut s = Schedule::new(1, ServerFaults::Single, 2, 3);
        let mut kinds: Vec<&str> = (0..7).map(|_| s.next_fault().1.kind()).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), 5);
        let mut s = Schedule::new(1, ServerFaults::None, 2, 3);
        assert!(
            (0..50).all(|_| !matches!(s.next_fault().1, Fault::RestartServer | Fault::KillServer))
        );
    }

    #[test]
    fn galera_bounces_every_node_and_only_nodes() {
        let mut s = Schedule::new(3, ServerFaults::Galera { nodes: 3 }, 3, 3);
        let faults: Vec<Fault> = (0..200).map(|_| s.next_fault().1).collect();
        let mut bounced: Vec<(usize, bool)> = faults
            .iter()
            .filter_map(|f| match f {
                Fault::BounceNode { node, crash, .. } => Some((*node, *crash)),
                _ => None,
            })
            .collect();
        bounced.sort();
        bounced.dedup();
        assert_eq!(
            bounced.len(),
            6,
            "every node, killed and stopped: {bounced:?}"
        );
        assert!(!faults.iter().any(|f| matches!(
            f,
            Fault::RestartServer | Fault::KillServer | Fault::FailOver { .. }
        )));
    }

    #[test]
    fn a_replica_fails_over_once_in_the_first_round() {
        let mut s = Schedule::new(5, ServerFaults::Replica, 2, 3);
        let faults: Vec<Fault> = (0..100).map(|_| s.next_fault().1).collect();
        let at: Vec<usize> = (0..faults.len())
            .filter(|&i| matches!(faults[i], Fault::FailOver { .. }))
            .collect();
        assert_eq!(at.len(), 1);
        assert!(at[0] < 6, "fail-over in the first round, at {}", at[0]);
        assert!(!faults.iter().any(|f| matches!(
            f,
            Fault::RestartServer | Fault::KillServer | Fault::BounceNode { .. }
        )));
    }
}
