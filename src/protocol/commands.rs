//! Command bytes (the first payload byte of a client packet) and the server error codes the proxy
//! uses on its own account — all of them, so that none can slip into a client-only range.

pub const COM_QUIT: u8 = 0x01;
pub const COM_INIT_DB: u8 = 0x02;
pub const COM_QUERY: u8 = 0x03;
pub const COM_FIELD_LIST: u8 = 0x04;
pub const COM_STATISTICS: u8 = 0x09;
pub const COM_PROCESS_INFO: u8 = 0x0A;
pub const COM_PING: u8 = 0x0E;
pub const COM_CHANGE_USER: u8 = 0x11;
pub const COM_BINLOG_DUMP: u8 = 0x12;
pub const COM_TABLE_DUMP: u8 = 0x13;
pub const COM_CONNECT_OUT: u8 = 0x14;
pub const COM_REGISTER_SLAVE: u8 = 0x15;
pub const COM_STMT_PREPARE: u8 = 0x16;
pub const COM_STMT_EXECUTE: u8 = 0x17;
pub const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
pub const COM_STMT_CLOSE: u8 = 0x19;
pub const COM_STMT_RESET: u8 = 0x1A;
pub const COM_SET_OPTION: u8 = 0x1B;
pub const COM_STMT_FETCH: u8 = 0x1C;
pub const COM_BINLOG_DUMP_GTID: u8 = 0x1E;
pub const COM_RESET_CONNECTION: u8 = 0x1F;
/// MariaDB's array-bound execute (offered through MARIADB_CLIENT_STMT_BULK_OPERATIONS).
pub const COM_STMT_BULK_EXECUTE: u8 = 0xFA;

/// ER_CON_COUNT_ERROR: "Too many connections".
pub const ER_CON_COUNT_ERROR: u16 = 1040;
/// ER_ACCESS_DENIED_ERROR.
pub const ER_ACCESS_DENIED_ERROR: u16 = 1045;
/// ER_UNKNOWN_COM_ERROR: "Unknown command".
pub const ER_UNKNOWN_COM_ERROR: u16 = 1047;
/// ER_HANDSHAKE_ERROR: "Bad handshake".
pub const ER_HANDSHAKE_ERROR: u16 = 1043;
/// ER_NET_PACKET_TOO_LARGE.
pub const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
/// "This command is not supported in the prepared statement protocol yet".
pub const ER_UNSUPPORTED_PS: u16 = 1295;
/// ER_SECURE_TRANSPORT_REQUIRED (MySQL 5.7+, also understood by MariaDB clients).
pub const ER_SECURE_TRANSPORT_REQUIRED: u16 = 3159;
/// ER_CONNECT_TO_FOREIGN_DATA_SOURCE: "Unable to connect to foreign data source". What the
/// server itself says when a FEDERATED/CONNECT/Spider table's remote server cannot be reached —
/// msgproxy's situation when it cannot connect or log in to its backend. After the handshake (a
/// failed backend login) it goes with SQLSTATE 08004, "the server rejected the connection", as
/// 1040 does, rather than the table's HY000, so drivers class it as a connection failure; in
/// place of the greeting an error carries no SQLSTATE at all (clients show HY000), as the
/// server's own 1040 does there.
pub const ER_CONNECT_TO_FOREIGN_DATA_SOURCE: u16 = 1429;
/// ER_NET_READ_ERROR: "Got an error reading communication packets" (SQLSTATE 08S01, which JDBC,
/// Go and pools take as "this connection is broken"). What the server says when its own network
/// read fails; msgproxy sends it when the session's backend connection breaks, since the
/// session cannot go on without it.
pub const ER_NET_READ_ERROR: u16 = 1158;
/// ER_SERVER_SHUTDOWN: "Server shutdown in progress" (08S01): msgproxy is stopping.
pub const ER_SERVER_SHUTDOWN: u16 = 1053;
/// ER_NO_SUCH_TABLE: a stream's message table was dropped (or stopped being one).
pub const ER_NO_SUCH_TABLE: u16 = 1146;
/// ER_NO_DB_ERROR: "No database selected" (an unqualified table name without a default database).
pub const ER_NO_DB_ERROR: u16 = 1046;
/// ER_WRONG_OBJECT: "'%s' is not %s" — a table named by STREAM/ACK is not a usable message table.
pub const ER_WRONG_OBJECT: u16 = 1347;
/// ER_CANT_DO_THIS_DURING_AN_TRANSACTION: "You are not allowed to execute this command in a
/// transaction" (25000) — STREAM inside the client's open transaction.
pub const ER_CANT_DO_THIS_DURING_AN_TRANSACTION: u16 = 1179;
/// ER_QUERY_INTERRUPTED: "Query execution was interrupted" (70100) — a STREAM ended by KILL QUERY.
pub const ER_QUERY_INTERRUPTED: u16 = 1317;
/// ER_TABLE_DEF_CHANGED: "Table definition has changed, please retry transaction" — a STREAM's
/// columns changed under it.
pub const ER_TABLE_DEF_CHANGED: u16 = 1412;
/// ER_UNKNOWN_ERROR — an answer to the proxy's own question that it could not read.
pub const ER_UNKNOWN_ERROR: u16 = 1105;
/// ER_UNKNOWN_CHARACTER_SET: "Unknown character set: '%s'".
pub const ER_UNKNOWN_CHARACTER_SET: u16 = 1115;
/// ER_WRONG_ARGUMENTS: "Incorrect arguments to %s" — a STREAM naming a group with another filter.
pub const ER_WRONG_ARGUMENTS: u16 = 1210;
/// ER_NOT_SUPPORTED_YET (42000) — a stream filter construct msgproxy does not evaluate.
pub const ER_NOT_SUPPORTED_YET: u16 = 1235;
/// ER_BAD_FIELD_ERROR: "Unknown column '%s' in '%s'" (42S22) — a STREAM column the table lacks.
pub const ER_BAD_FIELD_ERROR: u16 = 1054;

/// Whether a client may reject `code` when a server sends it. Codes 2000-2999 (CR_*) and
/// 5000-5999 (MariaDB Connector/C's CER_*) belong to the client libraries: libmariadb (the
/// `mariadb` CLI, mysqlclient, PHP mysqli, ...) refuses an ERR packet carrying one it defines
/// (`ma_net_safe_read`, since CONC-648: 2001 up to its last CR_ code, 5001 up to its last CER_
/// code) and reports "2027 Received malformed packet" instead of the message. The last codes
/// grow with each release, so every code msgproxy sends on its own account stays out of both
/// whole ranges.
pub const fn is_client_error_code(code: u16) -> bool {
    matches!(code, 2000..=2999 | 5000..=5999)
}

// Every error code above, checked at compile time (list a new one here too): one in a client
// range fails the build.
const _: () = {
    let codes = [
        ER_CON_COUNT_ERROR,
        ER_ACCESS_DENIED_ERROR,
        ER_UNKNOWN_COM_ERROR,
        ER_HANDSHAKE_ERROR,
        ER_NET_PACKET_TOO_LARGE,
        ER_UNSUPPORTED_PS,
        ER_SECURE_TRANSPORT_REQUIRED,
        ER_CONNECT_TO_FOREIGN_DATA_SOURCE,
        ER_NET_READ_ERROR,
        ER_SERVER_SHUTDOWN,
        ER_NO_SUCH_TABLE,
        ER_NO_DB_ERROR,
        ER_WRONG_OBJECT,
        ER_CANT_DO_THIS_DURING_AN_TRANSACTION,
        ER_QUERY_INTERRUPTED,
        ER_TABLE_DEF_CHANGED,
        ER_UNKNOWN_ERROR,
        ER_UNKNOWN_CHARACTER_SET,
        ER_WRONG_ARGUMENTS,
        ER_NOT_SUPPORTED_YET,
        ER_BAD_FIELD_ERROR,
        crate::sql::SyntaxError::CODE,
    ];
    let mut i = 0;
    while i < codes.len() {
        assert!(!is_client_error_code(codes[i]));
        i += 1;
    }
};

/// The statement id a `COM_STMT_EXECUTE`/`CLOSE`/`BULK_EXECUTE`/`RESET` payload names.
pub fn statement_id(payload: &[u8]) -> Option<u32> {
    let bytes = payload.get(1..5)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ranges_are_2000s_and_5000s() {
        for code in [2000, 2003, 2013, 2027, 2999, 5000, 5026, 5999] {
            assert!(is_client_error_code(code), "{code}");
        }
        for code in [1999, 3000, 3159, 4999, 6000, 1053, 1158, 1429, 1927] {
            assert!(!is_client_error_code(code), "{code}");
        }
    }
}
