//! A throwaway MariaDB server: its own data dir, port, socket and row-based binlog, started with
//! the option list every throwaway server shares (msgproxy-throwaway, throwaway/).
//!
//! `mariadb-install-db` takes about a second, so it runs once into a template data dir under the
//! cargo target dir (guarded by a file lock and an atomic rename, so parallel test processes do not
//! race) and every server starts from a copy of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use msgproxy_throwaway::launch::{self, NotUp};
use msgproxy_throwaway::programs::Program;
use msgproxy_throwaway::{Programs, ServerDir};

use super::process;

/// Where everything the suite writes lives: `target/tmp` of the test build.
fn work_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

const INSTALL_HINT: &str = "or run the suite through scripts/test.sh, which installs it";

/// The MariaDB programs; panics with what to install when one is missing (the suite needs a real
/// server, and does not install one itself).
fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        Programs::find().unwrap_or_else(|e| {
            panic!("the integration tests need a real MariaDB server: {e} ({INSTALL_HINT})")
        })
    })
}

fn require(program: Program) -> PathBuf {
    program.require().unwrap_or_else(|e| {
        panic!("the integration tests need a real MariaDB server: {e} ({INSTALL_HINT})")
    })
}

pub fn mariadbd_path() -> PathBuf {
    require(Program::Server)
}

pub fn install_db_path() -> PathBuf {
    require(Program::InstallDb)
}

pub fn client_path() -> PathBuf {
    require(Program::Client)
}

pub fn admin_path() -> PathBuf {
    require(Program::Admin)
}

/// Returns the template data dir, creating it once per `mariadbd` version.
pub fn template_datadir() -> PathBuf {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(build_template).clone()
}

fn build_template() -> PathBuf {
    let root = work_root();
    fs::create_dir_all(&root).expect("create CARGO_TARGET_TMPDIR");
    let programs = programs();
    let version = std::process::Command::new(&programs.mariadbd)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} ({INSTALL_HINT})",
                programs.mariadbd.display()
            )
        });
    // The option list is part of the stamp: a changed list (e.g. the redo log's size) makes a new
    // template.
    let stamp_text = format!(
        "{version}\n{}",
        msgproxy_throwaway::options::for_install().join(" ")
    );
    let template = root.join("mariadb-template");
    let stamp = template.join(".msgproxy-template-version");

    let lock = fs::File::create(root.join("mariadb-template.lock")).expect("create template lock");
    lock.lock().expect("lock the template dir");
    if fs::read_to_string(&stamp).ok().as_deref() == Some(stamp_text.as_str()) {
        return template;
    }
    let _ = fs::remove_dir_all(&template);
    let staging = ServerDir::new(root.join(format!("mariadb-template.tmp-{}", std::process::id())));
    let _ = fs::remove_dir_all(staging.root());
    fs::create_dir_all(staging.root()).expect("create template staging dir");
    staging
        .initialise(programs)
        .unwrap_or_else(|e| panic!("{e}"));
    fs::write(
        staging.data().join(".msgproxy-template-version"),
        &stamp_text,
    )
    .expect("write template stamp");
    fs::rename(staging.data(), &template).expect("move the template into place");
    let _ = fs::remove_dir_all(staging.root());
    template
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
        ServerDir::new(&dir)
            .copy_data_from(&template)
            .unwrap_or_else(|e| panic!("{e}"));
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
        self.server_dir().socket()
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
        self.server_dir().data()
    }

    pub fn error_log_path(&self) -> PathBuf {
        self.server_dir().error_log()
    }

    pub fn error_log(&self) -> String {
        process::tail(&self.error_log_path(), 8000)
    }

    fn server_dir(&self) -> ServerDir {
        ServerDir::new(&self.dir)
    }

    fn try_launch(&self) -> Result<(), String> {
        let mut guard = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(child) = guard.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                return Ok(());
            }
        }
        let server_dir = self.server_dir();
        fs::create_dir_all(server_dir.tmp()).map_err(|e| format!("create tmpdir: {e}"))?;
        let mut cmd = launch::server_command(programs(), &server_dir, self.port);
        cmd.arg(format!("--log-error={}", self.error_log_path().display()))
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // The suite's own spawner thread, not the library's spawn_owned: the server must outlive
        // the test thread that happens to start it (see support/process.rs).
        let mut child = process::spawn_owned(cmd, libc::SIGTERM)
            .map_err(|e| format!("cannot start mariadbd: {e} ({INSTALL_HINT})"))?;
        let limit = Duration::from_secs(30);
        match launch::wait_until_accepting(self.port, limit, launch::child_exited(&mut child)) {
            Ok(()) => {}
            Err(NotUp::Exited(status)) => {
                return Err(format!(
                    "mariadbd exited ({status}) before accepting connections on port {}:\n{}",
                    self.port,
                    self.error_log()
                ))
            }
            Err(NotUp::TimedOut) => {
                process::kill_hard(&mut child);
                return Err(format!(
                    "mariadbd did not accept connections on port {} within {limit:?}:\n{}",
                    self.port,
                    self.error_log()
                ));
            }
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
