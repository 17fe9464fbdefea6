//! `GET /metrics` over HTTP/1.1, by hand: one request per connection, answered and closed.
//!
//! The endpoint faces the network, so every resource it spends is bounded: at most
//! [`MAX_SCRAPES`] connections are served at once (the permit is taken *before* `accept`, so
//! more wait in the kernel's backlog instead of costing tasks), a request head may be at most
//! [`MAX_REQUEST`] bytes, and reading the request and writing the answer together get
//! [`TIMEOUT`]. Nothing a client sends can panic it: the request line is parsed with `split`,
//! never indexed.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::exposition::CONTENT_TYPE;
use super::Registry;

/// Scrapes served at once.
pub const MAX_SCRAPES: usize = 4;
/// Longest request head (request line and headers) read; longer requests get 431.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Time for one connection: reading the request, rendering and writing the answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the metrics page on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>, shutdown: CancellationToken) {
    let permits = Arc::new(Semaphore::new(MAX_SCRAPES));
    let tracker = TaskTracker::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => {
                backoff = Duration::from_millis(10);
                a
            }
            Err(e) => {
                warn!("metrics: accept failed: {e}; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let registry = registry.clone();
        tracker.spawn(async move {
            if tokio::time::timeout(TIMEOUT, answer(tcp, &registry))
                .await
                .is_err()
            {
                debug!(%peer, "metrics: request timed out");
            }
            drop(permit);
        });
    }
    tracker.close();
    let _ = tokio::time::timeout(TIMEOUT, tracker.wait()).await;
}

/// Reads one request and answers it.
async fn answer(mut tcp: TcpStream, registry: &Registry) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if find_end_of_head(&head).is_some() {
            break true;
        }
        if head.len() >= MAX_REQUEST {
            break false;
        }
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    };
    let reply = if complete {
        respond(&head, registry)
    } else {
        reply(
            431,
            "Request Header Fields Too Large",
            "text/plain",
            b"request too large\n".to_vec(),
            true,
        )
    };
    let _ = tcp.write_all(&reply).await;
    let _ = tcp.shutdown().await;
}

/// Where the request head ends (after the blank line), if it does.
fn find_end_of_head(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

/// The whole response to a request head.
fn respond(head: &[u8], registry: &Registry) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    if !version.is_some_and(|v| v.starts_with("HTTP/1.")) || parts.next().is_some() {
        return reply(
            400,
            "Bad Request",
            "text/plain",
            b"bad request\n".to_vec(),
            true,
        );
    }
    let with_body = match method {
        Some("GET") => true,
        Some("HEAD") => false,
        _ => {
            return reply(
                405,
                "Method Not Allowed",
                "text/plain",
                b"only GET and HEAD\n".to_vec(),
                true,
            )
        }
    };
    // The path, without a query string (Prometheus may add none, curl users might).
    let path = target
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default();
    match path {
        "/metrics" => reply(
            200,
            "OK",
            CONTENT_TYPE,
            registry.render().into_bytes(),
            with_body,
        ),
        "/" => reply(
            200,
            "OK",
            "text/plain; charset=utf-8",
            b"msgproxy: metrics at /metrics\n".to_vec(),
            with_body,
        ),
        _ => reply(
            404,
            "Not Found",
            "text/plain",
            b"not found; try /metrics\n".to_vec(),
            with_body,
        ),
    }
}

fn reply(code: u16, reason: &str, content_type: &str, body: Vec<u8>, with_body: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        out.extend_from_slice(&body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::ProxyMetrics;

    fn registry() -> Registry {
        Registry {
            streams: None,
            proxy: Arc::new(ProxyMetrics::default()),
            engine: None,
            binlog: None,
            backends: None,
        }
    }

    fn status_of(response: &[u8]) -> String {
        String::from_utf8_lossy(response)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn requests_and_answers() {
        let r = registry();
        let ok = respond(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r);
        assert_eq!(status_of(&ok), "HTTP/1.1 200 OK");
        let text = String::from_utf8_lossy(&ok);
        assert!(
            text.contains("Content-Type: text/plain; version=0.0.4"),
            "{text}"
        );
        assert!(text.contains("msgproxy_client_connections 0"), "{text}");
        let head = respond(b"HEAD /metrics HTTP/1.0\r\n\r\n", &r);
        assert!(String::from_utf8_lossy(&head).ends_with("\r\n\r\n"));
        let query = respond(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", &r);
        assert_eq!(status_of(&query), "HTTP/1.1 200 OK");
        assert_eq!(
            status_of(&respond(b"GET /nope HTTP/1.1\r\n\r\n", &r)),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status_of(&respond(b"POST /metrics HTTP/1.1\r\n\r\n", &r)),
            "HTTP/1.1 405 Method Not Allowed"
        );
        assert_eq!(
            status_of(&respond(b"\xff\xfe /\xc0 HTTP/1.1\r\n\r\n", &r)),
            "HTTP/1.1 405 Method Not Allowed"
        );
        for junk in [
            &b""[..],
            b"\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics SPDY/3 extra\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
        ] {
            assert_eq!(
                status_of(&respond(junk, &r)),
                "HTTP/1.1 400 Bad Request",
                "{junk:?}"
            );
        }
    }

    #[test]
    fn end_of_head() {
        assert_eq!(find_end_of_head(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(find_end_of_head(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(find_end_of_head(b"GET / HTTP/1.1\r\n"), None);
    }

    #[tokio::test]
    async fn serves_over_tcp_and_refuses_oversized_requests() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, Arc::new(registry()), stop.clone()));
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        assert_eq!(status_of(&got), "HTTP/1.1 200 OK");

        let mut big = TcpStream::connect(addr).await.unwrap();
        let _ = big.write_all(&vec![b'a'; MAX_REQUEST + 10]).await;
        let mut got = Vec::new();
        let _ = big.read_to_end(&mut got).await;
        assert_eq!(
            status_of(&got),
            "HTTP/1.1 431 Request Header Fields Too Large"
        );

        // Clients that connect and say nothing hold a permit each, until the timeout; the
        // others wait for one, and are served once one is free.
        let mut silent = Vec::new();
        for _ in 0..MAX_SCRAPES {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        drop(silent);
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(3), c.read_to_end(&mut got))
            .await
            .expect("served once the silent clients left")
            .unwrap();
        assert_eq!(status_of(&got), "HTTP/1.1 200 OK");
        stop.cancel();
        server.await.unwrap();
    }
}
