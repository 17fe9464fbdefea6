//! The serving side of `ACK`s and `SEEK`s through other proxies (`requests.rs`): the engine's
//! poller, which applies the requests for every group served here, and the takeover step that
//! applies a group's queued requests before its new proxy sends anything.

use std::collections::{BTreeSet, HashSet};

use super::group_task::Served;
use super::*;
use crate::streams::requests::Request;
use crate::streams::resume::Anchor;

impl StreamEngine {
    /// Every [`requests::POLL_EVERY`], while this proxy serves groups: reads the pending
    /// requests of all of them in one query, applies each `ACK` to its group's state as a local
    /// `ACK` would and writes those answers in one statement; a `SEEK` runs in a task of its own
    /// (finding its position reads the binlog) and answers when done. Now and then deletes old
    /// answered requests. Stops with the engine's shutdown token.
    ///
    /// Writing answers runs beside the reads, one write at a time: a write can wait seconds
    /// (on Galera, commits stall while the cluster decides a node has left), and meanwhile the
    /// `ACK`s read next are still applied at once, so that their events are not sent again (an
    /// `ACK` answered "queued" to its client holds all the same); their answers go in the next
    /// write.
    pub(super) async fn answer_requests(self: Arc<Self>) {
        let mut last_purge = Instant::now();
        // The `SEEK`s whose tasks run: not started again while their request is pending.
        let mut seeking: HashSet<u64> = HashSet::new();
        // `ACK`s applied whose answers are not written yet (waiting for the writer, or being
        // written): not applied again while their request is pending (that would answer 0).
        let mut unwritten: Vec<(u64, Answer)> = Vec::new();
        let mut applied: HashSet<u64> = HashSet::new();
        // The write in progress, and the ids it answers.
        let mut writer: Option<(tokio::task::JoinHandle<()>, Vec<u64>)> = None;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                _ = tokio::time::sleep(requests::POLL_EVERY) => {}
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
            let asked_at = Instant::now();
            let read = self.requests.pending(&keys).await;
            if asked_at.elapsed() > requests::SLOW_READ {
                info!(
                    "reading the ACK/SEEK requests for {} group(s) took {:?}",
                    keys.len(),
                    asked_at.elapsed()
                );
            }
            let pending = match read {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!("reading ACK/SEEK requests: {e}");
                    continue;
                }
            };
            seeking.retain(|id| pending.iter().any(|r| r.id == *id));
            // A write that ended: its requests are answered, or (after a failure) read again
            // and applied again, then answered 0 (their ids are acked by then; the ack holds).
            if writer.as_ref().is_some_and(|(task, _)| task.is_finished()) {
                if let Some((_, ids)) = writer.take() {
                    for id in ids {
                        applied.remove(&id);
                    }
                }
            }
            // A request of a group that stopped being served here meanwhile stays pending: the
            // next proxy to serve the group applies it when it takes the group over.
            for Request { id, key, asked } in pending {
                let Some(group) = served.get(&key) else {
                    continue;
                };
                if applied.contains(&id) {
                    continue;
                }
                match asked {
                    Asked::Ack(ids) => match group.ack_here(&ids) {
                        Some(n) => {
                            tracing::debug!("applied ACK request {id}: {n} newly acked");
                            applied.insert(id);
                            unwritten.push((id, Answer::Done(n)));
                        }
                        None => tracing::debug!(
                            "ACK request {id} of group {key:?}: the group is not served here now"
                        ),
                    },
                    Asked::Seek(to) => {
                        if seeking.insert(id) {
                            let engine = self.clone();
                            tokio::spawn(async move {
                                let answer = match engine.seek_here(&key, to).await {
                                    Ok(()) => Answer::Done(0),
                                    Err(e) => Answer::Failed(e.message),
                                };
                                if let Err(e) =
                                    engine.requests.answer(&[(id, answer)], &engine.me).await
                                {
                                    tracing::debug!("answering SEEK request {id}: {e}");
                                }
                            });
                        }
                    }
                }
            }
            if writer.is_none() && !unwritten.is_empty() {
                let answers = std::mem::take(&mut unwritten);
                let ids: Vec<u64> = answers.iter().map(|(id, _)| *id).collect();
                let engine = self.clone();
                let task = tokio::spawn(async move {
                    if let Err(e) = engine.requests.answer(&answers, &engine.me).await {
                        tracing::debug!("answering ACK requests: {e}");
                    }
                });
                writer = Some((task, ids));
            }
            if last_purge.elapsed() >= requests::PURGE_EVERY {
                last_purge = Instant::now();
                if let Err(e) = self.requests.purge().await {
                    tracing::debug!("deleting answered requests: {e}");
                }
            }
        }
    }

    /// At a takeover, before the group's state is built: applies the group's queued requests
    /// (those its previous proxy did not answer, e.g. because it died), in order, to `progress`
    /// and `anchor` — an `ACK`'s ids become acked ids, a `SEEK` moves them — saves that, and
    /// only then answers them, so a request queued for a dead proxy is honoured and never lost.
    /// Acked events are then skipped when read. An `ACK` is answered with the ids it added (at
    /// or above the floor, not acked yet): events not read yet are not known, so an id that
    /// names no event of the group counts too.
    ///
    /// `Err(served)`: the lease was lost, or the group stopped, while doing it.
    pub(super) async fn apply_queued_requests(
        &self,
        group: &Group,
        progress: &mut Progress,
        anchor: &mut Anchor,
    ) -> Result<(), Served> {
        let key = &group.key;
        let pending = loop {
            match self.requests.pending(std::slice::from_ref(key)).await {
                Ok(p) => break p,
                Err(e) => {
                    // Not served without them: an ACK read later would find its events not yet
                    // read and be answered 0, its ack lost.
                    tracing::debug!("reading the queued requests of group {key:?}: {e}");
                    tokio::select! {
                        _ = group.stop.cancelled() => return Err(Served::Stopped),
                        _ = tokio::time::sleep(requests::POLL_EVERY * 10) => {}
                    }
                }
            }
        };
        if pending.is_empty() {
            return Ok(());
        }
        let mut acked: BTreeSet<u64> = progress.acked.iter().copied().collect();
        let mut answers = Vec::with_capacity(pending.len());
        for request in &pending {
            let answer = match &request.asked {
                Asked::Ack(ids) => {
                    let added = ids
                        .iter()
                        .filter(|id| **id >= progress.floor && acked.insert(**id))
                        .count();
                    Answer::Done(added as u64)
                }
                Asked::Seek(to) => match self.resolve_seek(key, *to).await {
                    Ok((to, here)) => {
                        acked = to.acked.iter().copied().collect();
                        *progress = to;
                        *anchor = Anchor::at(here);
                        Answer::Done(0)
                    }
                    Err(e) => Answer::Failed(e.message),
                },
            };
            answers.push((request.id, answer));
        }
        progress.acked = acked.into_iter().collect();
        match self.store.save(key, &self.me, progress, anchor).await {
            Ok(true) => {
                info!(
                    "group '{}' of `{}`.`{}`: applied {} request(s) queued for the proxy that served it before",
                    key.group,
                    key.schema,
                    key.table,
                    answers.len()
                );
                if let Err(e) = self.requests.answer(&answers, &self.me).await {
                    tracing::debug!("answering the queued requests of group {key:?}: {e}");
                }
                Ok(())
            }
            Ok(false) => Err(Served::LostLease),
            // Left unanswered: the state built from `progress` holds them and saves them at its
            // first tick; the poller then answers the ACKs 0 and runs the SEEKs again.
            Err(e) => {
                tracing::debug!("saving the queued requests of group {key:?}: {e}");
                Ok(())
            }
        }
    }
}
