//! A throwaway MariaDB: a private `mariadbd` with its own data directory, port and socket, a
//! row-based binlog with column names (what msgproxy's binlog watcher reads), and nothing that
//! touches a system MariaDB (every program runs with `--no-defaults`).
//!
//! One harness for everything that needs such a server: the integration tests
//! (integration/support/mariadb.rs), msgproxy-bench and msgproxy-check (their `servers` module),
//! and `scripts/mariadb-throwaway.sh` (this crate's binary); scripts/mariadb-cluster.sh reads the
//! same option list from `mariadbd-common.opts`.
//!
//! # Layout
//!
//! - [`options`] — the one list of server options (`mariadbd-common.opts`, compiled in).
//! - [`programs`] — finding `mariadbd`, `mariadb-install-db` and the clients (Debian's paths too).
//! - [`install`] — installing them with apt-get when they are missing and the caller allows it.
//! - [`server_dir`] — the files of one server in its directory, and initialising its data.
//! - [`launch`] — the `mariadbd` command line, a server owned by (dying with) the caller, and
//!   waiting until a server accepts connections.
//! - [`detached`] — a server that outlives its starter (pid file, lock, start/stop/status), for
//!   the scripts.
//! - [`error`] — what can go wrong, for all of the above.

pub mod detached;
pub mod error;
pub mod install;
pub mod launch;
pub mod options;
pub mod programs;
pub mod server_dir;

pub use error::Error;
pub use programs::Programs;
pub use server_dir::ServerDir;
