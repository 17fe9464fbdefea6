//! A group's task (`StreamEngine::run`): take the lease, load the progress, place it on the
//! server in use (`placement.rs`: its own file and offset, by GTID on another server, or another
//! server's binlog that holds its place), read the binlog from there, hand events to the group's
//! streams, save the progress every [`SAVE_EVERY`]; again after losing the lease or a backend
//! switch; give the group up when it has been idle for [`IDLE_AFTER`].

use std::collections::VecDeque;

use tokio::sync::broadcast;

use super::*;
use crate::binlog::BinlogPosition;
use crate::streams::group::position_before;
use crate::streams::resume::{self, Anchor, Done};

// A module of this one, not of `engine`: the placement uses this file's own helpers of the task
// (`set_mode`, `last_progress`, `give_up_if_idle`) without them being opened to the engine.
#[path = "placement.rs"]
mod placement;
use placement::{Placed, Placement};

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
    /// adds a stream), so a stream never joins a group that is going away. The group stays in
    /// the map (as gone) until its task has saved and released the lease (`forget`), so that a
    /// stream joining meanwhile starts a task that waits for this one.
    fn give_up_if_idle(&self, group: &Arc<Group>) -> bool {
        let _groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if !Self::idle(group) {
            return false;
        }
        group.lock().mode = Mode::Gone("idle".into());
        true
    }

    /// Whether the group has had no streams and nothing in flight for [`IDLE_AFTER`], and its
    /// progress is saved: a group whose server went away (its saves fail) is kept until a
    /// switch carries its progress to the new server, where the next proxy to serve it finds
    /// what it has done (the streams of a session die with its backend connection, so a group
    /// is often idle at a switch).
    fn idle(group: &Group) -> bool {
        let inner = group.lock();
        inner.streams.is_empty()
            && inner.idle_since.is_some_and(|t| t.elapsed() >= IDLE_AFTER)
            && inner
                .state
                .as_ref()
                .is_none_or(|s| s.in_flight() == 0 && s.is_saved())
    }

    /// The group's task: lease, load, read, deliver, save; again after losing the lease.
    pub(super) async fn run(self: Arc<Self>, group: Arc<Group>, previous: Option<Arc<Group>>) {
        let _finished = group.finished.clone().drop_guard();
        if let Some(previous) = previous {
            tokio::select! {
                _ = group.stop.cancelled() => return self.forget(&group),
                _ = previous.finished.cancelled() => {}
            }
        }
        loop {
            // Take the lease.
            loop {
                if group.stop.is_cancelled() {
                    return self.forget(&group);
                }
                if self.give_up_if_idle(&group) {
                    return self.forget(&group);
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
        let mut anchor = row.anchor;
        // ACKs and SEEKs queued through other proxies while another served the group (or none
        // did).
        if let Err(end) = self
            .apply_queued_requests(group, &mut progress, &mut anchor)
            .await
        {
            return end;
        }
        // Built from the durable row below; kept from here on only across a backend switch.
        group.lock().state = None;
        let mut not_here = false;
        loop {
            Self::set_mode(group, Mode::Starting);
            let placed = self
                .place(
                    group,
                    &mut progress,
                    anchor.clone(),
                    std::mem::take(&mut not_here),
                )
                .await;
            let mut placement = match placed {
                Placed::Ready(p) => p,
                Placed::Seek((to, server)) => {
                    progress = to;
                    anchor = Anchor::at(server);
                    group.lock().state = None;
                    continue;
                }
                Placed::LostLease => return Served::LostLease,
                Placed::Stopped => return Served::Stopped,
            };
            {
                let mut inner = group.lock();
                let mut state = match inner.state.take() {
                    // Kept across a switch: the acks taken meanwhile and the events in flight
                    // (with their deadlines) stay; only the reading goes on on the new server.
                    Some(mut kept) => {
                        kept.rebase(progress.resume.clone());
                        kept
                    }
                    None => GroupState::new(progress.clone()),
                };
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
            // The group reads alone from where it must resume, and hands over to the table's
            // shared reader once it has caught up with it.
            let follow_shared = !placement.reads_elsewhere();
            let mut sources = Sources {
                own: Some(self.own_reader(group, &placement.opts, progress.resume.clone())),
                shared: if follow_shared {
                    self.shared
                        .subscribe(&group.key.schema, &group.key.table, placement.generation)
                } else {
                    None
                },
                ahead: VecDeque::new(),
                opts: placement.opts.clone(),
                generation: placement.generation,
                follow_shared,
            };
            let end = self.deliver(group, &mut sources, &mut placement).await;
            sources.stop_own();
            match end {
                Delivered::Seek((to, server)) => {
                    progress = to;
                    anchor = Anchor::at(server);
                    group.lock().state = None;
                }
                Delivered::LostLease => return Served::LostLease,
                Delivered::Stopped => {
                    // The last progress, saved before the lease goes.
                    if let Some((p, done)) = Self::last_progress(group) {
                        let a = placement.anchor_now(done);
                        let _ = self.store.save(&group.key, &self.me, &p, &a).await;
                    }
                    return Served::Stopped;
                }
                Delivered::PositionGone => {
                    not_here = true;
                    if let Some((p, d)) = Self::last_progress(group) {
                        progress = p;
                        anchor = placement.anchor_now(d);
                    }
                }
                Delivered::Switched | Delivered::Home => {
                    // Saved first (to the new server's copy of the table): a proxy that takes
                    // the group over from here on any server starts where this one stopped.
                    let mut done = None;
                    if let Some((p, d)) = Self::last_progress(group) {
                        progress = p;
                        done = d;
                    }
                    anchor = placement.anchor_now(done);
                    if let Err(e) = self
                        .store
                        .save(&group.key, &self.me, &progress, &anchor)
                        .await
                    {
                        tracing::debug!("saving group {:?} at a switch: {e}", group.key);
                    }
                    info!(
                        "group '{}' of `{}`.`{}`: {}; resuming there from {}",
                        group.key.group,
                        group.key.schema,
                        group.key.table,
                        if matches!(end, Delivered::Home) {
                            "the binlog of the server in use holds its place now"
                        } else {
                            "the backend in use changed"
                        },
                        resume::describe(&progress.resume, &anchor)
                    );
                    // The state stays (acks go on being taken while the group is placed on the
                    // new server; what is in flight keeps its deadline).
                }
            }
        }
    }

    /// The group's progress now, and its newest done transaction.
    fn last_progress(group: &Group) -> Option<(Progress, Option<Done>)> {
        group
            .lock()
            .state
            .as_ref()
            .map(|s| (s.snapshot(), s.done()))
    }

    /// Runs one reader's events into the group until a seek, the lease is lost, a backend
    /// switch, or the group stops.
    async fn deliver(
        &self,
        group: &Arc<Group>,
        sources: &mut Sources,
        placement: &mut Placement,
    ) -> Delivered {
        let mut switches = self.backends.subscribe();
        if switches.borrow_and_update().generation != placement.generation {
            return Delivered::Switched;
        }
        let mut save = tokio::time::interval(SAVE_EVERY);
        save.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_save = Instant::now();
        let mut reading = true;
        loop {
            let (window, next_deadline, waiting) = {
                let table = group.table();
                let mut inner = group.lock();
                let window = read_ahead(&table, inner.streams.len());
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
            // A group on the shared reader whose streams do not keep up reads alone: the
            // shared pieces are not held for it (memory), nor is anyone else held back.
            if sources.own.is_none() && !window && reading {
                self.read_alone(group, sources);
            }
            let deadline = next_deadline.map_or_else(
                || tokio::time::Instant::now() + Duration::from_secs(3600),
                tokio::time::Instant::from_std,
            );
            tokio::select! {
                _ = group.stop.cancelled() => return Delivered::Stopped,
                _ = switches.changed() => return Delivered::Switched,
                piece = next_piece(&mut sources.shared), if reading && (sources.own.is_some() || window) => {
                    self.took_piece(group, sources, piece);
                }
                msg = next_own(&mut sources.own), if window && reading => match msg {
                    Some(ReaderMsg::Committed { events, end }) => {
                        Self::take_in(group, events, end);
                        self.hand_over(group, sources);
                    }
                    Some(ReaderMsg::Opened) => {
                        if group.mode() == Mode::Starting {
                            Self::set_mode(group, Mode::Serving);
                        }
                    }
                    Some(ReaderMsg::Progress(end)) => {
                        Self::take_in(group, Vec::new(), end);
                        self.hand_over(group, sources);
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
                        if let Err(e) = self.requests.forget(&group.key).await {
                            warn!("forgetting the ACK requests of group {:?}: {e}", group.key);
                        }
                        Self::set_mode(group, Mode::Gone(why));
                        return Delivered::Stopped;
                    }
                    Some(ReaderMsg::Failed(ReaderError::PositionGone { .. }))
                        if placement.may_look_elsewhere() =>
                    {
                        return Delivered::PositionGone;
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
                    let (changed, snapshot, done) = {
                        let mut inner = group.lock();
                        match inner.state.as_mut() {
                            Some(s) => (s.take_progress(), Some(s.snapshot()), s.done()),
                            None => (None, None, None),
                        }
                    };
                    // The GTID state at the resume position, asked now and then in a task of
                    // its own, rides along with the next save; a new answer is saved at once,
                    // so that a group handed to a proxy on another server soon after it was
                    // placed (no events read yet, nothing else to save) can be found there.
                    let mut new_gtid = false;
                    if let Some(at) = snapshot.as_ref().map(|p| &p.resume) {
                        new_gtid = placement.gtid.tick(&placement.opts, at).await;
                    }
                    let due = last_save.elapsed() >= RENEW_EVERY || new_gtid;
                    let to_save = changed.or(if due { snapshot } else { None });
                    if let Some(p) = to_save {
                        let anchor = placement.anchor_now(done);
                        match self.store.save(&group.key, &self.me, &p, &anchor).await {
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
                    if self.home_again(placement, done).await {
                        return Delivered::Home;
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
                let oldest = locate::oldest_event(&self.reader_opts())
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

impl StreamEngine {
    /// A reader of the group's own from `from` on the server of `opts` (the one `from` is a
    /// position of).
    fn own_reader(&self, group: &Group, opts: &Opts, from: BinlogPosition) -> OwnReader {
        let stop = group.stop.child_token();
        let (tx, rx) = mpsc::channel::<ReaderMsg>(reader::QUEUE);
        let target = ReaderTarget {
            opts: opts.clone(),
            schema: group.key.schema.clone(),
            table: group.key.table.clone(),
        };
        tokio::spawn(reader::run(target, from, tx, stop.clone()));
        OwnReader { rx, stop }
    }

    /// A stretch of the binlog read (by either reader): its events of the table (none: only
    /// other tables' transactions), up to `end`.
    fn take_in(group: &Group, events: Vec<Arc<Event>>, end: BinlogPosition) {
        let table = group.table();
        let mut inner = group.lock();
        let Some(state) = inner.state.as_mut() else {
            return;
        };
        if events.is_empty() {
            state.progress(end);
        } else {
            state.committed(events, end, |e| {
                group
                    .filter
                    .as_ref()
                    .is_none_or(|f| filter::matches(f, e, &*table))
            });
        }
    }

    /// A piece from the shared reader: taken in (on it), kept for the hand-over (reading
    /// alone), or the sign to read alone (it overflowed, or the shared reader ended).
    fn took_piece(
        &self,
        group: &Group,
        sources: &mut Sources,
        piece: Result<Arc<Piece>, broadcast::error::RecvError>,
    ) {
        match piece {
            Ok(piece) if sources.own.is_none() => {
                Self::take_in(group, piece.events.clone(), piece.end.clone());
            }
            Ok(piece) => {
                sources.ahead.push_back(piece);
                if sources.ahead.len() > AHEAD {
                    sources.ahead.pop_front();
                }
                self.hand_over(group, sources);
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                sources.ahead.clear();
                if sources.own.is_none() {
                    self.read_alone(group, sources);
                }
            }
            Err(broadcast::error::RecvError::Closed) => {
                sources.ahead.clear();
                sources.shared = None;
                if sources.own.is_none() {
                    self.read_alone(group, sources);
                }
            }
        }
    }

    /// While reading alone: once the group has read up to where a kept shared piece starts, the
    /// shared reader goes on from there (nothing between is missed; what the group has already
    /// seen is known by id), and the group's own reader stops.
    fn hand_over(&self, group: &Group, sources: &mut Sources) {
        if sources.own.is_none() || sources.ahead.is_empty() {
            return;
        }
        let read_upto = {
            let table = group.table();
            let inner = group.lock();
            let window = read_ahead(&table, inner.streams.len());
            match inner.state.as_ref() {
                // Not while the group holds more than half its read-ahead: it would leave the
                // shared reader again at once (each time with a new binlog connection).
                Some(state) if state.outstanding() <= window / 2 => state.read_upto().clone(),
                _ => return,
            }
        };
        // Pieces the group has read past already.
        while sources
            .ahead
            .front()
            .is_some_and(|p| !position_before(&read_upto, &p.end))
        {
            sources.ahead.pop_front();
        }
        match sources.ahead.front() {
            Some(p) if !position_before(&read_upto, &p.from) => {}
            _ => return,
        }
        sources.stop_own();
        for piece in std::mem::take(&mut sources.ahead) {
            Self::take_in(group, piece.events.clone(), piece.end.clone());
        }
        if group.mode() == Mode::Starting {
            Self::set_mode(group, Mode::Serving);
        }
    }

    /// Leaves the shared reader: the group reads alone from where it must resume (the events
    /// it holds are read again and known by id), following the shared reader anew for a later
    /// hand-over.
    fn read_alone(&self, group: &Group, sources: &mut Sources) {
        let Some(from) = group.lock().state.as_ref().map(|s| s.snapshot().resume) else {
            return;
        };
        sources.ahead.clear();
        if sources.follow_shared {
            sources.shared =
                self.shared
                    .subscribe(&group.key.schema, &group.key.table, sources.generation);
        }
        sources.stop_own();
        sources.own = Some(self.own_reader(group, &sources.opts, from));
    }
}

/// The most events a group holds read and not done: its reader waits beyond it (so a group far
/// behind reads as it delivers), and it leaves the shared reader.
fn read_ahead(table: &StreamTable, streams: usize) -> usize {
    (table.options.max_unacked.saturating_mul(streams.max(1)))
        .max(table.options.batch_size * 4)
        .min(1_000_000)
}

/// Shared pieces a group reading alone keeps for its hand-over; older ones are dropped (the
/// group is then far behind, and reads on alone).
const AHEAD: usize = 256;

/// Where a serving group's events come from: a reader of its own, or the table's shared one.
struct Sources {
    own: Option<OwnReader>,
    shared: Option<broadcast::Receiver<Arc<Piece>>>,
    /// While the group reads alone: the shared reader's latest pieces, for the hand-over.
    ahead: VecDeque<Arc<Piece>>,
    /// The server the group's positions belong to: its readers read there, and follow a shared
    /// reader only of that server (switch `generation`).
    opts: Opts,
    generation: u64,
    /// Whether the group follows the table's shared reader at all: not while it reads from
    /// another server than the one in use (`Placement::reads_elsewhere`).
    follow_shared: bool,
}

impl Sources {
    fn stop_own(&mut self) {
        if let Some(own) = self.own.take() {
            own.stop.cancel();
        }
    }
}

struct OwnReader {
    rx: mpsc::Receiver<ReaderMsg>,
    stop: CancellationToken,
}

/// The group's own reader's next message (never, when it has none).
async fn next_own(own: &mut Option<OwnReader>) -> Option<ReaderMsg> {
    match own {
        Some(o) => o.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The shared reader's next piece (never, when the group does not follow one).
async fn next_piece(
    shared: &mut Option<broadcast::Receiver<Arc<Piece>>>,
) -> Result<Arc<Piece>, broadcast::error::RecvError> {
    match shared {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

pub(super) enum Served {
    LostLease,
    Stopped,
}

enum Delivered {
    Seek((Progress, String)),
    LostLease,
    Stopped,
    /// The backend in use changed: the group moves to the new server.
    Switched,
    /// The group read from another server, and the server in use's binlog now holds its
    /// place: it moves back there.
    Home,
    /// The binlog of the server in use no longer holds the group's place (its own file and
    /// offset): it looks for another server's binlog that does.
    PositionGone,
}
