//! The message engine (see ../shared/MESSAGING.md).
pub mod after_ddl;
pub mod backoff;
pub mod cache;
mod catalog;
pub mod claim_budget;
pub mod engine;
pub mod manager;
pub mod options;
pub mod poll;
pub mod purge;
pub mod reload;
pub mod repeated_failure;
pub mod schedule;
pub mod state;
pub mod stats;
pub mod stream;
pub mod table;
mod unacked;
