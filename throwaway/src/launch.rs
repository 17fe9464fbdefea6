//! Starting `mariadbd` on a [`ServerDir`]: its command line, a server owned by the calling
//! process (it dies with it), and waiting until it accepts connections.

use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::{options, Programs, ServerDir};

/// The `mariadbd` command for `dir` on `port`: the per-server options, then the common list of
/// [`options::common`]. Callers add their own after (`--log-error`, a test's `--skip-log-bin`),
/// which win over the common ones.
pub fn server_command(programs: &Programs, dir: &ServerDir, port: u16) -> Command {
    let mut cmd = Command::new(&programs.mariadbd);
    cmd.arg("--no-defaults")
        .args(programs.basedir_option())
        .arg(format!("--datadir={}", dir.data().display()))
        .arg(format!("--port={port}"))
        .arg(format!("--socket={}", dir.socket().display()))
        .arg(format!("--pid-file={}", dir.pid_file().display()))
        .arg(format!("--tmpdir={}", dir.tmp().display()))
        .args(options::common())
        .args(options::user());
    cmd
}

/// Spawns `cmd` so that the kernel sends it `death_signal` when the spawning *thread* exits
/// (`PR_SET_PDEATHSIG`): a server owned by a bench or a test never outlives it, even when that
/// is killed. Spawn from a thread that lives as long as the process.
pub fn spawn_owned(mut cmd: Command, death_signal: libc::c_int) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, death_signal as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Whether a MySQL server on 127.0.0.1:`port` sends a protocol-10 greeting (not an
/// "initialising" error packet, and not merely an open port).
pub fn mysql_greets(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && head[4] == 10
}

/// Whether anything accepts TCP connections on 127.0.0.1:`port`.
pub fn port_in_use(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// Why a server did not come up.
#[derive(Debug)]
pub enum NotUp {
    /// It exited; how, as `exited` told.
    Exited(String),
    /// It runs but did not greet within the limit.
    TimedOut,
}

/// Waits until the server on `port` greets, for up to `limit`. `exited` says whether the server
/// process is gone (and how), so that a server that died is reported at once instead of after
/// the whole limit.
pub fn wait_until_accepting(
    port: u16,
    limit: Duration,
    mut exited: impl FnMut() -> Option<String>,
) -> Result<(), NotUp> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(how) = exited() {
            return Err(NotUp::Exited(how));
        }
        if mysql_greets(port) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(NotUp::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// An `exited` for [`wait_until_accepting`] that watches a child process.
pub fn child_exited(child: &mut Child) -> impl FnMut() -> Option<String> + '_ {
    move || match child.try_wait() {
        Ok(Some(status)) => Some(status.to_string()),
        Ok(None) => None,
        Err(e) => Some(format!("cannot be waited for: {e}")),
    }
}
