#!/usr/bin/env python3
"""The client checks of CHECKS.md with PyMySQL, the way an application uses it.

    pymysql_checks.py HOST PORT

Connects as root (empty password) to database client_checks on HOST:PORT (a MariaDB server, or
msgproxy in front of one) and prints one line per check on stdout: `PASS name`, `FAIL name: why`
or `SKIP name: why`. Everything else (what each check observed, stack traces) goes to stderr, so a
direct run's and a proxied run's stderr can be diffed line by line when two digests differ.

Pass-through check names end with `#` and 12 hex digits of the SHA-256 of what the check observed,
so any difference in what the driver hands the application shows as a differing name.
Messaging checks need msgproxy (its server version ends with `-msgproxy`); straight to the server
they are SKIPped.

Exits 0 when it ran to the end, whatever the outcomes.
"""

import datetime
import decimal
import hashlib
import os
import queue
import sys
import threading
import time
import traceback

import pymysql
import pymysql.cursors
from pymysql.constants import CLIENT

HOST = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 3306
DATABASE = "client_checks"
PREFIX = "pymysql_"
QUEUE = PREFIX + "queue"
# CHECKS.md: a check that waits for something waits at most this long.
WAIT = 15.0
PROXY_SUFFIX = "-msgproxy"


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def connect(**options):
    """A connection as the checks use them. The read timeout keeps a check from hanging forever on
    an answer that never comes (PyMySQL closes the connection when it expires); stream connections
    pass read_timeout=None, since a stream may rightly stay silent for as long as it likes."""
    settings = dict(host=HOST, port=PORT, user="root", password="", database=DATABASE,
                    charset="utf8mb4", connect_timeout=WAIT, read_timeout=60, write_timeout=60)
    settings.update(options)
    return pymysql.connect(**settings)


class CheckFailed(Exception):
    pass


def expect(condition, why):
    # Not `assert`: python -O would strip it, and a check must never be unable to fail.
    if not condition:
        raise CheckFailed(why)


def canonical(value):
    """A text form of a value as the driver returned it, with its type, that is the same from run
    to run: sets (PyMySQL returns SET columns as str, but be safe) and dicts are sorted, since
    their iteration order depends on per-process hash seeds."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(canonical(v) for v in value)
        if isinstance(value, list):
            return f"[{inner}]"
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(canonical(v) for v in value)) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{canonical(k)}: {canonical(v)}" for k, v in value.items())) + "}"
    if isinstance(value, pymysql.err.Error):
        code, message = (list(value.args) + [None, None])[:2]
        return f"{type(value).__name__}(code={code}, sqlstate={value.sqlstate}, message={message!r})"
    return f"{type(value).__name__}:{value!r}"


class Observed:
    """What one check saw, in order; its digest becomes part of the check's name."""

    def __init__(self, check):
        self.check = check
        self.lines = []

    def add(self, label, value):
        line = f"{label} = {canonical(value)}"
        self.lines.append(line)
        log(f"  [{self.check}] {line}")

    def digest(self):
        return hashlib.sha256("\n".join(self.lines).encode("utf-8")).hexdigest()[:12]


def error_of(fn):
    """Run fn, which should fail with a server error; return that error (None if it succeeded)."""
    try:
        fn()
    except pymysql.err.Error as e:
        return e
    return None


def code_of(error):
    return error.args[0] if error is not None and error.args else None


def observe_result(obs, label, cursor, rows):
    obs.add(f"{label}.description", cursor.description)
    obs.add(f"{label}.rowcount", cursor.rowcount)
    obs.add(f"{label}.rows", rows)


# ---------------------------------------------------------------------------------------------
# Pass-through checks
# ---------------------------------------------------------------------------------------------

def check_connect(obs):
    conn = connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE(), @@autocommit, USER() = CURRENT_USER() OR 1")
            row = cur.fetchone()
            observe_result(obs, "select", cur, row)
        # PyMySQL turns autocommit off at connect (PEP 249), so the server must say 0.
        expect(row == (DATABASE, 0, 1), f"expected ('{DATABASE}', 0, 1), got {row!r}")
        conn.ping()  # COM_PING; raises on failure
        obs.add("ping", "ok")
        version = conn.get_server_info()
        if version.endswith(PROXY_SUFFIX):
            version = version[: -len(PROXY_SUFFIX)]
        obs.add("server_version", version)
        obs.add("protocol_version", conn.get_proto_info())
        obs.add("character_set_name", conn.character_set_name())
        obs.add("greeting_charset", conn.server_charset)
        obs.add("autocommit", conn.get_autocommit())
    finally:
        conn.close()


# The values of types_text/types_prepared, as SQL literals and as the Python values an application
# would bind. MariaDB has no CAST(... AS YEAR), so the year is YEAR() of the date (an integer).
TYPE_VALUES = [
    ("1", 1),
    ("-9223372036854775808", -9223372036854775808),
    ("CAST(18446744073709551615 AS UNSIGNED)", 18446744073709551615),
    ("CAST(1234.5678 AS DECIMAL(20,6))", decimal.Decimal("1234.567800")),
    ("CAST(1.5 AS FLOAT)", 1.5),
    ("1e300", 1e300),
    ("'héllo 😀'", "héllo 😀"),
    ("X'00FF41'", b"\x00\xffA"),
    ("DATE'2024-02-29'", datetime.date(2024, 2, 29)),
    ("TIMESTAMP'2024-01-02 03:04:05.123456'", datetime.datetime(2024, 1, 2, 3, 4, 5, 123456)),
    ("TIME'-838:59:59'", -datetime.timedelta(hours=838, minutes=59, seconds=59)),
    ("YEAR(DATE'2024-02-29')", 2024),
    ("b'1010'", b"\x0a"),
    ("JSON_OBJECT('a', 1)", '{"a": 1}'),
    ("NULL", None),
]


def check_types_text(obs):
    conn = connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT " + ", ".join(sql for sql, _ in TYPE_VALUES))
            rows = cur.fetchall()
            observe_result(obs, "select", cur, rows)
        expect(len(rows) == 1 and len(rows[0]) == len(TYPE_VALUES), f"expected one row of {len(TYPE_VALUES)} values, got {rows!r}")
        for (sql, wanted), got in zip(TYPE_VALUES, rows[0]):
            expect(type(got) is type(wanted) and got == wanted, f"{sql}: expected {wanted!r}, got {got!r}")
    finally:
        conn.close()


def check_types_prepared(obs):
    # PyMySQL has no server-side prepared statements: it escapes the parameters into the text
    # itself, so this is the same SELECT with %s parameters, bound from Python values.
    conn = connect()
    try:
        with conn.cursor() as cur:
            params = [value for _, value in TYPE_VALUES]
            sent = cur.mogrify("SELECT " + ", ".join(["%s"] * len(params)), params)
            obs.add("statement_as_sent", sent)
            cur.execute("SELECT " + ", ".join(["%s"] * len(params)), params)
            rows = cur.fetchall()
            observe_result(obs, "select", cur, rows)
        expect(len(rows) == 1 and len(rows[0]) == len(params), f"expected one row of {len(params)} values, got {rows!r}")
        row = rows[0]
        # What comes back depends on how PyMySQL escapes each type (a date becomes a string
        # literal, a timedelta a time string, bytes a _binary string): check the ones with an
        # unambiguous round trip.
        for index in (0, 1, 2, 3, 6, 7, 11):
            expect(row[index] == params[index], f"parameter {index}: sent {params[index]!r}, got {row[index]!r}")
        expect(row[14] is None, f"NULL parameter came back as {row[14]!r}")
    finally:
        conn.close()


def check_table_roundtrip(obs):
    table = PREFIX + "types"
    conn = connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(
                f"CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, b BIGINT, u BIGINT UNSIGNED,"
                " d DECIMAL(20,6), f DOUBLE, s VARCHAR(50) CHARACTER SET utf8mb4, v VARBINARY(20),"
                " dt DATETIME(6), t TIME(3), j JSON, e ENUM('x','y'), st SET('p','q'), bt BIT(10))")
            rows_in = [
                (-9223372036854775808, 18446744073709551615, decimal.Decimal("-12345678901234.123456"),
                 -2.5e-300, "héllo 😀 'quoted' \\ back", b"\x00\x01\xfe\xff'\\",
                 datetime.datetime(2024, 2, 29, 23, 59, 59, 999999), datetime.timedelta(hours=-1, milliseconds=-500),
                 '{"k": [1, 2, null]}', "y", "p,q", b"\x03\xff"),
                (42, 0, decimal.Decimal("0.000001"), 3.141592653589793, "", b"",
                 datetime.datetime(1970, 1, 1), datetime.timedelta(0), "[]", "x", "", b"\x00\x00"),
                (None,) * 12,
            ]
            # executemany on an INSERT ... VALUES: PyMySQL sends one multi-row INSERT.
            cur.executemany(
                f"INSERT INTO {table} (b, u, d, f, s, v, dt, t, j, e, st, bt)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows_in)
            obs.add("insert.rowcount", cur.rowcount)
            obs.add("insert.lastrowid", cur.lastrowid)
            obs.add("insert.warning_count", cur.warning_count)
            expect(cur.rowcount == 3, f"insert affected {cur.rowcount} rows, expected 3")
            # MariaDB reports the first id of a multi-row insert.
            expect(cur.lastrowid == 1, f"last insert id {cur.lastrowid}, expected 1")
            conn.commit()

            cur.execute(f"SELECT * FROM {table} WHERE id >= %s ORDER BY id", (1,))
            by_param = cur.fetchall()
            observe_result(obs, "select_param", cur, by_param)
            cur.execute(f"SELECT * FROM {table} ORDER BY id")
            plain = cur.fetchall()
            observe_result(obs, "select_plain", cur, plain)
        expect(len(plain) == 3, f"expected 3 rows back, got {len(plain)}")
        expect(by_param == plain, "the parameterized and the plain SELECT returned different rows")
        expect(plain[2][1:] == (None,) * 12, f"the all-NULL row came back as {plain[2]!r}")
        expect(plain[0][1:3] == rows_in[0][0:2] and plain[0][5] == rows_in[0][4] and plain[0][6] == rows_in[0][5],
               f"first row did not round-trip: {plain[0]!r}")
    finally:
        conn.close()


def check_warnings(obs):
    table = PREFIX + "warn"
    conn = connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(f"CREATE TABLE {table} (s VARCHAR(5))")
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(f"INSERT INTO {table} VALUES (%s)", ("much too long",))
            obs.add("insert.rowcount", cur.rowcount)
            obs.add("insert.warning_count", cur.warning_count)
            warning_count = cur.warning_count
            cur.execute("SHOW WARNINGS")
            shown = cur.fetchall()
            observe_result(obs, "show_warnings", cur, shown)
            cur.execute(f"SELECT s FROM {table}")
            stored = cur.fetchall()
            obs.add("stored", stored)
        expect(warning_count == 1, f"warning count {warning_count}, expected 1")
        expect(len(shown) == 1 and shown[0][1] == 1265, f"SHOW WARNINGS gave {shown!r}, expected one 1265")
        expect(stored == (("much ",),), f"stored {stored!r}")
    finally:
        conn.close()


def check_errors(obs):
    table = PREFIX + "errs"
    conn = connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY)")
            syntax = error_of(lambda: cur.execute("SELEC 1"))
            obs.add("syntax", syntax)
            unknown = error_of(lambda: cur.execute(f"SELECT * FROM {PREFIX}no_such_table"))
            obs.add("unknown_table", unknown)
            cur.execute(f"INSERT INTO {table} VALUES (%s)", (7,))
            duplicate = error_of(lambda: cur.execute(f"INSERT INTO {table} VALUES (%s)", (7,)))
            obs.add("duplicate", duplicate)
            cur.execute("SELECT 1")
            after = cur.fetchall()
            obs.add("select_after", after)
        expect(code_of(syntax) == 1064 and syntax.sqlstate == "42000", f"syntax error: {syntax!r}")
        expect(code_of(unknown) == 1146 and unknown.sqlstate == "42S02", f"unknown table: {unknown!r}")
        expect(isinstance(duplicate, pymysql.err.IntegrityError) and code_of(duplicate) == 1062
               and duplicate.sqlstate == "23000", f"duplicate key: {duplicate!r}")
        expect(after == ((1,),), f"SELECT 1 after the errors gave {after!r}")
    finally:
        conn.close()


def check_transactions(obs):
    table = PREFIX + "tx"
    writer = connect()  # autocommit off: PyMySQL's default
    reader = connect(autocommit=True)
    try:
        with writer.cursor() as cur, reader.cursor() as peek:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE=InnoDB")
            cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (1, "rolled"))
            obs.add("insert1.rowcount", cur.rowcount)
            writer.rollback()
            cur.execute(f"SELECT COUNT(*) FROM {table} WHERE id = 1")
            after_rollback = cur.fetchone()[0]
            obs.add("after_rollback", after_rollback)

            cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (2, "kept"))
            obs.add("insert2.rowcount", cur.rowcount)
            peek.execute(f"SELECT id, v FROM {table}")
            before_commit = peek.fetchall()
            obs.add("other_before_commit", before_commit)
            writer.commit()
            peek.execute(f"SELECT id, v FROM {table}")
            after_commit = peek.fetchall()
            obs.add("other_after_commit", after_commit)
            writer.commit()  # end the writer's read snapshot
        expect(after_rollback == 0, f"the rolled-back row is still there ({after_rollback})")
        expect(before_commit == (), f"a second connection saw uncommitted rows: {before_commit!r}")
        expect(after_commit == ((2, "kept"),), f"a second connection saw {after_commit!r} after commit")
    finally:
        writer.close()
        reader.close()


def check_multi_results(obs):
    proc = PREFIX + "two_results"
    # MULTI_STATEMENTS is off in PyMySQL unless asked for.
    conn = connect(autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP PROCEDURE IF EXISTS {proc}")
            cur.execute(f"CREATE PROCEDURE {proc}() BEGIN SELECT 1 AS a, 'one' AS b;"
                        " SELECT 2.5 AS c UNION ALL SELECT 3.5; END")
            cur.execute(f"CALL {proc}()")
            call_sets = []
            while True:
                rows = cur.fetchall()
                call_sets.append((cur.description, rows))
                observe_result(obs, f"call.set{len(call_sets)}", cur, rows)
                if not cur.nextset():
                    break
            cur.execute("SELECT 1 AS x; SELECT 'two' AS y, NULL AS z")
            multi_sets = []
            while True:
                rows = cur.fetchall()
                multi_sets.append(rows)
                observe_result(obs, f"multi.set{len(multi_sets)}", cur, rows)
                if not cur.nextset():
                    break
            cur.execute("SELECT 'next'")
            after = cur.fetchall()
            obs.add("after", after)
        # CALL: two result sets, then the OK of the CALL itself (no columns).
        expect(len(call_sets) == 3, f"CALL gave {len(call_sets)} results, expected 2 result sets and an OK")
        expect(call_sets[0][1] == ((1, "one"),), f"first result set {call_sets[0][1]!r}")
        expect(call_sets[1][1] == ((decimal.Decimal("2.5"),), (decimal.Decimal("3.5"),)), f"second result set {call_sets[1][1]!r}")
        expect(call_sets[2][0] is None, f"the CALL's final result has columns: {call_sets[2][0]!r}")
        expect(multi_sets == [((1,),), (("two", None),)], f"multi-statement results {multi_sets!r}")
        expect(after == (("next",),), f"the next query gave {after!r}")
    finally:
        conn.close()


def check_large_result(obs):
    conn = connect(cursorclass=pymysql.cursors.SSCursor)
    try:
        with conn.cursor() as cur:
            started = time.monotonic()
            cur.execute("SELECT seq, REPEAT('x', 100) FROM seq_1_to_200000")
            obs.add("description", cur.description)
            count = total = 0
            bad = None
            for seq, filler in cur:  # one row at a time off the socket
                count += 1
                total += seq
                if filler != "x" * 100 and bad is None:
                    bad = (seq, filler)
            obs.add("count", count)
            obs.add("sum", total)
            obs.add("bad_row", bad)
            log(f"  [passthrough/large_result] 200000 rows unbuffered in {time.monotonic() - started:.2f}s")
            cur.execute("SELECT REPEAT('y', 5000000)")
            (big,) = cur.fetchone()
            expect(cur.fetchone() is None, "more than one row for REPEAT")
            obs.add("big.description", cur.description)
            obs.add("big.length", None if big is None else len(big))
            obs.add("big.all_y", big is not None and big == "y" * 5000000)
        expect(count == 200000 and total == 200000 * 200001 // 2, f"read {count} rows summing to {total}")
        expect(bad is None, f"row with a wrong value: {bad!r}")
        expect(big is not None and len(big) == 5000000 and big == "y" * 5000000,
               f"the 5,000,000-byte value came back as {None if big is None else len(big)} characters")
    finally:
        conn.close()


def check_session_state(obs):
    other_db = "client_checks_2"
    conn = connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET @pymysql_var = %s", ("value ✓ 42",))
            cur.execute("SELECT @pymysql_var")
            var = cur.fetchone()
            obs.add("user_variable", var)

            # The driver's own way to change the character set: it sends SET NAMES and encodes
            # and decodes with latin1 from then on.
            conn.set_character_set("latin1")
            cur.execute("SELECT %s, HEX(%s), @@character_set_client, @@character_set_results", ("café",) * 2)
            latin = cur.fetchone()
            obs.add("latin1.description", cur.description)
            obs.add("latin1.row", latin)
            conn.set_character_set("utf8mb4")

            cur.execute(f"CREATE DATABASE IF NOT EXISTS {other_db}")
            cur.execute(f"USE {other_db}")
            cur.execute("SELECT DATABASE()")
            after_use = cur.fetchone()
            obs.add("after_use", after_use)
            conn.select_db(DATABASE)  # COM_INIT_DB
            cur.execute("SELECT DATABASE()")
            after_select_db = cur.fetchone()
            obs.add("after_select_db", after_select_db)

            cur.execute("SELECT CONNECTION_ID()")
            (server_id,) = cur.fetchone()
            # The id itself differs from run to run: record only that the driver agrees with it.
            obs.add("thread_id_matches", conn.thread_id() == server_id)
        expect(var == ("value ✓ 42",), f"user variable came back as {var!r}")
        expect(latin == ("café", "636166E9", "latin1", "latin1"), f"latin1 round trip gave {latin!r}")
        expect(after_use == (other_db,), f"after USE: {after_use!r}")
        expect(after_select_db == (DATABASE,), f"after select_db: {after_select_db!r}")
        expect(conn.thread_id() == server_id, f"driver says connection {conn.thread_id()}, server says {server_id}")
    finally:
        conn.close()


def check_kill_query(obs):
    victim = connect(autocommit=True)
    killer = connect(autocommit=True)
    kill_errors = []

    def kill():
        try:
            with killer.cursor() as cur:
                cur.execute("KILL QUERY %s", (victim.thread_id(),))
        except Exception as e:  # reported by the main thread
            kill_errors.append(e)

    try:
        timer = threading.Timer(0.5, kill)
        timer.start()
        started = time.monotonic()
        with victim.cursor() as cur:
            error = error_of(lambda: cur.execute("SELECT SLEEP(10)"))
            elapsed = time.monotonic() - started
            timer.join()
            result = None if error is not None else cur.fetchall()
            obs.add("sleep.error", error)
            obs.add("sleep.result", result)
            log(f"  [passthrough/kill_query] SLEEP(10) ended after {elapsed:.2f}s")
            cur.execute("SELECT 1")
            after = cur.fetchall()
            obs.add("select_after", after)
        expect(not kill_errors, f"KILL QUERY failed: {kill_errors!r}")
        # MariaDB ends a killed SLEEP with error 1317; MySQL would return 1 instead.
        expect(code_of(error) == 1317 or result == ((1,),), f"SLEEP gave error {error!r}, result {result!r}")
        expect(elapsed < 5, f"SLEEP(10) ended only after {elapsed:.1f}s")
        expect(after == ((1,),), f"SELECT 1 afterwards gave {after!r}")
    finally:
        victim.close()
        killer.close()


# ---------------------------------------------------------------------------------------------
# Messaging checks (through msgproxy only)
# ---------------------------------------------------------------------------------------------

class StreamReader(threading.Thread):
    """Reads `STREAM * FROM table` on a connection of its own and hands what it reads to the
    application through a queue. A thread, because PyMySQL's reads block, and its read timeout
    closes the connection; with a queue the application can wait for the next message with a
    timeout and leave the stream itself untouched."""

    def __init__(self, table):
        super().__init__(name=f"stream {table}", daemon=True)
        self.table = table
        # autocommit on: a STREAM inside an open transaction is refused (1179).
        self.conn = connect(autocommit=True, read_timeout=None, cursorclass=pymysql.cursors.SSCursor)
        self.events = queue.Queue()
        self.cursor = None

    def run(self):
        try:
            self.cursor = self.conn.cursor()
            # execute returns once the column definitions are read: an unbuffered cursor does not
            # wait for rows.
            self.cursor.execute(f"STREAM * FROM {self.table}")
            self.events.put(("columns", self.cursor.description))
            for row in self.cursor:  # blocks until the next message arrives
                self.events.put(("row", row))
            self.events.put(("end", None))
        except Exception as e:
            self.events.put(("error", e))

    def next_event(self, timeout):
        try:
            return self.events.get(timeout=max(timeout, 0))
        except queue.Empty:
            return None

    def messages_for(self, seconds, stop_when=None):
        """The rows the stream yields within `seconds` (or until stop_when(rows) is true)."""
        rows = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (stop_when and stop_when(rows)):
            event = self.next_event(deadline - time.monotonic())
            if event is None:
                break
            kind, payload = event
            if kind != "row":
                raise CheckFailed(f"the stream ended while waiting for messages: {kind} {payload!r}")
            rows.append(payload)
        return rows


class Messaging:
    """The state the messaging checks share: the queue table and one stream on it."""

    def __init__(self):
        self.setup_error = None
        self.ready = False
        self.stream = None

    def setup(self):
        if self.ready:
            return
        if self.setup_error is not None:
            raise CheckFailed(f"setting up {QUEUE} failed: {self.setup_error}")
        try:
            conn = connect(autocommit=True)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"DROP TABLE IF EXISTS {QUEUE}")
                    cur.execute(
                        f"CREATE TABLE {QUEUE} (id BIGINT PRIMARY KEY, time_next BIGINT DEFAULT 0, epoch BIGINT,"
                        " time_acked BIGINT, message VARCHAR(128), INDEX next_idx (time_next, epoch),"
                        " INDEX ack_idx (time_acked)) COMMENT 'vitess_message,vt_ack_wait=1,vt_purge_after=60,"
                        "vt_batch_size=10,vt_cache_size=1000,vt_poller_interval=1'")
            finally:
                conn.close()
        except Exception as e:
            self.setup_error = f"{type(e).__name__}: {e}"
            raise
        self.ready = True

    def open_stream(self):
        self.setup()
        if self.stream is None:
            self.stream = StreamReader(QUEUE)
            self.stream.start()
            event = self.stream.next_event(WAIT)
            if event is None:
                raise CheckFailed(f"STREAM gave no columns within {WAIT:.0f}s")
            kind, payload = event
            if kind != "columns":
                raise CheckFailed(f"STREAM answered {kind}: {payload!r}")
            self.stream.columns = payload
        return self.stream


def check_stream_columns(msg):
    stream = msg.open_stream()
    names = [column[0] for column in stream.columns]
    log(f"  [messaging/stream_columns] description = {stream.columns!r}")
    expect(names == ["id", "message"], f"stream columns {names!r}, expected ['id', 'message']")


def check_delivery(msg):
    stream = msg.open_stream()
    conn = connect()  # autocommit off: the inserts take effect at commit
    try:
        with conn.cursor() as cur:
            # executemany on INSERT ... VALUES sends one multi-row INSERT.
            cur.executemany(f"INSERT INTO {QUEUE} (id, message) VALUES (%s, %s)",
                            [(i, f"message {i}") for i in range(1, 11)])
            expect(cur.rowcount == 10, f"multi-row insert affected {cur.rowcount} rows")
            for i in range(11, 21):
                cur.execute(f"INSERT INTO {QUEUE} (id, message) VALUES (%s, %s)", (i, f"message {i}"))
            conn.commit()
            cur.execute(f"INSERT INTO {QUEUE} (id, message) VALUES (%s, %s)", (99, "rolled back"))
            conn.rollback()
    finally:
        conn.close()
    wanted = {i: f"message {i}" for i in range(1, 21)}
    rows = stream.messages_for(WAIT, stop_when=lambda rows: {r[0] for r in rows} >= set(wanted))
    # 99 would come right behind: watch a little longer.
    rows += stream.messages_for(0.5)
    log(f"  [messaging/delivery] rows = {rows!r}")
    ids = sorted(row[0] for row in rows)
    expect(99 not in ids, "the rolled-back message 99 was delivered")
    # The set, not the count: on a loaded machine the first messages may pass their 1 s ack wait
    # (plus backoff) before this check ends, and then rightly come again.
    expect(set(ids) == set(wanted), f"delivered ids {ids}, expected each of 1..20")
    wrong = [row for row in rows if row != (row[0], wanted.get(row[0]))]
    expect(not wrong, f"rows with wrong messages or types: {wrong!r}")


def check_ack(msg):
    msg.setup()
    conn = connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            ids = list(range(1, 21))
            statement = f"ACK {QUEUE} " + ", ".join(["%s"] * len(ids))  # PyMySQL interpolates
            first = cur.execute(statement, ids)
            again = cur.execute(statement, ids)
            cur.execute(f"SELECT COUNT(*) FROM {QUEUE} WHERE id BETWEEN 1 AND 20 AND time_acked IS NOT NULL")
            (acked,) = cur.fetchone()
        log(f"  [messaging/ack] first={first} again={again} acked={acked}")
        expect(first == 20, f"ACK affected {first} rows, expected 20")
        expect(again == 0, f"the same ACK again affected {again} rows, expected 0")
        expect(acked == 20, f"{acked} of the 20 rows have time_acked set")
    finally:
        conn.close()


def check_redelivery(msg):
    stream = msg.open_stream()
    conn = connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {QUEUE} (id, message) VALUES (%s, %s)", (30, "message 30"))
            seen = []
            started = time.monotonic()
            for copy in (1, 2):
                rows = stream.messages_for(WAIT, stop_when=lambda rows: any(r[0] == 30 for r in rows))
                seen += rows
                expect(any(r[0] == 30 for r in rows), f"message 30 did not come (copy {copy}) within {WAIT:.0f}s; saw {rows!r}")
                log(f"  [messaging/redelivery] copy {copy} of 30 after {time.monotonic() - started:.2f}s")
            # The Vitess way to ack: plain SQL, with the time as a parameter.
            affected = cur.execute(
                f"UPDATE {QUEUE} SET time_acked = %s, time_next = NULL WHERE id IN (%s) AND time_acked IS NULL",
                (time.time_ns(), 30))
            expect(affected == 1, f"the UPDATE ack affected {affected} rows, expected 1")
            after = stream.messages_for(3)
            seen_again = [r for r in after if r[0] == 30]
            expect(not seen_again, f"message 30 came again after its ack: {after!r}")
            # Copies of 1-20 may still be on their way, claimed again before messaging/ack acked
            # them; anything else has no business here.
            stale = [r for r in seen + after if r[0] != 30 and r[0] not in range(1, 21)]
            expect(not stale, f"other messages came during the check: {stale!r}")
    finally:
        conn.close()


def check_messaging_errors(msg):
    msg.setup()
    plain = PREFIX + "plain"
    # An unbuffered cursor and a read timeout: should a STREAM that ought to fail start streaming
    # instead, the check must not hang on it.
    conn = connect(autocommit=True, read_timeout=WAIT, cursorclass=pymysql.cursors.SSCursor)
    try:
        def fails(statement):
            with conn.cursor() as cur:
                try:
                    cur.execute(statement)
                except pymysql.err.Error as e:
                    log(f"  [messaging/errors] {statement!r} -> {canonical(e)}")
                    return e
            raise CheckFailed(f"{statement!r} did not fail")

        def still_works(after):
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                rows = tuple(cur.fetchall())  # an unbuffered cursor's fetchall gives a list
            expect(rows == ((1,),), f"SELECT 1 after {after} gave {rows!r}")

        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {plain}")
            cur.execute(f"CREATE TABLE {plain} (id INT PRIMARY KEY)")

        missing = fails(f"STREAM * FROM {PREFIX}no_such_table")
        expect(code_of(missing) == 1146, f"STREAM from a missing table: {canonical(missing)}, expected 1146")
        still_works("the missing table")

        not_messages = fails(f"ACK {plain} 1")
        expect(plain in str(not_messages.args[1:]), f"ACK on a plain table: {canonical(not_messages)} does not name {plain}")
        still_works("ACK on a plain table")

        syntax = fails(f"STREAM * FROM {QUEUE} WHERE")
        expect(code_of(syntax) == 1064, f"STREAM with a syntax error: {canonical(syntax)}, expected 1064")
        still_works("the syntax error")
    finally:
        conn.close()


def check_stop(msg):
    stream = msg.open_stream()
    killer = connect(autocommit=True)
    try:
        with killer.cursor() as cur:
            # The driver has no cancel: end the stream as the mariadb client's Ctrl-C does.
            cur.execute("KILL QUERY %s", (stream.conn.thread_id(),))
        deadline = time.monotonic() + WAIT
        ending = None
        while ending is None and time.monotonic() < deadline:
            event = stream.next_event(deadline - time.monotonic())
            if event is not None and event[0] != "row":
                ending = event
        expect(ending is not None, f"the stream did not end within {WAIT:.0f}s of KILL QUERY")
        kind, payload = ending
        stream.join(WAIT)  # the reader has put its last event: it is about to return
        log(f"  [messaging/stop] stream ended with {kind} {canonical(payload)}")
        expect(kind == "error" and code_of(payload) == 1317, f"the stream ended with {kind} {payload!r}, expected error 1317")
        expect(not stream.is_alive(), "the stream's reader is still running")
        # PyMySQL goes on after an error mid-result: the same connection answers.
        with stream.conn.cursor() as cur:
            cur.execute("SELECT 1")
            rows = tuple(cur.fetchall())  # an unbuffered cursor's fetchall gives a list
        expect(rows == ((1,),), f"SELECT 1 on the stream's connection gave {rows!r}")
        msg.stream = None
        stream.conn.close()
    finally:
        killer.close()


PASSTHROUGH = [
    ("passthrough/connect", check_connect),
    ("passthrough/types_text", check_types_text),
    ("passthrough/types_prepared", check_types_prepared),
    ("passthrough/table_roundtrip", check_table_roundtrip),
    ("passthrough/warnings", check_warnings),
    ("passthrough/errors", check_errors),
    ("passthrough/transactions", check_transactions),
    ("passthrough/multi_results", check_multi_results),
    ("passthrough/large_result", check_large_result),
    ("passthrough/session_state", check_session_state),
    ("passthrough/kill_query", check_kill_query),
]

MESSAGING = [
    ("messaging/stream_columns", check_stream_columns),
    ("messaging/delivery", check_delivery),
    ("messaging/ack", check_ack),
    ("messaging/redelivery", check_redelivery),
    ("messaging/errors", check_messaging_errors),
    ("messaging/stop", check_stop),
]


def report(outcome, name, why=None):
    why = " ".join(str(why).split()) if why is not None else None  # one line, whatever the message
    print(f"{outcome} {name}" + (f": {why}" if why else ""), flush=True)


def run(name, fn, arg):
    """Run one check: an exception is its FAIL, and the next check runs regardless."""
    log(f"--- {name}")
    started = time.monotonic()
    why = None
    try:
        fn(arg)
    except CheckFailed as e:
        why = str(e)
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
        traceback.print_exc(file=sys.stderr)
    log(f"--- {name}: {'PASS' if why is None else 'FAIL'} in {time.monotonic() - started:.2f}s")
    if isinstance(arg, Observed):
        name = f"{name}#{arg.digest()}"
    report("PASS" if why is None else "FAIL", name, why)


def server_is_msgproxy():
    conn = connect()
    try:
        version = conn.get_server_info()
    finally:
        conn.close()
    log(f"server version: {version} (PyMySQL {pymysql.VERSION_STRING})")
    return version.endswith(PROXY_SUFFIX)


def main():
    for name, fn in PASSTHROUGH:
        run(name, fn, Observed(name))
    try:
        proxied = server_is_msgproxy()
    except Exception as e:
        for name, _ in MESSAGING:
            report("FAIL", name, f"cannot tell whether this is msgproxy: {type(e).__name__}: {e}")
        return
    if not proxied:
        for name, _ in MESSAGING:
            report("SKIP", name, "needs msgproxy")
        return
    msg = Messaging()
    for name, fn in MESSAGING:
        run(name, fn, msg)
    if msg.stream is not None:
        # A stream that would not stop (messaging/stop failed): drop its connection and leave
        # without the interpreter's clean-up, in which PyMySQL's cursor finalizer would try to read
        # the never-ending result to its end.
        msg.stream.conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
    sys.exit(0)
