//! The processes under test and the faults done to them: a throwaway MariaDB (or `--backend`, or
//! a `--cluster` of servers, `nodes`) and the msgproxy processes in front of it.
//!
//! Everything restarts on the port it had, so clients keep their targets and simply reconnect.
//! Processes are spawned from the main thread only: they get SIGKILL when the spawning thread
//! exits (`PR_SET_PDEATHSIG` in `servers::spawn_owned`), and the main thread lives as long as the
//! run.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::nodes::{self, Nodes, Topology};
use crate::servers::{self, Owned, ServerSettings};
use crate::wire::Target;

/// A msgproxy process and the port it always listens on.
pub struct ProxyProc {
    pub port: u16,
    process: Option<Owned>,
    starts: u32,
}

/// The throwaway server (absent with `--backend`).
struct Server {
    process: Option<Owned>,
    starts: u32,
    settings: ServerSettings,
}

pub struct Cluster {
    work: PathBuf,
    /// The server, straight (under `--cluster`: the one to write to, which moves at a failover).
    pub direct: Target,
    server: Option<Server>,
    /// Under `--cluster`: the servers, which the proxies all list.
    pub nodes: Option<Nodes>,
    proxy_bin: PathBuf,
    pub proxies: Vec<ProxyProc>,
}

impl Cluster {
    /// Starts the throwaway server (unless `backend` is given); the proxies come later, once the
    /// database exists ([`Cluster::start_proxies`]).
    pub fn start_server(
        work: &Path,
        backend: Option<&str>,
        db: &str,
        proxy_bin: PathBuf,
    ) -> Result<Cluster, String> {
        let settings = ServerSettings {
            buffer_pool: "128M".into(),
            // Durable commits: an INSERT or ACK that got its OK must survive a SIGKILLed server.
            flush_log_at_trx_commit: 1,
            sync_binlog: 1,
            log_file_size: "64M".into(),
            extra_args: Vec::new(),
            cpus: None,
        };
        let (server, direct) = match backend {
            Some(url) => (None, Target::parse(url)?),
            None => {
                servers::install_mariadb(work, &settings)?;
                let mut last_err = String::new();
                let mut started = None;
                for _ in 0..3 {
                    let port = stable_port()?;
                    match servers::launch_mariadb(work, &settings, port, "mariadbd-1.log") {
                        Ok(p) => {
                            started = Some((p, port));
                            break;
                        }
                        Err(e) => last_err = e,
                    }
                }
                let (process, port) = started.ok_or(last_err)?;
                let target = Target {
                    host: "127.0.0.1".into(),
                    port,
                    user: "root".into(),
                    password: String::new(),
                    db: db.to_string(),
                    socket: None,
                };
                let server = Server {
                    process: Some(process),
                    starts: 1,
                    settings,
                };
                (Some(server), target)
            }
        };
        let direct = Target {
            db: if direct.db.is_empty() || server.is_some() {
                db.to_string()
            } else {
                direct.db
            },
            ..direct
        };
        Ok(Cluster {
            work: work.to_path_buf(),
            direct,
            server,
            nodes: None,
            proxy_bin,
            proxies: Vec::new(),
        })
    }

    /// Starts a cluster of `topology` (`--cluster`); the proxies come later, as with one server.
    pub fn start_nodes(
        work: &Path,
        topology: Topology,
        db: &str,
        proxy_bin: PathBuf,
    ) -> Result<Cluster, String> {
        let nodes = nodes::start(topology, work, db)?;
        Ok(Cluster {
            work: work.to_path_buf(),
            direct: nodes.writable(),
            server: None,
            nodes: Some(nodes),
            proxy_bin,
            proxies: Vec::new(),
        })
    }

    /// A server to `KILL` a connection on, chosen by `pick`: under `--cluster` any running
    /// node, else the one server.
    pub fn any_server(&self, pick: u64) -> Target {
        match &self.nodes {
            Some(n) => {
                let up: Vec<usize> = (0..n.targets().len()).filter(|&i| n.is_up(i)).collect();
                match up.get((pick / 7 % up.len().max(1) as u64) as usize) {
                    Some(&i) => n.target(i).clone(),
                    None => self.direct.clone(),
                }
            }
            None => self.direct.clone(),
        }
    }

    /// Node `i` down (killed or stopped cleanly) and, after `down`, back in the cluster.
    pub fn bounce_node(
        &mut self,
        i: usize,
        crash: bool,
        down: Duration,
    ) -> Result<Duration, String> {
        let Some(nodes) = &mut self.nodes else {
            return Ok(Duration::ZERO);
        };
        if crash {
            nodes.kill_node(i)?;
        } else {
            nodes.stop_node(i)?;
        }
        std::thread::sleep(down);
        let t = Instant::now();
        nodes.start_node(i)?;
        self.direct = nodes.writable();
        Ok(t.elapsed())
    }

    /// Replica runs: SIGKILL the primary and, after `detect` (a failover tool noticing),
    /// promote the replica; the direct clients' target moves to it. Returns when the promotion
    /// began: before it no write could commit on the replica, so every OK a client saw earlier
    /// came from the old primary.
    pub fn fail_over(&mut self, detect: Duration) -> Result<Instant, String> {
        let Some(nodes) = &mut self.nodes else {
            return Ok(Instant::now());
        };
        nodes.kill_primary()?;
        std::thread::sleep(detect);
        let promoting = Instant::now();
        nodes.promote()?;
        self.direct = nodes.writable();
        Ok(promoting)
    }

    /// Whether the checker owns the server (and may restart it).
    pub fn owns_server(&self) -> bool {
        self.server.is_some()
    }

    pub fn start_proxies(&mut self, count: usize) -> Result<(), String> {
        for i in 0..count {
            let port = stable_port()?;
            self.proxies.push(ProxyProc {
                port,
                process: None,
                starts: 0,
            });
            self.start_proxy(i)?;
        }
        Ok(())
    }

    pub fn proxy_target(&self, i: usize) -> Target {
        self.direct.with_port(self.proxies[i].port)
    }

    /// SIGKILLs proxy `i` and waits until it is gone.
    pub fn kill_proxy(&mut self, i: usize) {
        if let Some(mut p) = self.proxies[i].process.take() {
            sigkill(&mut p);
        }
    }

    /// Starts proxy `i` on its port (again). The port was free a moment ago; should another
    /// process have taken it meanwhile, this fails after a few tries.
    pub fn start_proxy(&mut self, i: usize) -> Result<(), String> {
        let p = &mut self.proxies[i];
        p.starts += 1;
        let log = std::env::var("MSGPROXY_LOG").unwrap_or_else(|_| "warn".into());
        let backend = match &self.nodes {
            Some(nodes) => nodes.backend_for(i),
            None => self.direct.url(),
        };
        let config = servers::proxy_users_config(
            &self.direct.url(),
            &self.work,
            &proxy_name(i).to_string(),
        )?;
        let mut last_err = String::new();
        for _ in 0..5 {
            let mut cmd = Command::new(&self.proxy_bin);
            cmd.arg("--listen")
                .arg(format!("127.0.0.1:{}", p.port))
                .arg("--backend")
                .arg(&backend)
                .current_dir(&self.work)
                .env("MSGPROXY_LOG", &log);
            if let Some(config) = &config {
                cmd.arg("--config").arg(config);
            }
            let log_file = self
                .work
                .join(format!("msgproxy-{}-{}.log", proxy_name(i), p.starts));
            let mut process = servers::spawn_owned(cmd, log_file)?;
            match servers::wait_for_greeting(
                &mut process,
                p.port,
                "msgproxy",
                Duration::from_secs(20),
            ) {
                Ok(()) => {
                    p.process = Some(process);
                    return Ok(());
                }
                Err(e) => last_err = e,
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(last_err)
    }

    /// Stops the server (cleanly, or with SIGKILL) and starts it again on the same port and data.
    pub fn restart_server(&mut self, crash: bool) -> Result<(), String> {
        let Some(server) = &mut self.server else {
            return Ok(());
        };
        if let Some(mut p) = server.process.take() {
            if crash {
                sigkill(&mut p);
            } else {
                // Long grace: a clean shutdown that gets SIGKILLed is a different fault.
                p.stop(Duration::from_secs(60));
            }
        }
        server.starts += 1;
        let mut last_err = String::new();
        for _ in 0..5 {
            let log = format!("mariadbd-{}.log", server.starts);
            match servers::launch_mariadb(&self.work, &server.settings, self.direct.port, &log) {
                Ok(p) => {
                    server.process = Some(p);
                    return Ok(());
                }
                Err(e) => last_err = e,
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(format!("cannot restart the server: {last_err}"))
    }

    /// Whether every process the checker started is running.
    pub fn check_alive(&mut self) -> Result<(), String> {
        if let Some(Server {
            process: Some(p), ..
        }) = &mut self.server
        {
            if !p.alive() {
                return Err(format!("the server died:\n{}", p.log_tail()));
            }
        }
        if let Some(nodes) = &self.nodes {
            if let Some(i) = nodes.dead().first() {
                return Err(format!(
                    "{} node {} died on its own (its log: {}/n{}/mariadbd.err)",
                    nodes.topology,
                    i + 1,
                    nodes.dir().display(),
                    i + 1
                ));
            }
        }
        for (i, proxy) in self.proxies.iter_mut().enumerate() {
            if let Some(p) = &mut proxy.process {
                if !p.alive() {
                    return Err(format!(
                        "msgproxy {} died on its own:\n{}",
                        proxy_name(i),
                        p.log_tail()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Starts again whatever died on its own (after [`Cluster::check_alive`] said so).
    pub fn revive(&mut self) -> Result<(), String> {
        let server_dead = match &mut self.server {
            Some(Server {
                process: Some(p), ..
            }) => !p.alive(),
            _ => false,
        };
        if server_dead {
            self.restart_server(true)?;
        }
        if let Some(nodes) = &mut self.nodes {
            for i in nodes.dead() {
                match nodes.topology {
                    Topology::Galera => nodes.start_node(i)?,
                    // A replica run has no way back for a dead server: the run cannot go on.
                    Topology::Replica => {
                        return Err(format!("server {} of the replica cluster died", i + 1))
                    }
                }
            }
            self.direct = nodes.writable();
        }
        for i in 0..self.proxies.len() {
            let dead = match &mut self.proxies[i].process {
                Some(p) => !p.alive(),
                None => false,
            };
            if dead {
                self.start_proxy(i)?;
            }
        }
        Ok(())
    }

    /// Stops the proxies (gracefully) and the server.
    pub fn stop(&mut self) {
        for p in &mut self.proxies {
            if let Some(mut process) = p.process.take() {
                process.stop(Duration::from_secs(5));
            }
        }
        if let Some(server) = &mut self.server {
            if let Some(mut process) = server.process.take() {
                process.stop(Duration::from_secs(30));
            }
        }
        if let Some(nodes) = &mut self.nodes {
            nodes.stop();
        }
    }
}

/// A free port below the kernel's ephemeral range. A process restarts on its old port, and a
/// port from the ephemeral range could meanwhile have become the local end of some outgoing
/// connection (one of ours, or anyone's), which would keep the restart from binding it.
fn stable_port() -> Result<u16, String> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| {
            r.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u16>().ok())
        })
        .unwrap_or(32768);
    let (from, to) = (low.saturating_sub(12000).max(1024), low.max(1025));
    for _ in 0..100 {
        let port = rand::random_range(from..to);
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    // An unusual port range: fall back to whatever the kernel hands out.
    servers::free_port()
}

pub fn proxy_name(i: usize) -> char {
    (b'a' + i as u8) as char
}

fn sigkill(p: &mut Owned) {
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg(p.pid().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}
