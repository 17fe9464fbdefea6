//! Who is at the other end of a client connection.

use std::net::SocketAddr;

/// Who is at the other end of a client connection: for the logs, and for the `'user'@'host'`
/// of access-denied errors.
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    Tcp(SocketAddr),
    /// A client on the proxy's Unix socket.
    Socket,
}

impl Peer {
    /// The host part of `'user'@'host'`, as the server names it: the address, or `localhost`
    /// for a socket client.
    pub fn host(&self) -> String {
        match self {
            Peer::Tcp(addr) => addr.ip().to_string(),
            Peer::Socket => "localhost".into(),
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Socket => f.write_str("unix socket"),
        }
    }
}
