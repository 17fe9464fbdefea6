//! A real browser for the operator's page: Debian's `chromium`, headless (`--dump-dom` to read
//! the page as the browser built it, `--screenshot` to keep a picture of it), and a plain HTTP
//! client for the requests a browser would not make on its own (forged forms, wrong logins).
//!
//! `CHROMIUM=/path/to/chromium` picks the browser; scripts/test.sh installs Debian's when missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The browser's program: `CHROMIUM`, or the first of `chromium`, `chromium-browser` on PATH.
pub fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return p.into();
    }
    for name in ["chromium", "chromium-browser"] {
        if let Some(dir) = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .find(|d| d.join(name).is_file())
        {
            return dir.join(name);
        }
    }
    panic!(
        "chromium not found (set CHROMIUM, or install Debian's: apt-get install chromium; \
         scripts/test.sh does that when it is missing)"
    );
}

/// Runs headless chromium on `url` with `args` (a profile of its own, so runs at once do not
/// share one); its stdout.
fn run(url: &str, args: &[&str]) -> String {
    let profile = tempfile::Builder::new()
        .prefix("chromium-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a chromium profile dir");
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .arg(url)
    .stdin(Stdio::null())
    .stderr(Stdio::null());
    let out = cmd.output().expect("run chromium");
    assert!(
        out.status.success(),
        "chromium {args:?} {url}: {}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The page's DOM after the browser loaded it.
pub fn dump_dom(url: &str) -> String {
    dump_dom_with(url, &[])
}

/// [`dump_dom`] with more of chromium's flags (e.g. `--ignore-certificate-errors` for a
/// self-signed certificate).
pub fn dump_dom_with(url: &str, flags: &[&str]) -> String {
    let mut args = vec!["--dump-dom", "--virtual-time-budget=2000"];
    args.extend_from_slice(flags);
    run(url, &args)
}

/// A PNG of the page at `path` (a 1400×1000 window).
pub fn screenshot(url: &str, path: &Path) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("the screenshot's directory");
    }
    run(
        url,
        &[
            &format!("--screenshot={}", path.display()),
            "--window-size=1400,1000",
        ],
    );
    let png = std::fs::read(path).expect("chromium wrote the screenshot");
    assert!(
        png.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        path.display()
    );
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// Sends `request` (a whole HTTP/1.1 request) to 127.0.0.1:`port` and reads the answer.
pub async fn http(port: u16, request: &str) -> Answer {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to the page's port {port}: {e}"));
    tcp.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut response))
        .await
        .expect("an answer within 20 s")
        .expect("read the answer");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// `Authorization: Basic` for `user:password`.
pub fn basic(user: &str, password: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |a, &b| (a << 8) | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    while !out.len().is_multiple_of(4) {
        out.push('=');
    }
    format!("Basic {out}")
}

/// The value of attribute `name` in the element that has `marker` (e.g. `data-table="db.q"`).
pub fn attribute(dom: &str, marker: &str, name: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let key = format!(" {name}=\"");
    let from = tag.find(&key)? + key.len();
    let len = tag[from..].find('"')?;
    Some(tag[from..from + len].to_string())
}
