//! A throwaway MariaDB server: its own data dir, port, socket and row-based binlog.
//!
//! `mariadb-install-db` takes about a second, so it runs once into a template data dir under the
//! cargo target dir (guarded by a file lock and an atomic rename, so parallel test processes do not
//! race) and every server starts from a copy of it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::process;

/// Where everything the suite writes lives: `target/tmp` of the test build.
fn work_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

const INSTALL_HINT: &str =
    "install MariaDB with `apt-get install mariadb-server` (Debian/Ubuntu), \
     or run the suite through scripts/test.sh";

/// Finds a MariaDB program: `$env_var`, then PATH, then the usual sbin/bin directories.
fn find_program(names: &[&str], env_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return PathBuf::from(path);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for extra in [
        "/usr/sbin",
        "/usr/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/local/mysql/bin",
        "/opt/homebrew/bin",
    ] {
        dirs.push(PathBuf::from(extra));
    }
    for name in names {
        for dir in &dirs {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "none of {names:?} found in PATH, /usr/sbin, /usr/local/...: the integration tests need a real \
         MariaDB server; {INSTALL_HINT} (or set {env_var})"
    );
}

pub fn mariadbd_path() -> PathBuf {
    find_program(&["mariadbd", "mysqld"], "MARIADBD")
}

pub fn install_db_path() -> PathBuf {
    find_program(
        &["mariadb-install-db", "mysql_install_db"],
        "MARIADB_INSTALL_DB",
    )
}

pub fn client_path() -> PathBuf {
    find_program(&["mariadb", "mysql"], "MARIADB_CLIENT")
}

pub fn admin_path() -> PathBuf {
    find_program(&["mariadb-admin", "mysqladmin"], "MARIADB_ADMIN")
}

/// Options shared by `mariadb-install-db` and `mariadbd` that shape the InnoDB files.
const INNODB_OPTS: &[&str] = &[
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=16M",
];

/// Returns the template data dir, creating it once per `mariadbd` version.
pub fn template_datadir() -> PathBuf {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(build_template).clone()
}

fn build_template() -> PathBuf {
    let root = work_root();
    fs::create_dir_all(&root).expect("create CARGO_TARGET_TMPDIR");
    let mariadbd = mariadbd_path();
    let version = Command::new(&mariadbd)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", mariadbd.display()));
    let template = root.join("mariadb-template");
    let stamp = template.join(".msgproxy-template-version");

    let lock = fs::File::create(root.join("mariadb-template.lock")).expect("create template lock");
    lock.lock().expect("lock the template dir");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(version.as_str()) {
        return template;
    }
    let _ = fs::remove_dir_all(&template);
    let staging = root.join(format!("mariadb-template.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging).expect("create template staging dir");
    let log = staging.join("install.log");
    let mut cmd = Command::new(install_db_path());
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", staging.join("data").display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .args(INNODB_OPTS)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&log).expect("install log"))
        .stderr(fs::File::create(staging.join("install.err")).expect("install err"));
    if is_root() {
        cmd.arg("--user=root");
    }
    let status = cmd.status().expect("run mariadb-install-db");
    if !status.success() {
        panic!(
            "mariadb-install-db failed ({status}):\n{}\n{}",
            process::tail(&log, 4000),
            process::tail(&staging.join("install.err"), 4000)
        );
    }
    fs::write(
        staging.join("data").join(".msgproxy-template-version"),
        &version,
    )
    .expect("write template stamp");
    fs::rename(staging.join("data"), &template).expect("move the template into place");
    let _ = fs::remove_dir_all(&staging);
    template
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Removes run dirs left behind by earlier test processes that are gone (the shared server lives in
/// a static, so its directory is never dropped).
fn clean_stale_runs(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("mdb-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || process::pid_alive(pid) {
            continue;
        }
        // The server of a dead run gets SIGTERM from PDEATHSIG; don't delete under its feet.
        let server_pid = fs::read_to_string(entry.path().join("mariadbd.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if server_pid.is_some_and(process::pid_alive) {
            continue;
        }
        let _ = fs::remove_dir_all(entry.path());
    }
}

/// A running (or stopped, restartable) MariaDB server owned by the test.
pub struct MariaDb {
    port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
    /// `mariadbd` options after the standard ones (so they win), e.g. `--skip-log-bin`.
    extra_args: Vec<String>,
    /// Keeps the run dir alive (deleted on drop). `None` never happens; `Option` for drop order.
    _tempdir: Option<tempfile::TempDir>,
}

impl MariaDb {
    /// The server shared by all tests of this process (never stopped by a test).
    pub fn shared() -> &'static MariaDb {
        static SHARED: OnceLock<MariaDb> = OnceLock::new();
        SHARED.get_or_init(MariaDb::start)
    }

    /// A new server on a free port.
    pub fn start() -> MariaDb {
        MariaDb::start_with(&[])
    }

    /// A new server on a free port, started with `extra_args` after the standard options (e.g.
    /// `--skip-log-bin`); they stay in force across `restart`.
    pub fn start_with(extra_args: &[&str]) -> MariaDb {
        for attempt in 0..3 {
            let port = process::free_port();
            match MariaDb::try_start_on_port(port, extra_args) {
                Ok(db) => return db,
                Err(e) if attempt < 2 => eprintln!("mariadbd on port {port} failed, retrying: {e}"),
                Err(e) => panic!("{e}"),
            }
        }
        unreachable!()
    }

    /// A new server on `port` (used to bring a backend up behind an already running proxy).
    pub fn start_on_port(port: u16) -> MariaDb {
        MariaDb::try_start_on_port(port, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_on_port(port: u16, extra_args: &[&str]) -> Result<MariaDb, String> {
        let template = template_datadir();
        let runs = work_root().join("runs");
        fs::create_dir_all(&runs).expect("create runs dir");
        clean_stale_runs(&runs);
        let tempdir = tempfile::Builder::new()
            .prefix(&format!("mdb-{}-", std::process::id()))
            .tempdir_in(&runs)
            .expect("create a server dir");
        let dir = tempdir.path().to_path_buf();
        copy_dir(&template, &dir.join("data")).expect("copy the template data dir");
        let db = MariaDb {
            port,
            dir,
            child: Mutex::new(None),
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
            _tempdir: Some(tempdir),
        };
        db.try_launch()?;
        db.sql("CREATE DATABASE IF NOT EXISTS test");
        Ok(db)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://root@127.0.0.1:PORT/DB` — what the proxy gets as `--backend`.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    pub fn backend_url(&self) -> String {
        self.url("test")
    }

    /// The server's Unix socket.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("mariadbd.sock")
    }

    /// `mysql://root@localhost/DB?socket=PATH` — the proxy reaches the server over its socket.
    pub fn socket_url(&self, db: &str) -> String {
        format!(
            "mysql://root@localhost/{db}?socket={}",
            self.socket_path().display()
        )
    }

    /// The server's data directory (binlog files live here).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn error_log_path(&self) -> PathBuf {
        self.dir.join("mariadbd.err")
    }

    pub fn error_log(&self) -> String {
        process::tail(&self.error_log_path(), 8000)
    }

    fn try_launch(&self) -> Result<(), String> {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(child) = guard.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                return Ok(());
            }
        }
        fs::create_dir_all(self.dir.join("tmp")).map_err(|e| format!("create tmpdir: {e}"))?;
        let mut cmd = Command::new(mariadbd_path());
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", self.socket_path().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mariadbd.pid").display()
            ))
            .arg(format!("--log-error={}", self.error_log_path().display()))
            // Own temp dir: servers sharing /tmp have been seen failing on each other's files.
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .args([
                "--bind-address=127.0.0.1",
                "--log-bin=mysql-bin",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                // Column names in the binlog's table maps: the proxy's binlog watcher needs them.
                "--binlog-row-metadata=FULL",
                "--server-id=1",
                "--max-allowed-packet=64M",
                "--local-infile=1",
                // Throwaway data: no fsync per commit (still survives a SIGKILL of the server).
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
            ])
            .args(INNODB_OPTS)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if is_root() {
            cmd.arg("--user=root");
        }
        let mut child = process::spawn_owned(cmd, libc::SIGTERM)
            .map_err(|e| format!("cannot start mariadbd: {e}; {INSTALL_HINT}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "mariadbd exited ({status}) before accepting connections on port {}:\n{}",
                    self.port,
                    self.error_log()
                ));
            }
            if process::mysql_greets(self.port) {
                break;
            }
            if Instant::now() > deadline {
                process::kill_hard(&mut child);
                return Err(format!(
                    "mariadbd did not accept connections on port {} within 30 s:\n{}",
                    self.port,
                    self.error_log()
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        *guard = Some(child);
        Ok(())
    }

    /// Starts the server again on the same data dir and port (after `stop` or `kill`).
    pub fn restart(&self) {
        self.try_launch().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Clean shutdown (SIGTERM), waiting for it.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            process::terminate(&mut child, Duration::from_secs(20));
        }
    }

    /// SIGKILL: the server vanishes mid-whatever, like a crash.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            process::kill_hard(&mut child);
        }
    }

    /// Runs SQL through the `mariadb` CLI, directly against this server; panics on failure.
    pub fn sql(&self, sql: &str) -> String {
        let out = super::cli::Cli::new(self.port).run(&["-e", sql]);
        if !out.success() {
            panic!(
                "`{sql}` failed on the test MariaDB: {}\n{}",
                out.stderr,
                self.error_log()
            );
        }
        out.stdout
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
    }
}
