//! The connection phase: the greeting the proxy sends, the client's handshake response, and the
//! greeting the proxy reads from the backend.

use bytes::{BufMut, BytesMut};
use mysql_common::constants::{CapabilityFlags, MariadbCapabilities, StatusFlags};
use mysql_common::io::ParseBuf;
use mysql_common::packets::HandshakePacket;
use mysql_common::proto::{MyDeserialize, MySerialize};

use super::wire::Reader;

/// Name of the classic SHA-1 challenge/response plugin.
pub const NATIVE_PASSWORD: &str = "mysql_native_password";
/// Name of MySQL 8's SHA-256 plugin (we only ever need its fast path, see `auth`).
pub const CACHING_SHA2_PASSWORD: &str = "caching_sha2_password";

/// What the proxy learned from the backend's greeting.
#[derive(Debug, Clone)]
pub struct BackendGreeting {
    pub server_version: Vec<u8>,
    pub connection_id: u32,
    pub capabilities: CapabilityFlags,
    pub collation: u8,
    pub status: u16,
    pub nonce: Vec<u8>,
    pub auth_plugin: Vec<u8>,
    /// MariaDB's extended capabilities (zero for MySQL, which sets CLIENT_LONG_PASSWORD).
    pub mariadb_capabilities: u32,
}

impl BackendGreeting {
    pub fn parse(payload: &[u8]) -> std::io::Result<BackendGreeting> {
        // mysql_common computes `len as i8 - 8` from the auth-plugin-data length byte, which
        // overflows (a panic in debug builds) for 0x80..=0x87. Servers send 21; anything from
        // 0x80 up is no greeting of a server we can talk to.
        if let Some(&len) = auth_data_len_byte(payload) {
            if len >= 0x80 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("malformed greeting: auth-plugin-data length {len}"),
                ));
            }
        }
        let p = HandshakePacket::deserialize((), &mut ParseBuf(payload))?;
        if p.protocol_version() != 10 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unsupported protocol version {}", p.protocol_version()),
            ));
        }
        Ok(BackendGreeting {
            server_version: p.server_version_ref().to_vec(),
            connection_id: p.connection_id(),
            capabilities: p.capabilities(),
            collation: p.default_collation(),
            status: p.status_flags().bits(),
            nonce: p.nonce(),
            auth_plugin: p
                .auth_plugin_name_ref()
                .unwrap_or(NATIVE_PASSWORD.as_bytes())
                .to_vec(),
            mariadb_capabilities: if p
                .capabilities()
                .contains(CapabilityFlags::CLIENT_LONG_PASSWORD)
            {
                0
            } else {
                p.mariadb_ext_capabilities().bits()
            },
        })
    }
}

/// The greeting's auth-plugin-data length byte: after the protocol version, the NUL-terminated
/// server version, and 20 fixed bytes (connection id, first nonce part, filler, capabilities,
/// collation, status, upper capabilities).
fn auth_data_len_byte(payload: &[u8]) -> Option<&u8> {
    let nul = payload.get(1..)?.iter().position(|&b| b == 0)? + 1;
    payload.get(nul + 21)
}

/// The greeting the proxy sends to a client.
pub struct Greeting<'a> {
    pub server_version: &'a [u8],
    pub connection_id: u32,
    pub nonce: &'a [u8; 20],
    pub capabilities: CapabilityFlags,
    pub collation: u8,
    pub status: u16,
    pub auth_plugin: &'a str,
    /// MariaDB extended capabilities offered (sent only when CLIENT_LONG_PASSWORD is clear).
    pub mariadb_capabilities: u32,
}

impl Greeting<'_> {
    pub fn encode(&self) -> Vec<u8> {
        // The second part of the nonce is sent NUL-terminated, as servers do.
        let mut scramble_2 = self.nonce[8..].to_vec();
        scramble_2.push(0);
        let mut scramble_1 = [0u8; 8];
        scramble_1.copy_from_slice(&self.nonce[..8]);
        let packet = HandshakePacket::new(
            10,
            self.server_version,
            self.connection_id,
            scramble_1,
            Some(scramble_2),
            self.capabilities,
            self.collation,
            StatusFlags::from_bits_truncate(self.status),
            Some(self.auth_plugin.as_bytes()),
        )
        .with_mariadb_ext_capabilities(MariadbCapabilities::from_bits_truncate(
            self.mariadb_capabilities,
        ));
        let mut out = Vec::with_capacity(128);
        packet.serialize(&mut out);
        out
    }
}

/// The client's handshake response (protocol 4.1), with borrowed fields.
#[derive(Debug, Clone)]
pub struct HandshakeResponse<'a> {
    pub capabilities: CapabilityFlags,
    pub max_packet_size: u32,
    pub collation: u8,
    pub user: &'a [u8],
    pub auth_response: &'a [u8],
    pub database: Option<&'a [u8]>,
    pub auth_plugin: Option<&'a [u8]>,
    /// The connection attributes exactly as sent (length-encoded block), passed on to the backend.
    pub connect_attrs: Option<&'a [u8]>,
    /// MariaDB extended capabilities (the last 4 bytes of the filler).
    pub mariadb_capabilities: u32,
}

/// Why a handshake response could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("the client speaks a protocol older than MySQL 4.1, which msgproxy does not support")]
    OldProtocol,
    #[error("malformed handshake response packet")]
    Malformed,
}

/// Length of an SSLRequest payload: the first 32 bytes of a handshake response.
pub const SSL_REQUEST_LEN: usize = 32;

/// Capability flags of a packet that may be an SSLRequest (a truncated handshake response).
pub fn ssl_request_capabilities(payload: &[u8]) -> Option<CapabilityFlags> {
    if payload.len() != SSL_REQUEST_LEN {
        return None;
    }
    let caps = CapabilityFlags::from_bits_truncate(Reader::new(payload).u32()?);
    caps.contains(CapabilityFlags::CLIENT_SSL).then_some(caps)
}

impl<'a> HandshakeResponse<'a> {
    pub fn parse(payload: &'a [u8]) -> Result<HandshakeResponse<'a>, HandshakeError> {
        use CapabilityFlags as C;
        let mut r = Reader::new(payload);
        let caps = C::from_bits_truncate(r.u32().ok_or(HandshakeError::Malformed)?);
        if !caps.contains(C::CLIENT_PROTOCOL_41) {
            return Err(HandshakeError::OldProtocol);
        }
        let max_packet_size = r.u32().ok_or(HandshakeError::Malformed)?;
        let collation = r.u8().ok_or(HandshakeError::Malformed)?;
        r.bytes(19).ok_or(HandshakeError::Malformed)?;
        let mariadb_capabilities = r.u32().ok_or(HandshakeError::Malformed)?;
        let user = r.null_terminated().ok_or(HandshakeError::Malformed)?;
        let auth_response = if caps.contains(C::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA) {
            r.lenenc_bytes()
        } else if caps.contains(C::CLIENT_SECURE_CONNECTION) {
            r.u8().and_then(|n| r.bytes(n as usize))
        } else {
            r.null_terminated()
        }
        .ok_or(HandshakeError::Malformed)?;
        let database = if caps.contains(C::CLIENT_CONNECT_WITH_DB) {
            Some(r.null_terminated_or_rest())
        } else {
            None
        };
        let auth_plugin = if caps.contains(C::CLIENT_PLUGIN_AUTH) {
            Some(r.null_terminated_or_rest())
        } else {
            None
        };
        let connect_attrs = if caps.contains(C::CLIENT_CONNECT_ATTRS) && !r.is_empty() {
            let start = r.remaining();
            r.lenenc_bytes().ok_or(HandshakeError::Malformed)?;
            Some(&start[..start.len() - r.remaining().len()])
        } else {
            None
        };
        Ok(HandshakeResponse {
            capabilities: caps,
            max_packet_size,
            collation,
            user,
            auth_response,
            database: database.filter(|d| !d.is_empty()),
            auth_plugin: auth_plugin.filter(|p| !p.is_empty()),
            connect_attrs,
            mariadb_capabilities,
        })
    }

    /// Encodes a handshake response as the proxy sends it to the backend.
    pub fn encode(&self) -> BytesMut {
        use CapabilityFlags as C;
        let mut out = BytesMut::with_capacity(128);
        out.put_u32_le(self.capabilities.bits());
        out.put_u32_le(self.max_packet_size);
        out.put_u8(self.collation);
        out.put_bytes(0, 19);
        out.put_u32_le(self.mariadb_capabilities);
        out.put_slice(self.user);
        out.put_u8(0);
        if self
            .capabilities
            .contains(C::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA)
        {
            super::wire::put_lenenc_bytes(&mut out, self.auth_response);
        } else {
            out.put_u8(self.auth_response.len() as u8);
            out.put_slice(self.auth_response);
        }
        if let Some(db) = self.database {
            out.put_slice(db);
            out.put_u8(0);
        }
        if let Some(plugin) = self.auth_plugin {
            out.put_slice(plugin);
            out.put_u8(0);
        }
        if let Some(attrs) = self.connect_attrs {
            out.put_slice(attrs);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CapabilityFlags as C;

    fn sample(caps: C) -> HandshakeResponse<'static> {
        HandshakeResponse {
            capabilities: caps,
            max_packet_size: 1 << 24,
            collation: 45,
            user: b"app",
            auth_response: &[1, 2, 3],
            database: Some(b"test"),
            auth_plugin: Some(b"mysql_native_password"),
            connect_attrs: Some(&[4, 1, b'a', 1, b'b']),
            mariadb_capabilities: 8,
        }
    }

    #[test]
    fn greeting_with_an_overflowing_auth_data_length_is_an_error_not_a_panic() {
        // protocol 10, "5.5.5-x\0", connection id, nonce part 1, filler, capabilities with
        // CLIENT_SECURE_CONNECTION and CLIENT_PLUGIN_AUTH, collation, status, upper caps,
        // auth-plugin-data length (patched below), 6 reserved + 4 MariaDB bytes, nonce part 2.
        let mut g = vec![10u8];
        g.extend_from_slice(b"5.5.5-x\0");
        g.extend_from_slice(&7u32.to_le_bytes());
        g.extend_from_slice(b"abcdefgh");
        g.push(0);
        g.extend_from_slice(&0xf7ffu16.to_le_bytes());
        g.push(8);
        g.extend_from_slice(&2u16.to_le_bytes());
        g.extend_from_slice(&0x0008u16.to_le_bytes());
        let len_at = g.len();
        g.push(21);
        g.extend_from_slice(&[0u8; 10]);
        g.extend_from_slice(b"ijklmnopqrst\0");
        g.extend_from_slice(b"mysql_native_password\0");
        assert_eq!(auth_data_len_byte(&g), Some(&21));
        assert!(BackendGreeting::parse(&g).is_ok());
        for bad in [0x80u8, 0x84, 0x87, 0xff] {
            g[len_at] = bad;
            assert!(BackendGreeting::parse(&g).is_err(), "length byte {bad:#x}");
        }
    }

    #[test]
    fn handshake_response_round_trip() {
        let caps = C::CLIENT_PROTOCOL_41
            | C::CLIENT_SECURE_CONNECTION
            | C::CLIENT_PLUGIN_AUTH
            | C::CLIENT_CONNECT_WITH_DB
            | C::CLIENT_CONNECT_ATTRS
            | C::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
        let original = sample(caps);
        let bytes = original.encode();
        let parsed = HandshakeResponse::parse(&bytes).unwrap();
        assert_eq!(parsed.user, b"app");
        assert_eq!(parsed.auth_response, &[1, 2, 3]);
        assert_eq!(parsed.database, Some(&b"test"[..]));
        assert_eq!(parsed.auth_plugin, Some(&b"mysql_native_password"[..]));
        assert_eq!(parsed.connect_attrs, original.connect_attrs);
        assert_eq!(parsed.collation, 45);
        assert_eq!(parsed.mariadb_capabilities, 8);
    }

    #[test]
    fn truncated_responses_are_errors() {
        let caps = C::CLIENT_PROTOCOL_41 | C::CLIENT_SECURE_CONNECTION | C::CLIENT_PLUGIN_AUTH;
        let bytes = sample(caps).encode();
        for n in 0..40 {
            let _ = HandshakeResponse::parse(&bytes[..n]);
        }
        assert!(HandshakeResponse::parse(&bytes[..10]).is_err());
    }

    #[test]
    fn greeting_parses_back() {
        let nonce = [b'a'; 20];
        let g = Greeting {
            server_version: b"10.11.19-MariaDB-msgproxy",
            connection_id: 42,
            nonce: &nonce,
            capabilities: C::CLIENT_PROTOCOL_41
                | C::CLIENT_SECURE_CONNECTION
                | C::CLIENT_PLUGIN_AUTH,
            collation: 45,
            status: 2,
            auth_plugin: NATIVE_PASSWORD,
            mariadb_capabilities: 8,
        }
        .encode();
        let parsed = BackendGreeting::parse(&g).unwrap();
        assert_eq!(parsed.connection_id, 42);
        assert_eq!(parsed.nonce, nonce.to_vec());
        assert_eq!(parsed.auth_plugin, NATIVE_PASSWORD.as_bytes());
    }
}
