//! The proxy's own Unix socket (`--listen-socket`), for clients on the proxy's host: what
//! `mysql -S`, PHP's `localhost` and libmariadb's `localhost` default use. On the same host it
//! costs the kernel far less per round trip than loopback TCP.
//!
//! Binding follows mysqld: a socket file left by a proxy that died is replaced, one that another
//! process still answers on is not (two proxies on one socket would split its clients silently),
//! and anything that is not a socket is never deleted. The file is made usable by every local
//! user (mode 0777, as mysqld does): who may log in is the password check's business, as on
//! TCP. The file is removed when the listener is dropped, at shutdown.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

/// A bound Unix socket that removes its file when dropped.
pub struct SocketListener {
    listener: UnixListener,
    path: PathBuf,
}

impl SocketListener {
    pub fn bind(path: &Path) -> io::Result<SocketListener> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.file_type().is_socket() => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket; msgproxy will not delete it: remove it or choose another --listen-socket", path.display()),
                ));
            }
            Ok(_) => {
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("another process is listening on {}: stop it or choose another --listen-socket", path.display()),
                    ));
                }
                // Nobody answers: a socket file left by a process that is gone.
                std::fs::remove_file(path)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        let bound = SocketListener {
            listener,
            path: path.to_path_buf(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))?;
        Ok(bound)
    }

    pub async fn accept(&self) -> io::Result<UnixStream> {
        self.listener.accept().await.map(|(stream, _)| stream)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::SocketListener;

    #[tokio::test]
    async fn replaces_a_stale_socket_but_not_a_live_one_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.sock");

        let live = SocketListener::bind(&path).unwrap();
        let err = SocketListener::bind(&path).err().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");

        // A socket whose process is gone: std's listener does not remove its file on drop.
        drop(live);
        assert!(!path.exists(), "the listener removes its file");
        let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(stale);
        assert!(path.exists());
        let again = SocketListener::bind(&path).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&path.metadata().unwrap().permissions());
        assert_eq!(mode & 0o777, 0o777);
        drop(again);

        std::fs::write(&path, b"not a socket").unwrap();
        let err = SocketListener::bind(&path).err().unwrap();
        assert!(err.to_string().contains("is not a socket"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    }
}
