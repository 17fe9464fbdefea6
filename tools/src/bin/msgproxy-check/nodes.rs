//! The database servers of a `--cluster` run: a 3-node Galera cluster, or a primary with one
//! asynchronous replica, all on loopback ports in the work dir.
//!
//! They are started, stopped, killed and promoted through scripts/mariadb-cluster.sh (the same
//! steps a user runs by hand, docs/CLUSTERS.md). [`start`] is the one place that knows how a
//! cluster comes up, so that it can be re-pointed at a library harness later; the rest only
//! asks for node `i` to go down or come back.

use std::fmt;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::wire::Target;

/// Which cluster `--cluster` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Three Galera nodes: every node writable, synchronous replication.
    Galera,
    /// A primary and one read-only GTID replica (asynchronous replication).
    Replica,
}

impl Topology {
    pub fn parse(s: &str) -> Result<Topology, String> {
        match s {
            "galera" => Ok(Topology::Galera),
            "replica" => Ok(Topology::Replica),
            _ => Err(format!("{s:?}: the clusters are galera and replica")),
        }
    }

    /// How many servers it has.
    pub fn nodes(self) -> usize {
        match self {
            Topology::Galera => 3,
            Topology::Replica => 2,
        }
    }

    /// The script's first argument.
    fn kind(self) -> &'static str {
        match self {
            Topology::Galera => "galera",
            Topology::Replica => "replica",
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// A running cluster. Dropping it stops every server (the data stays in the work dir).
pub struct Nodes {
    pub topology: Topology,
    script: PathBuf,
    /// The script's `--dir`: node `i` (from 1) lives in `<dir>/n<i>`.
    dir: PathBuf,
    /// The script's `--port`: node `i` (from 0 here) answers clients on `base_port + i`.
    base_port: u16,
    /// Node `i`'s client address, with the checker's database.
    targets: Vec<Target>,
    /// Whether node `i` runs (as far as the checker did anything to it).
    up: Vec<bool>,
    /// Replica runs: the replica was promoted (it is the primary now, the old one is gone).
    promoted: bool,
    /// Everything the script printed, for a failed run's post-mortem.
    log: PathBuf,
    stopped: bool,
}

/// Starts a cluster of `topology` under `work` (data in `<work>/<topology>`), on free loopback
/// ports, and returns it once every node answers (Galera: every node Synced).
pub fn start(topology: Topology, work: &Path, db: &str) -> Result<Nodes, String> {
    let dir = work.join(topology.kind());
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    // As root the script runs the servers as `mysql`, which must be able to reach the data dir.
    for d in [work, dir.as_path()] {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
    }
    let base_port = free_port_block(topology)?;
    let targets = (0..topology.nodes())
        .map(|i| Target {
            host: "127.0.0.1".into(),
            port: base_port + i as u16,
            user: "root".into(),
            password: String::new(),
            db: db.to_string(),
            socket: None,
        })
        .collect();
    let mut nodes = Nodes {
        topology,
        script: script_path(),
        dir,
        base_port,
        targets,
        up: vec![false; topology.nodes()],
        promoted: false,
        log: work.join(format!("{}-script.log", topology.kind())),
        stopped: false,
    };
    nodes.run(&["start"])?;
    nodes.up.fill(true);
    Ok(nodes)
}

/// scripts/mariadb-cluster.sh of the repository this checker was built from, or
/// `$MSGPROXY_CLUSTER_SCRIPT`.
fn script_path() -> PathBuf {
    std::env::var_os("MSGPROXY_CLUSTER_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mariadb-cluster.sh")
        })
}

/// A base port `P` whose whole block is free: the script uses P.. for clients and, for Galera,
/// P+10.., P+20.. and P+30.. for replication, IST and SST. Below the kernel's ephemeral range, so
/// that a node restarting on its port does not find it taken by some outgoing connection.
fn free_port_block(topology: Topology) -> Result<u16, String> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (from, to) = (
        low.saturating_sub(12000).max(1024),
        low.saturating_sub(40).max(1100),
    );
    let offsets: Vec<u16> = match topology {
        Topology::Galera => (0..4)
            .flat_map(|k| (0..3).map(move |i| k * 10 + i))
            .collect(),
        Topology::Replica => vec![0, 1],
    };
    for _ in 0..200 {
        let base = rand::random_range(from..to);
        if offsets
            .iter()
            .all(|o| TcpListener::bind((Ipv4Addr::LOCALHOST, base + o)).is_ok())
        {
            return Ok(base);
        }
    }
    Err("no free block of ports for the cluster".into())
}

impl Nodes {
    /// Node `i`'s client address (from 0).
    pub fn target(&self, i: usize) -> &Target {
        &self.targets[i]
    }

    /// Every node, in order.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The data directory the script was given (node `i` in `n<i>`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether node `i` runs.
    pub fn is_up(&self, i: usize) -> bool {
        self.up[i]
    }

    /// The server to write to straight (the direct producer, the final checks): Galera's first
    /// running node; the primary, or after a failover the promoted replica.
    pub fn writable(&self) -> Target {
        match self.topology {
            Topology::Galera => {
                let i = (0..self.up.len()).find(|&i| self.up[i]).unwrap_or(0);
                self.targets[i].clone()
            }
            Topology::Replica if self.promoted => self.targets[1].clone(),
            Topology::Replica => self.targets[0].clone(),
        }
    }

    /// `--backend` for the proxy that should prefer node `first`: every node, that one first.
    /// Replica runs always list the primary first (msgproxy never writes to a read-only server).
    pub fn backend_for(&self, first: usize) -> String {
        let n = self.targets.len();
        let first = match self.topology {
            Topology::Galera => first % n,
            Topology::Replica => 0,
        };
        (0..n)
            .map(|k| self.targets[(first + k) % n].url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The nodes that should run but whose server process is gone (died on its own: a Galera
    /// node that aborted, say). Read from the script's pid files, `n<i>/mariadbd.pid`.
    pub fn dead(&self) -> Vec<usize> {
        (0..self.up.len())
            .filter(|&i| self.up[i])
            .filter(|&i| {
                let pid_file = self.dir.join(format!("n{}/mariadbd.pid", i + 1));
                match std::fs::read_to_string(pid_file) {
                    Ok(pid) => !Path::new(&format!("/proc/{}", pid.trim())).exists(),
                    // A server that is starting may not have written it yet.
                    Err(_) => false,
                }
            })
            .collect()
    }

    /// Galera: SIGKILLs node `i` (from 0).
    pub fn kill_node(&mut self, i: usize) -> Result<(), String> {
        self.run(&["kill", &(i + 1).to_string()])?;
        self.up[i] = false;
        Ok(())
    }

    /// Galera: stops node `i` cleanly.
    pub fn stop_node(&mut self, i: usize) -> Result<(), String> {
        self.run(&["stop-node", &(i + 1).to_string()])?;
        self.up[i] = false;
        Ok(())
    }

    /// Galera: starts node `i` again and waits until it has rejoined (Synced).
    pub fn start_node(&mut self, i: usize) -> Result<(), String> {
        self.run(&["start-node", &(i + 1).to_string()])?;
        self.up[i] = true;
        Ok(())
    }

    /// Replica: SIGKILLs the primary (the script has no `kill` for replica clusters; its pid file
    /// is `n1/mariadbd.pid`) and waits until it is gone.
    pub fn kill_primary(&mut self) -> Result<(), String> {
        let pid_file = self.dir.join("n1/mariadbd.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("read {}: {e}", pid_file.display()))?;
        let pid = pid.trim();
        let status = Command::new("kill")
            .args(["-KILL", pid])
            .status()
            .map_err(|e| format!("kill: {e}"))?;
        if !status.success() {
            return Err(format!("kill -KILL {pid} (the primary) failed"));
        }
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while proc.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.up[0] = false;
        Ok(())
    }

    /// Replica: what a failover tool does once the primary is gone (stop replicating, read_only
    /// off). The old primary stays down: it is fenced.
    pub fn promote(&mut self) -> Result<(), String> {
        self.run(&["promote"])?;
        self.promoted = true;
        Ok(())
    }

    /// Stops every server (cleanly; the script waits up to a minute each).
    pub fn stop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            if let Err(e) = self.run(&["stop"]) {
                eprintln!(
                    "msgproxy-check: stopping the {} cluster: {e}",
                    self.topology
                );
            }
        }
    }

    /// Runs `mariadb-cluster.sh <kind> <args> --dir DIR --port P`, appending its output to the
    /// log; an error carries the output's tail.
    fn run(&self, args: &[&str]) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        let err_log = log
            .try_clone()
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        let status = Command::new("bash")
            .arg(&self.script)
            .arg(self.topology.kind())
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .arg("--port")
            .arg(self.base_port.to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .status()
            .map_err(|e| format!("cannot run {}: {e}", self.script.display()))?;
        if status.success() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        Err(format!(
            "mariadb-cluster.sh {} {} failed ({status}):\n{}",
            self.topology.kind(),
            args.join(" "),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(topology: Topology) -> Nodes {
        let n = topology.nodes();
        Nodes {
            topology,
            script: PathBuf::new(),
            dir: PathBuf::new(),
            base_port: 20000,
            targets: (0..n)
                .map(|i| Target {
                    host: "127.0.0.1".into(),
                    port: 20000 + i as u16,
                    user: "root".into(),
                    password: String::new(),
                    db: "msgcheck".into(),
                    socket: None,
                })
                .collect(),
            up: vec![true; n],
            promoted: false,
            log: PathBuf::new(),
            // Nothing to stop: dropping it must not run a script.
            stopped: true,
        }
    }

    #[test]
    fn topologies_parse() {
        assert_eq!(Topology::parse("galera"), Ok(Topology::Galera));
        assert_eq!(Topology::parse("replica"), Ok(Topology::Replica));
        assert!(Topology::parse("sharded").unwrap_err().contains("galera"));
    }

    #[test]
    fn each_galera_proxy_lists_its_own_node_first() {
        let n = nodes(Topology::Galera);
        let ports = |b: String| -> Vec<String> {
            b.split(',')
                .map(|u| u.split(':').nth(2).unwrap_or("").to_string())
                .collect()
        };
        assert_eq!(
            ports(n.backend_for(1)),
            ["20001/msgcheck", "20002/msgcheck", "20000/msgcheck"]
        );
        assert_eq!(ports(n.backend_for(3))[0], "20000/msgcheck");
        let r = nodes(Topology::Replica);
        assert_eq!(
            ports(r.backend_for(1)),
            ["20000/msgcheck", "20001/msgcheck"]
        );
    }

    #[test]
    fn the_writable_server_follows_kills_and_the_failover() {
        let mut g = nodes(Topology::Galera);
        g.up[0] = false;
        assert_eq!(g.writable().port, 20001);
        let mut r = nodes(Topology::Replica);
        assert_eq!(r.writable().port, 20000);
        r.promoted = true;
        assert_eq!(r.writable().port, 20001);
    }
}
