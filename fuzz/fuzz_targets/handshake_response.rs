//! The client's handshake response and SSL request: whatever the bytes, parsing returns a value
//! or an error (no panic, no read past the end).
#![no_main]

use libfuzzer_sys::fuzz_target;
use msgproxy::protocol::handshake::{ssl_request_capabilities, HandshakeResponse};

fuzz_target!(|data: &[u8]| {
    let _ = ssl_request_capabilities(data);
    if let Ok(r) = HandshakeResponse::parse(data) {
        // Everything it hands out lies inside the input.
        assert!(r.user.len() <= data.len());
        assert!(r.auth_response.len() <= data.len());
        if let Some(db) = r.database {
            assert!(db.len() <= data.len());
        }
    }
});
