//! The serving side of `ACK`s through other proxies (`ack_requests.rs`): the engine's poller,
//! which applies the requests for every group served here, and the takeover step that applies a
//! group's queued requests before its new proxy sends anything.

use std::collections::BTreeSet;

use super::group_task::Served;
use super::*;
use crate::streams::resume::Anchor;

impl StreamEngine {
    /// Every [`ack_requests::POLL_EVERY`], while this proxy serves groups: reads the pending
    /// requests of all of them in one query, applies each to its group's state as a local `ACK`
    /// would, and writes the answers in one statement. Now and then deletes old answered
    /// requests. Stops with the engine's shutdown token.
    pub(super) async fn answer_requests(self: Arc<Self>) {
        let mut last_purge = Instant::now();
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                _ = tokio::time::sleep(ack_requests::POLL_EVERY) => {}
            }
            let served: HashMap<GroupKey, Arc<Group>> = self
                .groups
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(_, g)| {
                    let inner = g.lock();
                    inner.state.is_some() && !matches!(inner.mode, Mode::Gone(_))
                })
                .map(|(k, g)| (k.clone(), g.clone()))
                .collect();
            // No query at all while nothing is served here (a proxy whose clients do not use
            // event streams, or only ACK through it).
            if served.is_empty() {
                continue;
            }
            let keys: Vec<GroupKey> = served.keys().cloned().collect();
            let pending = match self.requests.pending(&keys).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!("reading ACK requests: {e}");
                    continue;
                }
            };
            // A request of a group that stopped being served here meanwhile stays pending: the
            // next proxy to serve the group applies it when it takes the group over.
            let answers: Vec<(u64, u64)> = pending
                .iter()
                .filter_map(|r| {
                    let n = served.get(&r.key)?.ack_here(&r.ids)?;
                    Some((r.id, n))
                })
                .collect();
            // Unanswered after a failure, a request is applied again at the next poll: its ids
            // are acked by then, so it is answered 0 (the ack itself holds).
            if let Err(e) = self.requests.answer(&answers, &self.me).await {
                tracing::debug!("answering ACK requests: {e}");
            }
            if last_purge.elapsed() >= ack_requests::PURGE_EVERY {
                last_purge = Instant::now();
                if let Err(e) = self.requests.purge().await {
                    tracing::debug!("deleting answered ACK requests: {e}");
                }
            }
        }
    }

    /// At a takeover, before the group's state is built: folds the group's queued requests
    /// (those its previous proxy did not answer, e.g. because it died) into `progress` as acked
    /// ids, saves that, and only then answers them, so an ack queued for a dead proxy is
    /// honoured and never lost. Their events are then skipped when read. Each is answered with
    /// the ids it added (at or above the floor, not acked yet): events not read yet are not
    /// known, so an id that names no event of the group counts too.
    ///
    /// `Err(served)`: the lease was lost, or the group stopped, while doing it.
    pub(super) async fn fold_queued_acks(
        &self,
        group: &Group,
        progress: &mut Progress,
        anchor: &Anchor,
    ) -> Result<(), Served> {
        let key = &group.key;
        let pending = loop {
            match self.requests.pending(std::slice::from_ref(key)).await {
                Ok(p) => break p,
                Err(e) => {
                    // Not served without them: a request read later would find its events not
                    // yet read and be answered 0, its ack lost.
                    tracing::debug!("reading the queued ACKs of group {key:?}: {e}");
                    tokio::select! {
                        _ = group.stop.cancelled() => return Err(Served::Stopped),
                        _ = tokio::time::sleep(ack_requests::POLL_EVERY * 10) => {}
                    }
                }
            }
        };
        if pending.is_empty() {
            return Ok(());
        }
        let mut acked: BTreeSet<u64> = progress.acked.iter().copied().collect();
        let answers: Vec<(u64, u64)> = pending
            .iter()
            .map(|r| {
                let added = r
                    .ids
                    .iter()
                    .filter(|id| **id >= progress.floor && acked.insert(**id))
                    .count();
                (r.id, added as u64)
            })
            .collect();
        progress.acked = acked.into_iter().collect();
        match self.store.save(key, &self.me, progress, anchor).await {
            Ok(true) => {
                info!(
                    "group '{}' of `{}`.`{}`: applied {} ACK request(s) queued for the proxy that served it before",
                    key.group,
                    key.schema,
                    key.table,
                    answers.len()
                );
                if let Err(e) = self.requests.answer(&answers, &self.me).await {
                    tracing::debug!("answering the queued ACKs of group {key:?}: {e}");
                }
                Ok(())
            }
            Ok(false) => Err(Served::LostLease),
            // Left unanswered: the state built from `progress` holds them and saves them at its
            // first tick; the poller then answers them 0.
            Err(e) => {
                tracing::debug!("saving the queued ACKs of group {key:?}: {e}");
                Ok(())
            }
        }
    }
}
