//! The statement path every COM_QUERY takes: classify, then parse the virtual statements, then the
//! rewrite. Checks the invariants the proxy relies on, not just the absence of panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use msgproxy::sql::{classify, parse_virtual, rewrite, Action};

fuzz_target!(|data: &[u8]| {
    let c = classify(data);
    assert!(c.keyword_offset <= data.len());
    let parsed = parse_virtual(data);
    if c.action == Action::Virtual {
        // A virtual statement is answered by the proxy: the parse must give either a statement or a
        // syntax error with a position, never anything else.
        if let Err(e) = &parsed {
            assert!(e.line >= 1);
            let _ = e.message();
        }
    }
    if let Some(out) = rewrite(data) {
        assert_ne!(out.as_slice(), data, "a rewrite that changes nothing");
    }
});
