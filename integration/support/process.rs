//! Child processes that cannot outlive the test process, free ports, and waiting for a port.
//!
//! Every `mariadbd` and `msgproxy` the suite starts is spawned from one long-lived "spawner" thread
//! with `PR_SET_PDEATHSIG`: the kernel delivers that signal when the *thread* that forked the child
//! exits, so spawning from a short-lived test thread would kill the shared server as soon as the
//! first test finished. One thread that never exits means: the children die exactly when the test
//! process dies, even when it is killed or a static (the shared server) is never dropped.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

type SpawnRequest = (Command, libc::c_int, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` so that it receives `death_signal` when the test process exits.
pub fn spawn_owned(cmd: Command, death_signal: libc::c_int) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("integration-spawner".into())
            .spawn(move || {
                for (mut cmd, signal, reply) in rx {
                    use std::os::unix::process::CommandExt;
                    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
                    unsafe {
                        cmd.pre_exec(move || {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) != 0 {
                                return Err(io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
                // The sender lives in a static and is never dropped, so this loop (and the thread
                // whose exit would trigger PDEATHSIG) only ends with the process.
            })
            .expect("start the integration spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, death_signal, reply_tx))
        .map_err(|_| io::Error::other("integration spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("integration spawner thread dropped the request"))?
}

/// A port on 127.0.0.1 that was free a moment ago (bind port 0, read it, release it).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` right now.
pub fn port_accepts(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILLs. Reaps the child either way.
pub fn terminate(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// SIGKILL and reap: a crash, as far as everyone else can tell.
pub fn kill_hard(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether a process with this pid exists (used to clean up directories of dead test runs).
pub fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The last `max` bytes of a text file (for panic messages).
pub fn tail(path: &std::path::Path, max: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(max);
    String::from_utf8_lossy(&text[start..]).into_owned()
}
