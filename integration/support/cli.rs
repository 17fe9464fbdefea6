//! Running the real `mariadb` / `mariadb-admin` command-line clients, with a timeout.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::mariadb::{admin_path, client_path};

/// What a CLI run produced.
#[derive(Debug)]
pub struct CliOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl CliOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }
}

/// `mariadb --no-defaults --protocol=TCP -h127.0.0.1 -P<port> -u<user>` plus whatever a test adds
/// (or `--protocol=SOCKET -S<path>` with [`Cli::over_socket`]).
pub struct Cli {
    port: u16,
    socket: Option<std::path::PathBuf>,
    user: String,
    password: Option<String>,
    timeout: Duration,
}

impl Cli {
    pub fn new(port: u16) -> Cli {
        Cli {
            port,
            socket: None,
            user: "root".into(),
            password: None,
            timeout: Duration::from_secs(20),
        }
    }

    pub fn user(mut self, user: &str, password: Option<&str>) -> Cli {
        self.user = user.into();
        self.password = password.map(Into::into);
        self
    }

    /// Connects over this Unix socket instead of TCP.
    pub fn over_socket(path: &std::path::Path) -> Cli {
        Cli {
            socket: Some(path.to_path_buf()),
            ..Cli::new(0)
        }
    }

    fn common_args(&self) -> Vec<String> {
        let mut args = vec!["--no-defaults".to_string()];
        match &self.socket {
            Some(path) => args.extend([
                "--protocol=SOCKET".into(),
                format!("--socket={}", path.display()),
            ]),
            None => args.extend([
                "--protocol=TCP".into(),
                "-h127.0.0.1".into(),
                format!("-P{}", self.port),
            ]),
        }
        args.extend([format!("-u{}", self.user), "--connect-timeout=10".into()]);
        if let Some(password) = &self.password {
            args.push(format!("--password={password}"));
        }
        args
    }

    /// Runs `mariadb` with `args` (e.g. `["-e", "select 1"]`).
    pub fn run(&self, args: &[&str]) -> CliOutput {
        let mut cmd = Command::new(client_path());
        cmd.args(self.common_args()).args(args);
        run_with_timeout(cmd, self.timeout)
    }

    /// Runs `mariadb-admin` with `args` (e.g. `["status"]`).
    pub fn admin(&self, args: &[&str]) -> CliOutput {
        let mut cmd = Command::new(admin_path());
        cmd.args(self.common_args()).args(args);
        run_with_timeout(cmd, self.timeout)
    }
}

fn run_with_timeout(mut cmd: Command, timeout: Duration) -> CliOutput {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    // Drain both pipes on threads so a chatty client can't block on a full pipe.
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            timed_out = true;
            let _ = child.kill();
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    CliOutput {
        code: status.and_then(|s| s.code()),
        stdout: out_thread.join().unwrap_or_default(),
        stderr: err_thread.join().unwrap_or_default(),
        timed_out,
    }
}
