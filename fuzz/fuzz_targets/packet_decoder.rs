//! The packet reader over arbitrary bytes: whole packets, raw packets and logical packets
//! (continuations joined, with a size limit), until the input runs out. Also the sync helpers
//! that read packet contents (ERR packets, status flags, text rows).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use msgproxy::protocol::packet::{parse_header, PacketReader, HEADER_LEN};
use msgproxy::protocol::wire::{status_flags, text_row_values, ErrorPacket};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, input)) = data.split_first() else {
        return;
    };
    // One runtime for the whole run: building one per input would cost more than the parsing.
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    let Some(rt) = RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().ok())
    else {
        return;
    };
    rt.block_on(async {
        let mut reader = PacketReader::new(input);
        // Each read consumes at least a header, so this ends when the input does.
        for _ in 0..input.len() / HEADER_LEN + 1 {
            let payload = match mode % 3 {
                0 => match reader.next_packet().await {
                    Ok(p) => p.payload,
                    Err(_) => break,
                },
                1 => match reader.next_raw_packet().await {
                    Ok(p) => p,
                    Err(_) => break,
                },
                _ => match reader.next_logical_packet(1 << 20).await {
                    Ok(p) => p.payload,
                    Err(_) => break,
                },
            };
            let _ = ErrorPacket::parse(&payload);
            let _ = status_flags(&payload);
            let _ = text_row_values(&payload);
        }
    });
    if input.len() >= HEADER_LEN {
        let _ = parse_header(input);
    }
});
