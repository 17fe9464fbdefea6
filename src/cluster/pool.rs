//! A `mysql_async` pool that follows the backend in use: after a switch, new connections come
//! from a pool to the new server, and the old pool's connections are closed as they come back.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use mysql_async::{Conn, Pool};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Backends;
use crate::config::BackendTarget;

/// How the pool for one server is made (options, constraints, setup statements).
pub type MakePool = dyn Fn(&BackendTarget) -> Pool + Send + Sync;

/// The pool of the server in use, shared by whoever cloned it.
#[derive(Clone)]
pub struct SharedPool {
    inner: Arc<RwLock<(Pool, u64)>>,
}

impl SharedPool {
    /// A pool to the server in use now, replaced at every switch of `backends` until
    /// `shutdown`.
    pub fn new(
        backends: &Arc<Backends>,
        make: Box<MakePool>,
        shutdown: CancellationToken,
    ) -> SharedPool {
        let mut switches = backends.subscribe();
        let first = switches.borrow_and_update().clone();
        let shared = SharedPool {
            inner: Arc::new(RwLock::new((make(&first.target), first.generation))),
        };
        if backends.is_cluster() {
            let follower = shared.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        changed = switches.changed() => if changed.is_err() { return },
                        _ = shutdown.cancelled() => return,
                    }
                    let now = switches.borrow_and_update().clone();
                    let old = {
                        let mut inner = follower.inner.write().unwrap_or_else(|e| e.into_inner());
                        std::mem::replace(&mut *inner, (make(&now.target), now.generation)).0
                    };
                    // Connections out of the old pool finish what they do (their own errors
                    // if the server is gone); the pool closes them as they come back.
                    tokio::spawn(async move {
                        if tokio::time::timeout(Duration::from_secs(30), old.disconnect())
                            .await
                            .is_err()
                        {
                            debug!("the previous backend's pool did not close within 30 s");
                        }
                    });
                }
            });
        }
        shared
    }

    /// The pool in use now.
    pub fn current(&self) -> Pool {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// A connection to the server in use.
    pub async fn get_conn(&self) -> mysql_async::Result<Conn> {
        self.current().get_conn().await
    }

    /// A connection to the server of switch `generation`, if that is still the server in use:
    /// for questions about one of its sessions (thread ids mean nothing on another server).
    pub async fn get_conn_at(&self, generation: u64) -> Option<mysql_async::Result<Conn>> {
        let pool = {
            let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
            (inner.1 == generation).then(|| inner.0.clone())?
        };
        Some(pool.get_conn().await)
    }
}
