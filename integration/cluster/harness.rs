//! Clusters for the tests: `scripts/mariadb-cluster.sh` (the same script users run) in a
//! temporary directory, on free loopback ports, stopped when the test ends.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mysql_async::prelude::*;
use mysql_async::Conn;

use crate::support::opts;

/// Which kind of cluster (the script's first argument).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Galera,
    Replica,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Galera => "galera",
            Kind::Replica => "replica",
        }
    }

    fn nodes(self) -> u16 {
        match self {
            Kind::Galera => 3,
            Kind::Replica => 2,
        }
    }
}

/// A running cluster; stopped (and its files removed) on drop.
pub struct Servers {
    kind: Kind,
    dir: tempfile::TempDir,
    /// Node 1's client port; node I listens on `base + I - 1`.
    pub base: u16,
    /// The `--backend` value the script printed (every node, in order).
    pub backend: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mariadb-cluster.sh")
}

/// A base port whose client, Galera, IST and SST ports (base+0..3, +10, +20, +30) are all free.
fn free_base() -> u16 {
    for _ in 0..200 {
        let base = 20000 + (rand::random::<u16>() % 400) * 25;
        let ports = (0..3).flat_map(|i| [base + i, base + 10 + i, base + 20 + i, base + 30 + i]);
        let free = ports
            .into_iter()
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free block of ports for a cluster in 20000..30000");
}

/// Whether Galera can run here: galera-4 installed, or installed now (root or sudo). `Err`
/// says why not, for the skip message.
pub fn galera_available() -> Result<(), String> {
    let lib = Path::new("/usr/lib/galera/libgalera_smm.so");
    if lib.exists() {
        return Ok(());
    }
    let lib_sh = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/lib.sh");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(". {} && msgproxy_ensure_galera", lib_sh.display()))
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if lib.exists() {
        return Ok(());
    }
    Err(format!(
        "galera-4 is not installed and could not be installed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

impl Servers {
    /// Starts a cluster of `kind` (a few seconds for a replica, about 20 for Galera).
    pub fn start(kind: Kind) -> Servers {
        let dir = tempfile::Builder::new()
            .prefix("msgproxy-cluster-")
            .tempdir()
            .expect("a temporary directory");
        let base = free_base();
        let mut servers = Servers {
            kind,
            dir,
            base,
            backend: String::new(),
        };
        servers.backend = servers.run(&["start", "--port", &base.to_string()]);
        servers
    }

    /// Runs the script with `args` on this cluster; its last line of output. Panics with its
    /// messages when it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let dir = self.dir.path().display().to_string();
        let out = Command::new("bash")
            .arg(script())
            .arg(self.kind.name())
            .args(args)
            .args(["--dir", &dir])
            // The suite's template data directory: no mariadb-install-db per node.
            .env(
                "MSGPROXY_CLUSTER_TEMPLATE",
                crate::support::mariadb::template_datadir(),
            )
            .output()
            .expect("run scripts/mariadb-cluster.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "mariadb-cluster.sh {} {}: {}\n{}{}",
            self.kind.name(),
            args.join(" "),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout.lines().last().unwrap_or_default().to_string()
    }

    /// Node `i`'s client port (from 1).
    pub fn port(&self, i: u16) -> u16 {
        self.base + i - 1
    }

    /// The backend URL of node `i` alone.
    pub fn url(&self, i: u16) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port(i))
    }

    /// SIGKILLs node `i` (a crash: nothing flushed, no goodbye to the cluster).
    pub fn kill(&self, i: u16) {
        let pidfile = self.dir.path().join(format!("n{i}/mariadbd.pid"));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {}", pidfile.display()));
        // SAFETY: kill(2) with a pid read from the server's own pid file.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: signal 0 only checks that the process exists.
            unsafe { libc::kill(pid, 0) != 0 }
        });
        assert!(gone, "node {i} (pid {pid}) did not die");
    }

    /// A direct connection to node `i`.
    /// Waits until the replica (node 2) has everything the primary (node 1) has, as a failover
    /// tool would before promoting it.
    pub async fn replica_caught_up(&self) {
        let mut primary = self.direct(1).await;
        let gtid: String = scalar(&mut primary, "SELECT @@gtid_binlog_pos").await;
        drop(primary);
        let mut replica = self.direct(2).await;
        let waited: i64 = scalar(
            &mut replica,
            &format!("SELECT MASTER_GTID_WAIT('{gtid}', 30)"),
        )
        .await;
        assert_eq!(waited, 0, "the replica did not catch up with {gtid}");
    }

    pub async fn direct(&self, i: u16) -> Conn {
        Conn::new(opts(self.port(i), "root", None, Some("test")))
            .await
            .unwrap_or_else(|e| panic!("connect to node {i}: {e}"))
    }

    /// The server log of node `i`, for failure messages.
    pub fn log(&self, i: u16) -> String {
        crate::support::process::tail(&self.dir.path().join(format!("n{i}/mariadbd.err")), 3000)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let dir = self.dir.path().display().to_string();
        let _ = Command::new("bash")
            .arg(script())
            .args([self.kind.name(), "stop", "--dir", &dir])
            .output();
        let _ = self.kind.nodes();
    }
}

/// One query on `conn` that must work.
pub async fn run(conn: &mut Conn, sql: &str) {
    match tokio::time::timeout(Duration::from_secs(20), conn.query_drop(sql)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{sql}: {e}"),
        Err(_) => panic!("{sql}: no answer within 20 s"),
    }
}

/// One value from `conn`.
pub async fn scalar<T: FromValue + Send + 'static>(conn: &mut Conn, sql: &str) -> T {
    match tokio::time::timeout(Duration::from_secs(20), conn.query_first::<T, _>(sql)).await {
        Ok(Ok(Some(v))) => v,
        Ok(Ok(None)) => panic!("{sql}: no row"),
        Ok(Err(e)) => panic!("{sql}: {e}"),
        Err(_) => panic!("{sql}: no answer within 20 s"),
    }
}
