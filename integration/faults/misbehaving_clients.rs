//! Clients that misbehave: a consumer that stops reading its socket, and clients that vanish
//! mid-batch, mid-result or mid-LOAD DATA. The proxy serves the others and leaves nothing behind.

use std::collections::BTreeSet;
use std::time::Instant;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::{ack_all, delivered, insert_sql, inside_windows, open_windows, table_sql};
use crate::messaging::harness::{assert_each_once, exec, now_ns, secs, Env, Msg, RowState};
use crate::support::raw::{self, RawConn, RawError};
use crate::support::{eventually, opts};

/// A raw `STREAM * FROM table` that reads its column definitions and then whatever the test
/// asks for (or nothing: a client that stops reading its socket).
async fn raw_stream(port: u16, db: &str, table: &str) -> RawConn {
    let mut c = RawConn::connect(port, "root", "", Some(db))
        .await
        .expect("raw connect");
    c.send_command(
        raw::COM_QUERY,
        format!("STREAM * FROM `{table}`").as_bytes(),
    )
    .await
    .expect("send STREAM");
    let first = c
        .read_packet_timeout(secs(5.0))
        .await
        .expect("column count");
    assert_ne!(
        first.first(),
        Some(&0xff),
        "STREAM refused: {:?}",
        raw::parse_err(&first)
    );
    let columns = raw::lenenc(&first).0 as usize;
    for _ in 0..columns + 1 {
        c.read_packet_timeout(secs(5.0))
            .await
            .expect("column definitions and EOF");
    }
    c
}

/// The id of a text-protocol row packet (its first value).
fn row_id(row: &[u8]) -> i64 {
    let (len, used) = raw::lenenc(row);
    std::str::from_utf8(&row[used..used + len as usize])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(i64::MIN)
}

/// 3. A STREAM client that stops reading its socket while large messages keep coming: the
///    proxy's memory stays bounded, the other stream on the table keeps receiving, and the
///    stuck client's messages — those it was sent and the batch the proxy is blocked writing —
///    come back to the other stream after their ack wait, while the stuck client is still
///    connected.
#[tokio::test]
async fn a_consumer_that_stops_reading_holds_up_nothing() {
    const N: i64 = 3000;
    const BYTES: usize = 16 * 1024;
    let env = Env::private("fault_slow_consumer").await;
    // ack_wait 1, min_backoff 1: a claim keeps a row for 1.67..2.33 s.
    env.ddl(&table_sql("big", "1", 10, "1", "mediumtext")).await;
    let mut stuck = raw_stream(env.proxy.port(), &env.db, "big").await;
    let mut good = env.stream("big").await;
    let mut acker = env.proxy_conn().await;
    // Both streams set up before the baseline is taken.
    env.wait_counts("big", "both streams open", |c| c.subscribers == 2)
        .await;
    let (base_rss, _) = env.proxy.memory_kib().expect("the proxy's /proc status");
    let started = Instant::now();

    // 3000 messages of 16 KiB (48 MiB), 300 per statement, through the proxy.
    let (port, db) = (env.proxy.port(), env.db.clone());
    let writer = tokio::spawn(async move {
        let mut c = crate::messaging::harness::connect(port, &db).await;
        for chunk in 0..N / 300 {
            let sql = insert_sql("big", chunk * 300 + 1, chunk * 300 + 300, BYTES);
            exec(&mut c, &sql).await.expect("insert");
        }
    });
    let mut got: Vec<Msg> = Vec::new();
    let mut peak_rss = base_rss;
    let mut last_progress = Instant::now();
    // Until all have come, or nothing came for 6 s after the last insert (the ack wait is 1 s),
    // within a generous deadline: on a loaded machine claims whose COMMIT is slow are held back
    // (late_claim.rs) and come again a second later, so all 3000 may take well over 30 s.
    while (got.len() as i64) < N
        && (!writer.is_finished() || last_progress.elapsed() < secs(6.0))
        && started.elapsed() < secs(120.0)
    {
        let Some(first) = good.recv(secs(0.2)).await else {
            continue;
        };
        last_progress = Instant::now();
        let mut msgs = vec![first];
        msgs.extend(good.ready().await);
        let ids: Vec<i64> = msgs.iter().map(|m| m.id).collect();
        ack_all(&mut acker, "big", &ids, "the good stream").await;
        for m in &mut msgs {
            m.values.clear(); // keep the test's own memory small
        }
        got.extend(msgs);
        if let Some((rss, _)) = env.proxy.memory_kib() {
            peak_rss = peak_rss.max(rss);
        }
    }
    writer.await.expect("writer");
    let all_in = started.elapsed();
    let (_, hwm) = env.proxy.memory_kib().expect("the proxy's /proc status");
    let states = env.states("big").await;
    let stuck_ids: BTreeSet<i64> = states
        .iter()
        .filter(|(_, s)| s.epoch.unwrap_or(0) >= 2)
        .map(|(id, _)| *id)
        .collect();
    eprintln!(
        "{} messages in {all_in:?}; {} of them claimed for the stuck client first; proxy RSS \
         {base_rss} KiB at the start, peak {peak_rss} KiB sampled, VmHWM {hwm} KiB",
        got.len(),
        stuck_ids.len()
    );
    let got_ids: Vec<i64> = got.iter().map(|m| m.id).collect();
    let got_set: BTreeSet<i64> = got_ids.iter().copied().collect();
    let missing: Vec<i64> = (1..=N).filter(|id| !got_set.contains(id)).collect();
    if !missing.is_empty() {
        let show: Vec<(i64, Option<RowState>)> = missing
            .iter()
            .take(20)
            .map(|id| (*id, states.get(id).copied()))
            .collect();
        panic!(
            "the good stream never got {} messages (the stuck client still connected): first \
             {show:?} at {}\n--- proxy log ---\n{}",
            missing.len(),
            now_ns(),
            env.log()
        );
    }
    assert_each_once(
        &got_ids,
        1..=N,
        "the good stream, acking everything at once",
    );
    assert!(
        stuck_ids.len() >= 20,
        "the stuck client should have been sent (and kept) messages: {}",
        stuck_ids.len()
    );
    // What the stuck client holds is in its socket, not in the proxy: 48 MiB went through.
    assert!(
        hwm < base_rss + 16 * 1024,
        "the proxy's memory grew from {base_rss} KiB to a peak of {hwm} KiB"
    );

    // The stuck client reads at last: exactly the rows claimed for it, each once.
    let mut read_ids = Vec::new();
    loop {
        match stuck.read_packet_timeout(secs(1.0)).await {
            Ok(row) => {
                assert_ne!(
                    row.first(),
                    Some(&0xff),
                    "stream error: {:?}",
                    raw::parse_err(&row)
                );
                read_ids.push(row_id(&row));
            }
            Err(RawError::Io(_)) => break,
            Err(e) => panic!("the stuck client reading its backlog: {e:?}"),
        }
    }
    assert_each_once(
        &read_ids,
        stuck_ids.iter().copied(),
        "the stuck client's backlog = the rows claimed for it",
    );
    stuck.abandon();
    env.proxy.assert_alive();
    env.server.stop();
}

/// The backend sessions of clients of database `db` (stream, bystander, raw clients), and the
/// server's Threads_connected.
async fn sessions(env: &Env) -> (i64, i64) {
    let mut c = Conn::new(opts(env.server.port(), "root", None, None))
        .await
        .expect("connect");
    let in_db: Option<i64> = c
        .query_first(format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '{}'",
            env.db
        ))
        .await
        .expect("processlist");
    let threads: Option<(String, i64)> = c
        .query_first("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
        .await
        .expect("Threads_connected");
    let _ = c.disconnect().await;
    (in_db.unwrap_or(-1), threads.map_or(-1, |t| t.1))
}

async fn backend_gone(env: &Env, id: u32) -> bool {
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
    eventually(10, async || {
        crate::support::direct_scalar::<i64>(env.server, &sql).await == Some(0)
    })
    .await
}

/// 4. Clients that vanish in the middle of a STREAM batch, of a large result, and of a
///    `LOAD DATA LOCAL INFILE` (after sending part of the file, the last packet cut short): the
///    proxy keeps serving the others, every abandoned backend session ends (the processlist is
///    back where it was), the abandoned batch's messages come back to another stream after
///    their ack wait, and nothing of an abandoned LOAD DATA is committed.
#[tokio::test]
async fn clients_vanishing_mid_batch_result_or_load_data_leave_nothing_behind() {
    let env = Env::private("fault_walkaway").await;
    // ack_wait 1, min_backoff 1: a claim keeps a row for 1.67..2.33 s.
    env.ddl(&table_sql("w", "1", 20, "1", "varchar(8000)"))
        .await;
    env.via_proxy("CREATE TABLE ld (id int PRIMARY KEY, v varchar(100))")
        .await;
    let mut bystander = env.proxy_conn().await;
    // Only the bystander's backend session is in the test's database (sessions of the setup
    // statements may take a moment to go).
    let settled = eventually(5, async || sessions(&env).await.0 == 1).await;
    let (base_in_db, base_threads) = sessions(&env).await;
    assert!(
        settled,
        "backend sessions in {} at the start: {base_in_db}",
        env.db
    );

    // (a) Mid-batch: the only stream reads 3 rows of its first batch of 20 (8 KB each) and goes.
    let mut quitter = raw_stream(env.proxy.port(), &env.db, "w").await;
    let quitter_id = quitter.greeting.connection_id;
    env.via_proxy(&insert_sql("w", 1, 40, 8000)).await;
    let mut read = Vec::new();
    for _ in 0..3 {
        let row = quitter
            .read_packet_timeout(secs(3.0))
            .await
            .expect("a row of the first batch");
        read.push(row_id(&row));
    }
    quitter.abandon();
    // What it had claimed (the rows it read and those still on their way) may be sent again
    // only after each claim's window.
    let windows = open_windows(&env.states("w").await);
    let mut good = env.stream("w").await;
    let mut acker = env.proxy_conn().await;
    let mut got: Vec<Msg> = Vec::new();
    let deadline = Instant::now() + secs(6.0);
    while got.len() < 40 && Instant::now() < deadline {
        if let Some(m) = good.recv(secs(0.2)).await {
            ack_all(&mut acker, "w", &[m.id], "the good stream").await;
            got.push(m);
        }
    }
    let got_ids: Vec<i64> = got.iter().map(|m| m.id).collect();
    assert_each_once(
        &got_ids,
        1..=40,
        "all 40 messages, to the stream that stayed",
    );
    assert!(
        read.iter().all(|id| windows.contains_key(id)),
        "the rows the client read ({read:?}) were claimed: {windows:?}"
    );
    let early = inside_windows(&delivered("the stream that stayed", &got), &windows);
    assert!(
        early.is_empty(),
        "sent again within the window of the claim of the client that left: {early:#?}"
    );
    assert!(
        backend_gone(&env, quitter_id).await,
        "mid-batch: backend session {quitter_id} left open"
    );

    // (b) Mid-result: ~200 MB of rows, 50 packets read.
    let mut quitter = RawConn::connect(env.proxy.port(), "root", "", Some(&env.db))
        .await
        .expect("raw connect");
    let quitter_id = quitter.greeting.connection_id;
    quitter
        .send_command(
            raw::COM_QUERY,
            b"SELECT seq, REPEAT('x', 1000) FROM seq_1_to_200000",
        )
        .await
        .expect("send");
    for _ in 0..50 {
        quitter
            .read_packet_timeout(secs(10.0))
            .await
            .expect("first packets of the result");
    }
    quitter.abandon();
    assert!(
        backend_gone(&env, quitter_id).await,
        "mid-result: backend session {quitter_id} left open"
    );

    // (c) Mid-LOAD DATA: under autocommit, and inside a transaction that inserted a row first.
    for in_transaction in [false, true] {
        let mut quitter = RawConn::connect(env.proxy.port(), "root", "", Some(&env.db))
            .await
            .expect("raw connect");
        let quitter_id = quitter.greeting.connection_id;
        if in_transaction {
            quitter
                .query("START TRANSACTION")
                .await
                .expect("START TRANSACTION");
            quitter
                .query("INSERT INTO ld VALUES (0, 'before the LOAD DATA')")
                .await
                .expect("insert");
        }
        quitter
            .send_command(
                raw::COM_QUERY,
                b"LOAD DATA LOCAL INFILE 'rows.csv' INTO TABLE ld FIELDS TERMINATED BY ','",
            )
            .await
            .expect("send LOAD DATA");
        let request = quitter
            .read_packet_timeout(secs(5.0))
            .await
            .expect("the LOCAL INFILE request");
        assert_eq!(
            request.first(),
            Some(&0xfb),
            "LOCAL INFILE request: {request:02x?}"
        );
        // Four packets of ~64 KB of rows, then a packet header announcing 64 KB followed by
        // only 1 KB of it, then the socket closes.
        let mut id = 1;
        for _ in 0..4 {
            let mut chunk = Vec::new();
            while chunk.len() < 64 * 1024 {
                chunk.extend_from_slice(format!("{id},row {id}\n").as_bytes());
                id += 1;
            }
            quitter.write_packet(&chunk).await.expect("file data");
        }
        // Sequence ids: the request was 1, the four packets 2..=5.
        let mut cut = vec![0x00, 0x00, 0x01, 6];
        cut.extend(std::iter::repeat_n(b'9', 1024));
        quitter.write_raw(&cut).await.expect("a cut packet");
        // The scenario: the cut packet arrives on its own, then the client vanishes.
        tokio::time::sleep(secs(0.1)).await;
        quitter.abandon();
        assert!(
            backend_gone(&env, quitter_id).await,
            "mid-LOAD DATA (in a transaction: {in_transaction}): backend session {quitter_id} left open"
        );
        let rows: Option<i64> = crate::support::direct_scalar(
            env.server,
            &format!("SELECT COUNT(*) FROM `{}`.ld", env.db),
        )
        .await;
        assert_eq!(
            rows,
            Some(0),
            "an abandoned LOAD DATA (in a transaction: {in_transaction}, {} rows sent) left rows \
             behind",
            id - 1
        );
    }

    // The others were served all along, and are still.
    let one: Option<i64> = bystander.query_first("SELECT 1").await.expect("bystander");
    assert_eq!(one, Some(1));
    let mut fresh = env.proxy_conn().await;
    let one: Option<i64> = fresh.query_first("SELECT 1").await.expect("new session");
    assert_eq!(one, Some(1));
    drop(fresh);
    env.via_proxy(&insert_sql("w", 41, 41, 10)).await;
    assert_eq!(good.recv(secs(2.0)).await.map(|m| m.id), Some(41));
    ack_all(&mut acker, "w", &[41], "the good stream").await;
    // Back to where it was: the bystander and the two sessions opened since (stream, acker).
    let settled = eventually(10, async || sessions(&env).await.0 == base_in_db + 2).await;
    let (in_db, threads) = sessions(&env).await;
    eprintln!(
        "backend sessions of the test database: {base_in_db} before, {in_db} after (+ the good \
         stream and its acker); Threads_connected {base_threads} before, {threads} after"
    );
    assert!(
        settled,
        "backend sessions of {}: {base_in_db} before, {in_db} after; expected {} (the stream and \
         the acker were opened since)",
        env.db,
        base_in_db + 2
    );
    env.proxy.assert_alive();
    drop(good);
    env.server.stop();
}
