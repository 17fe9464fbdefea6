//! The processes under test: a throwaway MariaDB (or a server the user names) and msgproxy.
//! The server is msgproxy-throwaway's (throwaway/: its programs, data dir and option list, the
//! ones the integration tests and the scripts use), with the bench's settings on top.
//!
//! Both are children that die with the bench (`PR_SET_PDEATHSIG`, set in `pre_exec`), so an
//! interrupted run leaves no server behind; their files live in one work dir that is deleted at
//! the end, and work dirs of earlier runs that were killed are removed at the next start.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use msgproxy_throwaway::{launch, Programs, ServerDir};

use crate::wire::Target;

/// The bench's work dir: `$TMPDIR/msgproxy-bench-<pid>`, removed on drop.
/// A file in a work dir that is kept: later runs' clean-up of dead runs' dirs leaves it alone.
const KEPT_MARK: &str = "KEPT";

pub struct WorkDir {
    pub path: PathBuf,
    keep: bool,
}

impl WorkDir {
    pub fn create(keep: bool) -> Result<WorkDir, String> {
        WorkDir::create_named("msgproxy-bench", keep)
    }

    /// `$TMPDIR/<prefix>-<pid>` (msgproxy-check shares this module under its own prefix).
    pub fn create_named(prefix: &str, keep: bool) -> Result<WorkDir, String> {
        let base = std::env::temp_dir();
        let prefix = format!("{prefix}-");
        // Work dirs of runs that were killed: their pid is gone.
        if let Ok(entries) = fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name
                    .strip_prefix(prefix.as_str())
                    .and_then(|p| p.parse::<u32>().ok())
                {
                    // Kept ones (a failed check's logs, --keep-workdir) stay for the user.
                    if !Path::new(&format!("/proc/{pid}")).exists()
                        && !e.path().join(KEPT_MARK).exists()
                    {
                        let _ = fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let path = base.join(format!("{prefix}{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        let mut dir = WorkDir { path, keep: false };
        if keep {
            dir.keep_on_drop();
        }
        Ok(dir)
    }

    /// Keeps the work dir after all (e.g. for a failed run's logs), also from the clean-up of
    /// later runs.
    pub fn keep_on_drop(&mut self) {
        self.keep = true;
        let _ = fs::write(
            self.path.join(KEPT_MARK),
            "kept: not removed by later runs\n",
        );
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// A child process that is killed when dropped and when the bench dies.
pub struct Owned {
    child: Child,
    pub log: PathBuf,
}

impl Owned {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if !self.alive() {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].to_string()
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // Gracefully first: a proxy run under a profiler writes its profile when it exits.
        self.stop(Duration::from_secs(5));
    }
}

/// A set of CPUs the server, or msgproxy and the load generator, are kept on (`--server-cpus`,
/// `--proxy-cpus`): on a machine whose cores they otherwise share, pinning gives the server the
/// same CPU budget through the proxy as without it, so that what the proxy costs shows apart from
/// the CPU it takes away from the server.
#[derive(Clone, Debug)]
pub struct CpuSet {
    /// The kernel's `cpu_set_t`: bit `n` of the array is CPU `n` (up to 1,024 CPUs).
    mask: [u64; 16],
    /// As given (`1`, `0,2-3`), for the header.
    text: String,
}

impl CpuSet {
    /// Reads a list of CPU numbers and ranges, as `taskset -c` takes them (without its `:stride`):
    /// `1`, `0,2-3`.
    pub fn parse(text: &str) -> Result<CpuSet, String> {
        let mut mask = [0u64; 16];
        let limit = mask.len() * 64;
        for part in text.split(',').map(str::trim) {
            let (from, to) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let number = |s: &str| {
                s.parse::<usize>()
                    .ok()
                    .filter(|&n| n < limit)
                    .ok_or_else(|| {
                        format!("{text:?}: {s:?} is not a CPU number (0 to {})", limit - 1)
                    })
            };
            let (from, to) = (number(from)?, number(to)?);
            if from > to {
                return Err(format!("{text:?}: the range {part} runs backwards"));
            }
            for cpu in from..=to {
                mask[cpu / 64] |= 1 << (cpu % 64);
            }
        }
        Ok(CpuSet {
            mask,
            text: text.to_string(),
        })
    }

    /// The CPUs the bench may run on (its affinity at start: the machine's, or a container's).
    pub fn allowed() -> Result<CpuSet, String> {
        let mut mask = [0u64; 16];
        // SAFETY: the mask is a live, writable array of the size given.
        // SAFETY (the cast): `cpu_set_t` is 1,024 bits, the size of the array.
        let set = mask.as_mut_ptr().cast::<libc::cpu_set_t>();
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&mask), set) } != 0 {
            return Err(format!(
                "cannot read the bench's CPUs: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(CpuSet::from_mask(mask))
    }

    fn from_mask(mask: [u64; 16]) -> CpuSet {
        let cpus: Vec<String> = (0..mask.len() * 64)
            .filter(|&c| mask[c / 64] & (1 << (c % 64)) != 0)
            .map(|c| c.to_string())
            .collect();
        CpuSet {
            mask,
            text: cpus.join(","),
        }
    }

    pub fn count(&self) -> usize {
        self.mask.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn is_within(&self, other: &CpuSet) -> bool {
        self.mask.iter().zip(&other.mask).all(|(a, b)| a & !b == 0)
    }

    fn overlaps(&self, other: &CpuSet) -> bool {
        self.mask.iter().zip(&other.mask).any(|(a, b)| a & b != 0)
    }

    fn without(&self, other: &CpuSet) -> CpuSet {
        let mut mask = self.mask;
        for (a, b) in mask.iter_mut().zip(&other.mask) {
            *a &= !b;
        }
        CpuSet::from_mask(mask)
    }

    /// Checks `--server-cpus` and `--proxy-cpus` against the CPUs the bench may use (`allowed`)
    /// and each other, before anything starts: each set within them, the two apart. A set not
    /// given is the rest, so that neither party runs on the other's CPUs.
    pub fn plan(
        server: Option<CpuSet>,
        proxy: Option<CpuSet>,
        allowed: &CpuSet,
    ) -> Result<(Option<CpuSet>, Option<CpuSet>), String> {
        let check = |flag: &str, set: &CpuSet| {
            if set.count() == 0 || !set.is_within(allowed) {
                return Err(format!(
                    "{flag} {set}: the bench may run on CPUs {allowed} only"
                ));
            }
            Ok(())
        };
        let rest = |flag: &str, other: &CpuSet| {
            let rest = allowed.without(other);
            if rest.count() == 0 {
                return Err(format!(
                    "{flag} {other} leaves no CPU for the other side (the bench may run on {allowed})"
                ));
            }
            Ok(rest)
        };
        let (server, proxy) = match (server, proxy) {
            (None, None) => return Ok((None, None)),
            (Some(s), None) => {
                check("--server-cpus", &s)?;
                let p = rest("--server-cpus", &s)?;
                (s, p)
            }
            (None, Some(p)) => {
                check("--proxy-cpus", &p)?;
                let s = rest("--proxy-cpus", &p)?;
                (s, p)
            }
            (Some(s), Some(p)) => {
                check("--server-cpus", &s)?;
                check("--proxy-cpus", &p)?;
                (s, p)
            }
        };
        if server.overlaps(&proxy) {
            return Err(format!(
                "--server-cpus {server} and --proxy-cpus {proxy} share CPUs: pinning is for keeping them apart"
            ));
        }
        Ok((Some(server), Some(proxy)))
    }

    /// Keeps the calling thread (and the threads and processes it starts from now on) on these
    /// CPUs.
    pub fn pin_current_thread(&self) -> Result<(), String> {
        set_own_affinity(&self.mask)
            .map_err(|e| format!("cannot keep the bench on CPUs {}: {e}", self.text))
    }

    /// Makes `cmd`'s process start on these CPUs.
    fn pin_command(&self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        let mask = self.mask;
        // SAFETY: the closure makes one system call and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(move || set_own_affinity(&mask));
        }
    }
}

impl std::fmt::Display for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Keeps the calling thread on the CPUs of `mask` (a `cpu_set_t`).
fn set_own_affinity(mask: &[u64; 16]) -> std::io::Result<()> {
    // SAFETY: the mask is a live array of the size given.
    let set = mask.as_ptr().cast::<libc::cpu_set_t>();
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(mask), set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Spawns `cmd` (stdout and stderr to `log`) so that it gets SIGKILL when the spawning thread
/// exits; the bench spawns only from its main thread, which lives as long as the bench.
pub fn spawn_owned(mut cmd: Command, log: PathBuf) -> Result<Owned, String> {
    let out = fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("dup {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let program = cmd.get_program().to_string_lossy().into_owned();
    let child = launch::spawn_owned(cmd, libc::SIGKILL)
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    Ok(Owned { child, log })
}

pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

pub fn wait_for_greeting(
    owned: &mut Owned,
    port: u16,
    what: &str,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        if !owned.alive() {
            return Err(format!(
                "{what} exited before accepting connections:\n{}",
                owned.log_tail()
            ));
        }
        if launch::mysql_greets(port) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{what} did not accept connections on port {port} within {limit:?}:\n{}",
                owned.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Finds a program in PATH or the usual sbin/bin directories (haproxy; the MariaDB programs are
/// msgproxy-throwaway's to find).
pub fn find_program(names: &[&str]) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        dirs.push(PathBuf::from(d));
    }
    names
        .iter()
        .flat_map(|n| dirs.iter().map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

/// How the throwaway server is configured: what the table prints.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub buffer_pool: String,
    pub flush_log_at_trx_commit: u8,
    pub sync_binlog: u32,
    /// innodb_log_file_size.
    pub log_file_size: String,
    /// More mariadbd options (`--name=value`), after msgproxy's own: experiments with the
    /// server's settings (isolation level, group commit) without editing the bench.
    pub extra_args: Vec<String>,
    /// The CPUs mariadbd runs on (all when `None`).
    pub cpus: Option<CpuSet>,
}

/// A throwaway MariaDB: its own data dir, port and row-based binlog.
pub struct MariaDb {
    pub process: Owned,
    pub target: Target,
}

impl MariaDb {
    pub fn start(work: &Path, settings: &ServerSettings) -> Result<MariaDb, String> {
        install_mariadb(work, settings)?;
        let mut last_err = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            match launch_mariadb(work, settings, port, "mariadbd.log") {
                Ok(process) => {
                    return Ok(MariaDb {
                        process,
                        target: Target {
                            host: "127.0.0.1".into(),
                            port,
                            user: "root".into(),
                            password: String::new(),
                            db: "bench".into(),
                            socket: None,
                        },
                    });
                }
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }
}

fn innodb_args(settings: &ServerSettings) -> [String; 2] {
    [
        format!("--innodb-buffer-pool-size={}", settings.buffer_pool),
        format!("--innodb-log-file-size={}", settings.log_file_size),
    ]
}

/// The MariaDB programs (the bench does not install them: it says how).
fn programs() -> Result<Programs, String> {
    Programs::find().map_err(|e| format!("{e}; or pass --backend"))
}

/// Creates the throwaway server's data dir (`<work>/data`).
pub fn install_mariadb(work: &Path, settings: &ServerSettings) -> Result<(), String> {
    ServerDir::new(work)
        .initialise_with(&programs()?, &innodb_args(settings))
        .map_err(|e| e.to_string())
}

/// Starts mariadbd on the installed data dir and `port` (logging to `<work>/<log>`) and waits
/// until it accepts connections. Also how msgproxy-check restarts the server on the same port.
/// The options are the harness's common list (msgproxy-throwaway), then the bench's settings.
pub fn launch_mariadb(
    work: &Path,
    settings: &ServerSettings,
    port: u16,
    log: &str,
) -> Result<Owned, String> {
    let dir = ServerDir::new(work);
    fs::create_dir_all(dir.tmp()).map_err(|e| format!("create {}: {e}", dir.tmp().display()))?;
    let mut cmd = launch::server_command(&programs()?, &dir, port);
    // The bench's 32-connection runs and the checker's clients and proxies need more than the
    // default 151 connections; no DNS lookup per connection.
    cmd.arg("--max-connections=1000")
        .arg("--skip-name-resolve")
        .arg(format!(
            "--innodb-flush-log-at-trx-commit={}",
            settings.flush_log_at_trx_commit
        ))
        .arg(format!("--sync-binlog={}", settings.sync_binlog))
        .args(innodb_args(settings))
        .args(&settings.extra_args);
    if let Some(cpus) = &settings.cpus {
        cpus.pin_command(&mut cmd);
    }
    let mut process = spawn_owned(cmd, work.join(log))?;
    wait_for_greeting(&mut process, port, "mariadbd", Duration::from_secs(60))?;
    Ok(process)
}

/// The msgproxy binary to measure: `--proxy-bin`, else the `msgproxy` next to this binary
/// (built first when the bench runs under `cargo run`, so the two are never out of step).
pub fn proxy_binary(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let me = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let sibling = me.with_file_name("msgproxy");
    if let Some(cargo) = std::env::var_os("CARGO") {
        // Under `cargo run`: build the proxy with the same profile into the same target dir.
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "msgproxy", "--bin", "msgproxy"])
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"));
        // Not the variables `cargo run` set for this binary: build scripts that watch them (ring's
        // watches CARGO_MANIFEST_DIR) would see a change, and this build and the next plain one
        // would each rebuild ring, rustls and msgproxy (10-20 s every run).
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO_PKG_")
                || key.starts_with("CARGO_BIN_")
                || matches!(
                    &*key,
                    "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                        | "CARGO_RUSTC_CURRENT_DIR"
                )
            {
                cmd.env_remove(&*key);
            }
        }
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run cargo build: {e}"))?;
        if !status.success() {
            return Err("`cargo build --bin msgproxy` failed".into());
        }
    }
    if sibling.is_file() {
        Ok(sibling)
    } else {
        Err(format!(
            "{} not found: build it first (cargo build --release --bins) or pass --proxy-bin",
            sibling.display()
        ))
    }
}

/// A running msgproxy.
pub struct Proxy {
    pub process: Owned,
    pub port: u16,
    /// Its `--listen-socket`, when started with one.
    pub socket: Option<PathBuf>,
}

impl Proxy {
    /// Starts the proxy with `--backend backend_url`.
    pub fn start(
        binary: &Path,
        backend_url: &str,
        work: &Path,
        tag: &str,
    ) -> Result<Proxy, String> {
        Proxy::launch(binary, backend_url, work, tag, &log_filter(), None)
    }

    /// Like [`Proxy::start`], also listening on a Unix socket in `work` (`--listen-socket`).
    pub fn start_with_socket(
        binary: &Path,
        backend_url: &str,
        work: &Path,
        tag: &str,
    ) -> Result<Proxy, String> {
        let socket = work.join(format!("msgproxy-{tag}.sock"));
        Proxy::launch(binary, backend_url, work, tag, &log_filter(), Some(socket))
    }

    /// Like [`Proxy::start`], with more msgproxy flags (`--pool-size 16`).
    pub fn start_with_args(
        binary: &Path,
        backend_url: &str,
        work: &Path,
        tag: &str,
        args: &[&str],
    ) -> Result<Proxy, String> {
        Proxy::launch_with(binary, backend_url, work, tag, &log_filter(), None, args)
    }

    /// Starts the proxy with `MSGPROXY_LOG=log_filter`.
    pub fn start_with_log(
        binary: &Path,
        backend_url: &str,
        work: &Path,
        tag: &str,
        log_filter: &str,
    ) -> Result<Proxy, String> {
        Proxy::launch(binary, backend_url, work, tag, log_filter, None)
    }

    fn launch(
        binary: &Path,
        backend_url: &str,
        work: &Path,
        tag: &str,
        log_filter: &str,
        socket: Option<PathBuf>,
    ) -> Result<Proxy, String> {
        Proxy::launch_with(binary, backend_url, work, tag, log_filter, socket, &[])
    }

    fn launch_with(
        binary: &Path,
        backend_url: &str,
        work: &Path,
        tag: &str,
        log_filter: &str,
        socket: Option<PathBuf>,
        args: &[&str],
    ) -> Result<Proxy, String> {
        let config = proxy_users_config(backend_url, work, tag)?;
        let mut last_err = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let mut cmd = Command::new(binary);
            cmd.arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--backend")
                .arg(backend_url)
                .current_dir(work)
                .env("MSGPROXY_LOG", log_filter);
            if let Some(config) = &config {
                cmd.arg("--config").arg(config);
            }
            if let Some(socket) = &socket {
                cmd.arg("--listen-socket").arg(socket);
            }
            cmd.args(args);
            let mut process = spawn_owned(cmd, work.join(format!("msgproxy-{tag}.log")))?;
            match wait_for_greeting(&mut process, port, "msgproxy", Duration::from_secs(20)) {
                Ok(()) => {
                    return Ok(Proxy {
                        process,
                        port,
                        socket,
                    })
                }
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }
}

/// The proxies' log filter: the bench's own `MSGPROXY_LOG`, or warnings only.
fn log_filter() -> String {
    std::env::var("MSGPROXY_LOG").unwrap_or_else(|_| "warn".into())
}

/// The bench's clients log in to the proxy with the backend's credentials. With no users
/// configured the proxy takes only `root` without a password, so for any other account (a
/// `--backend` server's) this writes a config file with that one user, and returns its path.
pub fn proxy_users_config(
    backend_url: &str,
    work: &Path,
    tag: &str,
) -> Result<Option<PathBuf>, String> {
    let target = Target::parse(backend_url)?;
    if target.user == "root" && target.password.is_empty() {
        return Ok(None);
    }
    let path = work.join(format!("msgproxy-{tag}.toml"));
    let toml = format!(
        "[[users]]\nname = {}\npassword = {}\n",
        toml_string(&target.user),
        toml_string(&target.password)
    );
    fs::write(&path, toml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(Some(path))
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Peak and current resident memory of a process, in KiB (`VmHWM`, `VmRSS`).
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// CPU time (user + system) a process has used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces) — utime is the 14th field.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // `after` starts at field 3 (state); utime is field 14, stime 15.
    (ticks(11) + ticks(12)) / clock_ticks()
}

fn clock_ticks() -> f64 {
    // sysconf(_SC_CLK_TCK) is 100 on every Linux this runs on.
    100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_strings_round_trip() {
        for s in ["app", "p\"a\\ss", "tab\there", "ünïcode"] {
            let doc = format!("v = {}", toml_string(s));
            let table: toml::Table = toml::from_str(&doc).unwrap();
            assert_eq!(table["v"].as_str(), Some(s), "{doc}");
        }
    }

    #[test]
    fn cpu_lists_read_as_taskset_reads_them() {
        let set = |t: &str| CpuSet::parse(t).map(|c| c.mask[..2].to_vec());
        assert_eq!(set("1"), Ok(vec![0b10, 0]));
        assert_eq!(set("0, 2-3"), Ok(vec![0b1101, 0]));
        assert_eq!(set("64-65"), Ok(vec![0, 0b11]));
        assert!(set("3-1").unwrap_err().contains("backwards"));
        assert!(set("x").unwrap_err().contains("not a CPU number"));
        assert!(set("1024").is_err());
        assert!(set("").is_err());
        assert_eq!(CpuSet::parse("0,2-3").unwrap().to_string(), "0,2-3");
    }

    #[test]
    fn pinning_plans_keep_the_two_sides_apart_within_the_allowed_cpus() {
        let allowed = CpuSet::parse("0-3").unwrap();
        let set = |t: &str| Some(CpuSet::parse(t).unwrap());
        let plan = |s, p| {
            CpuSet::plan(s, p, &allowed)
                .map(|(s, p)| (s.map(|c| c.to_string()), p.map(|c| c.to_string())))
        };
        assert_eq!(plan(None, None), Ok((None, None)));
        assert_eq!(
            plan(set("1"), None),
            Ok((Some("1".into()), Some("0,2,3".into())))
        );
        assert_eq!(
            plan(None, set("0-1")),
            Ok((Some("2,3".into()), Some("0-1".into())))
        );
        assert!(plan(set("1"), set("1-2")).unwrap_err().contains("share"));
        assert!(plan(set("5"), None)
            .unwrap_err()
            .contains("may run on CPUs 0-3 only"));
        assert!(plan(set("0-3"), None)
            .unwrap_err()
            .contains("leaves no CPU"));
    }
}
