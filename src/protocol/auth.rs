//! Password checks for the proxy's own users (server side) and the scrambles the proxy computes
//! when it logs in to the backend (client side).
//!
//! The proxy keeps its users' passwords, so it can check both `mysql_native_password` and the fast
//! path of `caching_sha2_password` directly; it never needs the RSA or cleartext full-auth
//! exchange of the latter.

use rand::Rng;
use sha1::{Digest, Sha1};

use super::handshake::{CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};

/// A fresh 20-byte challenge. Bytes are printable ASCII so no client can mistake one for the
/// NUL that terminates the nonce on the wire.
pub fn new_nonce() -> [u8; 20] {
    let mut rng = rand::rng();
    let mut nonce = [0u8; 20];
    for b in &mut nonce {
        *b = rng.random_range(0x21..0x7F);
    }
    nonce
}

/// The auth plugins the proxy can check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    Native,
    CachingSha2,
}

impl Plugin {
    pub fn from_name(name: &[u8]) -> Option<Plugin> {
        match name {
            n if n == NATIVE_PASSWORD.as_bytes() => Some(Plugin::Native),
            n if n == CACHING_SHA2_PASSWORD.as_bytes() => Some(Plugin::CachingSha2),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Plugin::Native => NATIVE_PASSWORD,
            Plugin::CachingSha2 => CACHING_SHA2_PASSWORD,
        }
    }
}

/// The response a client computes for `password` under `plugin` (empty for an empty password).
pub fn scramble(plugin: Plugin, nonce: &[u8], password: &[u8]) -> Vec<u8> {
    let nonce = &nonce[..nonce.len().min(20)];
    match plugin {
        Plugin::Native => mysql_common::scramble::scramble_native(nonce, password)
            .map(|s| s.to_vec())
            .unwrap_or_default(),
        Plugin::CachingSha2 => mysql_common::scramble::scramble_sha256(nonce, password)
            .map(|s| s.to_vec())
            .unwrap_or_default(),
    }
}

/// Whether `response` proves knowledge of `password` for this nonce and plugin.
pub fn verify(plugin: Plugin, nonce: &[u8], password: &[u8], response: &[u8]) -> bool {
    // Some clients send a lone NUL for an empty password.
    let response = match response {
        [0] => &[][..],
        r => r,
    };
    constant_time_eq(&scramble(plugin, nonce, password), response)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `mysql_native_password` hash of a password as MySQL stores it (`*` + 40 hex digits), so
/// that a config file can hold the hash instead of the password.
pub fn native_password_hash(password: &[u8]) -> String {
    let stage2 = Sha1::digest(Sha1::digest(password));
    let mut out = String::from("*");
    for b in stage2 {
        out.push_str(&format!("{b:02X}"));
    }
    out
}

/// Checks a `mysql_native_password` response against a stored `*HEX` hash (SHA1(SHA1(password))).
/// The response is SHA1(pw) XOR SHA1(nonce + hash); XOR-ing it back gives SHA1(pw), whose SHA1
/// must equal the stored hash.
pub fn verify_native_hash(nonce: &[u8], stored: &[u8; 20], response: &[u8]) -> bool {
    if response.len() != 20 {
        return false;
    }
    let mut h = Sha1::new();
    h.update(&nonce[..nonce.len().min(20)]);
    h.update(stored);
    let mask = h.finalize();
    let stage1: Vec<u8> = response.iter().zip(mask).map(|(a, b)| a ^ b).collect();
    constant_time_eq(&Sha1::digest(&stage1), stored)
}

/// Parses a `*` + 40-hex-digit native password hash.
pub fn parse_native_hash(s: &str) -> Option<[u8; 20]> {
    let hex = s.strip_prefix('*')?;
    if hex.len() != 40 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_round_trip() {
        let nonce = new_nonce();
        let r = scramble(Plugin::Native, &nonce, b"secret");
        assert!(verify(Plugin::Native, &nonce, b"secret", &r));
        assert!(!verify(Plugin::Native, &nonce, b"Secret", &r));
        assert!(!verify(Plugin::Native, &nonce, b"", &r));
    }

    #[test]
    fn empty_password_is_an_empty_response() {
        let nonce = new_nonce();
        assert!(verify(Plugin::Native, &nonce, b"", b""));
        assert!(verify(Plugin::CachingSha2, &nonce, b"", b"\0"));
        assert!(!verify(Plugin::Native, &nonce, b"x", b""));
    }

    #[test]
    fn sha2_round_trip() {
        let nonce = new_nonce();
        let r = scramble(Plugin::CachingSha2, &nonce, b"pw");
        assert_eq!(r.len(), 32);
        assert!(verify(Plugin::CachingSha2, &nonce, b"pw", &r));
        assert!(!verify(Plugin::Native, &nonce, b"pw", &r));
    }

    #[test]
    fn stored_native_hash() {
        // The well-known hash of "password".
        let hash = native_password_hash(b"password");
        assert_eq!(hash, "*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19");
        let stored = parse_native_hash(&hash).unwrap();
        let nonce = new_nonce();
        let r = scramble(Plugin::Native, &nonce, b"password");
        assert!(verify_native_hash(&nonce, &stored, &r));
        assert!(!verify_native_hash(&nonce, &stored, &r[..19]));
        assert_eq!(parse_native_hash("*12"), None);
    }

    #[test]
    fn nonce_has_no_nul() {
        assert!(new_nonce().iter().all(|&b| b != 0));
    }
}
