//! The harness's errors. Each says what to do about it: these reach a developer's terminal (the
//! scripts) or a test's panic message.

use std::path::PathBuf;

/// What went wrong starting, stopping or preparing a throwaway server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A MariaDB program is not installed (and installing was not allowed, or did not help).
    #[error("{program} not found in PATH or {dirs}: install MariaDB (`apt-get install mariadb-server mariadb-client` on Debian/Ubuntu) or set {env_var}")]
    ProgramMissing {
        program: &'static str,
        dirs: String,
        env_var: &'static str,
    },
    /// apt-get could not install the packages.
    #[error("could not install {packages} with apt-get ({reason}); install them yourself: sudo apt-get update && sudo apt-get install -y --no-install-recommends {packages}")]
    Install { packages: String, reason: String },
    /// A file operation of the harness failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A program could not be run at all.
    #[error("cannot run {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    /// mariadb-install-db failed; `log` is the end of its output.
    #[error("mariadb-install-db failed ({status}); full log: {}\n{log}", log_path.display())]
    InstallDb {
        status: String,
        log_path: PathBuf,
        log: String,
    },
    /// The server exited before it accepted connections; `log` is the end of its error log.
    #[error("mariadbd exited ({status}) before accepting connections on port {port}:\n{log}")]
    Exited {
        port: u16,
        status: String,
        log: String,
    },
    /// The server did not accept connections in time.
    #[error("mariadbd did not accept connections on 127.0.0.1:{port} within {seconds} s:\n{log}")]
    NotAccepting {
        port: u16,
        seconds: u64,
        log: String,
    },
    /// Another program holds the port a detached server was to use.
    #[error("port {0} on 127.0.0.1 is already in use by another program; choose a free one with --port N")]
    PortInUse(u16),
    /// A statement run with the `mariadb` client failed.
    #[error("`{sql}` failed on 127.0.0.1:{port}: {stderr}")]
    Sql {
        sql: String,
        port: u16,
        stderr: String,
    },
}

impl Error {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Error {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
