//! A real detached server, started and stopped through the library and through the binary the
//! scripts run: it outlives the call that started it, is found again by `status`, answers on its
//! port, and is gone after `stop`.

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use msgproxy_throwaway::detached::{self, Detached};
use msgproxy_throwaway::launch::mysql_greets;
use msgproxy_throwaway::Programs;

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

fn work_dir(name: &str) -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(root).expect("create CARGO_TARGET_TMPDIR");
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(root)
        .expect("create a server dir")
}

/// Waits until `pid` is gone (its parent, this test, may hold it as a zombie until it reaps it).
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next());
        if matches!(state, None | Some("Z")) {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} still runs after stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_detached_server_starts_answers_and_stops() {
    let programs = Programs::find().expect("the tests need MariaDB installed");
    let work = work_dir("lib-");
    let server = Detached::new(work.path());
    assert_eq!(server.running(), None);
    let port = free_port();
    let lock = server.lock().expect("lock");
    let running = server.start(&programs, port, &lock).expect("start");
    drop(lock);
    assert_eq!(running.port, port);
    assert!(mysql_greets(port), "the started server does not greet");
    assert_eq!(
        server.running(),
        Some(running),
        "found again through its pid file"
    );
    assert!(
        server.dir.socket().exists(),
        "no socket at {:?}",
        server.dir.socket()
    );
    assert!(detached::backend_url(&server.dir, port)
        .starts_with(&format!("mysql://root@127.0.0.1:{port}/test?socket=")));
    // The common options are in force: the binlog watcher's metadata, and BLACKHOLE.
    let out = Command::new(&programs.client)
        .args(["--no-defaults", "-N", "-B", "-h127.0.0.1", "-uroot"])
        .arg(format!("-P{port}"))
        .args([
            "-e",
            "SELECT @@binlog_row_metadata, @@binlog_format, \
             (SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = 'BLACKHOLE'), \
             (SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'test')",
        ])
        .output()
        .expect("run the mariadb client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "FULL\tROW\tYES\t1"
    );

    assert_eq!(server.stop().expect("stop"), Some(running.pid));
    wait_gone(running.pid);
    assert!(!mysql_greets(port), "still answering after stop");
    assert_eq!(server.running(), None);
    assert_eq!(server.stop().expect("second stop"), None);
}

fn throwaway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_msgproxy-throwaway"))
        .args(args)
        .output()
        .expect("run msgproxy-throwaway")
}

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_binary_keeps_the_scripts_output_contract() {
    let work = work_dir("bin-");
    let dir = work.path().to_str().expect("a UTF-8 temp path");
    let port = free_port();
    let port_text = port.to_string();

    let status = throwaway(&["status", "--dir", dir]);
    assert_eq!(status.status.code(), Some(3), "{}", text(&status));

    let start = throwaway(&["start", "--port", &port_text, "--dir", dir]);
    assert!(start.status.success(), "{}", text(&start));
    let stdout = String::from_utf8_lossy(&start.stdout);
    let url = stdout.lines().last().unwrap_or_default().to_string();
    assert!(
        url.starts_with(&format!("mysql://root@127.0.0.1:{port}/test?socket=")),
        "{}",
        text(&start)
    );
    assert_eq!(
        stdout.lines().count(),
        1,
        "only the URL on stdout: {}",
        text(&start)
    );
    // The starter has exited; the server runs on.
    assert!(mysql_greets(port), "not answering after start returned");

    let again = throwaway(&["start", "--dir", dir]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).lines().last(),
        Some(url.as_str())
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already running"),
        "{}",
        text(&again)
    );

    let status = throwaway(&["status", "--dir", dir]);
    assert!(status.status.success(), "{}", text(&status));
    assert_eq!(
        String::from_utf8_lossy(&status.stdout).lines().last(),
        Some(url.as_str())
    );

    let pid = Detached::new(work.path())
        .running()
        .expect("a pid file")
        .pid;
    let stop = throwaway(&["stop", "--dir", dir]);
    assert!(stop.status.success(), "{}", text(&stop));
    assert!(
        String::from_utf8_lossy(&stop.stderr).contains("stopped"),
        "{}",
        text(&stop)
    );
    wait_gone(pid);
    let status = throwaway(&["status", "--dir", dir]);
    assert_eq!(status.status.code(), Some(3), "{}", text(&status));

    let usage = throwaway(&["launch"]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage));
}
