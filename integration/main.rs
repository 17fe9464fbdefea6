//! End-to-end tests: a throwaway MariaDB, the `msgproxy` binary in front of it, and real clients
//! (`mysql_async`, the `mariadb` CLI, a raw protocol client). Most tests run the same operations
//! directly against MariaDB and through the proxy and require identical observations — a client
//! must not be able to tell the difference.
//!
//! Run: `cargo test --test integration -- --test-threads=2` (needs `mariadbd` installed).
//! `MSGPROXY_INTEG_STANDIN=1` swaps the proxy for a byte forwarder to check the suite itself.
//!
//! Layout:
//! - `support/` — the harness (servers, proxy process, comparison runner, CLI, raw client).
//! - `types` — every column type, exact metadata, text and binary protocol.
//! - `statements` — counters/info strings, errors, transactions, session state, multi-statements,
//!   prepared statements.
//! - `commands` — COM_PING, COM_RESET_CONNECTION, COM_CHANGE_USER, COM_STATISTICS,
//!   COM_FIELD_LIST, KILL, CONNECTION_ID(), the handshake.
//! - `bulk` — LOAD DATA LOCAL INFILE and packets of 16 MiB and more.
//! - `auth` — passwords, unknown users, configured users, both auth plugins.
//! - `cli` — the `mariadb` / `mariadb-admin` clients through the proxy.
//! - `failures` — backend down, backend killed mid-session, clients that walk away.

mod support;

mod auth;
mod bulk;
mod cli;
mod commands;
mod failures;
mod statements;
mod types;
