//! How the proxy's greeting names it: the server version clients see, with a marker of its own.

/// Suffix added to the backend's version in the greeting, so `SELECT VERSION()` (the backend's)
/// and the handshake (the proxy's) can be told apart while drivers still parse the version.
pub const VERSION_SUFFIX: &[u8] = b"-msgproxy";

/// The version the proxy's greeting announces for a server of version `server_version`.
pub fn proxy_version(server_version: &[u8]) -> Vec<u8> {
    let mut version = Vec::with_capacity(server_version.len() + VERSION_SUFFIX.len());
    version.extend_from_slice(server_version);
    version.extend_from_slice(VERSION_SUFFIX);
    version
}
