//! The few statements the proxy changes before relaying them.
//!
//! `@@socket` is the only one today. mysql_async (and the Rust `mysql` crate) ask for it right
//! after connecting to a loopback address and, by default, reconnect over that Unix socket —
//! straight to the server, silently bypassing the proxy and its message statements. Through the
//! proxy there is no socket to offer, so `@@socket` reads as an empty string: mysql_async then
//! fails to open "" and stays on the proxy, and clients that read it as a string (the Go
//! driver's own tests do) still get a string.

/// The statement to send instead of `sql`, if it must change.
pub fn rewrite(sql: &[u8]) -> Option<Vec<u8>> {
    const VARIABLE: &[u8] = b"@@socket";
    // Fast path: almost no statement mentions a system variable at all.
    sql.iter().position(|&b| b == b'@')?;
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    let mut copied = 0;
    while i + VARIABLE.len() <= sql.len() {
        let candidate = &sql[i..i + VARIABLE.len()];
        let ends_word = sql
            .get(i + VARIABLE.len())
            .is_none_or(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80));
        if candidate.eq_ignore_ascii_case(VARIABLE) && ends_word {
            let buf = out.get_or_insert_with(|| Vec::with_capacity(sql.len()));
            buf.extend_from_slice(&sql[copied..i]);
            buf.extend_from_slice(b"''");
            i += VARIABLE.len();
            copied = i;
        } else {
            i += 1;
        }
    }
    let mut buf = out?;
    buf.extend_from_slice(&sql[copied..]);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn socket_reads_as_an_empty_string() {
        assert_eq!(
            rewrite(b"SELECT @@max_allowed_packet,@@wait_timeout,@@socket").as_deref(),
            Some(&b"SELECT @@max_allowed_packet,@@wait_timeout,''"[..])
        );
        assert_eq!(
            rewrite(b"select @@SOCKET as s").as_deref(),
            Some(&b"select '' as s"[..])
        );
    }

    #[test]
    fn other_statements_are_untouched() {
        assert_eq!(rewrite(b"SELECT 1"), None);
        assert_eq!(rewrite(b"SELECT @@socket_timeout"), None);
        assert_eq!(rewrite(b"SELECT @a"), None);
        assert_eq!(rewrite(b"@@socke"), None);
    }
}
