//! A server that outlives the process that started it (the scripts' development server): it runs
//! in a session of its own (Ctrl-C in the starting terminal does not reach it), is found again
//! through its pid file, and starts of the same directory are serialised by a lock file.

use std::fs;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::launch::{self, NotUp};
use crate::{Error, Programs, ServerDir};

/// How long a starting server may take to accept connections (a first start of InnoDB on a slow
/// disk takes a while).
pub const START_LIMIT: Duration = Duration::from_secs(60);
/// How long a stopping server may take before it is killed.
pub const STOP_LIMIT: Duration = Duration::from_secs(60);

/// A detached server's directory: a [`ServerDir`] plus the files that find the server again.
#[derive(Clone, Debug)]
pub struct Detached {
    pub dir: ServerDir,
}

/// A detached server that runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub pid: u32,
    pub port: u16,
}

/// Held while a start is under way; released (by the kernel, too) when dropped.
pub struct StartLock {
    _file: fs::File,
}

impl Detached {
    pub fn new(root: impl Into<PathBuf>) -> Detached {
        Detached {
            dir: ServerDir::new(root),
        }
    }

    fn port_file(&self) -> PathBuf {
        self.dir.root().join("port")
    }

    /// Output of the server before its error log is open (and of the server's own crashes).
    fn output_log(&self) -> PathBuf {
        self.dir.root().join("mariadbd.out")
    }

    /// The port the server was last started on.
    pub fn recorded_port(&self) -> Option<u16> {
        fs::read_to_string(self.port_file())
            .ok()
            .and_then(|p| p.trim().parse().ok())
    }

    /// The server of this directory, when one runs. A pid file whose process is gone, or is some
    /// other program now (the pid was reused), is removed.
    pub fn running(&self) -> Option<Running> {
        let pid_file = self.dir.pid_file();
        let pid: u32 = fs::read_to_string(&pid_file).ok()?.trim().parse().ok()?;
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if matches!(comm.trim(), "mariadbd" | "mysqld") {
            return Some(Running {
                pid,
                port: self.recorded_port().unwrap_or(0),
            });
        }
        let _ = fs::remove_file(&pid_file);
        None
    }

    /// Serialises starts on this directory (waits for another start to finish).
    pub fn lock(&self) -> Result<StartLock, Error> {
        let root = self.dir.root();
        fs::create_dir_all(root).map_err(|e| Error::io("cannot create", root, e))?;
        let path = root.join(".lock");
        let file = fs::File::create(&path).map_err(|e| Error::io("cannot create", &path, e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Error::io(
                "cannot lock",
                &path,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(StartLock { _file: file })
    }

    /// Starts the server on `port` (initialising its data directory the first time) and waits
    /// until it accepts connections and has the database `test`. Call with the [`StartLock`]
    /// held and no server running.
    pub fn start(
        &self,
        programs: &Programs,
        port: u16,
        _lock: &StartLock,
    ) -> Result<Running, Error> {
        if launch::port_in_use(port) {
            return Err(Error::PortInUse(port));
        }
        if !self.dir.is_initialised() {
            eprintln!(
                "initialising a new MariaDB data directory in {} ...",
                self.dir.data().display()
            );
            self.dir.initialise(programs)?;
        }
        let tmp = self.dir.tmp();
        fs::create_dir_all(&tmp).map_err(|e| Error::io("cannot create", &tmp, e))?;
        let port_file = self.port_file();
        fs::write(&port_file, format!("{port}\n"))
            .map_err(|e| Error::io("cannot write", &port_file, e))?;
        let _ = fs::remove_file(self.dir.pid_file());
        eprintln!(
            "starting throwaway MariaDB on 127.0.0.1:{port} (data in {}, log {}) ...",
            self.dir.root().display(),
            self.dir.error_log().display()
        );
        let out_path = self.output_log();
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out_path)
            .map_err(|e| Error::io("cannot open", &out_path, e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io("cannot reopen", &out_path, e))?;
        let mut cmd = launch::server_command(programs, &self.dir, port);
        cmd.arg(format!("--log-error={}", self.dir.error_log().display()))
            .current_dir(self.dir.root())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        {
            use std::os::unix::process::CommandExt;
            // A session of its own: no terminal's signals reach it. SAFETY: setsid is
            // async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|source| Error::Spawn {
            program: programs.mariadbd.clone(),
            source,
        })?;
        let log = || {
            format!(
                "{}{}",
                self.dir.error_log_tail(),
                crate::server_dir::tail(&self.output_log(), 2000)
            )
        };
        match launch::wait_until_accepting(port, START_LIMIT, launch::child_exited(&mut child)) {
            Ok(()) => {}
            Err(NotUp::Exited(status)) => {
                return Err(Error::Exited {
                    port,
                    status,
                    log: log(),
                })
            }
            Err(NotUp::TimedOut) => {
                return Err(Error::NotAccepting {
                    port,
                    seconds: START_LIMIT.as_secs(),
                    log: log(),
                })
            }
        }
        create_test_database(programs, port)?;
        Ok(self.running().unwrap_or(Running {
            pid: child.id(),
            port,
        }))
    }

    /// Stops the server (SIGTERM, then SIGKILL after [`STOP_LIMIT`]); the data stays. Returns
    /// the pid it stopped, or `None` when none ran.
    pub fn stop(&self) -> Result<Option<u32>, Error> {
        let Some(running) = self.running() else {
            return Ok(None);
        };
        let pid = running.pid as libc::pid_t;
        eprintln!(
            "stopping throwaway MariaDB (pid {pid}) in {} ...",
            self.dir.root().display()
        );
        // SAFETY: kill(2) with the pid of the server `running` just checked by name.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_LIMIT;
        while alive(pid) {
            if Instant::now() > deadline {
                eprintln!(
                    "warning: mariadbd (pid {pid}) did not stop within {} s; killing it",
                    STOP_LIMIT.as_secs()
                );
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = fs::remove_file(self.dir.pid_file());
        Ok(Some(running.pid))
    }
}

/// Whether a process exists (a zombie counts as gone: it serves nothing).
fn alive(pid: libc::pid_t) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain spaces.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z") | None)
}

/// The database msgproxy's backend URL names.
fn create_test_database(programs: &Programs, port: u16) -> Result<(), Error> {
    let sql = "CREATE DATABASE IF NOT EXISTS test";
    let out = Command::new(&programs.client)
        .args(["--no-defaults", "-h127.0.0.1", "-uroot"])
        .arg(format!("-P{port}"))
        .args(["-e", sql])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            program: programs.client.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Sql {
            sql: sql.into(),
            port,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// The backend URL for msgproxy: through the server's Unix socket, which costs the kernel less
/// per round trip than loopback TCP; the host and port name the same server for the logs.
pub fn backend_url(dir: &ServerDir, port: u16) -> String {
    format!(
        "mysql://root@127.0.0.1:{port}/test?socket={}",
        dir.socket().display()
    )
}
