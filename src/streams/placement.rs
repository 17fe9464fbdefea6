//! Where a group's task (`group_task.rs`) reads from once it holds the lease: its
//! [`Placement`]. On the server in use at the group's saved file and offset (the same server) or
//! right after its saved GTID state (another server); on another configured server whose binlog
//! holds the group's place when the server in use's does not (a Galera node that rejoined by SST,
//! a server that purged it), and back to the server in use once its binlog does. What a server
//! can take is decided in `resume.rs`; this is the waiting, retrying, logging and lease-keeping
//! around it.

use super::*;
use crate::binlog::BinlogPosition;
use crate::streams::resume::{self, Anchor, Done, GtidTracker, LocateError, Place, ServerState};

/// How often a group that cannot be placed on the server in use (behind, or lacking
/// transactions) looks again.
const PLACE_RETRY: Duration = Duration::from_secs(1);

/// How often a group reading from another server than the one in use (whose binlog lacks the
/// group's place) looks whether the server in use's binlog holds it by now.
const HOME_AGAIN_EVERY: Duration = Duration::from_secs(10);

/// How long asking one other server whether its binlog holds a group's place may take.
const ASK_OTHER_LIMIT: Duration = Duration::from_secs(3);

/// Where a serving group reads: the server its file and offset belong to (by switch count, and
/// how to connect to it), and what is saved with them to resume elsewhere.
pub(super) struct Placement {
    /// The switch count of the server in use when the group was placed.
    pub(super) generation: u64,
    /// The server the group reads from: the server in use, or (see `elsewhere`) another one.
    pub(super) opts: Opts,
    anchor: Anchor,
    /// The GTID state at the group's resume position on `opts`' server, saved with its progress.
    pub(super) gtid: GtidTracker,
    /// `Some(identity)` when the group reads from another server than the one in use, because
    /// the binlog of the one in use does not hold the group's place (a Galera node that rejoined
    /// by SST starts a new binlog; a server that purged it): the group reads there alone (the
    /// table's shared reader reads the server in use, whose positions are not this one's) and
    /// moves back by GTID once the server in use's binlog holds its place.
    elsewhere: Option<String>,
    /// When the group last looked whether it can move back to the server in use.
    home_tried: Instant,
    /// Whether another server was looked for because the binlog of the server in use lost the
    /// group's place, and none found: the reader's failure then stands.
    elsewhere_tried: bool,
}

impl Placement {
    fn new(generation: u64, opts: Opts, anchor: Anchor) -> Placement {
        let gtid = GtidTracker::new(anchor.gtid.clone());
        Placement {
            generation,
            opts,
            anchor,
            gtid,
            elsewhere: None,
            home_tried: Instant::now(),
            elsewhere_tried: false,
        }
    }

    /// What to save with the group's progress: the group's newest done transaction when it
    /// knows it (else the last saved one).
    pub(super) fn anchor_now(&mut self, done: Option<Done>) -> Anchor {
        self.anchor.gtid = self.gtid.known.clone();
        if done.is_some() {
            self.anchor.done = done;
        }
        self.anchor.clone()
    }

    /// Whether the group reads from another server than the one in use (`elsewhere`).
    pub(super) fn reads_elsewhere(&self) -> bool {
        self.elsewhere.is_some()
    }

    /// Whether a reader that finds its place gone from the binlog of the server in use should
    /// have the group placed again, looking for the place by GTID and on the other servers: not
    /// when it reads elsewhere already, nor when that was looked for in vain when it was placed.
    pub(super) fn may_look_elsewhere(&self) -> bool {
        self.elsewhere.is_none() && !self.elsewhere_tried
    }
}

/// How [`StreamEngine::place`] ended.
pub(super) enum Placed {
    Ready(Placement),
    /// A `SEEK`: the position, and the server it is a position of.
    Seek((Progress, String)),
    LostLease,
    Stopped,
}

/// Another server whose binlog holds a group's place: who it is, how to reach it, and the
/// file and offset there (`None`: the saved ones, which are that server's).
struct OtherServer {
    identity: String,
    opts: Opts,
    at: Option<BinlogPosition>,
}

impl OtherServer {
    /// The group placed there (`generation`: the server in use's switch count).
    fn placement(self, generation: u64, progress: &mut Progress, mut anchor: Anchor) -> Placement {
        if let Some(at) = self.at {
            progress.resume = at;
        }
        anchor.server = Some(self.identity.clone());
        let mut placement = Placement::new(generation, self.opts, anchor);
        placement.elsewhere = Some(self.identity);
        placement
    }
}

impl StreamEngine {
    /// Where the group starts on the server in use: its saved file and offset (the same server),
    /// or right after its saved GTID state (another server). While the server cannot take it
    /// (behind, lacking transactions, nothing to move by) the group keeps its lease and its
    /// saved progress, its streams wait or get the reason, and this looks again every
    /// [`PLACE_RETRY`], at a switch, and at a `SEEK`.
    pub(super) async fn place(
        &self,
        group: &Arc<Group>,
        progress: &mut Progress,
        mut anchor: Anchor,
        not_here: bool,
    ) -> Placed {
        let mut switches = self.backends.subscribe();
        let mut behind_since: Option<Instant> = None;
        // When the progress was last saved here (renewing the lease): at once, since after a
        // switch it may be newer than the new server's copy.
        let mut last_renew: Option<Instant> = None;
        let mut told: Option<String> = None;
        let name = format!(
            "group '{}' of `{}`.`{}`",
            group.key.group, group.key.schema, group.key.table
        );
        let seek_hint = format!(
            "SEEK `{}`.`{}` GROUP '{}' TO EARLIEST (or TO EVENT n, TO LATEST) to go on from a position on this server",
            group.key.schema, group.key.table, group.key.group
        );
        loop {
            // The acks taken meanwhile by a state kept across a switch ride along with the
            // progress (saved with the lease, and the start of a new state if this one is dropped).
            if let Some((kept, _)) = Self::last_progress(group) {
                progress.floor = kept.floor;
                progress.acked = kept.acked;
            }
            let server = switches.borrow_and_update().clone();
            let opts: Opts = server.target.mysql_async_opts().into();
            let verdict = async {
                let in_use = resume::server_state(&opts)
                    .await
                    .map_err(|e| e.to_string())?;
                let place = resume::find_place(&opts, &anchor, &in_use).await;
                Ok::<_, String>((in_use, place))
            }
            .await;
            let problem = match verdict {
                Ok((in_use, Place::Saved)) => {
                    let here = in_use.identity.clone();
                    // The file and offset are the server's own, but its binlog no longer holds
                    // them (purged, reset, or a node that rejoined by SST and wrote a new
                    // binlog): the place may still be found by GTID, in this server's binlog
                    // first, then in another server's.
                    if not_here && anchor.gtid.is_some() {
                        if let Some(at) = here_by_gtid(&anchor, &in_use, &opts).await {
                            info!(
                                "{name}: the binlog of {here} does not hold its place {} as a file and offset; resuming there by GTID from {at}",
                                progress.resume
                            );
                            progress.resume = at;
                            anchor.server = Some(here);
                            let mut placement = Placement::new(server.generation, opts, anchor);
                            placement.elsewhere_tried = true;
                            return Placed::Ready(placement);
                        }
                        if let Some(other) = self.read_elsewhere(&anchor).await {
                            info!(
                                "{name}: the binlog of {here} no longer holds its place {}; reading from {}, whose binlog does, until that of {here} does",
                                progress.resume, other.identity
                            );
                            return Placed::Ready(other.placement(
                                server.generation,
                                progress,
                                anchor,
                            ));
                        }
                    }
                    anchor.server = Some(here);
                    let mut placement = Placement::new(server.generation, opts, anchor);
                    // Looked for in vain: the reader's failure stands this time.
                    placement.elsewhere_tried = not_here;
                    return Placed::Ready(placement);
                }
                Ok((
                    ServerState { identity: here, .. },
                    Place::ByGtid {
                        after: state,
                        at: Ok(at),
                    },
                )) => {
                    info!(
                        "{name}: resuming on {here} after GTID {state} (saved at {}), from {at}",
                        resume::describe(&progress.resume, &anchor)
                    );
                    progress.resume = at;
                    anchor.server = Some(here);
                    return Placed::Ready(Placement::new(server.generation, opts, anchor));
                }
                Ok((
                    ServerState { identity: here, .. },
                    Place::ByGtid {
                        after: state,
                        at: Err(LocateError::Missing(why)),
                    },
                )) => match self.read_elsewhere(&anchor).await {
                    Some(other) => {
                        info!(
                            "{name}: the binlog of {here} does not hold its place ({why}); reading from {}, whose binlog does, until that of {here} does",
                            other.identity
                        );
                        return Placed::Ready(other.placement(
                            server.generation,
                            progress,
                            anchor,
                        ));
                    }
                    None => Some(Mode::Failed(format!(
                        "{name} cannot resume on {here}: it was saved on {} after GTID {state}, and this server's binlog does not have those transactions ({why}), nor does that of any other configured server; going on would skip events or give new ones the ids of events already done. {seek_hint}",
                        anchor.server.as_deref().unwrap_or("another server")
                    ))),
                },
                Ok((
                    ServerState { identity: here, .. },
                    Place::ByGtid {
                        after: state,
                        at: Err(LocateError::Other(e)),
                    },
                )) => {
                    tracing::debug!("{name}: finding GTID {state} on {here}: {e}");
                    None
                }
                Ok((ServerState { identity: here, .. }, Place::Behind { needs, has })) => {
                    let since = *behind_since.get_or_insert_with(Instant::now);
                    Some(if since.elapsed() < resume::BEHIND_GRACE {
                        Mode::Behind(format!(
                            "waiting for {here} to apply transactions the group has read or done ({needs}; its binlog has {has})"
                        ))
                    } else {
                        Mode::Failed(format!(
                            "{name} cannot resume on {here}: this server has not applied transactions the group has read or done ({needs}; its binlog has {has}). A replica still catching up resumes the group by itself once it has them; if they are lost, {seek_hint}"
                        ))
                    })
                }
                // Saved before its first GTID answer: the server it was saved on, if it is
                // configured and up, still reads its file and offset.
                Ok((
                    ServerState { identity: here, .. },
                    Place::NoGtid { server: saved_on },
                )) => match self.read_elsewhere(&anchor).await {
                    Some(other) => {
                        info!(
                            "{name}: saved at {} on {saved_on} without its GTID state; reading from {}, until the binlog of {here} holds its place",
                            progress.resume, other.identity
                        );
                        return Placed::Ready(other.placement(
                            server.generation,
                            progress,
                            anchor,
                        ));
                    }
                    None => Some(Mode::Failed(format!(
                        "{name} cannot resume on {here}: it was saved at {} on {saved_on} without the GTID state to find that place on another server (MariaDB GTIDs are needed), and {saved_on} is not a configured server that answers. {seek_hint}",
                        progress.resume
                    ))),
                },
                Err(e) => {
                    tracing::debug!("{name}: asking the server in use where to resume: {e}");
                    None
                }
            };
            if let Some(mode) = problem {
                if matches!(mode, Mode::Failed(_)) {
                    group.lock().state = None;
                }
                let why = match &mode {
                    Mode::Failed(w) | Mode::Behind(w) => Some(w.clone()),
                    _ => None,
                };
                if why != told {
                    if let Some(w) = &why {
                        warn!("{w}");
                    }
                    told = why;
                }
                Self::set_mode(group, mode);
            }
            // Waiting, holding the lease: the saved progress stays as it was (but for the acks a
            // kept state took, folded in above).
            if last_renew.is_none_or(|t| t.elapsed() >= RENEW_EVERY) {
                match self
                    .store
                    .save(&group.key, &self.me, progress, &anchor)
                    .await
                {
                    Ok(false) => return Placed::LostLease,
                    Ok(true) => last_renew = Some(Instant::now()),
                    Err(e) => tracing::debug!("renewing the lease of {name}: {e}"),
                }
            }
            tokio::select! {
                _ = group.stop.cancelled() => return Placed::Stopped,
                _ = switches.changed() => {}
                _ = group.control.notified() => {
                    let seek = group.lock().seek.take();
                    if let Some(to) = seek {
                        return Placed::Seek(to);
                    }
                    // Not before its progress is saved on this server.
                    if last_renew.is_some() && self.give_up_if_idle(group) {
                        return Placed::Stopped;
                    }
                }
                _ = tokio::time::sleep(PLACE_RETRY) => {
                    if last_renew.is_some() && self.give_up_if_idle(group) {
                        return Placed::Stopped;
                    }
                }
            }
        }
    }

    /// Another configured server whose binlog holds the group's place (saved as `anchor`), for
    /// a group whose place the server in use's binlog lacks; the first in the configured order.
    async fn read_elsewhere(&self, anchor: &Anchor) -> Option<OtherServer> {
        for target in self.backends.others() {
            let opts: Opts = target.mysql_async_opts().into();
            let asked = tokio::time::timeout(ASK_OTHER_LIMIT, async {
                let there = resume::server_state(&opts)
                    .await
                    .map_err(|e| e.to_string())?;
                let at = match resume::find_place(&opts, anchor, &there).await {
                    // The saved file and offset are that server's own.
                    Place::Saved => None,
                    Place::ByGtid { at, .. } => Some(at.map_err(|e| e.to_string())?),
                    other => return Err(format!("{other:?}")),
                };
                Ok::<_, String>(OtherServer {
                    identity: there.identity,
                    opts: opts.clone(),
                    at,
                })
            })
            .await;
            match asked {
                Ok(Ok(other)) => return Some(other),
                Ok(Err(why)) => {
                    tracing::debug!(
                        "{}: cannot read a group's place there: {why}",
                        target.address()
                    )
                }
                Err(_) => tracing::debug!("{}: no answer in time", target.address()),
            }
        }
        None
    }

    /// For a group reading from another server: every [`HOME_AGAIN_EVERY`], whether the binlog
    /// of the server in use holds its place by now (it then moves back there).
    pub(super) async fn home_again(&self, placement: &mut Placement, done: Option<Done>) -> bool {
        if !placement.reads_elsewhere() || placement.home_tried.elapsed() < HOME_AGAIN_EVERY {
            return false;
        }
        placement.home_tried = Instant::now();
        let anchor = placement.anchor_now(done);
        self.home_holds(&anchor).await
    }

    /// Whether the binlog of the server in use holds the place of a group saved as `anchor`
    /// (read elsewhere until now).
    async fn home_holds(&self, anchor: &Anchor) -> bool {
        let asked = tokio::time::timeout(ASK_OTHER_LIMIT, async {
            let opts = self.reader_opts();
            let Ok(here) = resume::server_state(&opts).await else {
                return false;
            };
            match resume::find_place(&opts, anchor, &here).await {
                Place::Saved => true,
                Place::ByGtid { at, .. } => at.is_ok(),
                Place::Behind { .. } | Place::NoGtid { .. } => false,
            }
        })
        .await;
        matches!(asked, Ok(true))
    }
}

/// Where the group's place (saved as `anchor`, with a GTID state) is in the binlog of the
/// server `here` (reached by `opts`), found by GTID as if the group came from another server.
async fn here_by_gtid(anchor: &Anchor, here: &ServerState, opts: &Opts) -> Option<BinlogPosition> {
    let elsewhere = Anchor {
        // Never a server's name: the decision goes by GTID.
        server: Some(String::new()),
        ..anchor.clone()
    };
    match resume::find_place(opts, &elsewhere, here).await {
        Place::ByGtid { at: Ok(at), .. } => Some(at),
        _ => None,
    }
}
