//! Command bytes (the first payload byte of a client packet) and server error codes the proxy
//! uses on its own account.

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
/// CR_CONN_HOST_ERROR: "Can't connect to MySQL server". A client-side code, but the one every
/// driver and user recognises for "the server is not reachable"; the proxy sends it when it
/// cannot reach the backend.
pub const CR_CONN_HOST_ERROR: u16 = 2003;
/// CR_SERVER_LOST: "Lost connection to MySQL server during query" — sent when the backend
/// connection breaks while a command is running.
pub const CR_SERVER_LOST: u16 = 2013;
