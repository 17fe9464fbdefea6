//! Several servers behind one `--backend` (issue 22, docs/CLUSTERS.md): the nodes of a Galera
//! cluster, or a primary and its replicas. [`Backends`] says which one msgproxy uses now; the
//! sessions' new connections, the spares, the engine's pool ([`SharedPool`]) and the binlog
//! watcher all ask it, or watch it for a switch.
//!
//! Every [`CHECK_INTERVAL`] each server is asked whether it is usable (`health`): reachable,
//! `read_only` off and, on Galera, synced and ready. The proxy stays on its server while it is
//! usable (moving back and forth between Galera nodes would only cost reconnections, and an old
//! primary that comes back writable is the failover tool's to fence, not msgproxy's to follow);
//! when it is not, it moves to the first usable server in the configured order. With no usable
//! server it stays where it is: clients then get that server's own errors. msgproxy never
//! promotes or fences a server.
//!
//! With one server there is nothing to choose: no checks run and nothing ever switches.

pub mod health;
mod pool;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::BackendTarget;
use health::{Checker, Health};
pub use pool::SharedPool;

/// How often every server is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// The server in use, and how many switches led to it.
#[derive(Debug, Clone)]
pub struct Current {
    /// Its place in the configured list.
    pub index: usize,
    pub target: BackendTarget,
    /// 0 at start, one more at each switch: what a holder of a connection compares to know
    /// whether its connection is to the server in use.
    pub generation: u64,
}

/// The configured servers and the one in use.
pub struct Backends {
    targets: Vec<BackendTarget>,
    current: watch::Sender<Current>,
    /// Each server's last answer, for the metrics: 0 not checked, 1 usable, 2 not usable.
    answers: Vec<AtomicU8>,
}

/// One configured server as the metrics show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerView {
    /// host:port, or the socket's path.
    pub address: String,
    /// The last check's answer; `None` before the first check (and always with one server).
    pub usable: Option<bool>,
    pub in_use: bool,
}

impl Backends {
    /// The servers, the first in use; no checks run until [`Backends::start_checks`].
    pub fn new(targets: Vec<BackendTarget>) -> Arc<Backends> {
        assert!(
            !targets.is_empty(),
            "the configuration names at least one backend"
        );
        let (current, _) = watch::channel(Current {
            index: 0,
            target: targets[0].clone(),
            generation: 0,
        });
        let answers = targets.iter().map(|_| AtomicU8::new(0)).collect();
        Arc::new(Backends {
            targets,
            current,
            answers,
        })
    }

    /// The server to connect to now.
    pub fn current(&self) -> BackendTarget {
        self.current.borrow().target.clone()
    }

    /// How many switches there have been.
    pub fn generation(&self) -> u64 {
        self.current.borrow().generation
    }

    /// Sees every switch.
    pub fn subscribe(&self) -> watch::Receiver<Current> {
        self.current.subscribe()
    }

    /// Every configured server: its last answer and whether it is the one in use.
    pub fn servers(&self) -> Vec<ServerView> {
        let in_use = self.current.borrow().index;
        self.targets
            .iter()
            .zip(&self.answers)
            .enumerate()
            .map(|(i, (t, answer))| ServerView {
                address: t.address(),
                usable: match answer.load(Ordering::Relaxed) {
                    1 => Some(true),
                    2 => Some(false),
                    _ => None,
                },
                in_use: i == in_use,
            })
            .collect()
    }

    /// The configured servers other than the one in use, in the configured order: where a
    /// stream group may read a stretch of binlog that the server in use no longer holds
    /// (a Galera node that rejoined by SST starts a new binlog).
    pub fn others(&self) -> Vec<BackendTarget> {
        let in_use = self.current.borrow().index;
        self.targets
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != in_use)
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// Whether there is more than one server to choose from.
    pub fn is_cluster(&self) -> bool {
        self.targets.len() > 1
    }

    /// With several servers: checks them all once (so the proxy starts on a usable one when
    /// there is one), then every [`CHECK_INTERVAL`] in a task of its own until `shutdown`.
    pub async fn start_checks(self: &Arc<Self>, shutdown: CancellationToken) {
        if !self.is_cluster() {
            return;
        }
        let mut checkers: Vec<Checker> = self.targets.iter().cloned().map(Checker::new).collect();
        let mut last: Vec<Option<Health>> = vec![None; checkers.len()];
        self.check_round(&mut checkers, &mut last).await;
        let backends = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(CHECK_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                backends.check_round(&mut checkers, &mut last).await;
            }
        });
    }

    /// Asks every server (at once: one slow server does not delay the verdict on the others),
    /// logs each change of a server's answer, and switches when the server in use is not
    /// usable and another is.
    async fn check_round(&self, checkers: &mut Vec<Checker>, last: &mut [Option<Health>]) {
        let mut asking = tokio::task::JoinSet::new();
        for (i, mut checker) in std::mem::take(checkers).into_iter().enumerate() {
            asking.spawn(async move {
                let health = checker.check().await;
                (i, checker, health)
            });
        }
        let mut answered: Vec<(usize, Checker, Health)> = Vec::with_capacity(last.len());
        while let Some(done) = asking.join_next().await {
            match done {
                Ok(answer) => answered.push(answer),
                // A check never panics; were one to, its server counts as unusable from now on.
                Err(e) => warn!("a backend check failed: {e}"),
            }
        }
        let mut answers = vec![Health::Unusable("its check failed".into()); last.len()];
        let mut back: Vec<Option<Checker>> = (0..last.len()).map(|_| None).collect();
        for (i, checker, health) in answered {
            answers[i] = health;
            back[i] = Some(checker);
        }
        *checkers = back
            .into_iter()
            .enumerate()
            .map(|(i, c)| c.unwrap_or_else(|| Checker::new(self.targets[i].clone())))
            .collect();
        for (i, health) in answers.iter().enumerate() {
            self.answers[i].store(if health.is_usable() { 1 } else { 2 }, Ordering::Relaxed);
            if last[i].as_ref() != Some(health) {
                let address = self.targets[i].address();
                match health {
                    Health::Usable => info!("backend {address}: usable"),
                    Health::Unusable(why) => warn!("backend {address}: not usable: {why}"),
                }
                last[i] = Some(health.clone());
            }
        }
        let in_use = self.current.borrow().index;
        if answers[in_use].is_usable() {
            return;
        }
        if let Some(next) = choose(&answers, in_use) {
            self.switch_to(next);
        }
    }

    fn switch_to(&self, index: usize) {
        let target = self.targets[index].clone();
        let from = self.current.borrow().target.address();
        info!(
            "switching backend from {from} to {} (it is writable and the other is not)",
            target.address()
        );
        self.current.send_modify(|c| {
            c.index = index;
            c.target = target;
            c.generation += 1;
        });
    }
}

/// Where to go when the server in use (`in_use`) is not usable: the first usable server in the
/// configured order, if any.
pub fn choose(answers: &[Health], in_use: usize) -> Option<usize> {
    answers
        .iter()
        .enumerate()
        .find(|(i, h)| *i != in_use && h.is_usable())
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_usable_server_in_order_is_chosen() {
        let up = Health::Usable;
        let down = Health::Unusable("down".into());
        assert_eq!(choose(&[down.clone(), up.clone(), up.clone()], 0), Some(1));
        assert_eq!(choose(&[up.clone(), down.clone(), up.clone()], 1), Some(0));
        assert_eq!(choose(&[down.clone(), down.clone()], 0), None);
    }
}
