// The client checks of CHECKS.md (next to this file) with MariaDB Connector/J, through the plain JDBC
// API as an application uses it.
//
//   java -cp CLASSES:mariadb-java-client.jar ConnectorJChecks HOST PORT
//
// User root with an empty password, database client_checks (created beforehand by connector-j.sh).
// Prints one line per check on stdout (PASS name, FAIL name: why, SKIP name: why); everything else
// (what each check observed, stack traces) goes to stderr. Exits 0 when it ran to the end.
//
// Connections: plain ones (client-side prepared statements, the driver's default), ones with
// useServerPrepStmts=true for the checks that use the binary protocol (COM_STMT_PREPARE/EXECUTE), and
// one with allowMultiQueries=true for several statements in one query.

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.SQLWarning;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

public class ConnectorJChecks {
    static final String DB = "client_checks";
    static final String PREFIX = "cj_";
    /** The longest a check waits for something (a message, a killed query, a cancelled stream). */
    static final long WAIT_MS = 15_000;

    static String host;
    static int port;

    // ---------------------------------------------------------------------------------------------
    // Connections

    /**
     * A connection to client_checks with extra URL options. socketTimeout bounds any read, so a
     * check cannot hang forever on a server that stops answering (it is longer than the SLEEP(10) of
     * kill_query); the stream's connection has none, since waiting long for a message is its job.
     */
    static Connection open(String options) throws SQLException {
        String url = "jdbc:mariadb://" + host + ":" + port + "/" + DB + "?user=root&connectTimeout=10000"
                + (options.isEmpty() ? "" : "&" + options);
        return DriverManager.getConnection(url);
    }

    static Connection openPlain() throws SQLException {
        return open("socketTimeout=30000");
    }

    static Connection openServerPrepared() throws SQLException {
        return open("socketTimeout=30000&useServerPrepStmts=true");
    }

    // ---------------------------------------------------------------------------------------------
    // What a check observed, in canonical text, and its digest

    static final class Obs {
        final StringBuilder text = new StringBuilder();

        void add(String key, Object value) {
            text.append(key).append(" = ").append(value).append('\n');
        }

        String digest() {
            try {
                byte[] d = MessageDigest.getInstance("SHA-256").digest(text.toString().getBytes(StandardCharsets.UTF_8));
                return hex(d).substring(0, 12);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }
    }

    static final class CheckFailed extends Exception {
        private static final long serialVersionUID = 1L;

        CheckFailed(String why) {
            super(why);
        }
    }

    static void expect(boolean ok, String what) throws CheckFailed {
        if (!ok) {
            throw new CheckFailed(what);
        }
    }

    static void expectEq(Object expected, Object actual, String what) throws CheckFailed {
        if (expected == null ? actual != null : !expected.equals(actual)) {
            throw new CheckFailed(what + ": expected " + expected + ", got " + actual);
        }
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) {
            s.append(String.format("%02x", x & 0xff));
        }
        return s.toString();
    }

    /** A value as the driver returned it: its Java type and its text. */
    static String fmt(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof byte[]) {
            return "byte[]:" + hex((byte[]) v);
        }
        return v.getClass().getName() + ":" + v;
    }

    /**
     * An error as the application sees it. Connector/J puts the connection id in every message
     * ("(conn=42) ..."), which differs from run to run: that part is left out.
     */
    static String fmtError(Throwable e) {
        if (e == null) {
            return "nothing";
        }
        if (e instanceof SQLException) {
            SQLException s = (SQLException) e;
            return s.getClass().getSimpleName() + " code=" + s.getErrorCode() + " sqlstate=" + s.getSQLState()
                    + " message=" + stripConn(s.getMessage());
        }
        return e.getClass().getName() + ": " + e.getMessage();
    }

    static String stripConn(String message) {
        return message == null ? null : message.replaceAll("\\(conn[:=]\\d+\\) ?", "");
    }

    static int code(Throwable e) {
        return e instanceof SQLException ? ((SQLException) e).getErrorCode() : -1;
    }

    /** The column metadata Connector/J exposes. */
    static void addMetadata(Obs o, String key, ResultSetMetaData md) throws SQLException {
        for (int i = 1; i <= md.getColumnCount(); i++) {
            o.add(key + ".col" + i, "label=" + md.getColumnLabel(i) + " name=" + md.getColumnName(i)
                    + " type=" + md.getColumnType(i) + " typeName=" + md.getColumnTypeName(i)
                    + " class=" + md.getColumnClassName(i) + " precision=" + md.getPrecision(i)
                    + " scale=" + md.getScale(i) + " displaySize=" + md.getColumnDisplaySize(i)
                    + " signed=" + md.isSigned(i) + " nullable=" + md.isNullable(i)
                    + " table=" + md.getTableName(i) + " catalog=" + md.getCatalogName(i));
        }
    }

    /**
     * Every row of a result set: each value by getObject (with its Java type) and by getString.
     * A getter that throws (Connector/J 2.7 cannot map every MariaDB value to a Java type, e.g. a
     * negative TIME) is recorded as such: that, too, must be the same through msgproxy.
     */
    static List<List<Object>> addRows(Obs o, String key, ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        addMetadata(o, key, md);
        List<List<Object>> rows = new ArrayList<>();
        int r = 0;
        while (rs.next()) {
            r++;
            List<Object> row = new ArrayList<>();
            for (int i = 1; i <= md.getColumnCount(); i++) {
                Object v;
                String shown;
                try {
                    v = rs.getObject(i);
                    shown = fmt(v);
                } catch (SQLException e) {
                    v = e;
                    shown = "getObject threw " + fmtError(e);
                }
                String str;
                try {
                    str = String.valueOf(rs.getString(i));
                } catch (SQLException e) {
                    str = "getString threw " + fmtError(e);
                }
                o.add(key + ".row" + r + ".col" + i, shown + " | getString=" + str);
                row.add(v);
            }
            rows.add(row);
        }
        o.add(key + ".rows", r);
        return rows;
    }

    /** All results of Statement.execute: result sets and update counts, in order. */
    static int addAllResults(Obs o, String key, Statement st, boolean isResultSet) throws SQLException {
        int resultSets = 0;
        for (int n = 1; ; n++) {
            if (isResultSet) {
                resultSets++;
                try (ResultSet rs = st.getResultSet()) {
                    addRows(o, key + ".result" + n, rs);
                }
            } else {
                int count = st.getUpdateCount();
                if (count == -1) {
                    break;
                }
                o.add(key + ".result" + n, "updateCount=" + count);
            }
            isResultSet = st.getMoreResults();
        }
        return resultSets;
    }

    static long queryLong(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            if (!rs.next()) {
                throw new SQLException("no row from " + sql);
            }
            return rs.getLong(1);
        }
    }

    static void exec(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement()) {
            st.execute(sql);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Running checks

    interface Body {
        void run(Obs o) throws Throwable;
    }

    interface Plain {
        void run() throws Throwable;
    }

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** A pass-through check: its name carries the digest of what it observed. */
    static void passthrough(String name, Body body) {
        Obs o = new Obs();
        String full = "passthrough/" + name;
        Throwable failure = null;
        try {
            body.run(o);
        } catch (Throwable t) {
            failure = t;
        }
        System.err.println("--- " + full + " observed:\n" + o.text);
        String named = full + "#" + o.digest();
        if (failure == null) {
            out("PASS " + named);
        } else {
            failure.printStackTrace(System.err);
            out("FAIL " + named + ": " + oneLine(failure));
        }
    }

    static void messaging(String name, boolean viaProxy, Plain body) {
        String full = "messaging/" + name;
        if (!viaProxy) {
            out("SKIP " + full + ": needs msgproxy");
            return;
        }
        try {
            body.run();
            out("PASS " + full);
        } catch (Throwable t) {
            System.err.println("--- " + full + " failed:");
            t.printStackTrace(System.err);
            out("FAIL " + full + ": " + oneLine(t));
        }
    }

    static String oneLine(Throwable t) {
        String s = t instanceof CheckFailed ? t.getMessage() : fmtError(t);
        return s == null ? t.getClass().getName() : s.replace('\n', ' ');
    }

    // ---------------------------------------------------------------------------------------------
    // Pass-through checks

    static void checkConnect(Obs o) throws Exception {
        try (Connection c = openPlain(); Statement st = c.createStatement();
             ResultSet rs = st.executeQuery("SELECT DATABASE(), @@autocommit, USER() = CURRENT_USER() OR 1")) {
            addMetadata(o, "select", rs.getMetaData());
            expect(rs.next(), "no row");
            o.add("database", fmt(rs.getObject(1)));
            o.add("autocommit", fmt(rs.getObject(2)));
            o.add("user", fmt(rs.getObject(3)));
            expectEq(DB, rs.getString(1), "DATABASE()");
            expectEq(1L, rs.getLong(2), "@@autocommit");
            expectEq(1L, rs.getLong(3), "USER() = CURRENT_USER() OR 1");
            // Connection.isValid is Connector/J's ping: a COM_PING.
            boolean valid = c.isValid(5);
            o.add("isValid", valid);
            expect(valid, "isValid (COM_PING) returned false");
            o.add("getAutoCommit", c.getAutoCommit());
            o.add("getCatalog", c.getCatalog());
            String version = c.getMetaData().getDatabaseProductVersion();
            o.add("productName", c.getMetaData().getDatabaseProductName());
            // msgproxy reports the server's version with "-msgproxy" appended: left out.
            o.add("productVersion", version.replaceFirst("-msgproxy$", ""));
            o.add("majorVersion", c.getMetaData().getDatabaseMajorVersion());
        }
    }

    /** The values of types_text, as SQL literals. MariaDB has no CAST(... AS YEAR), so no YEAR here. */
    static final String[] TEXT_VALUES = {
        "1", "-9223372036854775808", "CAST(18446744073709551615 AS UNSIGNED)", "CAST(1234.5678 AS DECIMAL(20,6))",
        "CAST(1.5 AS FLOAT)", "1e300", "'héllo 😀'", "X'00FF41'", "DATE'2024-02-29'",
        "TIMESTAMP'2024-01-02 03:04:05.123456'", "TIME'-838:59:59'", "b'1010'", "JSON_OBJECT('a', 1)", "NULL",
    };

    /** What both type checks know about the values, whichever protocol carried them. */
    static void expectTypeValues(ResultSet rs) throws Exception {
        expectEq(1L, rs.getLong(1), "value 1");
        expectEq(Long.MIN_VALUE, rs.getLong(2), "value 2");
        expectEq("18446744073709551615", rs.getString(3), "value 3");
        expectEq(0, new BigDecimal("1234.5678").compareTo(rs.getBigDecimal(4)), "value 4 compared with 1234.5678");
        expectEq(1.5, rs.getDouble(5), "value 5");
        expectEq(1e300, rs.getDouble(6), "value 6");
        expectEq("héllo 😀", rs.getString(7), "value 7");
        expectEq("00ff41", hex(rs.getBytes(8)), "value 8");
        expectEq("2024-02-29", rs.getString(9), "value 9");
        expectEq("{\"a\": 1}", rs.getString(13), "value 13");
        expectEq(null, rs.getObject(14), "value 14");
    }

    static void checkTypesText(Obs o) throws Exception {
        String sql = "SELECT " + String.join(", ", TEXT_VALUES);
        try (Connection c = openPlain(); Statement st = c.createStatement()) {
            try (ResultSet rs = st.executeQuery(sql)) {
                expectEq(1, addRows(o, "text", rs).size(), "row count");
            }
            try (ResultSet rs = st.executeQuery(sql)) {
                rs.next();
                expectTypeValues(rs);
            }
        }
    }

    static void checkTypesPrepared(Obs o) throws Exception {
        String sql = "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?";
        try (Connection c = openServerPrepared(); PreparedStatement ps = c.prepareStatement(sql)) {
            // useServerPrepStmts=true: the statement is prepared by the server (binary protocol).
            o.add("statementClass", ps.getClass().getSimpleName());
            expect(ps.isWrapperFor(org.mariadb.jdbc.ServerSidePreparedStatement.class),
                    "not a server-side prepared statement: " + ps.getClass().getName());
            ps.setLong(1, 1);
            ps.setLong(2, Long.MIN_VALUE);
            ps.setBigDecimal(3, new BigDecimal("18446744073709551615"));
            ps.setBigDecimal(4, new BigDecimal("1234.567800"));
            ps.setFloat(5, 1.5f);
            ps.setDouble(6, 1e300);
            ps.setString(7, "héllo 😀");
            ps.setBytes(8, new byte[] {0x00, (byte) 0xFF, 0x41});
            ps.setDate(9, Date.valueOf("2024-02-29"));
            ps.setTimestamp(10, Timestamp.valueOf("2024-01-02 03:04:05.123456"));
            // java.sql.Time cannot hold a negative time of day: sent as a string, as an application must.
            ps.setString(11, "-838:59:59");
            ps.setBytes(12, new byte[] {0x0A});
            ps.setString(13, "{\"a\": 1}");
            ps.setNull(14, Types.VARCHAR);
            try (ResultSet rs = ps.executeQuery()) {
                expectEq(1, addRows(o, "prepared", rs).size(), "row count");
            }
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                expectTypeValues(rs);
            }
        }
    }

    static final String TYPES_COLUMNS = "b, u, d, f, s, v, dt, t, j, e, st, bt";

    static void checkTableRoundtrip(Obs o) throws Exception {
        String table = PREFIX + "types";
        try (Connection c = openPlain(); Connection p = openServerPrepared()) {
            exec(c, "DROP TABLE IF EXISTS " + table);
            exec(c, "CREATE TABLE " + table + " (id INT AUTO_INCREMENT PRIMARY KEY, b BIGINT, u BIGINT UNSIGNED,"
                    + " d DECIMAL(20,6), f DOUBLE, s VARCHAR(50) CHARACTER SET utf8mb4, v VARBINARY(20), dt DATETIME(6),"
                    + " t TIME(3), j JSON, e ENUM('x','y'), st SET('p','q'), bt BIT(10))");
            String insert = "INSERT INTO " + table + " (" + TYPES_COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
            try (PreparedStatement ps = p.prepareStatement(insert, Statement.RETURN_GENERATED_KEYS)) {
                for (int row = 1; row <= 3; row++) {
                    if (row == 2) {
                        for (int i = 1; i <= 12; i++) {
                            ps.setNull(i, Types.NULL);
                        }
                    } else {
                        boolean first = row == 1;
                        ps.setLong(1, first ? -5 : Long.MAX_VALUE);
                        ps.setBigDecimal(2, new BigDecimal(first ? "18446744073709551615" : "0"));
                        ps.setBigDecimal(3, new BigDecimal(first ? "12345.678901" : "-0.000001"));
                        ps.setDouble(4, first ? 2.5 : -1e-300);
                        ps.setString(5, first ? "héllo 😀" : "");
                        ps.setBytes(6, first ? new byte[] {0x00, (byte) 0xFF, 0x41} : new byte[0]);
                        ps.setTimestamp(7, Timestamp.valueOf(first ? "2024-01-02 03:04:05.123456" : "1970-01-01 00:00:01"));
                        ps.setString(8, first ? "12:34:56.789" : "-01:02:03.5");
                        ps.setString(9, first ? "{\"k\": [1, 2]}" : "null");
                        ps.setString(10, first ? "y" : "x");
                        ps.setString(11, first ? "p,q" : "");
                        ps.setLong(12, first ? 517 : 0);
                    }
                    int affected = ps.executeUpdate();
                    o.add("insert" + row + ".affected", affected);
                    expectEq(1, affected, "insert " + row + " affected rows");
                    try (ResultSet keys = ps.getGeneratedKeys()) {
                        expect(keys.next(), "insert " + row + ": no generated key");
                        o.add("insert" + row + ".lastInsertId", fmt(keys.getObject(1)));
                        expectEq((long) row, keys.getLong(1), "insert " + row + " last insert id");
                    }
                }
            }
            String select = "SELECT id, " + TYPES_COLUMNS + " FROM " + table;
            try (PreparedStatement ps = p.prepareStatement(select + " WHERE id >= ? ORDER BY id")) {
                ps.setInt(1, 1);
                try (ResultSet rs = ps.executeQuery()) {
                    List<List<Object>> rows = addRows(o, "prepared", rs);
                    expectEq(3, rows.size(), "prepared select: rows");
                    expectEq("héllo 😀", rows.get(0).get(5), "prepared select: s of row 1");
                    expect(rows.get(1).subList(1, 13).stream().allMatch(v -> v == null), "prepared select: row 2 not all NULL");
                }
            }
            try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(select + " ORDER BY id")) {
                List<List<Object>> rows = addRows(o, "text", rs);
                expectEq(3, rows.size(), "text select: rows");
                expectEq("héllo 😀", rows.get(0).get(5), "text select: s of row 1");
                expect(rows.get(1).subList(1, 13).stream().allMatch(v -> v == null), "text select: row 2 not all NULL");
            }
        }
    }

    static void checkWarnings(Obs o) throws Exception {
        String table = PREFIX + "warn";
        try (Connection c = openPlain(); Statement st = c.createStatement()) {
            st.execute("DROP TABLE IF EXISTS " + table);
            st.execute("CREATE TABLE " + table + " (s VARCHAR(3))");
            st.execute("SET SESSION sql_mode = ''");
            int affected = st.executeUpdate("INSERT INTO " + table + " VALUES ('abcdef')");
            o.add("affected", affected);
            expectEq(1, affected, "affected rows");
            // Connector/J asks the server (SHOW WARNINGS) when the OK packet counted warnings.
            int count = 0;
            boolean truncated = false;
            for (SQLWarning w = st.getWarnings(); w != null; w = w.getNextWarning()) {
                count++;
                o.add("warning" + count, "code=" + w.getErrorCode() + " sqlstate=" + w.getSQLState()
                        + " message=" + stripConn(w.getMessage()));
                truncated |= w.getErrorCode() == 1265;
            }
            o.add("warningCount", count);
            expect(truncated, "no warning 1265 (data truncated) from the driver");
            try (ResultSet rs = st.executeQuery("SHOW WARNINGS")) {
                expect(addRows(o, "showWarnings", rs).size() >= 1, "SHOW WARNINGS: no row");
            }
        }
    }

    static void checkErrors(Obs o) throws Exception {
        String dup = PREFIX + "dup";
        try (Connection c = openPlain(); Statement st = c.createStatement()) {
            st.execute("DROP TABLE IF EXISTS " + dup);
            st.execute("CREATE TABLE " + dup + " (id INT PRIMARY KEY)");
            st.execute("INSERT INTO " + dup + " VALUES (1)");
            String[][] cases = {
                {"syntax", "SELEC 1", "1064"},
                {"unknownTable", "SELECT * FROM " + PREFIX + "no_such_table", "1146"},
                {"duplicateKey", "INSERT INTO " + dup + " VALUES (1)", "1062"},
            };
            for (String[] k : cases) {
                try {
                    st.execute(k[1]);
                    o.add(k[0], "no error");
                    throw new CheckFailed(k[0] + ": no error from " + k[1]);
                } catch (SQLException e) {
                    o.add(k[0], fmtError(e));
                    expectEq(Integer.parseInt(k[2]), e.getErrorCode(), k[0] + " error code");
                }
            }
            long one = queryLong(c, "SELECT 1");
            o.add("selectAfter", one);
            expectEq(1L, one, "SELECT 1 after the errors");
        }
    }

    static void checkTransactions(Obs o) throws Exception {
        String table = PREFIX + "tx";
        try (Connection c = openPlain(); Connection other = openPlain()) {
            exec(c, "DROP TABLE IF EXISTS " + table);
            exec(c, "CREATE TABLE " + table + " (id INT PRIMARY KEY) ENGINE=InnoDB");
            c.setAutoCommit(false);
            try (Statement st = c.createStatement()) {
                o.add("insert1", st.executeUpdate("INSERT INTO " + table + " VALUES (1)"));
                c.rollback();
                long afterRollback = queryLong(c, "SELECT COUNT(*) FROM " + table);
                o.add("countAfterRollback", afterRollback);
                expectEq(0L, afterRollback, "rows after rollback");
                o.add("insert2", st.executeUpdate("INSERT INTO " + table + " VALUES (2)"));
                c.commit();
            }
            try (Statement st = other.createStatement(); ResultSet rs = st.executeQuery("SELECT id FROM " + table + " ORDER BY id")) {
                List<List<Object>> rows = addRows(o, "seenByOther", rs);
                expectEq(1, rows.size(), "rows seen from the second connection");
                expectEq(2L, ((Number) rows.get(0).get(0)).longValue(), "the committed id");
            }
        }
    }

    static void checkMultiResults(Obs o) throws Exception {
        String proc = PREFIX + "two_results";
        try (Connection c = openPlain(); Statement st = c.createStatement()) {
            st.execute("DROP PROCEDURE IF EXISTS " + proc);
            st.execute("CREATE PROCEDURE " + proc + "() BEGIN SELECT 1 AS a, 'one' AS b; SELECT 2 AS c UNION SELECT 3; END");
            int sets = addAllResults(o, "call", st, st.execute("CALL " + proc + "()"));
            expectEq(2, sets, "result sets from CALL");
            try (CallableStatement cs = c.prepareCall("{call " + proc + "()}")) {
                sets = addAllResults(o, "callable", cs, cs.execute());
                expectEq(2, sets, "result sets from CallableStatement");
            }
        }
        try (Connection c = open("socketTimeout=30000&allowMultiQueries=true"); Statement st = c.createStatement()) {
            int sets = addAllResults(o, "multi", st, st.execute("SELECT 1; SELECT 2"));
            expectEq(2, sets, "result sets from SELECT 1; SELECT 2");
        }
    }

    static void checkLargeResult(Obs o) throws Exception {
        try (Connection c = openPlain(); Statement st = c.createStatement()) {
            // A fetch size makes Connector/J stream the result instead of buffering all of it.
            st.setFetchSize(1000);
            long rows = 0;
            long sum = 0;
            boolean allHundred = true;
            try (ResultSet rs = st.executeQuery("SELECT seq, REPEAT('x', 100) FROM seq_1_to_200000")) {
                addMetadata(o, "seq", rs.getMetaData());
                while (rs.next()) {
                    rows++;
                    sum += rs.getLong(1);
                    allHundred &= rs.getString(2).length() == 100;
                }
            }
            o.add("rows", rows);
            o.add("sum", sum);
            o.add("allHundred", allHundred);
            expectEq(200_000L, rows, "rows");
            expectEq(20_000_100_000L, sum, "sum of seq");
            expect(allHundred, "a REPEAT('x', 100) value of another length");
            st.setFetchSize(0);
            try (ResultSet rs = st.executeQuery("SELECT REPEAT('y', 5000000)")) {
                addMetadata(o, "big", rs.getMetaData());
                expect(rs.next(), "no row");
                String big = rs.getString(1);
                o.add("bigLength", big.length());
                expectEq(5_000_000, big.length(), "length of the large value");
                expect(big.chars().allMatch(ch -> ch == 'y'), "the large value is not all 'y'");
            }
        }
    }

    static void checkSessionState(Obs o) throws Exception {
        try (Connection c = openPlain(); Statement st = c.createStatement()) {
            st.execute("SET @cj_var = 'kept in the session'");
            try (ResultSet rs = st.executeQuery("SELECT @cj_var")) {
                expect(rs.next(), "no row");
                o.add("userVar", fmt(rs.getObject(1)));
                expectEq("kept in the session", rs.getString(1), "user variable");
            }
            // Connector/J always encodes and decodes UTF-8 whatever the session says; what SET NAMES
            // latin1 does to a non-ASCII string is recorded (the server's view in hex, the driver's).
            st.execute("SET NAMES latin1");
            try (ResultSet rs = st.executeQuery("SELECT 'café', HEX('café'), @@character_set_client, @@character_set_results")) {
                addRows(o, "latin1", rs);
            }
            try (PreparedStatement ps = c.prepareStatement("SELECT ?")) {
                ps.setString(1, "café");
                try (ResultSet rs = ps.executeQuery()) {
                    expect(rs.next(), "no row");
                    o.add("latin1.param", fmt(rs.getObject(1)));
                    expectEq("café", rs.getString(1), "non-ASCII string round trip after SET NAMES latin1");
                }
            }
            st.execute("SET NAMES utf8mb4");
            st.execute("CREATE DATABASE IF NOT EXISTS client_checks_2");
            st.execute("USE client_checks_2");
            try (ResultSet rs = st.executeQuery("SELECT DATABASE()")) {
                expect(rs.next(), "no row");
                o.add("databaseAfterUse", fmt(rs.getObject(1)));
                expectEq("client_checks_2", rs.getString(1), "DATABASE() after USE");
            }
            o.add("getCatalogAfterUse", c.getCatalog());
            long driverId = c.unwrap(org.mariadb.jdbc.MariaDbConnection.class).getServerThreadId();
            long serverId = queryLong(c, "SELECT CONNECTION_ID()");
            // Only whether they agree: the ids themselves differ from run to run.
            o.add("driverConnectionIdEqualsConnectionId", driverId == serverId);
            expectEq(serverId, driverId, "the driver's connection id vs CONNECTION_ID()");
        }
    }

    static void checkKillQuery(Obs o) throws Exception {
        try (Connection victim = openPlain(); Connection killer = openPlain()) {
            long id = queryLong(victim, "SELECT CONNECTION_ID()");
            AtomicReference<String> outcome = new AtomicReference<>();
            CountDownLatch done = new CountDownLatch(1);
            long start = System.nanoTime();
            Thread t = new Thread(() -> {
                try (Statement st = victim.createStatement(); ResultSet rs = st.executeQuery("SELECT SLEEP(10)")) {
                    rs.next();
                    outcome.set("result " + fmt(rs.getObject(1)));
                } catch (Throwable e) {
                    outcome.set("error " + fmtError(e));
                } finally {
                    done.countDown();
                }
            });
            t.setDaemon(true);
            t.start();
            Thread.sleep(500);
            try (Statement st = killer.createStatement()) {
                st.execute("KILL QUERY " + id);
            }
            expect(done.await(WAIT_MS, TimeUnit.MILLISECONDS), "SELECT SLEEP(10) still running 15 s after KILL QUERY");
            double seconds = (System.nanoTime() - start) / 1e9;
            System.err.printf("kill_query: SLEEP(10) ended after %.2f s%n", seconds);
            o.add("outcome", outcome.get());
            expect(seconds < 5, "SELECT SLEEP(10) ended only after " + seconds + " s");
            long one = queryLong(victim, "SELECT 1");
            o.add("selectAfter", one);
            expectEq(1L, one, "SELECT 1 on the killed query's connection");
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Messaging

    static final String QUEUE = PREFIX + "queue";

    /** One message read from the stream. */
    static final class Msg {
        final long id;
        final String message;

        Msg(long id, String message) {
            this.id = id;
            this.message = message;
        }

        @Override
        public String toString() {
            return id + ":" + message;
        }
    }

    /**
     * A STREAM read on a connection of its own by a thread of its own, as a consumer would: rs.next()
     * blocks until the next message, so the thread hands each one over through a queue, and ends when
     * the stream ends (the way Connector/J reports that: an SQLException, normally 1317 on cancel()).
     */
    static final class Stream {
        final Connection conn;
        final Statement stmt;
        final CompletableFuture<List<String>> columns = new CompletableFuture<>();
        final BlockingQueue<Msg> messages = new LinkedBlockingQueue<>();
        final AtomicReference<Throwable> endedWith = new AtomicReference<>();
        final CountDownLatch ended = new CountDownLatch(1);

        Stream() throws SQLException {
            // No socketTimeout: a stream waits for messages as long as it takes.
            conn = open("");
            stmt = conn.createStatement();
            // Stream row by row: without a fetch size the driver would buffer a result that never ends.
            stmt.setFetchSize(1);
            Thread t = new Thread(this::read, "stream-reader");
            t.setDaemon(true);
            t.start();
        }

        private void read() {
            try (ResultSet rs = stmt.executeQuery("STREAM * FROM " + QUEUE)) {
                // Connector/J's executeQuery returns once the first row has come.
                ResultSetMetaData md = rs.getMetaData();
                List<String> names = new ArrayList<>();
                for (int i = 1; i <= md.getColumnCount(); i++) {
                    names.add(md.getColumnName(i));
                }
                columns.complete(names);
                while (rs.next()) {
                    messages.add(new Msg(rs.getLong("id"), rs.getString("message")));
                }
                endedWith.set(new IllegalStateException("the stream's result set ended"));
            } catch (Throwable e) {
                columns.completeExceptionally(e);
                endedWith.set(e);
            } finally {
                ended.countDown();
            }
        }

        /** The next message, or null when none comes before the deadline. */
        Msg next(long deadlineNanos) throws InterruptedException {
            long left = deadlineNanos - System.nanoTime();
            Msg m = left <= 0 ? messages.poll() : messages.poll(left, TimeUnit.NANOSECONDS);
            if (m != null) {
                System.err.println("stream: got " + m);
            }
            return m;
        }
    }

    static long deadline(long ms) {
        return System.nanoTime() + ms * 1_000_000L;
    }

    static Stream stream;
    static Connection producer;
    static Connection acker;

    static Stream needStream() throws CheckFailed {
        if (stream == null) {
            throw new CheckFailed("the stream did not start (see messaging/stream_columns)");
        }
        return stream;
    }

    /** stream_columns, first half: the table, and a stream on it. */
    static void startStream() throws Exception {
        try (Connection c = openPlain()) {
            exec(c, "DROP TABLE IF EXISTS " + QUEUE);
            exec(c, "CREATE TABLE " + QUEUE + " (id BIGINT PRIMARY KEY, time_next BIGINT DEFAULT 0, epoch BIGINT,"
                    + " time_acked BIGINT, message VARCHAR(128), INDEX next_idx (time_next, epoch),"
                    + " INDEX ack_idx (time_acked)) COMMENT 'vitess_message,vt_ack_wait=1,vt_purge_after=60,"
                    + "vt_batch_size=10,vt_cache_size=1000,vt_poller_interval=1'");
        }
        stream = new Stream();
        expect(stream.conn.getAutoCommit(), "the stream's connection is not in autocommit mode");
    }

    /** stream_columns, second half: Connector/J knows the columns once the first message came. */
    static void checkStreamColumns() throws Exception {
        Stream s = needStream();
        List<String> names;
        try {
            names = s.columns.get(WAIT_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            throw new CheckFailed("executeQuery(STREAM) did not return within 15 s of the first insert");
        } catch (java.util.concurrent.ExecutionException e) {
            throw new CheckFailed("STREAM failed: " + fmtError(e.getCause()));
        }
        expectEq(Arrays.asList("id", "message"), names, "the stream's columns");
    }

    static void insertForDelivery() throws Exception {
        try (Statement st = producer.createStatement()) {
            StringBuilder values = new StringBuilder();
            for (int i = 1; i <= 10; i++) {
                values.append(i == 1 ? "" : ", ").append("(").append(i).append(", 'message ").append(i).append("')");
            }
            expectEq(10, st.executeUpdate("INSERT INTO " + QUEUE + " (id, message) VALUES " + values), "multi-row insert");
        }
        try (PreparedStatement ps = producer.prepareStatement("INSERT INTO " + QUEUE + " (id, message) VALUES (?, ?)")) {
            for (int i = 11; i <= 20; i++) {
                ps.setLong(1, i);
                ps.setString(2, "message " + i);
                expectEq(1, ps.executeUpdate(), "insert of id " + i);
            }
        }
        producer.setAutoCommit(false);
        try (Statement st = producer.createStatement()) {
            st.executeUpdate("INSERT INTO " + QUEUE + " (id, message) VALUES (99, 'rolled back')");
            producer.rollback();
        } finally {
            producer.setAutoCommit(true);
        }
    }

    static void checkDelivery() throws Exception {
        Stream s = needStream();
        Set<Long> want = new TreeSet<>();
        for (long i = 1; i <= 20; i++) {
            want.add(i);
        }
        Set<Long> seen = new TreeSet<>();
        long until = deadline(WAIT_MS);
        // Unacked messages come again after the ack wait (1 s), so an id may show twice: only the set counts.
        while (!seen.containsAll(want)) {
            Msg m = s.next(until);
            if (m == null) {
                break;
            }
            seen.add(m.id);
            if (m.id != 99) {
                expectEq("message " + m.id, m.message, "message of id " + m.id);
            }
        }
        // Anything else (99) would have come with them; give it a moment anyway.
        long grace = deadline(500);
        for (Msg m; (m = s.next(grace)) != null; ) {
            seen.add(m.id);
        }
        expectEq(want, seen, "ids read from the stream");
    }

    static void checkAck() throws Exception {
        StringBuilder ids = new StringBuilder();
        for (int i = 1; i <= 20; i++) {
            ids.append(i == 1 ? "" : ", ").append(i);
        }
        try (Statement st = acker.createStatement()) {
            expectEq(20, st.executeUpdate("ACK " + QUEUE + " " + ids), "affected rows of the first ACK");
            expectEq(0, st.executeUpdate("ACK " + QUEUE + " " + ids), "affected rows of the same ACK again");
        }
        expectEq(20L, queryLong(acker, "SELECT COUNT(*) FROM " + QUEUE + " WHERE id BETWEEN 1 AND 20 AND time_acked IS NOT NULL"),
                "rows 1-20 with time_acked set");
    }

    /** The next time id comes from the stream (other ids are skipped), or false at the deadline. */
    static boolean awaitId(Stream s, long id, long deadlineNanos) throws InterruptedException {
        for (Msg m; (m = s.next(deadlineNanos)) != null; ) {
            if (m.id == id) {
                return true;
            }
        }
        return false;
    }

    static void checkRedelivery() throws Exception {
        Stream s = needStream();
        try (PreparedStatement ps = producer.prepareStatement("INSERT INTO " + QUEUE + " (id, message) VALUES (?, ?)")) {
            ps.setLong(1, 30);
            ps.setString(2, "message 30");
            expectEq(1, ps.executeUpdate(), "insert of id 30");
        }
        expect(awaitId(s, 30, deadline(WAIT_MS)), "id 30 not delivered within 15 s");
        expect(awaitId(s, 30, deadline(WAIT_MS)), "id 30 not delivered again within 15 s without an ack");
        // The Vitess form of an ack: ordinary SQL, prepared by the server (this connection has
        // useServerPrepStmts=true), with the time in nanoseconds.
        try (Connection p = openServerPrepared();
             PreparedStatement ps = p.prepareStatement("UPDATE " + QUEUE + " SET time_acked = ?, time_next = NULL"
                     + " WHERE id IN (?) AND time_acked IS NULL")) {
            expect(ps.isWrapperFor(org.mariadb.jdbc.ServerSidePreparedStatement.class), "the ack is not server-prepared");
            ps.setLong(1, System.currentTimeMillis() * 1_000_000L);
            ps.setLong(2, 30);
            expectEq(1, ps.executeUpdate(), "affected rows of the UPDATE ack");
        }
        expect(!awaitId(s, 30, deadline(3000)), "id 30 delivered again after its ack");
    }

    static void expectError(Statement st, String sql, boolean query, int wantCode, String mustName) throws Exception {
        try {
            if (query) {
                st.executeQuery(sql).close();
            } else {
                st.executeUpdate(sql);
            }
            throw new CheckFailed("no error from " + sql);
        } catch (SQLException e) {
            System.err.println("messaging/errors: " + sql + " -> " + fmtError(e));
            if (wantCode != 0) {
                expectEq(wantCode, e.getErrorCode(), "error code of " + sql);
            }
            if (mustName != null) {
                expect(e.getMessage() != null && e.getMessage().contains(mustName),
                        "the error of " + sql + " does not name " + mustName + ": " + e.getMessage());
            }
        }
        expectEq(1L, queryLong(st.getConnection(), "SELECT 1"), "SELECT 1 after " + sql);
    }

    static void checkMessagingErrors() throws Exception {
        String plain = PREFIX + "plain";
        try (Connection c = openPlain(); Statement st = c.createStatement()) {
            st.execute("DROP TABLE IF EXISTS " + plain);
            st.execute("CREATE TABLE " + plain + " (id BIGINT PRIMARY KEY)");
            st.setFetchSize(1);
            expectError(st, "STREAM * FROM " + PREFIX + "no_such_table", true, 1146, null);
            expectError(st, "ACK " + plain + " 1", false, 0, plain);
            expectError(st, "STREAM * FROM", true, 1064, null);
        }
    }

    static void checkStop() throws Exception {
        Stream s = needStream();
        expect(s.ended.getCount() == 1, "the stream had already ended: " + fmtError(s.endedWith.get()));
        // Statement.cancel() sends KILL QUERY for the stream's connection over a connection of its own.
        // Run it on a thread of its own so that a cancel() that hangs fails the check instead.
        CompletableFuture<Void> cancel = CompletableFuture.runAsync(() -> {
            try {
                s.stmt.cancel();
            } catch (SQLException e) {
                throw new RuntimeException(e);
            }
        });
        expect(s.ended.await(WAIT_MS, TimeUnit.MILLISECONDS), "the stream did not end within 15 s of Statement.cancel()");
        try {
            cancel.get(WAIT_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            throw new CheckFailed("Statement.cancel() did not return within 15 s");
        } catch (java.util.concurrent.ExecutionException e) {
            throw new CheckFailed("Statement.cancel() failed: " + oneLine(e.getCause().getCause() != null ? e.getCause().getCause() : e.getCause()));
        }
        Throwable end = s.endedWith.get();
        System.err.println("messaging/stop: the stream ended with " + fmtError(end));
        expectEq(1317, code(end), "error of the cancelled stream (" + fmtError(end) + ")");
        expectEq(1L, queryLong(s.conn, "SELECT 1"), "SELECT 1 on the stream's connection after the stop");
    }

    // ---------------------------------------------------------------------------------------------

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: ConnectorJChecks HOST PORT");
            System.exit(2);
        }
        host = args[0];
        port = Integer.parseInt(args[1]);

        passthrough("connect", ConnectorJChecks::checkConnect);
        passthrough("types_text", ConnectorJChecks::checkTypesText);
        passthrough("types_prepared", ConnectorJChecks::checkTypesPrepared);
        passthrough("table_roundtrip", ConnectorJChecks::checkTableRoundtrip);
        passthrough("warnings", ConnectorJChecks::checkWarnings);
        passthrough("errors", ConnectorJChecks::checkErrors);
        passthrough("transactions", ConnectorJChecks::checkTransactions);
        passthrough("multi_results", ConnectorJChecks::checkMultiResults);
        passthrough("large_result", ConnectorJChecks::checkLargeResult);
        passthrough("session_state", ConnectorJChecks::checkSessionState);
        passthrough("kill_query", ConnectorJChecks::checkKillQuery);

        // Which one we talk to: msgproxy reports the server's version with "-msgproxy" appended.
        boolean viaProxy = false;
        try (Connection c = openPlain()) {
            String version = c.getMetaData().getDatabaseProductVersion();
            viaProxy = version.endsWith("-msgproxy");
            System.err.println("server version: " + version);
        } catch (SQLException e) {
            System.err.println("cannot tell the server version: " + fmtError(e));
        }
        if (viaProxy) {
            try {
                producer = openServerPrepared();
                acker = openPlain();
            } catch (SQLException e) {
                System.err.println("cannot open the producer/acker connections: " + fmtError(e));
            }
        }
        // The stream's columns are known only once the first message has come (executeQuery returns
        // with it), so stream_columns starts the stream, delivery's inserts follow, and then both check.
        AtomicReference<Throwable> startFailure = new AtomicReference<>();
        if (viaProxy) {
            try {
                startStream();
            } catch (Throwable t) {
                startFailure.set(t);
            }
        }
        AtomicReference<Throwable> insertFailure = new AtomicReference<>();
        if (viaProxy && stream != null) {
            try {
                insertForDelivery();
            } catch (Throwable t) {
                insertFailure.set(t);
            }
        }
        messaging("stream_columns", viaProxy, () -> {
            if (startFailure.get() != null) {
                throw startFailure.get();
            }
            checkStreamColumns();
        });
        messaging("delivery", viaProxy, () -> {
            if (insertFailure.get() != null) {
                throw insertFailure.get();
            }
            checkDelivery();
        });
        messaging("ack", viaProxy, ConnectorJChecks::checkAck);
        messaging("redelivery", viaProxy, ConnectorJChecks::checkRedelivery);
        messaging("errors", viaProxy, ConnectorJChecks::checkMessagingErrors);
        messaging("stop", viaProxy, ConnectorJChecks::checkStop);

        // A stream that did not end (stop failed) must not be closed: Connector/J would first read the
        // rest of its endless result. Drop that connection's socket instead.
        if (stream != null && stream.ended.getCount() > 0) {
            try {
                stream.conn.abort(Runnable::run);
            } catch (SQLException e) {
                System.err.println("aborting the stream's connection: " + fmtError(e));
            }
        }
        for (Connection c : new Connection[] {producer, acker, stream == null || stream.ended.getCount() > 0 ? null : stream.conn}) {
            if (c != null) {
                try {
                    c.close();
                } catch (SQLException e) {
                    System.err.println("closing: " + fmtError(e));
                }
            }
        }
        // A reader thread stuck on a stream that would not end must not keep the JVM alive.
        System.exit(0);
    }
}
