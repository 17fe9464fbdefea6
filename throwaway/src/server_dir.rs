//! One server's files, all in one directory: `data/` (the data directory), `tmp/`, the socket,
//! the pid file and the logs; and initialising `data/` with mariadb-install-db.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{options, Error, Programs};

/// A Unix socket path is limited to 107 bytes; a socket whose path in the directory would be
/// longer goes to the temp dir instead.
const SOCKET_PATH_MAX: usize = 100;

/// The directory of one throwaway server (it need not exist yet).
#[derive(Clone, Debug)]
pub struct ServerDir {
    root: PathBuf,
}

impl ServerDir {
    pub fn new(root: impl Into<PathBuf>) -> ServerDir {
        ServerDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The data directory (the binlog files are here too).
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The server's own temp dir: servers sharing /tmp have been seen failing on each other's
    /// files.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub fn pid_file(&self) -> PathBuf {
        self.root.join("mariadbd.pid")
    }

    pub fn error_log(&self) -> PathBuf {
        self.root.join("mariadbd.err")
    }

    pub fn install_log(&self) -> PathBuf {
        self.root.join("install-db.log")
    }

    /// Marks a data directory that mariadb-install-db finished (one it did not is made again).
    fn initialised_mark(&self) -> PathBuf {
        self.root.join(".initialized")
    }

    /// `<root>/mariadbd.sock`, or for a deep directory a name in the temp dir derived from it.
    pub fn socket(&self) -> PathBuf {
        let socket = self.root.join("mariadbd.sock");
        if socket.as_os_str().len() <= SOCKET_PATH_MAX {
            return socket;
        }
        std::env::temp_dir().join(format!(
            "msgproxy-mariadb-{:016x}.sock",
            fnv1a(self.root.as_os_str().as_encoded_bytes())
        ))
    }

    pub fn is_initialised(&self) -> bool {
        self.initialised_mark().is_file()
    }

    /// Creates `data/` with mariadb-install-db (root without a password, no test database),
    /// replacing whatever an interrupted earlier attempt left.
    pub fn initialise(&self, programs: &Programs) -> Result<(), Error> {
        self.initialise_with(programs, &[])
    }

    /// Like [`ServerDir::initialise`], with more options for the installer after the common
    /// InnoDB ones (a bench's own redo log size, so that the first start does not resize it).
    pub fn initialise_with(&self, programs: &Programs, extra_args: &[String]) -> Result<(), Error> {
        let data = self.data();
        match fs::remove_dir_all(&data) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(Error::io("cannot remove", &data, e))
            }
            _ => {}
        }
        fs::create_dir_all(&data).map_err(|e| Error::io("cannot create", &data, e))?;
        let tmp = self.tmp();
        fs::create_dir_all(&tmp).map_err(|e| Error::io("cannot create", &tmp, e))?;
        let log_path = self.install_log();
        let log =
            fs::File::create(&log_path).map_err(|e| Error::io("cannot create", &log_path, e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| Error::io("cannot reopen", &log_path, e))?;
        let mut cmd = Command::new(&programs.install_db);
        cmd.arg("--no-defaults")
            .args(programs.basedir_option())
            .arg(format!("--datadir={}", data.display()))
            // Its bootstrap server's temporary tables in a temp dir of its own, as the server's:
            // installs running side by side in /tmp have failed on each other's files.
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .args(options::for_install())
            .args(extra_args)
            .args(options::user())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let status = cmd.status().map_err(|source| Error::Spawn {
            program: programs.install_db.clone(),
            source,
        })?;
        if !status.success() {
            return Err(Error::InstallDb {
                status: status.to_string(),
                log: tail(&log_path, 4000),
                log_path,
            });
        }
        let mark = self.initialised_mark();
        fs::write(&mark, "").map_err(|e| Error::io("cannot write", &mark, e))
    }

    /// Fills `data/` with a copy of `template` (a data directory [`ServerDir::initialise`] made
    /// earlier): a fraction of a second instead of mariadb-install-db's several.
    pub fn copy_data_from(&self, template: &Path) -> Result<(), Error> {
        copy_dir(template, &self.data())
            .map_err(|e| Error::io("cannot copy into", self.data(), e))?;
        let mark = self.initialised_mark();
        fs::write(&mark, "").map_err(|e| Error::io("cannot write", &mark, e))
    }

    /// The end of the error log, for messages about a server that failed.
    pub fn error_log_tail(&self) -> String {
        tail(&self.error_log(), 8000)
    }
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

/// The last `max` bytes of a text file (empty when it cannot be read).
pub fn tail(path: &Path, max: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    String::from_utf8_lossy(&text[start..]).into_owned()
}

/// FNV-1a: a hash that stays the same across builds (std's `DefaultHasher` promises no such
/// thing), so that `status` finds the socket `start` made.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deep_directory_gets_its_socket_in_the_temp_dir_under_a_stable_name() {
        let shallow = ServerDir::new("/tmp/x");
        assert_eq!(shallow.socket(), PathBuf::from("/tmp/x/mariadbd.sock"));
        let deep = ServerDir::new(format!("/tmp/{}", "d".repeat(120)));
        let socket = deep.socket();
        assert!(socket.starts_with(std::env::temp_dir()), "{socket:?}");
        assert!(socket.as_os_str().len() <= SOCKET_PATH_MAX);
        assert_eq!(socket, ServerDir::new(deep.root()).socket());
        assert_ne!(
            socket,
            ServerDir::new(format!("/tmp/{}", "e".repeat(120))).socket()
        );
    }
}
