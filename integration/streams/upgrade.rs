//! A groups table of the previous version (without `resume_server`, `resume_gtid`,
//! `done_gtid`): the proxy adds the columns, a group saved in the old form resumes at its file
//! and offset on the server in use, and is then saved with the server and its GTID state.

use std::collections::BTreeSet;

use mysql_async::prelude::Queryable;

use super::*;
use crate::support::MariaDb;

/// The table as the previous version created it.
const OLD_TABLE: &str = "CREATE TABLE evs_upgrade.groups_v1 (\
   table_schema VARCHAR(64) NOT NULL, table_name VARCHAR(64) NOT NULL, \
   group_name VARBINARY(255) NOT NULL, filter TEXT NOT NULL, floor BIGINT UNSIGNED NOT NULL, \
   resume_file VARCHAR(512) NOT NULL, resume_pos BIGINT UNSIGNED NOT NULL, \
   acked MEDIUMTEXT NOT NULL, owner VARCHAR(255) NULL, lease_until DATETIME(3) NULL, \
   created_at DATETIME(6) NOT NULL DEFAULT NOW(6), updated_at DATETIME(6) NOT NULL DEFAULT NOW(6), \
   PRIMARY KEY (table_schema, table_name, group_name)\
 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

#[tokio::test]
async fn a_groups_table_of_the_previous_version_is_upgraded_and_its_groups_resume() {
    let server = MariaDb::shared();
    let env = Env::on_url(
        server,
        "evs_upgrade",
        &server.backend_url(),
        &["--stream-groups-table", "evs_upgrade.groups_v1"],
    )
    .await;
    env.ddl(&orders_events(",ack_wait=60")).await;
    let before = insert_direct(&env, 5, 5, "before").await;
    // A group the previous version saved after those five, in its table (no proxy has touched
    // it yet: the table is created when the first group statement comes).
    let mut direct = env.direct_conn().await;
    direct.query_drop(OLD_TABLE).await.expect("the old table");
    let (file, pos): (String, u64) = direct
        .query_first::<mysql_async::Row, _>("SHOW MASTER STATUS")
        .await
        .expect("SHOW MASTER STATUS")
        .map(|mut r| (r.take(0).unwrap(), r.take(1).unwrap()))
        .expect("the binlog is on");
    direct
        .exec_drop(
            "INSERT INTO evs_upgrade.groups_v1 (table_schema, table_name, group_name, filter, floor, \
             resume_file, resume_pos, acked) VALUES ('evs_upgrade', 'orders_events', 'old', '', 0, ?, ?, '')",
            (file.as_str(), pos),
        )
        .await
        .expect("the old group's row");
    let after = insert_direct(&env, 7, 3, "after").await;

    let mut s = stream(&env, "* FROM orders_events GROUP 'old'").await;
    let got = s.recv_n(7, secs(30)).await;
    let rows: BTreeSet<i64> = row_ids(&got).into_iter().collect();
    assert_eq!(
        rows,
        after.iter().copied().collect(),
        "the old group goes on from its saved file and offset (not {before:?})"
    );
    s.expect_quiet(secs(1), "nothing before the saved position")
        .await;

    // The new columns are there, and the group's row names its server and GTID state.
    let columns: Vec<String> = direct
        .query("SHOW COLUMNS FROM evs_upgrade.groups_v1")
        .await
        .expect("SHOW COLUMNS")
        .into_iter()
        .map(|mut r: mysql_async::Row| r.take::<String, _>(0).unwrap())
        .collect();
    for c in ["resume_server", "resume_gtid", "done_gtid"] {
        assert!(columns.iter().any(|x| x == c), "{c} missing: {columns:?}");
    }
    let mut c = env.proxy_conn().await;
    ack(
        &mut c,
        "orders_events",
        "old",
        &crate::messaging::harness::ids(&got),
    )
    .await;
    let anchored = crate::support::eventually(30, async || {
        let row: Option<(Option<String>, Option<String>, Option<String>)> = direct
            .query_first(
                "SELECT resume_server, resume_gtid, done_gtid FROM evs_upgrade.groups_v1 \
                 WHERE group_name = 'old'",
            )
            .await
            .ok()
            .flatten();
        matches!(row, Some((Some(_), Some(g), Some(_))) if !g.is_empty())
    })
    .await;
    assert!(
        anchored,
        "the group was not saved with its server, GTID state and done transaction within 30 s\n{}",
        env.log()
    );
    // SHOW STREAM GROUPS says where it resumes.
    let shown: Vec<mysql_async::Row> = c
        .query("SHOW STREAM GROUPS")
        .await
        .expect("SHOW STREAM GROUPS");
    let resume_from: Vec<String> = shown
        .into_iter()
        .map(|r| r.get::<String, _>("Resume_from").unwrap_or_default())
        .collect();
    assert!(
        resume_from
            .iter()
            .any(|r| r.contains(" on ") && r.contains("gtid ")),
        "{resume_from:?}"
    );
    s.close();
}
