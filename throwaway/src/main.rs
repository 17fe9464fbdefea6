//! `msgproxy-throwaway`: a throwaway MariaDB for development, behind scripts/mariadb-throwaway.sh.
//!
//!   msgproxy-throwaway start  [--port N] [--dir DIR]   start it (or just report it when it runs)
//!   msgproxy-throwaway stop   [--dir DIR]              stop it (the data stays in DIR)
//!   msgproxy-throwaway status [--dir DIR]              report whether it runs
//!
//! The output contract the scripts rely on: the last line `start` and `status` print on stdout
//! is the backend URL; every other message goes to stderr. Exit status 0 on success, 1 on an
//! error, 2 on a usage error, 3 from `status` when no server runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use msgproxy_throwaway::detached::{self, Detached};
use msgproxy_throwaway::install;

const DEFAULT_PORT: u16 = 13306;

/// `.msgproxy/mariadb` in the repository this binary was built from (gitignored).
const DEFAULT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../.msgproxy/mariadb");

const USAGE: &str = "\
usage: NAME start  [--port N] [--dir DIR]   start it (or just report it when it runs)
       NAME stop   [--dir DIR]              stop it (the data stays in DIR)
       NAME status [--dir DIR]              report whether it runs

A throwaway MariaDB for development: its own data directory, port, socket and row-based binlog,
started from the distribution's mariadbd (installed with apt-get when missing). Nothing here
touches a system MariaDB or its configuration (every program runs with --no-defaults).

DIR defaults to .msgproxy/mariadb in the repository (gitignored), the port to 13306. The last line
`start` and `status` print on stdout is the backend URL,
mysql://root@127.0.0.1:PORT/test?socket=SOCKET (msgproxy connects through the socket; root has no
password and the server listens on 127.0.0.1 and its socket only); all other messages go to
stderr. To start afresh: stop, then delete DIR.";

#[derive(Debug, PartialEq, Eq)]
enum Action {
    Start,
    Stop,
    Status,
}

#[derive(Debug)]
struct Args {
    action: Action,
    port: Option<u16>,
    dir: PathBuf,
}

/// How the user calls us (the wrapper script passes its own name), for usage and hints.
fn own_name() -> String {
    std::env::var("MSGPROXY_THROWAWAY_NAME").unwrap_or_else(|_| "msgproxy-throwaway".into())
}

fn usage() -> String {
    USAGE.replace("NAME", &own_name())
}

/// `Err(Ok(()))` asks for the help text, `Err(Err(message))` is a usage error.
fn parse(argv: &[String]) -> Result<Args, Result<(), String>> {
    let mut it = argv.iter();
    let action = match it.next().map(String::as_str) {
        Some("start") => Action::Start,
        Some("stop") => Action::Stop,
        Some("status") => Action::Status,
        Some("-h" | "--help" | "help") => return Err(Ok(())),
        Some(other) => return Err(Err(format!("unknown command: {other}"))),
        None => return Err(Err("a command is needed".into())),
    };
    let mut port = None;
    let mut dir = None;
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| Err(format!("{name} needs a value")))
        };
        match name {
            "--port" => {
                let v = value()?;
                port = Some(v.parse::<u16>().ok().filter(|&p| p >= 1).ok_or_else(|| {
                    Err(format!("--port must be a number in 1..65535, got '{v}'"))
                })?);
            }
            "--dir" => {
                let v = value()?;
                if v.is_empty() {
                    return Err(Err("--dir must not be empty".into()));
                }
                dir = Some(PathBuf::from(v));
            }
            "-h" | "--help" => return Err(Ok(())),
            _ => return Err(Err(format!("unknown option: {arg}"))),
        }
    }
    if port.is_some() && action == Action::Stop {
        eprintln!("warning: stop ignores --port (it stops the server of --dir)");
    }
    Ok(Args {
        action,
        port,
        dir: dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DIR)),
    })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(args) => args,
        Err(Ok(())) => {
            eprintln!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(Err(message)) => {
            eprintln!("error: {message} (see {} --help)", own_name());
            return ExitCode::from(2);
        }
    };
    let outcome = match args.action {
        Action::Start => start(&args),
        Action::Stop => stop(&args),
        Action::Status => status(&args),
    };
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `dir` as an absolute path without `..` (it is in messages and the URL); `dir` must exist.
fn resolved(dir: &Path) -> Result<PathBuf, String> {
    dir.canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", dir.display()))
}

fn start(args: &Args) -> Result<ExitCode, String> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let server = Detached::new(resolved(&args.dir)?);
    let root = server.dir.root().display().to_string();
    let lock = server.lock().map_err(|e| e.to_string())?;
    let programs = install::ensure_programs(true).map_err(|e| e.to_string())?;
    if let Some(running) = server.running() {
        let port = running_port(&server, running);
        if args.port.is_some_and(|p| p != port) {
            eprintln!(
                "warning: already running on port {port} (not {}); stop it first to change the port",
                args.port.unwrap_or(port)
            );
        }
        eprintln!(
            "throwaway MariaDB already running (pid {}) on 127.0.0.1:{port}, data in {root}",
            running.pid
        );
        println!("{}", detached::backend_url(&server.dir, port));
        return Ok(ExitCode::SUCCESS);
    }
    let port = args.port.unwrap_or(DEFAULT_PORT);
    let running = server
        .start(&programs, port, &lock)
        .map_err(|e| e.to_string())?;
    let mut stop_cmd = format!("{} stop", own_name());
    if Path::new(DEFAULT_DIR).canonicalize().ok().as_deref() != Some(server.dir.root()) {
        stop_cmd.push_str(&format!(" --dir {}", shell_quote(&root)));
    }
    eprintln!(
        "throwaway MariaDB running (pid {}) on 127.0.0.1:{port}; stop it with: {stop_cmd}",
        running.pid
    );
    println!("{}", detached::backend_url(&server.dir, port));
    Ok(ExitCode::SUCCESS)
}

fn stop(args: &Args) -> Result<ExitCode, String> {
    if !args.dir.is_dir() {
        eprintln!(
            "no throwaway MariaDB in {}: nothing to stop",
            args.dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let server = Detached::new(resolved(&args.dir)?);
    let root = server.dir.root().display().to_string();
    match server.stop().map_err(|e| e.to_string())? {
        Some(_) => eprintln!("stopped (data kept in {root})"),
        None => eprintln!("throwaway MariaDB in {root} is not running"),
    }
    Ok(ExitCode::SUCCESS)
}

fn status(args: &Args) -> Result<ExitCode, String> {
    if !args.dir.is_dir() {
        eprintln!("no throwaway MariaDB in {}", args.dir.display());
        return Ok(ExitCode::from(3));
    }
    let server = Detached::new(resolved(&args.dir)?);
    let root = server.dir.root().display().to_string();
    let Some(running) = server.running() else {
        eprintln!("throwaway MariaDB in {root} is not running");
        return Ok(ExitCode::from(3));
    };
    let port = running_port(&server, running);
    eprintln!(
        "throwaway MariaDB running (pid {}) on 127.0.0.1:{port}, data in {root}",
        running.pid
    );
    println!("{}", detached::backend_url(&server.dir, port));
    Ok(ExitCode::SUCCESS)
}

/// The port of a running server: the one it was started on (a directory from before the port
/// was recorded ran on the default).
fn running_port(server: &Detached, running: detached::Running) -> u16 {
    server
        .recorded_port()
        .filter(|_| running.port != 0)
        .unwrap_or(DEFAULT_PORT)
}

/// `s` quoted for a POSIX shell when it needs quoting (for the "stop it with" hint).
fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_scripts_interface_parses_as_before() {
        let a = parse(&argv("start --port 14000 --dir /tmp/x")).unwrap();
        assert_eq!(
            (a.action, a.port, a.dir),
            (Action::Start, Some(14000), PathBuf::from("/tmp/x"))
        );
        let a = parse(&argv("status --dir=/tmp/y")).unwrap();
        assert_eq!((a.action, a.port), (Action::Status, None));
        assert!(parse(&argv("start --port 0")).is_err());
        assert!(parse(&argv("start --port x")).is_err());
        assert!(parse(&argv("start --port")).is_err());
        assert!(parse(&argv("launch")).is_err());
        assert!(parse(&argv("stop --bogus")).is_err());
        assert!(matches!(parse(&argv("--help")), Err(Ok(()))));
    }

    #[test]
    fn hints_quote_paths_only_when_they_need_it() {
        assert_eq!(shell_quote("/tmp/a-b"), "/tmp/a-b");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("/tmp/it's"), r"'/tmp/it'\''s'");
    }
}
