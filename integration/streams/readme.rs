//! The README's event-stream example, as written there, through the real `mariadb` client.

use super::*;
use crate::messaging::harness::value_str;
use crate::support::cli::Cli;

/// The `n`th fenced block of `lang` in the README section that starts with `heading`.
fn readme_block(heading: &str, lang: &str, n: usize) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("README has no section {heading}"));
    let fence = format!("```{lang}\n");
    section
        .split(&fence)
        .skip(1)
        .nth(n)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("README's {heading} has no block {n} of {lang}"))
        .to_owned()
}

#[tokio::test]
async fn the_readme_example_works_in_the_mariadb_client() {
    // START EARLIEST reads the binlog once from its oldest file (to find the table's last
    // creation): on the shared server that is every other test's binlog too. A server of its own.
    let env = Env::private("evs_readme").await;
    {
        let mut c = env.direct_conn().await;
        let _ = exec(&mut c, "INSTALL SONAME 'ha_blackhole'").await;
        let _ = c.disconnect().await;
    }
    let setup = readme_block("Event streams", "sql", 0);
    let out = Cli::new(env.proxy.port()).run(&[&env.db, "-e", &setup]);
    assert!(out.success(), "{out:?}\n{}", env.log());
    // The two STREAMs of the shell block, as written.
    let shell = readme_block("Event streams", "sh", 0);
    let statements: Vec<&str> = shell
        .split("-e \"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect();
    assert_eq!(statements.len(), 2, "{shell}");
    let open = |sql: &str| {
        let sql = sql.to_owned();
        let port = env.proxy.port();
        let db = env.db.clone();
        async move {
            Stream::open(port, &db, &sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        }
    };
    let mut audit = open(statements[0]).await;
    let mut shipping = open(statements[1]).await;
    let all = audit.recv_n(2, secs(20)).await;
    let topics: Vec<String> = all.iter().map(|m| value_str(&m.values[2])).collect();
    assert_eq!(topics, ["order.created", "user.profile.updated"]);
    let shipped = shipping.recv_n(1, secs(20)).await;
    assert_eq!(value_str(&shipped[0].values[1]), "1");
    assert_eq!(
        value_str(&shipped[0].values[3]),
        r#"{"order_id": 12345, "customer": "acme", "total": 99.99}"#
    );
    shipping.expect_quiet(secs(1), "only order.created").await;
    audit.close();
    shipping.close();
    // The ACK / SEEK / SHOW / DROP block runs as written (its ids are examples: acking unknown
    // ids is no error).
    let ops = readme_block("Event streams", "sql", 1);
    let out = Cli::new(env.proxy.port()).run(&[&env.db, "-e", &ops]);
    assert!(out.success(), "{out:?}\n{}", env.log());
    assert!(out.stdout.contains("audit"), "{}", out.stdout);
    env.server.stop();
}
