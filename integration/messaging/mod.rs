//! Message tables end to end (../shared/MESSAGING.md): `STREAM * FROM t`, `ACK`, the Vitess SQL
//! ack, claims and backoff in the database, polling, purging, several streams and several
//! proxies, and the errors. Each test has its own database (`msg_<test>`) on the shared MariaDB
//! and its own proxy; tables are created through the proxy so it loads them at once.
//!
//! The tests wait on real time (ack waits and poll intervals of about a second), so they are
//! meant to run in parallel (about 15 s this way; about 40 s with the suite's usual two threads):
//!
//!     cargo test --test integration messaging:: -- --test-threads=32
//!
//! Every proxy loads every message table on the server, so each test's table is also polled and
//! purged by the other tests' proxies — as with several proxies in production. The timing bounds
//! (delivery within 1.5-2 s, redelivery within a poll of its `time_next`) hold on an idle
//! machine; a machine loaded far beyond its cores can break them.
//!
//! Layout:
//! - `harness` — the test environment, the stream client, row inspection helpers.
//! - `columns` — which columns a stream carries and how (RFC table, current Vitess layout, user
//!   column types, `vt_message_cols`).
//! - `arrival` — when messages arrive: rows inserted before a stream, transactions, insert
//!   constructs, scheduling, priority order, NULL/0 seeds.
//! - `acks` — redelivery and backoff, both ack forms, purging.
//! - `streams` — several streams, several proxies, streams that go away, purges running
//!   elsewhere (on a MariaDB of its own, as it loads the server hard).
//! - `errors` — what `STREAM`/`ACK` answer when they cannot work.
//! - `stream_sessions` — what a stream does to its own session: transactions, locks, read-only
//!   sessions, columns altered under it.
//! - `ddl` — DDL through the proxy: every form takes effect before its OK; plain DDL reads nothing.
//! - `current_db` — unqualified `ACK`/`STREAM` tables follow the session's real database.
//! - `max_unacked` — `vt_max_unacked`: what one stream may hold unacked.
//! - `ack_literals` — quoted `ACK` ids under every `sql_mode` (`NO_BACKSLASH_ESCAPES`,
//!   `ANSI_QUOTES`) and character set.
//! - `fifo` — `vt_group_col`: one message per key in flight, in id order, across proxies.
//! - `filters` — `STREAM cols FROM t WHERE condition`: streams that choose.
//! - `dead_letters` — `vt_max_attempts`: dead in place or moved to `vt_dead_letter`, `REDRIVE`.
//! - `late_claims` — a claim whose COMMIT returns after its rows' window sends nothing.
//! - `work_queue` — beyond Vitess: `NACK`, `EXTEND`, acks that delete (`vt_purge_after=0`), and
//!   what a new user met first (the age of new messages, broken tables, syntax errors).

mod ack_literals;
mod acks;
mod arrival;
mod columns;
mod current_db;
mod ddl;
mod dead_letters;
mod errors;
mod fifo;
mod filters;
pub(crate) mod harness;
mod hostile_names;
mod late_claims;
mod max_unacked;
mod stream_sessions;
mod streams;
pub(crate) mod work_queue;
