//! The fault schedule: which fault comes next and after how long, drawn from the run's seed so
//! that `--seed` replays the same sequence (the clients' timing around it is not replayable).
//!
//! Faults come in rounds: each round is every kind once, shuffled (the server faults only when the
//! checker owns the server), so even a one-minute run sees each kind and none twice in a row
//! by chance more than the shuffle allows.

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
}

pub struct Schedule {
    rng: StdRng,
    round: Vec<Kind>,
    server_faults: bool,
    proxies: usize,
    consumers: usize,
}

impl Schedule {
    pub fn new(seed: u64, server_faults: bool, proxies: usize, consumers: usize) -> Schedule {
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
            if self.server_faults {
                self.round.extend([Kind::Restart, Kind::Crash]);
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
            let mut s = Schedule::new(seed, true, 2, 3);
            (0..20).map(|_| s.next_fault()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn each_round_has_every_kind() {
        let mut s = Schedule::new(1, true, 2, 3);
        let mut kinds: Vec<&str> = (0..7).map(|_| s.next_fault().1.kind()).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), 5);
        let mut s = Schedule::new(1, false, 2, 3);
        assert!(
            (0..50).all(|_| !matches!(s.next_fault().1, Fault::RestartServer | Fault::KillServer))
        );
    }
}
