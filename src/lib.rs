//! msgproxy — a MySQL-protocol proxy that turns tables into durable message queues.
//!
//! # Layout
//!
//! - [`config`] — command-line flags, `MSGPROXY_*` environment variables and the optional strict TOML file.
//! - [`protocol`] — the MySQL wire format for the server side: packet framing, handshake, authentication
//!   and the encoders for OK / ERR packets. Knows nothing of message tables.
//! - [`backend`] — opens and authenticates one backend connection per client session.
//! - [`backend_tls`] — TLS to the backend: `ssl-mode`, the CA file, the certificate checks.
//! - [`relay`] — forwards one command to the backend and its response back, parsing only enough to
//!   know where the response ends and what the session's status flags are.
//! - [`frontend`] — the accept loop (connection limit, graceful shutdown) and the per-client session.
//! - [`sql`] — the statement classifier: relay, or a virtual statement for the message engine.
//! - [`messaging`] — the message engine: table definitions, per-table managers, streams.
//! - [`binlog`] — the binlog watcher: follows the backend's row-based binlog and tells the
//!   engine about message-table rows written by anyone, and about DDL.
//! - [`streams`] — event streams: `msgproxy_stream` tables read by consumer groups from the binlog,
//!   with durable group progress and leases in msgproxy's own table (docs/STREAMS.md).
//! - [`admin`] — the operator's page (`--admin-listen`): tables, charts, stream groups, problems,
//!   and the redrive / seek actions, with logins and anti-forgery checks (docs/OPERATOR.md).
//! - [`metrics`] — Prometheus metrics: the per-proxy counters, the page (with the per-table
//!   counters of `messaging::stats`) and the `GET /metrics` endpoint.

pub mod sql;

pub mod admin;
pub mod backend;
pub mod backend_tls;
pub mod binlog;
pub mod config;
pub mod frontend;
pub mod messaging;
pub mod metrics;
pub mod protocol;
pub mod relay;
pub mod streams;
