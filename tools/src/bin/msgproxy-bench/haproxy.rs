//! HAProxy in TCP mode in front of the same server: what any relaying proxy pays on this machine
//! (issue 23). It copies bytes and understands nothing, so msgproxy's QPS against it, in the same
//! run, separates what relaying costs from what msgproxy's own work costs.
//!
//! Debian's `haproxy` package (`apt-get install haproxy`); without it the scenario's HAProxy rows
//! are left out and the bench says so once.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::servers::{find_program, free_port, spawn_owned, wait_for_greeting, Owned};
use crate::wire::Target;

/// A running HAProxy forwarding one port to the server.
pub struct HaProxy {
    pub process: Owned,
    pub port: u16,
    /// `haproxy -v`'s first line.
    pub version: String,
}

impl HaProxy {
    /// Starts HAProxy (if installed) in front of `server`; `Ok(None)` when it is not installed.
    pub fn start(server: &Target, work: &Path) -> Result<Option<HaProxy>, String> {
        let Some(binary) = find_program(&["haproxy"]) else {
            return Ok(None);
        };
        let version = Command::new(&binary)
            .arg("-v")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.lines().next().map(str::to_owned))
            .unwrap_or_else(|| "HAProxy".into());
        let mut last_err = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let config = work.join("haproxy.cfg");
            fs::write(&config, config_text(port, server))
                .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
            let mut cmd = Command::new(&binary);
            // -db: foreground, no daemon (so the bench owns the process); -f: the config.
            cmd.arg("-db").arg("-f").arg(&config);
            let mut process = spawn_owned(cmd, work.join("haproxy.log"))?;
            match wait_for_greeting(&mut process, port, "haproxy", Duration::from_secs(20)) {
                Ok(()) => {
                    return Ok(Some(HaProxy {
                        process,
                        port,
                        version,
                    }))
                }
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }
}

/// TCP mode, one listener, one server; as many threads as CPUs (HAProxy's default, as msgproxy's);
/// long client/server timeouts so a slow run is never cut; no health checks (they would connect
/// to the server and count against its connection rate).
fn config_text(port: u16, server: &Target) -> String {
    format!(
        "global\n    maxconn 4096\n\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\n\nlisten mysql\n    bind 127.0.0.1:{port}\n    server db {}:{}\n",
        server.host, server.port
    )
}
