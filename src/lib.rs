//! msgproxy — a MySQL-protocol proxy that adds message tables and event streams to a MySQL/MariaDB server.
//!
//! The parts and what each owns: docs/ARCHITECTURE.md ("Parts"), with a connection, a query, a message and
//! an event traced through them.

// The public surface: what the binary (src/main.rs), the grammar tests and the fuzz targets use.
pub mod app;
pub mod config;
pub mod protocol;
pub mod sql;

mod admin;
mod backend;
mod backend_tls;
mod binlog;
mod cluster;
mod frontend;
mod messaging;
mod metrics;
mod relay;
mod streams;

/// The first page of the FIFO poller's walk of a table's groups, as msgproxy runs it
/// (src/messaging/groups.rs): msgproxy-bench times this very query on a large backlog.
pub use messaging::groups::walk_page_sql as fifo_poller_page_sql;
