//! The MySQL wire protocol, server side, plus the client side of the login the proxy performs
//! against the backend. Pure: no knowledge of sessions, backends or message tables.

pub mod auth;
pub mod commands;
pub mod handshake;
pub mod packet;
pub mod sha2_rsa;
pub mod streamed_result;
pub mod wire;
