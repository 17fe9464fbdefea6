//! A group's task (`StreamEngine::run`): take the lease, load the progress, read the binlog from
//! there, hand events to the group's streams, save the progress every [`SAVE_EVERY`]; again after
//! losing the lease; give the group up when it has been idle for [`IDLE_AFTER`].

use super::*;

impl StreamEngine {
    fn forget(&self, group: &Arc<Group>) {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if groups
            .get(&group.key)
            .is_some_and(|g| Arc::ptr_eq(g, group))
        {
            groups.remove(&group.key);
        }
    }

    fn set_mode(group: &Group, mode: Mode) {
        let mut inner = group.lock();
        if !matches!(inner.mode, Mode::Gone(_)) {
            inner.mode = mode;
        }
        drop(inner);
        group.changed.notify_waiters();
    }

    /// Ends the group here if it is idle: under the map's lock (which `join` holds while it
    /// adds a stream), so a stream never joins a group that is going away.
    fn give_up_if_idle(&self, group: &Arc<Group>) -> bool {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if !Self::idle(group) {
            return false;
        }
        group.lock().mode = Mode::Gone("idle".into());
        if groups
            .get(&group.key)
            .is_some_and(|g| Arc::ptr_eq(g, group))
        {
            groups.remove(&group.key);
        }
        true
    }

    /// Whether the group has had no streams and nothing in flight for [`IDLE_AFTER`].
    fn idle(group: &Group) -> bool {
        let inner = group.lock();
        inner.streams.is_empty()
            && inner.idle_since.is_some_and(|t| t.elapsed() >= IDLE_AFTER)
            && inner.state.as_ref().is_none_or(|s| s.in_flight() == 0)
    }

    /// The group's task: lease, load, read, deliver, save; again after losing the lease.
    pub(super) async fn run(self: Arc<Self>, group: Arc<Group>) {
        loop {
            // Take the lease.
            loop {
                if group.stop.is_cancelled() {
                    return self.forget(&group);
                }
                if self.give_up_if_idle(&group) {
                    return;
                }
                match self.store.claim(&group.key, &self.me).await {
                    Ok(true) => break,
                    Ok(false) => {
                        let owner = self.store.load(&group.key).await.ok().flatten();
                        match owner {
                            None => {
                                Self::set_mode(
                                    &group,
                                    Mode::Gone(format!("group '{}' was dropped", group.key.group)),
                                );
                                return self.forget(&group);
                            }
                            Some(row) => Self::set_mode(&group, Mode::Waiting(row.owner)),
                        }
                    }
                    Err(e) => tracing::debug!("claiming group {:?}: {e}", group.key),
                }
                tokio::select! {
                    _ = group.stop.cancelled() => {}
                    _ = tokio::time::sleep(CLAIM_EVERY) => {}
                }
            }
            match self.serve(&group).await {
                Served::LostLease => {
                    info!(
                        "group '{}' of `{}`.`{}`: another msgproxy took it over",
                        group.key.group, group.key.schema, group.key.table
                    );
                    let mut inner = group.lock();
                    inner.state = None;
                    inner.mode = Mode::Waiting(None);
                    drop(inner);
                    group.changed.notify_waiters();
                }
                Served::Stopped => {
                    let _ = self.store.release(&group.key, &self.me).await;
                    return self.forget(&group);
                }
            }
        }
    }

    /// Serves the group while this proxy holds its lease.
    async fn serve(&self, group: &Arc<Group>) -> Served {
        let Ok(Some(row)) = self.store.load(&group.key).await else {
            return Served::LostLease;
        };
        let mut progress = row.progress;
        loop {
            let reader_stop = group.stop.child_token();
            let (tx, mut rx) = mpsc::channel::<ReaderMsg>(64);
            {
                let mut inner = group.lock();
                let mut state = GroupState::new(progress.clone());
                // Saved at the first tick: after a SEEK, a save of the old state may have
                // landed after the SEEK's own write.
                state.mark_dirty();
                inner.state = Some(state);
                inner.seek = None;
                if !matches!(inner.mode, Mode::Gone(_)) {
                    inner.mode = Mode::Starting;
                }
            }
            group.changed.notify_waiters();
            let target = ReaderTarget {
                opts: self.reader_opts.clone(),
                schema: group.key.schema.clone(),
                table: group.key.table.clone(),
            };
            tokio::spawn(reader::run(
                target,
                progress.resume.clone(),
                tx,
                reader_stop.clone(),
            ));
            let end = self.deliver(group, &mut rx).await;
            reader_stop.cancel();
            match end {
                Delivered::Seek(to) => progress = to,
                Delivered::LostLease => return Served::LostLease,
                Delivered::Stopped => {
                    // The last progress, saved before the lease goes.
                    let last = group.lock().state.as_ref().map(GroupState::snapshot);
                    if let Some(p) = last {
                        let _ = self.store.save(&group.key, &self.me, &p).await;
                    }
                    return Served::Stopped;
                }
            }
        }
    }

    /// Runs one reader's events into the group until a seek, the lease is lost, or the group
    /// stops.
    async fn deliver(&self, group: &Arc<Group>, rx: &mut mpsc::Receiver<ReaderMsg>) -> Delivered {
        let mut save = tokio::time::interval(SAVE_EVERY);
        save.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_save = Instant::now();
        let mut reading = true;
        loop {
            let (window, next_deadline, waiting) = {
                let table = group.table();
                let mut inner = group.lock();
                let streams = inner.streams.len().max(1);
                let window = (table.options.max_unacked.saturating_mul(streams))
                    .max(table.options.batch_size * 4)
                    .min(1_000_000);
                let next = inner.state.as_mut().and_then(|s| s.expire(Instant::now()));
                (
                    inner.state.as_ref().is_some_and(|s| s.wants_more(window)),
                    next,
                    inner.state.as_ref().is_some_and(GroupState::has_waiting),
                )
            };
            // The streams are woken for events to send (new ones, or ones whose deadline
            // passed); mode changes and departures wake them where they happen. Waking them
            // at every turn of this loop (every transaction read, every save tick) woke each
            // stream for nothing most of the time.
            if waiting {
                group.changed.notify_waiters();
            }
            let deadline = next_deadline.map_or_else(
                || tokio::time::Instant::now() + Duration::from_secs(3600),
                tokio::time::Instant::from_std,
            );
            tokio::select! {
                _ = group.stop.cancelled() => return Delivered::Stopped,
                msg = rx.recv(), if window && reading => match msg {
                    Some(ReaderMsg::Committed { events, end }) => {
                        let table = group.table();
                        let mut inner = group.lock();
                        if let Some(state) = inner.state.as_mut() {
                            state.committed(events, end, |e| {
                                group.filter.as_ref().is_none_or(|f| filter::matches(f, e, &*table))
                            });
                        }
                    }
                    Some(ReaderMsg::Opened) => {
                        if group.mode() == Mode::Starting {
                            Self::set_mode(group, Mode::Serving);
                        }
                    }
                    Some(ReaderMsg::Progress(end)) => {
                        if let Some(state) = group.lock().state.as_mut() {
                            state.progress(end);
                        }
                    }
                    Some(ReaderMsg::Failed(ReaderError::TableGone(at))) => {
                        // Groups of a dropped table are gone with it (STREAMS.md §2).
                        let why = format!(
                            "the table `{}`.`{}` was dropped or renamed (binlog {at}); group '{}' is gone with it",
                            group.key.schema, group.key.table, group.key.group
                        );
                        info!("{why}");
                        if let Err(e) = self.store.delete(&group.key).await {
                            warn!("forgetting group {:?} of a dropped table: {e}", group.key);
                        }
                        Self::set_mode(group, Mode::Gone(why));
                        return Delivered::Stopped;
                    }
                    Some(ReaderMsg::Failed(e)) => {
                        reading = false;
                        let why = self.failure_message(group, &e).await;
                        warn!("{why}");
                        Self::set_mode(group, Mode::Failed(why));
                    }
                    None => {
                        // The reader ends by itself only after a Failed; gone without one, it
                        // panicked on an event: going on would deliver nothing, silently.
                        reading = false;
                        if !group.stop.is_cancelled() {
                            let why = format!(
                                "group '{}' of `{}`.`{}` stopped: its binlog reader failed on an event it could not read (see msgproxy's log); SEEK the group past it, or report the event",
                                group.key.group, group.key.schema, group.key.table
                            );
                            warn!("{why}");
                            Self::set_mode(group, Mode::Failed(why));
                        }
                    }
                },
                _ = tokio::time::sleep_until(deadline) => {}
                _ = group.control.notified() => {
                    let seek = group.lock().seek.take();
                    if let Some(to) = seek {
                        return Delivered::Seek(to);
                    }
                    if self.give_up_if_idle(group) {
                        return Delivered::Stopped;
                    }
                }
                _ = save.tick() => {
                    let (changed, snapshot) = {
                        let mut inner = group.lock();
                        match inner.state.as_mut() {
                            Some(s) => (s.take_progress(), Some(s.snapshot())),
                            None => (None, None),
                        }
                    };
                    let due = last_save.elapsed() >= RENEW_EVERY;
                    let to_save = changed.or(if due { snapshot } else { None });
                    if let Some(p) = to_save {
                        match self.store.save(&group.key, &self.me, &p).await {
                            Ok(true) => last_save = Instant::now(),
                            Ok(false) => return Delivered::LostLease,
                            Err(e) => {
                                // Saved at the next tick; the lease lasts long enough.
                                tracing::debug!("saving group {:?}: {e}", group.key);
                                if let Some(state) = group.lock().state.as_mut() {
                                    state.mark_dirty();
                                }
                            }
                        }
                    }
                    if self.give_up_if_idle(group) {
                        return Delivered::Stopped;
                    }
                }
            }
        }
    }

    /// The message for a reader that stopped for good.
    async fn failure_message(&self, group: &Group, e: &ReaderError) -> String {
        match e {
            ReaderError::PositionGone { at, .. } => {
                let position = group.lock().state.as_ref().map_or(0, GroupState::floor);
                let oldest = locate::oldest_event(&self.reader_opts)
                    .await
                    .ok()
                    .flatten()
                    .map_or("none".to_owned(), |id| id.to_string());
                format!(
                    "group '{}' of `{}`.`{}` is at event {position} (binlog {at}), which the server's binlog no longer holds; the oldest event it holds is {oldest}. SEEK `{}`.`{}` GROUP '...' TO EARLIEST (or TO EVENT n) to go on from there",
                    group.key.group, group.key.schema, group.key.table, group.key.schema, group.key.table
                )
            }
            other => format!(
                "group '{}' of `{}`.`{}` stopped: {other}",
                group.key.group, group.key.schema, group.key.table
            ),
        }
    }
}

enum Served {
    LostLease,
    Stopped,
}

enum Delivered {
    Seek(Progress),
    LostLease,
    Stopped,
}
