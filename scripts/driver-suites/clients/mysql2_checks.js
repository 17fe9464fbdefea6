#!/usr/bin/env node
// The client checks of CHECKS.md, written with node's mysql2 the way an application would use it:
// the promise API for ordinary statements, `execute` for server-side prepared statements, and the
// event/stream API of the callback connection (`conn.connection.query(...)`) for large results and
// for `STREAM`, whose result set never ends.
//
//   node mysql2_checks.js HOST PORT
//
// One line per check on stdout (`PASS name`, `FAIL name: why`, `SKIP name: why`); what each check
// observed goes to stderr. Pass-through check names end with `#` and the first 12 hex digits of
// the SHA-256 of the canonical text of what the check observed, so that any difference between the
// server and msgproxy shows as a differing name. Exits 0 when it ran to the end.
'use strict';

const crypto = require('crypto');
const mysql = require('mysql2');

const [HOST, PORT_TEXT] = process.argv.slice(2);
if (!HOST || !PORT_TEXT) {
  process.stderr.write('usage: mysql2_checks.js HOST PORT\n');
  process.exit(2);
}
const PORT = Number(PORT_TEXT);
const DB = 'client_checks';
const WAIT_MS = 15000; // the longest any check waits for something

// --- connections ----------------------------------------------------------------------------

// Opens a connection and resolves once it is logged in, with the promise API in `conn` and the
// server version from the handshake in `serverVersion` (mysql2 hands the handshake only to the
// `connect` event of the callback connection; msgproxy's version ends with `-msgproxy`).
function connect(extra = {}) {
  return new Promise((resolve, reject) => {
    const core = mysql.createConnection({
      host: HOST,
      port: PORT,
      user: 'root',
      password: '',
      database: DB,
      charset: 'utf8mb4_general_ci',
      // Exact BIGINT and DECIMAL values: beyond 2^53 they come back as strings, not rounded numbers.
      supportBigNumbers: true,
      ...extra,
    });
    core.once('connect', (handshake) => {
      core.removeListener('error', reject);
      // An error after login (e.g. the connection killed) must not crash the process: the
      // command that was running gets it anyway.
      core.on('error', (err) => process.stderr.write(`connection error event: ${err.message}\n`));
      resolve({ conn: core.promise(), core, serverVersion: handshake.serverVersion });
    });
    core.once('error', reject);
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Ends a connection politely (COM_QUIT), or destroys its socket when that does not finish within
// 2 s: COM_QUIT waits behind the running command, and a STREAM that was not stopped never ends.
async function closeQuietly(c) {
  if (!c) return;
  const ended = await Promise.race([c.conn.end().then(() => true, () => false), sleep(2000).then(() => false)]);
  if (!ended) c.core.destroy();
}

// Rejects after `ms` with a message naming what was awaited, so that a hang is a FAIL, not a stuck run.
function within(ms, promise, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// --- canonical text of what a check observed -------------------------------------------------

// Every value with its JavaScript type, objects with sorted keys, so equal observations give equal
// text and any difference in value or type changes it.
function canon(v) {
  if (v === null) return 'null';
  if (v === undefined) return 'undefined';
  if (Buffer.isBuffer(v)) return `Buffer(${v.toString('hex')})`;
  if (v instanceof Date) return `Date(${Number.isNaN(v.getTime()) ? 'Invalid' : v.toISOString()})`;
  if (Array.isArray(v)) return `[${v.map(canon).join(',')}]`;
  switch (typeof v) {
    case 'number':
      return `number(${Object.is(v, -0) ? '-0' : String(v)})`;
    case 'bigint':
      return `bigint(${v})`;
    case 'string':
      return `string(${JSON.stringify(v)})`;
    case 'boolean':
      return `boolean(${v})`;
    case 'object': {
      const ctor = v.constructor && v.constructor !== Object ? `${v.constructor.name}` : '';
      const keys = Object.keys(v).sort();
      return `${ctor}{${keys.map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`;
    }
    default:
      return `${typeof v}(${String(v)})`;
  }
}

// The column metadata mysql2 exposes on each field.
function fieldInfo(f) {
  return {
    catalog: f.catalog,
    schema: f.schema,
    table: f.table,
    orgTable: f.orgTable,
    name: f.name,
    orgName: f.orgName,
    characterSet: f.characterSet,
    encoding: f.encoding,
    columnLength: f.columnLength,
    columnType: f.columnType,
    type: f.type,
    flags: f.flags,
    decimals: f.decimals,
  };
}
const fieldsInfo = (fields) => (fields ? fields.map(fieldInfo) : fields);

// An OK packet as mysql2 returns it (ResultSetHeader), all of its fields.
function okInfo(rs) {
  return {
    fieldCount: rs.fieldCount,
    affectedRows: rs.affectedRows,
    insertId: rs.insertId,
    info: rs.info,
    serverStatus: rs.serverStatus,
    warningStatus: rs.warningStatus,
    changedRows: rs.changedRows,
    stateChanges: rs.stateChanges,
  };
}

// A query's result as the promise API resolves it: [rows, fields] for a result set, an OK packet,
// or for several results arrays of either.
function resultInfo([rows, fields]) {
  if (Array.isArray(rows)) {
    // Several results (CALL, multi-statements): each entry is a row array or an OK packet.
    if (Array.isArray(fields) && fields.length > 0 && (Array.isArray(fields[0]) || fields[0] === undefined)) {
      return rows.map((r, i) => (Array.isArray(r) ? { rows: r, fields: fieldsInfo(fields[i]) } : { ok: okInfo(r) }));
    }
    return { rows, fields: fieldsInfo(fields) };
  }
  return { ok: okInfo(rows) };
}

function errorInfo(err) {
  return { errno: err.errno, code: err.code, sqlState: err.sqlState, sqlMessage: err.sqlMessage, fatal: err.fatal };
}

// Awaits the promise of a statement that must fail; resolves with the server's error.
async function expectError(what, promise) {
  try {
    await promise;
    throw new Error(`${what}: expected an error, it succeeded`);
  } catch (err) {
    if (err.errno === undefined) throw err;
    return err;
  }
}

function assert(cond, why) {
  if (!cond) throw new Error(why);
}

// --- running checks ----------------------------------------------------------------------------

async function runCheck(name, fn) {
  try {
    const observed = await fn();
    if (name.startsWith('passthrough/')) {
      const text = canon(observed);
      const digest = crypto.createHash('sha256').update(text).digest('hex').slice(0, 12);
      process.stderr.write(`--- ${name} observed: ${text}\n`);
      console.log(`PASS ${name}#${digest}`);
    } else {
      console.log(`PASS ${name}`);
    }
  } catch (err) {
    process.stderr.write(`--- ${name} failed: ${err && err.stack ? err.stack : err}\n`);
    const why = String(err && err.message ? err.message : err).replace(/\s+/g, ' ');
    console.log(`FAIL ${name}: ${why}`);
  }
}

// --- pass-through checks -----------------------------------------------------------------------

async function checkConnect() {
  const c = await connect();
  try {
    const [rows, fields] = await c.conn.query({
      sql: 'SELECT DATABASE(), @@autocommit, USER() = CURRENT_USER() OR 1',
      rowsAsArray: true,
    });
    assert(rows.length === 1 && rows[0][0] === DB, `DATABASE() is ${canon(rows[0] && rows[0][0])}`);
    // ping() resolves with nothing; what is observed is that COM_PING got its OK.
    await c.conn.ping();
    return {
      serverVersion: c.serverVersion.replace(/-msgproxy$/, ''),
      rows,
      fields: fieldsInfo(fields),
      ping: 'ok',
    };
  } finally {
    await closeQuietly(c);
  }
}

// The values of types_text and types_prepared: [alias, SQL literal, JS parameter].
// MariaDB has no CAST(... AS YEAR), so YEAR is left out here (no YEAR literal exists in SQL).
const TYPE_VALUES = [
  ['i', '1', 1],
  ['bigmin', '-9223372036854775808', -9223372036854775808n],
  ['ubigmax', 'CAST(18446744073709551615 AS UNSIGNED)', 18446744073709551615n],
  ['dcm', 'CAST(1234.5678 AS DECIMAL(20,6))', '1234.567800'],
  ['flt', 'CAST(1.5 AS FLOAT)', 1.5],
  ['dbl', '1e300', 1e300],
  ['str', "'héllo 😀'", 'héllo 😀'],
  ['bin', "X'00FF41'", Buffer.from([0x00, 0xff, 0x41])],
  ['dt', "DATE'2024-02-29'", new Date(2024, 1, 29)],
  ['ts', "TIMESTAMP'2024-01-02 03:04:05.123456'", new Date(2024, 0, 2, 3, 4, 5, 123)],
  ['tm', "TIME'-838:59:59'", '-838:59:59'],
  ['bits', "b'1010'", Buffer.from([0x0a])],
  ['js', "JSON_OBJECT('a', 1)", { a: 1 }],
  ['nul', 'NULL', null],
];

async function checkTypesText() {
  const c = await connect();
  try {
    const sql = `SELECT ${TYPE_VALUES.map(([a, lit]) => `${lit} AS ${a}`).join(', ')}`;
    const [rows, fields] = await c.conn.query(sql);
    assert(rows.length === 1, `${rows.length} rows`);
    const row = rows[0];
    assert(row.i === 1, `1 came back as ${canon(row.i)}`);
    assert(row.str === 'héllo 😀', `the utf8mb4 string came back as ${canon(row.str)}`);
    assert(Buffer.isBuffer(row.bin) && row.bin.equals(Buffer.from([0, 255, 65])), `X'00FF41' came back as ${canon(row.bin)}`);
    assert(row.ubigmax === '18446744073709551615', `the unsigned maximum came back as ${canon(row.ubigmax)}`);
    assert(row.nul === null, `NULL came back as ${canon(row.nul)}`);
    return { row, fields: fieldsInfo(fields) };
  } finally {
    await closeQuietly(c);
  }
}

async function checkTypesPrepared() {
  const c = await connect();
  try {
    const sql = `SELECT ${TYPE_VALUES.map(([a]) => `? AS ${a}`).join(', ')}`;
    const [rows, fields] = await c.conn.execute(sql, TYPE_VALUES.map(([, , v]) => v));
    assert(rows.length === 1, `${rows.length} rows`);
    const row = rows[0];
    assert(row.str === 'héllo 😀', `the utf8mb4 string came back as ${canon(row.str)}`);
    assert(Buffer.isBuffer(row.bin) && row.bin.equals(Buffer.from([0, 255, 65])), `the bytes came back as ${canon(row.bin)}`);
    assert(row.nul === null, `NULL came back as ${canon(row.nul)}`);
    // The same statement again: mysql2 reuses its cached prepared statement (COM_STMT_EXECUTE only).
    const [rows2] = await c.conn.execute(sql, TYPE_VALUES.map(([, , v]) => v));
    assert(canon(rows2) === canon(rows), 'the second execution of the cached statement differs from the first');
    return { row, fields: fieldsInfo(fields) };
  } finally {
    await closeQuietly(c);
  }
}

async function checkTableRoundtrip() {
  const c = await connect();
  try {
    await c.conn.query('DROP TABLE IF EXISTS mysql2_types');
    const created = await c.conn.query(
      `CREATE TABLE mysql2_types (id INT AUTO_INCREMENT PRIMARY KEY, b BIGINT, u BIGINT UNSIGNED,
         d DECIMAL(20,6), f DOUBLE, s VARCHAR(50) CHARACTER SET utf8mb4, v VARBINARY(20), dt DATETIME(6),
         t TIME(3), j JSON, e ENUM('x','y'), st SET('p','q'), bt BIT(10))`
    );
    const insert = 'INSERT INTO mysql2_types (b, u, d, f, s, v, dt, t, j, e, st, bt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)';
    // Row 1 through a server-side prepared statement, row 2 with mysql2's own client-side
    // interpolation (query with values), row 3 all NULL, prepared again.
    const ins1 = await c.conn.execute(insert, [
      -9223372036854775808n, 18446744073709551615n, '-99999999999999.999999', 1e300, 'héllo 😀',
      Buffer.from([0, 1, 2, 255]), new Date(2024, 1, 29, 23, 59, 58, 250), '-12:34:56.789', { a: [1, 'b'] },
      'y', 'p,q', Buffer.from([0x02, 0x01]),
    ]);
    const ins2 = await c.conn.query(insert, [
      42, 0, '0.000001', -2.5, "it's \\ \"quoted\"", Buffer.from('bin'), new Date(1999, 11, 31, 0, 0, 0, 1),
      '838:59:59', '[1, 2]', 'x', '', Buffer.from([0x03, 0xff]),
    ]);
    const ins3 = await c.conn.execute(insert, Array(12).fill(null));
    for (const [i, ins] of [ins1, ins2, ins3].entries()) {
      assert(ins[0].affectedRows === 1, `insert ${i + 1}: affectedRows ${ins[0].affectedRows}`);
      assert(ins[0].insertId === i + 1, `insert ${i + 1}: insertId ${ins[0].insertId}`);
    }
    const prepared = await c.conn.execute('SELECT * FROM mysql2_types WHERE id >= ? ORDER BY id', [1]);
    const plain = await c.conn.query('SELECT * FROM mysql2_types ORDER BY id');
    assert(prepared[0].length === 3 && plain[0].length === 3, `${prepared[0].length} / ${plain[0].length} rows read back`);
    assert(plain[0][0].s === 'héllo 😀' && prepared[0][0].s === 'héllo 😀', 'the utf8mb4 string did not round-trip');
    assert(plain[0][0].b === '-9223372036854775808', `BIGINT minimum read back as ${canon(plain[0][0].b)}`);
    assert(plain[0][2].b === null && prepared[0][2].bt === null, 'the all-NULL row is not NULL');
    return {
      created: resultInfo(created),
      inserts: [ins1, ins2, ins3].map(resultInfo),
      prepared: resultInfo(prepared),
      plain: resultInfo(plain),
    };
  } finally {
    await closeQuietly(c);
  }
}

async function checkWarnings() {
  const c = await connect();
  try {
    await c.conn.query('DROP TABLE IF EXISTS mysql2_warn');
    await c.conn.query('CREATE TABLE mysql2_warn (s VARCHAR(5))');
    const mode = await c.conn.query("SET SESSION sql_mode = ''");
    const ins = await c.conn.query('INSERT INTO mysql2_warn VALUES (?)', ['far too long for five']);
    assert(ins[0].affectedRows === 1, `affectedRows ${ins[0].affectedRows}`);
    assert(ins[0].warningStatus === 1, `warning count ${ins[0].warningStatus}`);
    const warnings = await c.conn.query('SHOW WARNINGS');
    assert(warnings[0].length === 1 && warnings[0][0].Code === 1265, `SHOW WARNINGS: ${canon(warnings[0])}`);
    const stored = await c.conn.query('SELECT s FROM mysql2_warn');
    assert(stored[0][0].s === 'far t', `stored ${canon(stored[0][0].s)}`);
    return { mode: resultInfo(mode), ins: resultInfo(ins), warnings: resultInfo(warnings), stored: resultInfo(stored) };
  } finally {
    await closeQuietly(c);
  }
}

async function checkErrors() {
  const c = await connect();
  try {
    await c.conn.query('DROP TABLE IF EXISTS mysql2_dup');
    await c.conn.query('CREATE TABLE mysql2_dup (id INT PRIMARY KEY)');
    const syntax = await expectError('SELEC 1', c.conn.query('SELEC 1'));
    assert(syntax.errno === 1064 && syntax.sqlState === '42000', `syntax error: ${syntax.errno} ${syntax.sqlState}`);
    const unknown = await expectError('unknown table', c.conn.query('SELECT * FROM mysql2_no_such_table'));
    assert(unknown.errno === 1146 && unknown.sqlState === '42S02', `unknown table: ${unknown.errno} ${unknown.sqlState}`);
    await c.conn.execute('INSERT INTO mysql2_dup VALUES (?)', [1]);
    const dup = await expectError('duplicate key', c.conn.execute('INSERT INTO mysql2_dup VALUES (?)', [1]));
    assert(dup.errno === 1062 && dup.sqlState === '23000', `duplicate key: ${dup.errno} ${dup.sqlState}`);
    const after = await c.conn.query('SELECT 1 AS one');
    assert(after[0][0].one === 1, `SELECT 1 afterwards gave ${canon(after[0])}`);
    return { syntax: errorInfo(syntax), unknown: errorInfo(unknown), dup: errorInfo(dup), after: resultInfo(after) };
  } finally {
    await closeQuietly(c);
  }
}

async function checkTransactions() {
  const c = await connect();
  const other = await connect();
  try {
    await c.conn.query('DROP TABLE IF EXISTS mysql2_tx');
    await c.conn.query('CREATE TABLE mysql2_tx (id INT PRIMARY KEY, note VARCHAR(20)) ENGINE=InnoDB');
    const seen = async () => (await other.conn.query('SELECT id, note FROM mysql2_tx ORDER BY id'))[0];

    await c.conn.beginTransaction();
    const insRolledBack = await c.conn.execute('INSERT INTO mysql2_tx VALUES (?, ?)', [1, 'rolled back']);
    const insideTx = await c.conn.query('SELECT id FROM mysql2_tx');
    await c.conn.rollback();
    const afterRollback = await c.conn.query('SELECT id FROM mysql2_tx');
    assert(insideTx[0].length === 1, `inside the transaction ${insideTx[0].length} rows`);
    assert(afterRollback[0].length === 0, `after ROLLBACK ${afterRollback[0].length} rows`);

    await c.conn.beginTransaction();
    const insCommitted = await c.conn.execute('INSERT INTO mysql2_tx VALUES (?, ?)', [2, 'committed']);
    const beforeCommit = await seen();
    await c.conn.commit();
    const afterCommit = await seen();
    assert(beforeCommit.length === 0, `the second connection saw ${beforeCommit.length} rows before COMMIT`);
    assert(afterCommit.length === 1 && afterCommit[0].id === 2, `the second connection saw ${canon(afterCommit)} after COMMIT`);
    return {
      insRolledBack: resultInfo(insRolledBack),
      insideTx: resultInfo(insideTx),
      afterRollback: resultInfo(afterRollback),
      insCommitted: resultInfo(insCommitted),
      beforeCommit,
      afterCommit,
    };
  } finally {
    await closeQuietly(c);
    await closeQuietly(other);
  }
}

async function checkMultiResults() {
  const c = await connect();
  const multi = await connect({ multipleStatements: true });
  try {
    await c.conn.query('DROP PROCEDURE IF EXISTS mysql2_two');
    await c.conn.query("CREATE PROCEDURE mysql2_two() BEGIN SELECT 1 AS a; SELECT 'x' AS b, 2.5 AS c; END");
    const call = await c.conn.query('CALL mysql2_two()');
    // Two result sets and the CALL's own OK.
    assert(Array.isArray(call[0]) && call[0].length === 3, `CALL gave ${call[0].length} results`);
    assert(call[0][0][0].a === 1 && call[0][1][0].b === 'x', `CALL's rows: ${canon(call[0].slice(0, 2))}`);
    const statements = await multi.conn.query("SELECT 1 AS one; SELECT 2 AS two, 'z' AS z; DO 0");
    assert(statements[0].length === 3, `SELECT 1; SELECT 2; DO 0 gave ${statements[0].length} results`);
    assert(statements[0][0][0].one === 1 && statements[0][1][0].two === 2, `its rows: ${canon(statements[0].slice(0, 2))}`);
    const after = await multi.conn.query('SELECT 3 AS three');
    assert(after[0][0].three === 3, 'the connection does not answer after the multi-statement query');
    return { call: resultInfo(call), statements: resultInfo(statements), after: resultInfo(after) };
  } finally {
    await closeQuietly(c);
    await closeQuietly(multi);
  }
}

async function checkLargeResult() {
  const c = await connect();
  try {
    // Streamed: mysql2 emits each row as it is parsed and never holds the whole result.
    const stream = c.core.query("SELECT seq, REPEAT('x', 100) AS pad FROM seq_1_to_200000").stream();
    let count = 0;
    let sum = 0;
    let badPad = 0;
    let fields;
    stream.on('fields', (f) => {
      fields = f;
    });
    await within(
      WAIT_MS * 2,
      (async () => {
        for await (const row of stream) {
          count += 1;
          sum += row.seq;
          if (row.pad.length !== 100) badPad += 1;
        }
      })(),
      'the 200,000 rows'
    );
    assert(count === 200000, `${count} rows`);
    assert(sum === 20000100000, `sum of seq ${sum}`);
    assert(badPad === 0, `${badPad} rows with a wrong REPEAT value`);
    const [big, bigFields] = await c.conn.query("SELECT REPEAT('y', 5000000) AS big");
    const len = big[0].big.length;
    assert(len === 5000000, `the large value has length ${len}`);
    assert(/^y+$/.test(big[0].big), 'the large value is not all y');
    return { count, sum, fields: fieldsInfo(fields), bigLength: len, bigFields: fieldsInfo(bigFields) };
  } finally {
    await closeQuietly(c);
  }
}

async function checkSessionState() {
  const c = await connect();
  try {
    const setVar = await c.conn.query('SET @mysql2_v = 42');
    const readVar = await c.conn.query('SELECT @mysql2_v AS v');
    assert(readVar[0][0].v === 42, `@mysql2_v read back as ${canon(readVar[0][0].v)}`);

    // mysql2 follows the server's session tracking of character_set_client, so after SET NAMES it
    // encodes queries in latin1 and decodes latin1 columns.
    const names = await c.conn.query('SET NAMES latin1');
    const latin = await c.conn.query("SELECT 'café ß' AS s, HEX('café ß') AS h, @@character_set_client AS cs");
    assert(latin[0][0].s === 'café ß', `'café ß' came back as ${canon(latin[0][0].s)}`);
    assert(latin[0][0].h === '636166E920DF', `it reached the server as ${latin[0][0].h}`);
    const latinParam = await c.conn.query('SELECT ? AS p', ['naïve']);
    assert(latinParam[0][0].p === 'naïve', `'naïve' as a parameter came back as ${canon(latinParam[0][0].p)}`);

    // Dropped first so that CREATE answers the same (no "exists" warning) on every run.
    await c.conn.query('DROP DATABASE IF EXISTS client_checks_2');
    const created = await c.conn.query('CREATE DATABASE client_checks_2');
    const use = await c.conn.query('USE client_checks_2');
    const db = await c.conn.query('SELECT DATABASE() AS db');
    assert(db[0][0].db === 'client_checks_2', `DATABASE() is ${canon(db[0][0].db)} after USE`);

    const id = await c.conn.query('SELECT CONNECTION_ID() AS id');
    const sameId = Number(id[0][0].id) === c.core.threadId;
    assert(sameId, `the driver's threadId ${c.core.threadId} is not CONNECTION_ID() ${id[0][0].id}`);
    return {
      setVar: resultInfo(setVar),
      readVar: resultInfo(readVar),
      names: resultInfo(names),
      latin: resultInfo(latin),
      latinParam: resultInfo(latinParam),
      created: resultInfo(created),
      use: resultInfo(use),
      db: resultInfo(db),
      idFields: fieldsInfo(id[1]),
      sameId,
    };
  } finally {
    await closeQuietly(c);
  }
}

async function checkKillQuery() {
  const victim = await connect();
  const killer = await connect();
  try {
    const started = Date.now();
    const sleeping = victim.conn.query('SELECT SLEEP(10) AS s').then(
      (res) => ({ result: resultInfo(res) }),
      (err) => ({ error: err })
    );
    await sleep(500);
    const kill = await killer.conn.query(`KILL QUERY ${victim.core.threadId}`);
    const outcome = await within(WAIT_MS, sleeping, 'the killed SELECT SLEEP(10)');
    const elapsed = Date.now() - started;
    assert(elapsed < 5000, `the killed SLEEP(10) took ${elapsed} ms`);
    process.stderr.write(`kill_query: SLEEP(10) ended after ${elapsed} ms\n`);
    if (outcome.error && outcome.error.errno === undefined) throw outcome.error;
    const after = await victim.conn.query('SELECT 1 AS one');
    assert(after[0][0].one === 1, 'the killed connection does not answer SELECT 1');
    return {
      kill: resultInfo(kill),
      outcome: outcome.error ? { error: errorInfo(outcome.error) } : outcome,
      after: resultInfo(after),
    };
  } finally {
    await closeQuietly(victim);
    await closeQuietly(killer);
  }
}

// --- messaging checks ----------------------------------------------------------------------------

// A `STREAM * FROM` read with mysql2's event API: rows are queued as they arrive, and the check
// takes them with `next()`, which waits for one up to a deadline.
class MessageStream {
  constructor(core, table) {
    this.rows = [];
    this.fields = null;
    this.error = null;
    this.ended = false;
    this.waiters = [];
    const query = core.query(`STREAM * FROM ${table}`);
    query.on('fields', (fields) => {
      this.fields = fields;
      this.rowsBeforeFields = this.rows.length;
      this.wake();
    });
    query.on('result', (row) => {
      this.rows.push(row);
      this.wake();
    });
    query.on('error', (err) => {
      this.error = err;
      this.wake();
    });
    query.on('end', () => {
      this.ended = true;
      this.wake();
    });
  }

  wake() {
    const waiters = this.waiters;
    this.waiters = [];
    waiters.forEach((w) => w());
  }

  // Resolves once `cond()` holds or the stream ended/failed, or after `ms`; returns cond().
  async waitFor(cond, ms) {
    const deadline = Date.now() + ms;
    while (!cond() && !this.error && !this.ended && Date.now() < deadline) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, Math.min(deadline - Date.now(), 200));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return cond();
  }

  // The next row not yet taken, or null after `ms`.
  async next(ms) {
    await this.waitFor(() => this.rows.length > 0, ms);
    if (this.rows.length > 0) return this.rows.shift();
    if (this.error) throw new Error(`the stream ended with error ${this.error.errno}: ${this.error.message}`);
    if (this.ended) throw new Error('the stream ended');
    return null;
  }
}

const QUEUE = 'mysql2_queue';
const messaging = {}; // what the messaging checks share: the stream and its connection

async function checkStreamColumns() {
  const setup = await connect();
  try {
    await setup.conn.query(`DROP TABLE IF EXISTS ${QUEUE}`);
    await setup.conn.query(`CREATE TABLE ${QUEUE} (id BIGINT PRIMARY KEY, time_next BIGINT DEFAULT 0, epoch BIGINT,
      time_acked BIGINT, message VARCHAR(128), INDEX next_idx (time_next, epoch), INDEX ack_idx (time_acked))
      COMMENT 'vitess_message,vt_ack_wait=1,vt_purge_after=60,vt_batch_size=10,vt_cache_size=1000,vt_poller_interval=1'`);
  } finally {
    await closeQuietly(setup);
  }
  // mysql2 connections are in autocommit mode unless told otherwise, as STREAM needs.
  messaging.streamConn = await connect();
  const stream = new MessageStream(messaging.streamConn.core, QUEUE);
  messaging.stream = stream;
  await stream.waitFor(() => stream.fields !== null, WAIT_MS);
  if (stream.error) throw new Error(`STREAM failed: ${stream.error.errno} ${stream.error.message}`);
  assert(stream.fields !== null, `no columns within ${WAIT_MS} ms`);
  const names = stream.fields.map((f) => f.name);
  assert(canon(names) === canon(['id', 'message']), `the stream's columns are ${names.join(', ')}`);
  assert(stream.rowsBeforeFields === 0 && stream.rows.length === 0, `rows on an empty queue: ${canon(stream.rows)}`);
}

async function checkDelivery() {
  const { stream } = messaging;
  assert(stream, 'no stream (messaging/stream_columns failed)');
  const producer = await connect();
  try {
    const values = Array.from({ length: 10 }, (_, i) => `(${i + 1}, 'message ${i + 1}')`).join(', ');
    const multi = await producer.conn.query(`INSERT INTO ${QUEUE} (id, message) VALUES ${values}`);
    assert(multi[0].affectedRows === 10, `the multi-row INSERT affected ${multi[0].affectedRows} rows`);
    for (let id = 11; id <= 20; id++) {
      await producer.conn.execute(`INSERT INTO ${QUEUE} (id, message) VALUES (?, ?)`, [id, `message ${id}`]);
    }
    await producer.conn.beginTransaction();
    await producer.conn.execute(`INSERT INTO ${QUEUE} (id, message) VALUES (?, ?)`, [99, 'rolled back']);
    await producer.conn.rollback();
  } finally {
    await closeQuietly(producer);
  }

  // Unacked messages come again after the 1 s ack wait, so a message seen twice is fine here;
  // what matters is the set of ids and each id's message.
  const seen = new Map();
  const deadline = Date.now() + WAIT_MS;
  while (seen.size < 20 && Date.now() < deadline) {
    const row = await stream.next(deadline - Date.now());
    if (row === null) break;
    const id = Number(row.id);
    assert(row.message === (id === 99 ? 'rolled back' : `message ${id}`), `id ${id} came with message ${canon(row.message)}`);
    seen.set(id, row.message);
  }
  // Give a stray id 99 (or anything else) a moment to show up before judging.
  await sleep(300);
  for (const row of stream.rows) seen.set(Number(row.id), row.message);
  const ids = [...seen.keys()].sort((a, b) => a - b);
  const want = Array.from({ length: 20 }, (_, i) => i + 1);
  assert(canon(ids) === canon(want), `the stream yielded ids ${ids.join(',')}`);
}

async function checkAck() {
  const acker = await connect();
  try {
    const ids = Array.from({ length: 20 }, (_, i) => i + 1).join(', ');
    // ACK is a text statement (it cannot be prepared): the promise API's query sends it as text.
    const first = await acker.conn.query(`ACK ${QUEUE} ${ids}`);
    assert(first[0].affectedRows === 20, `the first ACK affected ${first[0].affectedRows} rows`);
    const again = await acker.conn.query(`ACK ${QUEUE} ${ids}`);
    assert(again[0].affectedRows === 0, `the same ACK again affected ${again[0].affectedRows} rows`);
    const [rows] = await acker.conn.query(
      `SELECT COUNT(*) AS n, SUM(time_acked IS NOT NULL) AS acked FROM ${QUEUE} WHERE id BETWEEN 1 AND 20`
    );
    assert(Number(rows[0].n) === 20 && Number(rows[0].acked) === 20, `time_acked set on ${rows[0].acked} of ${rows[0].n}`);
  } finally {
    await closeQuietly(acker);
  }
}

async function checkRedelivery() {
  const { stream } = messaging;
  assert(stream, 'no stream (messaging/stream_columns failed)');
  const producer = await connect();
  try {
    await producer.conn.execute(`INSERT INTO ${QUEUE} (id, message) VALUES (?, ?)`, [30, 'message 30']);
    // Take id 30 twice; rows of other ids (redeliveries of 1-20 sent before their ACK) are passed over.
    const deadline = Date.now() + WAIT_MS;
    let deliveries = 0;
    while (deliveries < 2 && Date.now() < deadline) {
      const row = await stream.next(deadline - Date.now());
      if (row === null) break;
      if (Number(row.id) === 30) deliveries += 1;
    }
    assert(deliveries === 2, `id 30 came ${deliveries} time(s) within ${WAIT_MS} ms, not again after its ack wait`);

    // The Vitess way to ack: ordinary SQL, here as a server-side prepared statement.
    const nowNs = BigInt(Date.now()) * 1000000n;
    const [ack] = await producer.conn.execute(
      `UPDATE ${QUEUE} SET time_acked = ?, time_next = NULL WHERE id IN (?) AND time_acked IS NULL`,
      [nowNs, 30]
    );
    assert(ack.affectedRows === 1, `the UPDATE ack affected ${ack.affectedRows} rows`);
    const seenAgain = await stream.waitFor(() => stream.rows.some((r) => Number(r.id) === 30), 3000);
    assert(!seenAgain, 'id 30 came again after it was acked');
    if (stream.error) throw new Error(`the stream ended with error ${stream.error.errno}: ${stream.error.message}`);
  } finally {
    await closeQuietly(producer);
  }
}

async function checkMessagingErrors() {
  const c = await connect();
  try {
    const stillWorks = async (after) => {
      const [rows] = await c.conn.query('SELECT 1 AS one');
      assert(rows[0].one === 1, `the connection does not answer after ${after}`);
    };
    const noTable = await expectError('STREAM of a missing table', c.conn.query('STREAM * FROM mysql2_no_such_table'));
    assert(noTable.errno === 1146, `STREAM * FROM mysql2_no_such_table: error ${noTable.errno} ${noTable.message}`);
    await stillWorks('the STREAM of a missing table');

    await c.conn.query('DROP TABLE IF EXISTS mysql2_plain');
    await c.conn.query('CREATE TABLE mysql2_plain (id BIGINT PRIMARY KEY)');
    const plain = await expectError('ACK of a plain table', c.conn.query('ACK mysql2_plain 1'));
    assert(/mysql2_plain/.test(plain.message), `ACK mysql2_plain 1: error ${plain.errno} does not name the table: ${plain.message}`);
    await stillWorks('the ACK of a plain table');

    const syntax = await expectError('STREAM with a syntax error', c.conn.query(`STREAM * FROM ${QUEUE} WHERE`));
    assert(syntax.errno === 1064, `STREAM * FROM ${QUEUE} WHERE: error ${syntax.errno} ${syntax.message}`);
    await stillWorks('the STREAM with a syntax error');
  } finally {
    await closeQuietly(c);
  }
}

async function checkStop() {
  const { stream, streamConn } = messaging;
  assert(stream, 'no stream (messaging/stream_columns failed)');
  assert(!stream.error && !stream.ended, 'the stream had already ended');
  const killer = await connect();
  try {
    await killer.conn.query(`KILL QUERY ${streamConn.core.threadId}`);
    await stream.waitFor(() => stream.error !== null || stream.ended, WAIT_MS);
    assert(stream.error !== null, stream.ended ? 'the stream ended without an error' : `the stream went on for ${WAIT_MS} ms`);
    assert(stream.error.errno === 1317, `the stream ended with error ${stream.error.errno}: ${stream.error.message}`);
    // mysql2 finishes the command on the error packet, so the connection goes on.
    const [rows] = await within(WAIT_MS, streamConn.conn.query('SELECT 1 AS one'), 'SELECT 1 after the stream');
    assert(rows[0].one === 1, 'the stream connection does not answer SELECT 1');
  } finally {
    await closeQuietly(killer);
    await closeQuietly(streamConn);
    messaging.stream = null;
    messaging.streamConn = null;
  }
}

// --- main ------------------------------------------------------------------------------------------

async function main() {
  await runCheck('passthrough/connect', checkConnect);
  await runCheck('passthrough/types_text', checkTypesText);
  await runCheck('passthrough/types_prepared', checkTypesPrepared);
  await runCheck('passthrough/table_roundtrip', checkTableRoundtrip);
  await runCheck('passthrough/warnings', checkWarnings);
  await runCheck('passthrough/errors', checkErrors);
  await runCheck('passthrough/transactions', checkTransactions);
  await runCheck('passthrough/multi_results', checkMultiResults);
  await runCheck('passthrough/large_result', checkLargeResult);
  await runCheck('passthrough/session_state', checkSessionState);
  await runCheck('passthrough/kill_query', checkKillQuery);

  const messagingChecks = [
    ['messaging/stream_columns', checkStreamColumns],
    ['messaging/delivery', checkDelivery],
    ['messaging/ack', checkAck],
    ['messaging/redelivery', checkRedelivery],
    ['messaging/errors', checkMessagingErrors],
    ['messaging/stop', checkStop],
  ];
  let viaProxy = false;
  try {
    const probe = await connect();
    viaProxy = probe.serverVersion.endsWith('-msgproxy');
    process.stderr.write(`server version: ${probe.serverVersion}\n`);
    await closeQuietly(probe);
  } catch (err) {
    process.stderr.write(`cannot connect to tell server from msgproxy: ${err.stack}\n`);
    for (const [name] of messagingChecks) console.log(`FAIL ${name}: cannot connect: ${err.message}`);
    return;
  }
  for (const [name, fn] of messagingChecks) {
    if (viaProxy) await runCheck(name, fn);
    else console.log(`SKIP ${name}: needs msgproxy`);
  }
  // A stream left open by a failed check would keep the process alive.
  if (messaging.streamConn) messaging.streamConn.core.destroy();
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`unexpected: ${err.stack}\n`);
    process.exit(1);
  }
);
