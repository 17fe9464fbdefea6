//! The message engine (see ../shared/MESSAGING.md).
pub mod backoff;
pub mod cache;
pub mod claim_budget;
pub mod dead_letter;
pub mod engine;
pub mod groups;
pub mod manager;
pub mod options;
pub mod poll;
pub mod purge;
pub mod repeated_failure;
pub mod schedule;
pub mod state;
pub mod stats;
pub mod stream;
pub mod table;
mod unacked;
