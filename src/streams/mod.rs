//! Event streams (docs/STREAMS.md): a table's committed inserts, in commit order, read by any
//! number of consumer groups from the binlog; msgproxy never writes to the table.
//!
//! - `options.rs` — the `msgproxy_stream` table comment;
//! - `registry.rs` — the stream tables, loaded from `information_schema`;
//! - `reader.rs` — a binlog reader: committed inserts of one table as events, with their event
//!   ids;
//! - `shared.rs` — one reader per table for the groups at the binlog's head (a group behind
//!   reads alone);
//! - `ddl.rs` — whether a DDL statement in the binlog creates the table or makes it go;
//! - `locate.rs` — where `START`/`SEEK` positions are in the binlog;
//! - `encode.rs` — a binlog value as the text protocol sends it;
//! - `filter.rs` — a group's `WHERE` filter over an event's values;
//! - `group.rs` — one group's delivery state without I/O (position, acked, in flight);
//! - `store.rs` — the groups' durable progress and leases in msgproxy's own table;
//! - `requests.rs` — `ACK`s and `SEEK`s handed from another proxy to the one serving the
//!   group, in a table beside the groups table;
//! - `resume.rs` — where a group resumes on the server in use: its own file and offset, or by
//!   GTID on another server (or why it cannot);
//! - `engine.rs` — the groups this proxy serves and the statements on them;
//! - `group_task.rs` — one group's task: lease, reader, deliveries, saves;
//! - `placement.rs` — where a group's task reads from: the server in use, or another server
//!   whose binlog holds the group's place (waiting and retrying while neither can take it);
//! - `request_poller.rs` — the serving side of `ACK`s and `SEEK`s through other proxies: one
//!   query per interval for every group served here, and the queued ones applied at a takeover;
//! - `serve.rs` — one `STREAM ... GROUP` on a client session.

pub mod ddl;
pub mod encode;
pub mod engine;
pub mod filter;
pub mod group;
pub mod locate;
pub mod options;
pub mod reader;
pub mod registry;
pub mod requests;
pub mod resume;
pub mod serve;
pub mod shared;
pub mod store;
