//! End-to-end tests: a throwaway MariaDB, the `msgproxy` binary in front of it, and real clients
//! (`mysql_async`, the `mariadb` CLI, a raw protocol client). Most tests run the same operations
//! directly against MariaDB and through the proxy and require identical observations — a client
//! must not be able to tell the difference.
//!
//! Run: `cargo test --test integration -- --test-threads=2` (needs `mariadbd`, `mariadb`,
//! `mariadb-admin`, `mariadb-install-db` and `openssl` installed; nothing is skipped silently).
//!
//! Knobs (environment):
//! - `MSGPROXY_BIN=/path/to/msgproxy` — test that binary instead of cargo's build of this package.
//! - `MSGPROXY_INTEG_STANDIN=1` — replace the proxy by a plain TCP byte forwarder, to check the
//!   suite itself: every comparison test must pass; tests of the proxy's own behaviour (configured
//!   users, backend-down errors, the connection limit, TLS, `@@socket` bypass) fail by design.
//! - `INTEG_DUMP=1` (with `--nocapture`) — print the direct half of every comparison transcript.
//! - `MARIADBD`, `MARIADB_INSTALL_DB`, `MARIADB_CLIENT`, `MARIADB_ADMIN` — program paths.
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
//! - `binlog` — rows written straight to the server reach streams promptly (the binlog watcher),
//!   direct acks and DDL, server restarts, poll mode when binlog access is missing.
//! - `cli` — the `mariadb` / `mariadb-admin` clients through the proxy.
//! - `failures` — backend down, backend killed mid-session, clients that walk away.
//! - `ops` — the Prometheus endpoint, `SHOW MESSAGE TABLES`, and logs without passwords.
//! - `faults` — faults on purpose, counting every message: the proxy SIGKILLed and restarted, the
//!   backend restarted under load, a consumer that stops reading, clients vanishing mid-batch,
//!   mid-result and mid-LOAD DATA, one of two proxies SIGKILLed.
//! - `tls` — TLS between client and proxy, optional and required.
//! - `listen_socket` — clients on the proxy's own Unix socket (`--listen-socket`).
//! - `relay_fidelity` — where every shape of response ends (cursor and out-parameter flags,
//!   errors between results), and a client that vanishes mid-command leaving nothing behind.
//! - `raw_protocol` — commands mysql_async never sends (COM_INIT_DB, COM_SET_OPTION, cursors with
//!   COM_STMT_FETCH, ...), byte for byte, with and without CLIENT_DEPRECATE_EOF/SESSION_TRACK.

mod support;

mod admin;
mod auth;
mod backend_socket;
mod backend_tls;
mod binlog;
mod bulk;
mod cli;
mod cluster;
mod commands;
mod failures;
mod faults;
mod hostile;
mod listen_socket;
mod messaging;
mod ops;
mod raw_protocol;
mod relay_fidelity;
mod statements;
mod streams;
mod tls;
mod types;
