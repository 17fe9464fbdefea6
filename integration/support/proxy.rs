//! The proxy under test, as a child process with its stderr kept in a file.
//!
//! `MSGPROXY_BIN=/path/to/msgproxy` tests that binary instead of cargo's build of this package.
//!
//! Setting `MSGPROXY_INTEG_STANDIN=1` replaces the binary with an in-process TCP byte forwarder.
//! That is only for checking the suite itself (a perfect relay must pass every comparison test);
//! tests of the proxy's own behaviour (users, backend errors, logs) fail under it by design.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::process;

enum Runner {
    Process(Mutex<Child>),
    StandIn(Arc<AtomicBool>),
}

/// A running proxy; killed on drop.
pub struct Proxy {
    port: u16,
    runner: Runner,
    dir: tempfile::TempDir,
    /// What it was started with, for [`Proxy::restart`].
    backend_url: String,
    extra_args: Vec<String>,
    config: Option<PathBuf>,
    envs: Vec<(String, String)>,
}

/// The binary under test: cargo's build of it, or `MSGPROXY_BIN` (e.g. a release build).
pub fn binary() -> std::ffi::OsString {
    std::env::var_os("MSGPROXY_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_msgproxy").into())
}

fn standin_requested() -> bool {
    std::env::var("MSGPROXY_INTEG_STANDIN").is_ok_and(|v| v == "1")
}

impl Proxy {
    /// Starts `msgproxy --listen 127.0.0.1:<free port> --backend <backend_url> [--config FILE]
    /// <extra_args>` and waits until its port accepts connections.
    pub fn start(backend_url: &str, extra_args: &[&str], config_toml: Option<&str>) -> Proxy {
        Proxy::start_with_env(backend_url, extra_args, config_toml, &[])
    }

    /// Like [`Proxy::start`], with environment variables set for the proxy process (e.g.
    /// `MSGPROXY_LOG=trace`).
    pub fn start_with_env(
        backend_url: &str,
        extra_args: &[&str],
        config_toml: Option<&str>,
        envs: &[(&str, &str)],
    ) -> Proxy {
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let dir = tempfile::Builder::new()
            .prefix("msgproxy-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("create a proxy dir");
        if standin_requested() {
            return Proxy::start_standin(backend_url, dir);
        }
        let config = config_toml.map(|toml| {
            let path = dir.path().join("msgproxy.toml");
            fs::write(&path, toml).expect("write proxy config");
            path
        });
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = process::free_port();
            let extra: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
            // A fresh log per attempt (spawn appends, so that a restart keeps the log).
            let _ = fs::remove_file(dir.path().join("stderr.log"));
            let failure = match spawn(port, backend_url, &extra, config.as_deref(), &envs, &dir) {
                Ok(child) => {
                    return Proxy {
                        port,
                        runner: Runner::Process(Mutex::new(child)),
                        dir,
                        backend_url: backend_url.to_string(),
                        extra_args: extra,
                        config,
                        envs,
                    }
                }
                Err(failure) => failure,
            };
            let log = process::tail(&dir.path().join("stderr.log"), 8000);
            // Another process may have taken the port between free_port() and the bind.
            if attempt < 3 && log.to_lowercase().contains("in use") {
                continue;
            }
            panic!(
                "{failure}; listen 127.0.0.1:{port}, backend {backend_url}, args {extra_args:?}, \
                 config {config_toml:?}\n--- msgproxy stderr ---\n{log}"
            );
        }
    }

    /// SIGKILL: the proxy vanishes mid-whatever, like a crash (its sockets are closed by the
    /// kernel). [`Proxy::restart`] brings it back.
    pub fn kill(&self) {
        if let Runner::Process(child) = &self.runner {
            process::kill_hard(&mut child.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// Starts the proxy again on the same port with the same arguments (killing it first if it
    /// still runs); its log goes on in the same file. Waits until the port accepts connections.
    pub fn restart(&self) {
        let Runner::Process(child) = &self.runner else {
            panic!("Proxy::restart is not supported by the stand-in");
        };
        let mut child = child.lock().unwrap_or_else(|e| e.into_inner());
        process::kill_hard(&mut child);
        match spawn(
            self.port,
            &self.backend_url,
            &self.extra_args,
            self.config.as_deref(),
            &self.envs,
            &self.dir,
        ) {
            Ok(new) => *child = new,
            Err(failure) => panic!(
                "restarting msgproxy on port {}: {failure}\n--- msgproxy stderr ---\n{}",
                self.port,
                self.log()
            ),
        }
    }

    /// The process id (for /proc), `None` for the stand-in.
    pub fn pid(&self) -> Option<u32> {
        match &self.runner {
            Runner::Process(child) => Some(child.lock().unwrap_or_else(|e| e.into_inner()).id()),
            Runner::StandIn(_) => None,
        }
    }

    /// The process's resident memory now and at its peak (`VmRSS`, `VmHWM` from
    /// /proc/PID/status), in KiB.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line[name.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        };
        Some((field("VmRSS:")?, field("VmHWM:")?))
    }

    fn start_standin(backend_url: &str, dir: tempfile::TempDir) -> Proxy {
        let backend_port: u16 = backend_url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .expect("backend url with a port");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind stand-in");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        std::thread::spawn(move || forward(client, backend_port));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => break,
                }
            }
        });
        fs::write(dir.path().join("stderr.log"), "").expect("stand-in log");
        Proxy {
            port,
            runner: Runner::StandIn(stop),
            dir,
            backend_url: backend_url.to_string(),
            extra_args: Vec::new(),
            config: None,
            envs: Vec::new(),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Everything the proxy wrote to stderr so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("stderr.log")
    }

    /// Whether the proxy process is still running.
    pub fn is_alive(&self) -> bool {
        match &self.runner {
            Runner::Process(child) => matches!(
                child.lock().unwrap_or_else(|e| e.into_inner()).try_wait(),
                Ok(None)
            ),
            Runner::StandIn(_) => true,
        }
    }

    /// Panics (with the proxy's log) unless the process is still running.
    pub fn assert_alive(&self) {
        assert!(
            self.is_alive(),
            "msgproxy died; its stderr:\n{}",
            self.log()
        );
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        match &self.runner {
            Runner::Process(child) => {
                process::kill_hard(&mut child.lock().unwrap_or_else(|e| e.into_inner()))
            }
            Runner::StandIn(stop) => stop.store(true, Ordering::Relaxed),
        }
    }
}

/// Starts `msgproxy --listen 127.0.0.1:<port> --backend <backend_url> [--config FILE]
/// <extra_args>` in `dir` (stderr appended to `dir/stderr.log`) and waits until the port accepts
/// connections; on failure, says why (the caller adds the log).
fn spawn(
    port: u16,
    backend_url: &str,
    extra_args: &[String],
    config: Option<&std::path::Path>,
    envs: &[(String, String)],
    dir: &tempfile::TempDir,
) -> Result<Child, String> {
    let stderr = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("stderr.log"))
        .expect("proxy log file");
    let mut cmd = Command::new(binary());
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--backend")
        .arg(backend_url);
    if let Some(path) = config {
        cmd.arg("--config").arg(path);
    }
    cmd.args(extra_args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let mut child = process::spawn_owned(cmd, libc::SIGKILL).expect("spawn the msgproxy binary");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("msgproxy exited early ({status})"));
        }
        if process::port_accepts(port) {
            return Ok(child);
        }
        if Instant::now() > deadline {
            process::kill_hard(&mut child);
            return Err("msgproxy did not accept connections within 15 s".to_string());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The stand-in's whole job: copy bytes both ways until either side closes.
fn forward(client: TcpStream, backend_port: u16) {
    let Ok(backend) = TcpStream::connect((Ipv4Addr::LOCALHOST, backend_port)) else {
        return;
    };
    let (Ok(mut c2), Ok(mut b2)) = (client.try_clone(), backend.try_clone()) else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        let mut client = client;
        let mut backend = backend;
        let _ = io::copy(&mut client, &mut backend);
        let _ = backend.shutdown(Shutdown::Both);
        let _ = client.shutdown(Shutdown::Both);
    });
    let _ = io::copy(&mut b2, &mut c2);
    let _ = c2.shutdown(Shutdown::Both);
    let _ = b2.shutdown(Shutdown::Both);
    let _ = upstream.join();
}
