//! `KILL [HARD | SOFT] QUERY thread_id`: the connection whose statement a KILL interrupts. The
//! server accepts it for a connection that is between statements and forgets it, which is where a
//! `STREAM` spends its time; the proxy reads the target so that it can end the stream itself.

use mysql_common::constants::ColumnType;

use super::lexer::{is_word, Quoting, SpelledTokens, TokenKind};

/// The connection a `KILL [HARD | SOFT] QUERY` statement names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillQueryTarget {
    /// Written out: `KILL QUERY 42`.
    Connection(u64),
    /// A parameter marker, `KILL QUERY ?`: a prepared statement (`COM_STMT_PREPARE`), whose
    /// target is its one parameter, bound at each `COM_STMT_EXECUTE`.
    Parameter,
}

/// The connection id a `KILL [HARD | SOFT] QUERY id` statement names. `None` for every other
/// statement: a connection kill (`KILL id`, `KILL CONNECTION id`: the server closes that
/// connection itself), `KILL QUERY ID n` (which names a query id), `KILL USER u`, and anything
/// that is not exactly one such statement.
pub fn kill_query_target(sql: &[u8]) -> Option<u64> {
    match kill_query(sql)? {
        KillQueryTarget::Connection(id) => Some(id),
        // As text, `?` is the server's syntax error.
        KillQueryTarget::Parameter => None,
    }
}

/// What a `KILL [HARD | SOFT] QUERY id` or `KILL [HARD | SOFT] QUERY ?` statement names, for
/// the text and the binary protocol alike; `None` for the statements [`kill_query_target`]
/// refuses.
pub fn kill_query(sql: &[u8]) -> Option<KillQueryTarget> {
    let mut tokens = SpelledTokens::new(sql, Quoting::DEFAULT);
    if !is_word(tokens.next(), "kill") {
        return None;
    }
    let mut token = tokens.next();
    if is_word(token, "hard") || is_word(token, "soft") {
        token = tokens.next();
    }
    if !is_word(token, "query") {
        return None;
    }
    let target = match tokens.next() {
        (TokenKind::Punct(b'?'), _) => KillQueryTarget::Parameter,
        (TokenKind::Number, text) if text.iter().all(u8::is_ascii_digit) => {
            KillQueryTarget::Connection(std::str::from_utf8(text).ok()?.parse().ok()?)
        }
        _ => return None,
    };
    (tokens.next().0 == TokenKind::Eof).then_some(target)
}

/// The connection id bound to the one parameter of a prepared `KILL QUERY ?`, read from its
/// `COM_STMT_EXECUTE` payload (command byte included). `bound_type` is the type the client
/// bound last for this statement: a client may send the types only when they change
/// (`new_params_bound_flag` 0), and it is updated when they are sent. Integer types are read,
/// as the server reads them; so is a string or decimal of ASCII digits. `None` for NULL, a
/// negative number, anything else, and a payload too short for what it announces.
pub fn executed_kill_target(payload: &[u8], bound_type: &mut Option<[u8; 2]>) -> Option<u64> {
    // command, statement id (4), flags, iteration count (4); then, for one parameter, a
    // one-byte NULL bitmap and the new-params-bound flag.
    let (&null_bitmap, rest) = payload.get(10..)?.split_first()?;
    let (&new_bound, rest) = rest.split_first()?;
    let value = if new_bound == 1 {
        let (ty, value) = rest.split_at_checked(2)?;
        *bound_type = Some([ty[0], ty[1]]);
        value
    } else {
        rest
    };
    if null_bitmap & 1 != 0 {
        return None;
    }
    let [ty, flags] = (*bound_type)?;
    let unsigned = flags & 0x80 != 0;
    let int = |len: usize| -> Option<u64> {
        let bytes = value.get(..len)?;
        let mut le = [0u8; 8];
        le[..len].copy_from_slice(bytes);
        let raw = u64::from_le_bytes(le);
        if unsigned {
            return Some(raw);
        }
        // Sign-extend and refuse a negative id.
        let shift = 64 - 8 * len as u32;
        let signed = ((raw << shift) as i64) >> shift;
        u64::try_from(signed).ok()
    };
    match ColumnType::try_from(ty).ok()? {
        ColumnType::MYSQL_TYPE_TINY => int(1),
        ColumnType::MYSQL_TYPE_SHORT | ColumnType::MYSQL_TYPE_YEAR => int(2),
        ColumnType::MYSQL_TYPE_LONG | ColumnType::MYSQL_TYPE_INT24 => int(4),
        ColumnType::MYSQL_TYPE_LONGLONG => int(8),
        // Sent as length-encoded strings.
        ColumnType::MYSQL_TYPE_VARCHAR
        | ColumnType::MYSQL_TYPE_NEWDECIMAL
        | ColumnType::MYSQL_TYPE_ENUM
        | ColumnType::MYSQL_TYPE_SET
        | ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB
        | ColumnType::MYSQL_TYPE_VAR_STRING
        | ColumnType::MYSQL_TYPE_STRING => {
            // A length-encoded string (a one-byte length is plenty for an id).
            let (&len, rest) = value.split_first()?;
            let digits = rest.get(..usize::from(len))?;
            if len > 20 || digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            std::str::from_utf8(digits).ok()?.parse().ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_kills_name_their_connection() {
        for sql in [
            "KILL QUERY 42",
            "kill query 42;",
            "  KILL /* Ctrl-C */ HARD QUERY 42 ",
            "Kill Soft Query\n42 -- why",
        ] {
            assert_eq!(kill_query_target(sql.as_bytes()), Some(42), "{sql}");
        }
    }

    #[test]
    fn other_kills_and_other_statements_name_none() {
        for sql in [
            "KILL 42",
            "KILL CONNECTION 42",
            "KILL QUERY ID 42",
            "KILL USER bob",
            "KILL QUERY 4.2",
            "KILL QUERY 0x2a",
            "KILL QUERY 42; SELECT 1",
            "KILL QUERY",
            "SELECT 'KILL QUERY 42'",
            "KILL QUERY 99999999999999999999999",
            "KILL QUERY ?",
        ] {
            assert_eq!(kill_query_target(sql.as_bytes()), None, "{sql}");
        }
    }

    #[test]
    fn prepared_query_kills_name_their_connection_or_parameter() {
        for sql in [
            "KILL QUERY ?",
            "kill hard query ?;",
            "KILL SOFT QUERY /* id */ ?",
        ] {
            assert_eq!(
                kill_query(sql.as_bytes()),
                Some(KillQueryTarget::Parameter),
                "{sql}"
            );
        }
        assert_eq!(
            kill_query(b"KILL QUERY 42"),
            Some(KillQueryTarget::Connection(42))
        );
        for sql in [
            "KILL ?",
            "KILL CONNECTION ?",
            "KILL QUERY ID ?",
            "KILL QUERY ?, ?",
            "KILL QUERY ? + 1",
        ] {
            assert_eq!(kill_query(sql.as_bytes()), None, "{sql}");
        }
    }

    /// A COM_STMT_EXECUTE payload of statement 7 with one parameter.
    fn execute(null: bool, types: Option<[u8; 2]>, value: &[u8]) -> Vec<u8> {
        let mut p = vec![0x17, 7, 0, 0, 0, 0, 1, 0, 0, 0];
        p.push(u8::from(null));
        match types {
            Some(t) => {
                p.push(1);
                p.extend_from_slice(&t);
            }
            None => p.push(0),
        }
        p.extend_from_slice(value);
        p
    }

    #[test]
    fn the_bound_id_is_read_from_integer_and_digit_parameters() {
        let mut ty = None;
        let longlong = execute(false, Some([8, 0]), &42i64.to_le_bytes());
        assert_eq!(executed_kill_target(&longlong, &mut ty), Some(42));
        assert_eq!(ty, Some([8, 0]));
        // The types are sent only when they change: the last ones apply.
        let again = execute(false, None, &43i64.to_le_bytes());
        assert_eq!(executed_kill_target(&again, &mut ty), Some(43));
        for (t, value, id) in [
            ([1, 0], &[42u8][..], Some(42)),
            ([1, 0], &[0xd6], None),
            ([1, 0x80], &[0xd6], Some(214)),
            ([2, 0], &[0x39, 0x30], Some(12345)),
            ([3, 0], &[0x15, 0xcd, 0x5b, 0x07], Some(123456789)),
            ([3, 0], &(-5i32).to_le_bytes(), None),
            ([8, 0x80], &u64::MAX.to_le_bytes(), Some(u64::MAX)),
            ([253, 0], b"\x0299", Some(99)),
            ([254, 0], b"\x03abc", None),
            ([5, 0], &1.0f64.to_le_bytes(), None),
            ([8, 0], &[1, 2, 3], None),
        ] {
            let mut ty = None;
            assert_eq!(
                executed_kill_target(&execute(false, Some(t), value), &mut ty),
                id,
                "{t:?} {value:?}"
            );
        }
        let mut ty = None;
        let null = execute(true, Some([8, 0]), &[]);
        assert_eq!(executed_kill_target(&null, &mut ty), None);
        assert_eq!(executed_kill_target(&[0x17, 7, 0], &mut ty), None);
    }
}
